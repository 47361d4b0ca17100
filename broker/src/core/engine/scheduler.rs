//! Scheduled delivery: ActiveMQ's `AMQ_SCHEDULED_DELAY`, `AMQ_SCHEDULED_PERIOD`,
//! `AMQ_SCHEDULED_REPEAT` and `AMQ_SCHEDULED_CRON` message properties.
//!
//! A message sent with a delay, a period or a cron entry is not routed: [`Core::send`] hands
//! it to the scheduler as a [`Job`] (inside a transaction, only when the transaction commits,
//! as ActiveMQ does). One task owns every job, ordered by due time in a `BTreeMap`, and sleeps
//! until the first is due. A due job is *fired*: a copy of its message, with a new broker id
//! and without the scheduling properties (so it is not scheduled again), is routed like a
//! fresh send to the message's destination.
//!
//! Timing, as ActiveMQ's job scheduler: the first fire is at the next cron time (or now),
//! plus the delay, or plus the period when there is no delay; a job with `repeat` N fires N
//! more times, each `period` after the previous fire (a negative repeat repeats forever). A
//! cron job without a repeat delivers once at every cron time; a cron job with a repeat
//! delivers nothing itself but, at every cron time, starts a sequence of N+1 deliveries
//! (delay, then every period). Every delivery of a repeating or cron job is a new message
//! with its own JMSMessageID; a one-shot delayed message keeps its own. Each delivered
//! message carries the job id (the original JMSMessageID) in `scheduledJobId`, and its
//! expiration moves with it when it has a time to live.
//!
//! Persistence: the jobs of persistent messages are stored in a reserved store queue,
//! [`store_queue`], which recovery does not treat as a destination. A stored job is the
//! message as sent plus its state (`ferromq.scheduler.due`, `ferromq.scheduler.remaining`),
//! so that a restart resumes a repeating job where it was. A fire is one unit of work: the
//! delivered copy added to its destination's queues, the job's entry acked, and the job's
//! next state (for a repeating job) added as a new entry. The copy is dispatched only once
//! that unit is durable, so after a crash a job has either fired (and its copy is in the
//! destination) or not (and fires after the restart), never both. Jobs of non-persistent
//! messages live in memory only.

pub mod cron;

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use store::{
    Completion, Destination, DestinationKind, Message, MessageId, MessageStore, Operation, PageKey,
    PropertyValue, QueueKey, StoreError, UnitOfWork,
};
use tokio::sync::mpsc;

use super::transaction::Transaction;
use super::Core;
use crate::core::queue::{now_millis, stage, Staged};
use crate::core::types::{composite_parts, ConnectionId, CoreError};
use crate::core::wildcard::DestinationFilter;
pub use cron::{Cron, CronError};

/// Delay before the first delivery, in milliseconds (a long; numeric strings are accepted).
pub const AMQ_SCHEDULED_DELAY: &str = "AMQ_SCHEDULED_DELAY";
/// Milliseconds between repeated deliveries.
pub const AMQ_SCHEDULED_PERIOD: &str = "AMQ_SCHEDULED_PERIOD";
/// Number of deliveries after the first (an int; negative: forever).
pub const AMQ_SCHEDULED_REPEAT: &str = "AMQ_SCHEDULED_REPEAT";
/// A five-field cron entry (see [`cron`]).
pub const AMQ_SCHEDULED_CRON: &str = "AMQ_SCHEDULED_CRON";
/// Set on every delivered message to its job's id (ActiveMQ's `ScheduledMessage.AMQ_SCHEDULED_ID`);
/// a message that carries it is never scheduled.
pub const AMQ_SCHEDULED_ID: &str = "scheduledJobId";

/// Stored job state: when the job fires next (milliseconds since the epoch).
const STATE_DUE: &str = "ferromq.scheduler.due";
/// Stored job state: repeats left after the next fire.
const STATE_REMAINING: &str = "ferromq.scheduler.remaining";
/// Stored job state: a repeat sequence started by a cron job's fire.
const STATE_SEQUENCE: &str = "ferromq.scheduler.sequence";

/// The reserved store queue that holds the jobs of persistent messages. Its destination is a
/// temporary queue, a kind the core never stores otherwise, so no client destination can
/// collide with it; [`Core::recover`] skips it.
pub fn store_queue() -> QueueKey {
    QueueKey::destination(Destination {
        kind: DestinationKind::TempQueue,
        name: "ferromq.scheduler".into(),
    })
}

/// The scheduling a message asks for, read from its properties.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub delay: i64,
    pub period: i64,
    pub repeat: i32,
    pub cron: Option<Cron>,
}

impl Schedule {
    /// The schedule `message` asks for, or `None` when it has no delay, period or cron
    /// property (a repeat alone schedules nothing, as in ActiveMQ) or was itself delivered by
    /// the scheduler. Invalid values are refused with a message that names the property.
    pub fn of(message: &Message) -> Result<Option<Schedule>, String> {
        let properties = &message.properties;
        if properties.contains_key(AMQ_SCHEDULED_ID)
            || ![AMQ_SCHEDULED_DELAY, AMQ_SCHEDULED_PERIOD, AMQ_SCHEDULED_CRON]
                .iter()
                .any(|name| properties.contains_key(*name))
        {
            return Ok(None);
        }
        let delay = long_property(message, AMQ_SCHEDULED_DELAY)?.unwrap_or(0);
        let period = long_property(message, AMQ_SCHEDULED_PERIOD)?.unwrap_or(0);
        let repeat = match long_property(message, AMQ_SCHEDULED_REPEAT)? {
            None => 0,
            Some(repeat) => i32::try_from(repeat).map_err(|_| {
                format!("{AMQ_SCHEDULED_REPEAT} must be an int, {repeat} is out of range")
            })?,
        };
        for (name, value) in [(AMQ_SCHEDULED_DELAY, delay), (AMQ_SCHEDULED_PERIOD, period)] {
            if value < 0 {
                return Err(format!("{name} must not be negative, got {value}"));
            }
        }
        let cron = match properties.get(AMQ_SCHEDULED_CRON) {
            None | Some(PropertyValue::Null) => None,
            Some(value) => {
                let text = value.to_header_text();
                if text.trim().is_empty() {
                    None
                } else {
                    let cron = Cron::parse(&text).map_err(|e| e.to_string())?;
                    if cron.next_after(now_millis()).is_none() {
                        return Err(format!("cron entry `{cron}` never matches a date"));
                    }
                    Some(cron)
                }
            }
        };
        if repeat < 0 && period == 0 && cron.is_none() {
            return Err(format!(
                "{AMQ_SCHEDULED_REPEAT} {repeat} repeats forever and needs a positive \
                 {AMQ_SCHEDULED_PERIOD}"
            ));
        }
        Ok(Some(Schedule { delay, period, repeat, cron }))
    }

    /// The wait before a sequence's first delivery: the delay, or the period without one.
    fn first_offset(&self) -> i64 {
        if self.delay > 0 {
            self.delay
        } else {
            self.period
        }
    }

    /// When a job scheduled at `now` fires first.
    pub fn first_due(&self, now: i64) -> i64 {
        let base = self.cron.as_ref().and_then(|cron| cron.next_after(now)).unwrap_or(now);
        base.saturating_add(self.first_offset())
    }
}

/// A property as a long: any integer type, or a string holding one (STOMP headers).
fn long_property(message: &Message, name: &str) -> Result<Option<i64>, String> {
    let value = match message.properties.get(name) {
        None | Some(PropertyValue::Null) => return Ok(None),
        Some(value) => value,
    };
    let number = match value {
        PropertyValue::Byte(v) => i64::from(*v),
        PropertyValue::Short(v) => i64::from(*v),
        PropertyValue::Int(v) => i64::from(*v),
        PropertyValue::Long(v) => *v,
        PropertyValue::String(text) => text
            .trim()
            .parse()
            .map_err(|_| format!("{name} must be a whole number, not `{text}`"))?,
        other => {
            return Err(format!("{name} must be a whole number, not `{}`", other.to_header_text()))
        }
    };
    Ok(Some(number))
}

/// One scheduled message and where its schedule stands.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    /// The message as sent, plus the job state properties; stored as is for persistent ones.
    entry: Arc<Message>,
    schedule: Schedule,
    due: i64,
    /// Repeats left after the next fire; negative: forever.
    remaining: i32,
    /// A repeat sequence started by a cron job (it ignores the cron entry).
    sequence: bool,
}

/// What one fire of a job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FirePlan {
    deliver: bool,
    /// The job's next (due, remaining), if it fires again.
    next: Option<(i64, i32)>,
    /// A repeat sequence (due, remaining) a cron job starts.
    start_sequence: Option<(i64, i32)>,
}

impl Job {
    /// A new job for `message` (whose broker id the entry keeps), scheduled at `now`.
    fn new(message: &Message, schedule: Schedule, now: i64) -> Job {
        let due = schedule.first_due(now);
        let remaining = schedule.repeat;
        Job {
            entry: Arc::new(entry_of(message, message.id, due, remaining, false)),
            schedule,
            due,
            remaining,
            sequence: false,
        }
    }

    /// A job read back from the store.
    fn recovered(entry: Arc<Message>) -> Result<Job, String> {
        let schedule = Schedule::of(&entry)?.ok_or("it has no schedule")?;
        let due = match entry.properties.get(STATE_DUE) {
            Some(PropertyValue::Long(due)) => *due,
            _ => return Err(format!("it has no {STATE_DUE}")),
        };
        let remaining = match entry.properties.get(STATE_REMAINING) {
            Some(PropertyValue::Int(remaining)) => *remaining,
            _ => schedule.repeat,
        };
        let sequence =
            matches!(entry.properties.get(STATE_SEQUENCE), Some(PropertyValue::Bool(true)));
        Ok(Job { entry, schedule, due, remaining, sequence })
    }

    fn plan(&self, now: i64) -> FirePlan {
        match &self.schedule.cron {
            Some(cron) if !self.sequence => {
                let next = cron.next_after(now).map(|due| (due, self.remaining));
                if self.schedule.repeat == 0 {
                    FirePlan { deliver: true, next, start_sequence: None }
                } else {
                    let start = now.saturating_add(self.schedule.first_offset());
                    FirePlan {
                        deliver: false,
                        next,
                        start_sequence: Some((start, self.schedule.repeat)),
                    }
                }
            }
            _ => {
                let next = (self.remaining != 0).then(|| {
                    let remaining =
                        if self.remaining > 0 { self.remaining - 1 } else { self.remaining };
                    (now.saturating_add(self.schedule.period), remaining)
                });
                FirePlan { deliver: true, next, start_sequence: None }
            }
        }
    }

    fn stored(&self) -> bool {
        self.entry.is_persistent()
    }
}

/// `message` with the job state properties set, filed under broker id `id`.
fn entry_of(message: &Message, id: MessageId, due: i64, remaining: i32, sequence: bool) -> Message {
    let mut entry = message.clone();
    entry.id = id;
    entry.properties.insert(STATE_DUE.into(), PropertyValue::Long(due));
    entry.properties.insert(STATE_REMAINING.into(), PropertyValue::Int(remaining));
    if sequence {
        entry.properties.insert(STATE_SEQUENCE.into(), PropertyValue::Bool(true));
    }
    entry
}

/// The message a fire of `job` delivers, under broker id `id`.
fn delivered(job: &Job, id: MessageId, now: i64) -> Message {
    let mut message = Message::clone(&job.entry);
    message.id = id;
    for name in [
        AMQ_SCHEDULED_DELAY,
        AMQ_SCHEDULED_PERIOD,
        AMQ_SCHEDULED_REPEAT,
        AMQ_SCHEDULED_CRON,
        STATE_DUE,
        STATE_REMAINING,
        STATE_SEQUENCE,
    ] {
        message.properties.remove(name);
    }
    message
        .properties
        .insert(AMQ_SCHEDULED_ID.into(), PropertyValue::String(job.entry.message_id.clone()));
    if job.schedule.repeat != 0 || job.schedule.cron.is_some() {
        // The original may be delivered many times: each copy is a message of its own. The
        // broker id is unique and increasing, like a producer sequence.
        message.message_id = format!("ID:ferromq-scheduler:1:1:{}", id.0).into();
    }
    // The time to live counts from the delivery, as in ActiveMQ.
    let headers = &mut message.headers;
    if headers.timestamp > 0 && headers.expiration > 0 {
        let time_to_live = headers.expiration - headers.timestamp;
        let expiration = now.saturating_add(time_to_live);
        if expiration > headers.expiration {
            if time_to_live > 0 {
                headers.expiration = expiration;
            }
            headers.timestamp = now;
        }
    }
    message
}

enum Command {
    Add(Vec<Job>),
    Stop,
}

/// A cheap handle to the scheduler task.
#[derive(Clone)]
pub(crate) struct SchedulerHandle {
    tx: mpsc::UnboundedSender<Command>,
}

impl SchedulerHandle {
    pub(crate) fn add(&self, jobs: Vec<Job>) {
        if !jobs.is_empty() {
            let _ = self.tx.send(Command::Add(jobs));
        }
    }

    pub(crate) fn stop(&self) {
        let _ = self.tx.send(Command::Stop);
    }
}

/// The core's scheduler: the handle, and the task's receiver until the task starts.
pub(crate) struct Scheduler {
    pub(crate) handle: SchedulerHandle,
    waiting: Mutex<Option<mpsc::UnboundedReceiver<Command>>>,
}

impl Scheduler {
    pub(crate) fn new() -> Scheduler {
        let (tx, rx) = mpsc::unbounded_channel();
        Scheduler { handle: SchedulerHandle { tx }, waiting: Mutex::new(Some(rx)) }
    }
}

/// Reads every stored job. Entries that no longer parse are acked (dropped) with a warning.
pub(crate) fn recover_jobs(store: &Arc<dyn MessageStore>) -> Result<Vec<Job>, StoreError> {
    let key = store_queue();
    let mut jobs = Vec::new();
    let mut after = None;
    loop {
        let page = store.read_page(&key, after, 1000)?;
        let Some(last) = page.last() else { break };
        after = Some(PageKey::of(&last.message));
        for stored in page {
            match Job::recovered(stored.message.clone()) {
                Ok(job) => jobs.push(job),
                Err(reason) => {
                    tracing::warn!(message = %stored.message.message_id, reason,
                        "stored scheduled message dropped");
                    drop(store.submit(UnitOfWork::with(Operation::Ack {
                        queue: key.clone(),
                        key: PageKey::of(&stored.message),
                        txn: None,
                    })));
                }
            }
        }
    }
    Ok(jobs)
}

/// How long to wait before retrying a fire the store refused.
const RETRY_MS: i64 = 1000;

impl Core {
    /// The schedule of a message about to be sent, when the scheduler is on and the message
    /// asks for one; a schedule with invalid values is refused.
    pub(super) fn schedule_of(&self, message: &Message) -> Result<Option<Schedule>, CoreError> {
        if self.scheduler.is_none() {
            return Ok(None);
        }
        let Some(schedule) = Schedule::of(message).map_err(CoreError::InvalidSchedule)? else {
            return Ok(None);
        };
        for part in composite_parts(&message.destination) {
            if DestinationFilter::is_pattern(&part.name) {
                return Err(CoreError::WildcardSend(part.to_string()));
            }
        }
        Ok(Some(schedule))
    }

    /// Hands a message with a schedule to the scheduler instead of routing it; inside a
    /// transaction it is kept for the commit. A persistent message's job is stored first.
    pub(super) fn schedule(
        &self,
        message: Arc<Message>,
        schedule: Schedule,
        transaction: Option<&mut Transaction>,
    ) -> Result<Completion, CoreError> {
        let Some(scheduler) = &self.scheduler else {
            return Err(CoreError::Unsupported("scheduled"));
        };
        if let Some(transaction) = transaction {
            transaction.scheduled.push((message, schedule));
            return Ok(Completion::ready(Ok(())));
        }
        let job = Job::new(&message, schedule, now_millis());
        let mut unit = UnitOfWork::new();
        if job.stored() {
            unit.push(Operation::AddMessage {
                message: job.entry.clone(),
                queues: vec![store_queue()],
                txn: None,
            });
        }
        // Nothing to announce: the job's entry is stored for the scheduler, not a queue.
        let completion = stage(&*self.store, unit, Vec::new())?.enqueue();
        tracing::debug!(id = %message.message_id, due = job.due, "message scheduled");
        scheduler.handle.add(vec![job]);
        Ok(completion)
    }

    /// At a commit: the jobs of the transaction's scheduled sends, timed from now. Persistent
    /// ones are stored tagged with the transaction, so the commit record makes them durable.
    pub(super) fn schedule_at_commit(&self, transaction: &mut Transaction) -> Vec<Job> {
        let now = now_millis();
        let mut jobs = Vec::with_capacity(transaction.scheduled.len());
        for (message, schedule) in transaction.scheduled.drain(..) {
            let job = Job::new(&message, schedule, now);
            if job.stored() {
                transaction.has_store_records = true;
                // Failures surface at the commit: a store that failed is poisoned.
                drop(self.store.submit(UnitOfWork::with(Operation::AddMessage {
                    message: job.entry.clone(),
                    queues: vec![store_queue()],
                    txn: Some(transaction.id),
                })));
            }
            jobs.push(job);
        }
        jobs
    }

    /// The scheduler's handle, for work that completes later (a commit).
    pub(super) fn scheduler_handle(&self) -> Option<SchedulerHandle> {
        self.scheduler.as_ref().map(|s| s.handle.clone())
    }

    /// Starts the scheduler task (once; later calls do nothing). Jobs scheduled or recovered
    /// before wait for it.
    pub fn start_scheduler(self: &Arc<Self>) {
        let Some(scheduler) = &self.scheduler else { return };
        if let Some(rx) = scheduler.waiting.lock().take() {
            tokio::spawn(run(Arc::downgrade(self), rx));
        }
    }

    /// Fires `job` at `now`: routes its copy (when it delivers one) and submits the fire's
    /// unit of work. Returns the jobs that follow (its next state, a started sequence).
    /// The fire's copy is staged with the unit, to be enqueued only once the unit is durable
    /// (see `run`).
    fn fire(&self, job: &Job, now: i64) -> Result<(Staged, Vec<Job>), StoreError> {
        let plan = job.plan(now);
        let mut unit = UnitOfWork::new();
        let copy = plan.deliver.then(|| Arc::new(delivered(job, self.next_message_id(), now)));
        // Selectors are judged before the routing lock is taken, as for a send.
        let verdicts = copy.as_ref().and_then(|message| self.judge_selectors(message));
        let mut registry = self.registry.lock();
        let mut route = Vec::new();
        let mut delivered_copy = None;
        if let Some(message) = copy {
            let routed =
                self.route(&mut registry, &message, ConnectionId::BROKER, true, verdicts.as_ref());
            match routed {
                Ok(routed) => {
                    route = routed;
                    let stored: Vec<QueueKey> = if message.is_persistent() {
                        route.iter().filter(|q| q.stored).map(|q| (*q.key).clone()).collect()
                    } else {
                        Vec::new()
                    };
                    if !stored.is_empty() {
                        unit.push(Operation::AddMessage {
                            message: message.clone(),
                            queues: stored,
                            txn: None,
                        });
                    }
                    delivered_copy = Some(message);
                }
                Err(error) => tracing::warn!(job = %job.entry.message_id, %error,
                    "scheduled message could not be delivered"),
            }
        }
        if job.stored() {
            unit.push(Operation::Ack {
                queue: store_queue(),
                key: PageKey::of(&job.entry),
                txn: None,
            });
        }
        let follow = plan
            .next
            .map(|(due, remaining)| (due, remaining, job.sequence))
            .into_iter()
            .chain(plan.start_sequence.map(|(due, remaining)| (due, remaining, true)));
        let mut jobs = Vec::new();
        for (due, remaining, sequence) in follow {
            let entry =
                Arc::new(entry_of(&job.entry, self.next_message_id(), due, remaining, sequence));
            if job.stored() {
                unit.push(Operation::AddMessage {
                    message: entry.clone(),
                    queues: vec![store_queue()],
                    txn: None,
                });
            }
            jobs.push(Job { entry, schedule: job.schedule.clone(), due, remaining, sequence });
        }
        // Announced before the submit makes the copy readable (see `queue/arrival.rs`).
        let arrivals = match &delivered_copy {
            Some(message) => route.iter().map(|queue| queue.announce(message)).collect(),
            None => Vec::new(),
        };
        let staged = stage(&*self.store, unit, arrivals);
        drop(registry);
        Ok((staged?, jobs))
    }
}

/// The scheduler task: jobs by due time; fires what is due, sleeps until the next.
async fn run(core: Weak<Core>, mut commands: mpsc::UnboundedReceiver<Command>) {
    let mut jobs: BTreeMap<(i64, u64), Job> = BTreeMap::new();
    let mut sequence = 0u64;
    let mut insert = |jobs: &mut BTreeMap<(i64, u64), Job>, job: Job| {
        sequence += 1;
        jobs.insert((job.due, sequence), job);
    };
    loop {
        let wait = jobs.first_key_value().map(|((due, _), _)| {
            Duration::from_millis(u64::try_from(due - now_millis()).unwrap_or(0))
        });
        tokio::select! {
            command = commands.recv() => match command {
                Some(Command::Add(new)) => {
                    for job in new {
                        insert(&mut jobs, job);
                    }
                }
                Some(Command::Stop) | None => return,
            },
            () = async {
                match wait {
                    Some(wait) => tokio::time::sleep(wait).await,
                    None => std::future::pending().await,
                }
            } => {
                let Some(core) = core.upgrade() else { return };
                let now = now_millis();
                let mut waiting = Vec::new();
                while let Some(entry) = jobs.first_entry() {
                    if entry.key().0 > now {
                        break;
                    }
                    let job = entry.remove();
                    match core.fire(&job, now) {
                        Ok((fired, follow)) => {
                            for next in follow {
                                insert(&mut jobs, next);
                            }
                            if fired.is_durable() {
                                drop(fired.enqueue());
                            } else {
                                waiting.push(fired);
                            }
                        }
                        Err(error) => {
                            tracing::warn!(job = %job.entry.message_id, %error,
                                "the store refused a scheduled message's fire; retrying");
                            insert(&mut jobs, Job { due: now + RETRY_MS, ..job });
                        }
                    }
                }
                if !waiting.is_empty() {
                    // Dispatched only once durable: a crash before then fires the job again
                    // after the restart, and the copy must not have been delivered already.
                    tokio::spawn(async move {
                        for fired in waiting {
                            if let Err(error) = fired.enqueue_when_durable().await {
                                tracing::error!(%error,
                                    "a scheduled message's fire was not stored");
                            }
                        }
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
