//! [`ProducerOptions`] and [`run_producer`]: ActiveMQ's `producer` command.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use protocol::stomp::{Command, Frame};
use tokio::task::JoinSet;

use super::failover::Reconnect;
use super::report::Histogram;
use super::{
    amqp_failover_refusal, amqp_refusal, connection_lost, mqtt_refusal, no_observer, now_micros,
    now_millis, thread_label, BrokerUrl, Connection, DestinationName, Dialer, LoadError, LoadEvent,
    LoadReport, Meter, Observer, Role, WireProtocol, SENT_AT_PROPERTY,
};
use crate::amqp::{self, AmqpClient};
use crate::mqtt::{Confirmation, MqttClient, QoS};
use crate::openwire::{
    Destination, OpenWireClient, OutgoingMessage, Producer, ProducerSettings, SendMode, Session,
    SessionMode,
};
use crate::{ClientError, StompClient};

/// What [`run_producer`] sends; the defaults are ActiveMQ's `producer` command's.
#[derive(Debug, Clone)]
pub struct ProducerOptions {
    /// The broker; default `tcp://localhost:61616` (OpenWire).
    pub broker: BrokerUrl,
    /// Where to send; default `queue://TEST`.
    pub destination: DestinationName,
    /// Messages per thread; default 1000.
    pub message_count: u64,
    /// 0 (the default): a text body `test message: N`; otherwise a bytes body of this many
    /// `.` characters (ActiveMQ's tool does the same).
    pub message_size: usize,
    /// A fixed text body (ActiveMQ's `--message`), used when `message_size` is 0.
    pub message: Option<String>,
    /// Persistent messages (`persistent:true`); default true.
    pub persistent: bool,
    /// Threads, each with its own connection; default 1.
    pub parallel_threads: usize,
    /// Messages per transaction; 0 (the default) sends outside transactions.
    pub transaction_batch_size: u64,
    /// Time to live: each message `expires` this long after it is sent; zero (the
    /// default) for never.
    pub msg_ttl: Duration,
    /// The `JMSXGroupID` of every message, if any.
    pub msg_group_id: Option<String>,
    /// A pause after each send; default none.
    pub sleep: Duration,
    /// Wait for the broker's receipt after each send. `None` (the default) follows the JMS
    /// client: synchronous for persistent messages outside transactions. Over AMQP every
    /// send waits (the AMQP client sends nothing pre-settled).
    pub sync_send: Option<bool>,
    /// The login, if any.
    pub user: Option<String>,
    /// The passcode, if any.
    pub password: Option<String>,
    /// Send for this long (each thread, from the common start) instead of
    /// [`ProducerOptions::message_count`] messages; the first send after the time is up is
    /// the last (it commits an open transaction, or confirms asynchronous sends).
    pub duration: Option<Duration>,
    /// The destinations of each thread (one list per thread), used instead of
    /// [`ProducerOptions::destination`]: a thread sends its messages to its destinations in
    /// turn, and `message_count` messages to each (the perf tool's `totalDests`).
    pub thread_destinations: Option<Vec<Vec<DestinationName>>>,
    /// Names the threads `PREFIX0`, `PREFIX1`, ... (the perf tool's `JmsProducer0`) instead
    /// of `producer-1`, `producer-2`, ...
    pub thread_prefix: Option<String>,
    /// Live per-thread counts, read by a sampler or a progress display; latencies are
    /// recorded only while it is measuring.
    pub meter: Option<Meter>,
    /// Put the send time (microseconds since the Unix epoch) in each message, in the
    /// [`SENT_AT_PROPERTY`] property, for a consumer's end-to-end latency.
    pub stamp_send_time: bool,
}

impl Default for ProducerOptions {
    fn default() -> ProducerOptions {
        ProducerOptions {
            broker: BrokerUrl::default(),
            destination: DestinationName::queue("TEST"),
            message_count: 1000,
            message_size: 0,
            message: None,
            persistent: true,
            parallel_threads: 1,
            transaction_batch_size: 0,
            msg_ttl: Duration::ZERO,
            msg_group_id: None,
            sleep: Duration::ZERO,
            sync_send: None,
            user: None,
            password: None,
            duration: None,
            thread_destinations: None,
            thread_prefix: None,
            meter: None,
            stamp_send_time: false,
        }
    }
}

impl ProducerOptions {
    /// Whether each send waits for its receipt: [`ProducerOptions::sync_send`], or by
    /// default persistent and not transacted; always over AMQP.
    pub fn effective_sync_send(&self) -> bool {
        // MQTT publishes are windowed instead (see `Sender::Mqtt`).
        self.broker.protocol() == WireProtocol::Amqp
            || self.sync_send.unwrap_or(
                self.persistent
                    && self.transaction_batch_size == 0
                    && self.broker.protocol() != WireProtocol::Mqtt,
            )
    }
}

/// Sends messages as [`ProducerOptions`] says and reports how fast.
pub async fn run_producer(options: ProducerOptions) -> Result<LoadReport, LoadError> {
    run_producer_observed(options, no_observer()).await
}

/// [`run_producer`], telling `observer` when each thread is ready and done.
pub async fn run_producer_observed(
    options: ProducerOptions,
    observer: Observer,
) -> Result<LoadReport, LoadError> {
    if options.parallel_threads == 0 {
        return Err(LoadError::InvalidOptions("parallel threads must be at least 1".into()));
    }
    if let Some(lists) = &options.thread_destinations {
        if lists.len() != options.parallel_threads || lists.iter().any(Vec::is_empty) {
            return Err(LoadError::InvalidOptions(format!(
                "{} threads need {} non-empty destination lists, got {}",
                options.parallel_threads,
                options.parallel_threads,
                lists.len()
            )));
        }
    }
    let transacted = options.transaction_batch_size > 0;
    if let Some(refused) =
        amqp_refusal(&options.broker, &[(transacted, "a transaction batch size")])
    {
        return Err(refused);
    }
    if let Some(refused) = amqp_failover_refusal(&options.broker) {
        return Err(refused);
    }
    let mut destinations = vec![&options.destination];
    if let Some(lists) = &options.thread_destinations {
        destinations = lists.iter().flatten().collect();
    }
    let asked = [
        (transacted, "a transaction batch size"),
        (!options.msg_ttl.is_zero(), "a message time to live"),
        (options.msg_group_id.is_some(), "a message group"),
    ];
    if let Some(refused) = mqtt_refusal(&options.broker, &destinations, &asked) {
        return Err(refused);
    }
    let plan = Arc::new(Plan::new(&options));
    let failover = options.broker.failover().is_some();

    // Connect every thread before the clock starts.
    let mut connecting = JoinSet::new();
    for index in 0..options.parallel_threads {
        let thread = thread_label(options.thread_prefix.as_deref(), "producer", index);
        let dialer = Dialer {
            broker: options.broker.clone(),
            user: options.user.clone(),
            password: options.password.clone(),
            client_id: None,
            // Over failover, every connection of the thread announces one connection id (and
            // STOMP sends carry ids made from it), so that a resent message's id stays the
            // one the broker's duplicate detection saw.
            connection_id: failover.then(crate::openwire::new_connection_id),
            thread,
        };
        let plan = plan.clone();
        connecting.spawn(async move {
            let mut link = Link {
                reconnect: Reconnect::new(dialer.broker.clone(), dialer.thread.clone()),
                sender: None,
                dialer,
            };
            link.open(&plan, index, true, 0).await?;
            Ok::<_, LoadError>((index, link))
        });
    }
    let mut clients = Vec::with_capacity(options.parallel_threads);
    while let Some(joined) = connecting.join_next().await {
        clients.push(joined.map_err(panicked)??);
    }
    clients.sort_by_key(|(index, _)| *index);

    let start = match &options.meter {
        Some(meter) => meter.mark_start(),
        None => Instant::now(),
    };
    let mut workers = JoinSet::new();
    for (index, mut link) in clients {
        let thread = link.dialer.thread.clone();
        observer(&LoadEvent::Ready { thread: thread.clone() });
        let (plan, observer) = (plan.clone(), observer.clone());
        workers.spawn(async move {
            let outcome = produce(index, &mut link, &plan, start).await;
            // The messages are confirmed (or the run failed): the goodbye's outcome adds
            // nothing.
            if let Some(sender) = link.sender.take() {
                sender.close().await;
            }
            let outcome = outcome?;
            observer(&LoadEvent::Finished {
                thread,
                messages: outcome.sent,
                expected: plan.expected(index),
                elapsed: outcome.finished - start,
                idle_timeout: None,
            });
            Ok::<_, LoadError>((index, outcome))
        });
    }
    let mut outcomes = Vec::with_capacity(options.parallel_threads);
    while let Some(joined) = workers.join_next().await {
        // The first failure ends the run; dropping the set aborts the other threads.
        outcomes.push(joined.map_err(panicked)??);
    }
    outcomes.sort_by_key(|(index, _)| *index);

    let mut latencies = Histogram::default();
    let mut end = start;
    for (_, outcome) in &outcomes {
        latencies.merge(&outcome.latencies);
        end = end.max(outcome.finished);
    }
    let per_thread: Vec<u64> = outcomes.iter().map(|(_, outcome)| outcome.sent).collect();
    Ok(LoadReport {
        role: Role::Producer,
        messages: per_thread.iter().sum(),
        expected: (0..options.parallel_threads).map(|index| plan.expected(index)).sum(),
        elapsed: end - start,
        per_thread,
        latency: plan.latency_label.and_then(|what| latencies.latencies(what)),
    })
}

/// A worker task that panicked (a bug): reported as a failure rather than propagated.
pub(super) fn panicked(error: tokio::task::JoinError) -> LoadError {
    LoadError::Aborted(error.to_string())
}

/// Where a thread sends: the STOMP, OpenWire and AMQP forms of one destination.
struct Target {
    stomp: String,
    openwire: Destination,
    amqp: String,
    /// `None` for a queue (refused over MQTT before connecting).
    mqtt: Option<String>,
}

impl Target {
    fn new(destination: &DestinationName) -> Target {
        Target {
            stomp: destination.stomp_destination(),
            openwire: destination.openwire_destination(),
            amqp: destination.amqp_address(),
            mqtt: destination.mqtt_topic(),
        }
    }
}

/// The options, prepared once for every thread.
struct Plan {
    /// Each thread's destinations (one list shared by all threads, or one per thread).
    targets: Vec<Vec<Target>>,
    count: u64,
    duration: Option<Duration>,
    meter: Option<Meter>,
    stamp: bool,
    body: Body,
    persistent: bool,
    transaction_batch: u64,
    ttl: Duration,
    group_id: Option<String>,
    sleep: Duration,
    sync: bool,
    /// Over failover, asynchronous sends outside transactions wait for a confirmation
    /// every this many messages, so that a reconnect resends at most that many (they are
    /// rebuilt from their numbers, so nothing is kept in memory for them).
    checkpoint: Option<u64>,
    latency_label: Option<&'static str>,
}

/// Asynchronous sends between confirmations over a failover URL (see `Plan::checkpoint`).
const FAILOVER_CHECKPOINT: u64 = 1000;

enum Body {
    /// A bytes message, the same for every send.
    Bytes(Bytes),
    /// A text message, the same for every send.
    Text(Bytes),
    /// `test message: N`.
    Numbered,
}

impl Plan {
    fn new(options: &ProducerOptions) -> Plan {
        let body = if options.message_size > 0 {
            Body::Bytes(Bytes::from(vec![b'.'; options.message_size]))
        } else if let Some(text) = &options.message {
            Body::Text(Bytes::from(text.clone().into_bytes()))
        } else {
            Body::Numbered
        };
        let sync = options.effective_sync_send();
        let latency_label = if sync {
            Some("send latency")
        } else if options.transaction_batch_size > 0 {
            Some("commit latency")
        } else {
            None
        };
        let targets = match &options.thread_destinations {
            Some(lists) => {
                lists.iter().map(|list| list.iter().map(Target::new).collect()).collect()
            }
            None => vec![vec![Target::new(&options.destination)]],
        };
        Plan {
            targets,
            count: options.message_count,
            duration: options.duration,
            meter: options.meter.clone(),
            stamp: options.stamp_send_time,
            body,
            persistent: options.persistent,
            transaction_batch: options.transaction_batch_size,
            ttl: options.msg_ttl,
            group_id: options.msg_group_id.clone().filter(|id| !id.is_empty()),
            sleep: options.sleep,
            sync,
            checkpoint: (options.broker.failover().is_some()
                && !sync
                && options.transaction_batch_size == 0)
                .then_some(FAILOVER_CHECKPOINT),
            latency_label,
        }
    }

    /// Thread `thread`'s destinations.
    fn targets(&self, thread: usize) -> &[Target] {
        // `targets` has one list, or one per thread (checked before the run).
        &self.targets[thread % self.targets.len()]
    }

    /// The messages thread `thread` is asked for: `count` to each of its destinations, or
    /// none in particular when it sends for a duration.
    fn expected(&self, thread: usize) -> u64 {
        match self.duration {
            Some(_) => 0,
            None => self.count.saturating_mul(self.targets(thread).len() as u64),
        }
    }

    /// Whether latencies are recorded now.
    fn measuring(&self) -> bool {
        self.meter.as_ref().is_none_or(Meter::is_measuring)
    }

    /// OpenWire message number `index` (from 0).
    fn message(&self, index: u64) -> OutgoingMessage {
        let message = match &self.body {
            Body::Bytes(bytes) => OutgoingMessage::bytes(bytes.clone()),
            Body::Text(text) => OutgoingMessage::text(String::from_utf8_lossy(text)),
            Body::Numbered => OutgoingMessage::text(format!("test message: {index}")),
        };
        let mut message = message.persistent(self.persistent).time_to_live(self.ttl);
        if let Some(group) = &self.group_id {
            message = message.group_id(group.as_str());
        }
        if self.stamp {
            message = message.property(SENT_AT_PROPERTY, now_micros());
        }
        message
    }

    /// The MQTT payload of message number `index` (from 0): the body's bytes, the text's
    /// UTF-8 (MQTT has no properties in 3.1.1, so neither a send time nor a group).
    fn mqtt_payload(&self, index: u64) -> bytes::Bytes {
        match &self.body {
            Body::Bytes(bytes) => bytes.clone(),
            Body::Text(text) => bytes::Bytes::from(text.to_vec()),
            Body::Numbered => bytes::Bytes::from(format!("test message: {index}")),
        }
    }

    /// AMQP message number `index` (from 0): a `data` section for bytes, an `amqp-value`
    /// string for text (the JMS mapping's bytes and text messages).
    fn amqp_message(&self, index: u64) -> amqp::Message {
        let mut message = match &self.body {
            Body::Bytes(bytes) => amqp::Message::with_data(bytes.clone()),
            Body::Text(text) => amqp::Message {
                body: amqp::Body::Value(String::from_utf8_lossy(text).into_owned().into()),
                ..amqp::Message::default()
            },
            Body::Numbered => amqp::Message {
                body: amqp::Body::Value(format!("test message: {index}").into()),
                ..amqp::Message::default()
            },
        };
        let ttl =
            (!self.ttl.is_zero()).then(|| u32::try_from(self.ttl.as_millis()).unwrap_or(u32::MAX));
        message.header =
            Some(amqp::Header { durable: Some(self.persistent), ttl, ..amqp::Header::default() });
        if let Some(group) = &self.group_id {
            message.properties =
                Some(amqp::Properties { group_id: Some(group.clone()), ..Default::default() });
        }
        if self.stamp {
            let mut properties = amqp::ApplicationProperties::default();
            properties.insert(SENT_AT_PROPERTY, amqp::Value::Long(now_micros()));
            message.application_properties = Some(properties);
        }
        message
    }

    /// SEND number `index` (from 0) to `target`, in `transaction` if any.
    fn frame(&self, target: &Target, index: u64, transaction: Option<&str>) -> Frame {
        let mut frame = Frame::new(Command::Send)
            .header("destination", target.stomp.as_str())
            .header("persistent", if self.persistent { "true" } else { "false" });
        if !self.ttl.is_zero() {
            let ttl = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
            frame.push_header("expires", now_millis().saturating_add(ttl).to_string());
        }
        if let Some(group) = &self.group_id {
            frame.push_header("JMSXGroupID", group.as_str());
        }
        if let Some(transaction) = transaction {
            frame.push_header("transaction", transaction);
        }
        if self.stamp {
            frame.push_header(SENT_AT_PROPERTY, now_micros().to_string());
        }
        // The encoder always writes content-length, which makes a STOMP message a bytes
        // message unless amq-msg-type says text (ActiveMQ's convention).
        match &self.body {
            Body::Bytes(bytes) => frame.with_body(bytes.clone()),
            Body::Text(text) => frame.header("amq-msg-type", "text").with_body(text.clone()),
            Body::Numbered => frame
                .header("amq-msg-type", "text")
                .with_body(format!("test message: {index}").into_bytes()),
        }
    }
}

struct Outcome {
    sent: u64,
    finished: Instant,
    latencies: Histogram,
}

/// The SEND header in which a STOMP producer names its message, in ActiveMQ's id form, so
/// that ferromq's producer audit recognises a resend (the broker's
/// `stomp::mapping::MESSAGE_ID_HEADER`; other brokers keep it as a property).
pub const STOMP_MESSAGE_ID_HEADER: &str = "ferromq-message-id";

/// The ids a STOMP thread gives its sends over a failover URL: `<connection id>:1:1:<n>`,
/// the form of an OpenWire producer's, numbered like one.
struct StompIds {
    connection_id: String,
    sequence: AtomicI64,
}

/// One thread's way to send, over the protocol of its connection.
enum Sender {
    Stomp {
        client: StompClient,
        ids: Option<StompIds>,
    },
    OpenWire {
        client: OpenWireClient,
        session: Session,
        producer: Producer,
    },
    /// One sender link per destination of the thread, with its address.
    Amqp {
        client: AmqpClient,
        links: Vec<(String, amqp::Sender)>,
    },
    /// Publishes at QoS 1 (persistent) or 0; the confirmations not yet waited for, oldest
    /// first: a send that waits waits for all of them.
    Mqtt {
        client: MqttClient,
        pending: tokio::sync::Mutex<std::collections::VecDeque<Confirmation>>,
    },
}

impl Sender {
    /// Over OpenWire: a session (transacted with a transaction batch size) and a producer
    /// (for thread `thread`'s destination, or an anonymous one when it has several).
    /// `last_sequence` is the producer sequence to resume after (see
    /// [`ProducerSettings::last_sequence`]); with `connection_id`, STOMP sends carry ids
    /// made from it.
    async fn open(
        connection: Connection,
        plan: &Plan,
        thread: usize,
        connection_id: Option<&str>,
        last_sequence: i64,
    ) -> Result<Sender, ClientError> {
        match connection {
            Connection::Stomp(client) => {
                let ids = connection_id.map(|id| StompIds {
                    connection_id: id.to_owned(),
                    sequence: AtomicI64::new(last_sequence),
                });
                Ok(Sender::Stomp { client, ids })
            }
            Connection::OpenWire(client) => {
                let mode = if plan.transaction_batch > 0 {
                    SessionMode::Transacted
                } else {
                    SessionMode::Auto
                };
                let session = client.session(mode).await?;
                let destination = match plan.targets(thread) {
                    [only] => Some(only.openwire.clone()),
                    _ => None,
                };
                let settings =
                    ProducerSettings { destination, last_sequence, ..ProducerSettings::default() };
                let producer = session.producer_with(settings).await?;
                Ok(Sender::OpenWire { client, session, producer })
            }
            Connection::Amqp(client) => {
                let mut links = Vec::new();
                for target in plan.targets(thread) {
                    links.push((target.amqp.clone(), client.sender(&target.amqp).await?));
                }
                Ok(Sender::Amqp { client, links })
            }
            Connection::Mqtt(client) => Ok(Sender::Mqtt { client, pending: Default::default() }),
        }
    }

    /// The producer sequence of the last message sent (0 when the sends have no ids).
    fn last_sequence(&self) -> i64 {
        match self {
            Sender::OpenWire { producer, .. } => producer.last_sequence(),
            Sender::Stomp { ids: Some(ids), .. } => ids.sequence.load(Ordering::Relaxed),
            Sender::Stomp { ids: None, .. } | Sender::Amqp { .. } | Sender::Mqtt { .. } => 0,
        }
    }

    /// Starts transaction `id` (OpenWire sessions begin with their first send).
    async fn begin(&self, id: &str) -> Result<(), ClientError> {
        match self {
            // Not waited for: an ERROR fails the next request.
            Sender::Stomp { client, .. } => {
                client.send_frame(Frame::new(Command::Begin).header("transaction", id)).await
            }
            Sender::OpenWire { .. } | Sender::Amqp { .. } | Sender::Mqtt { .. } => Ok(()),
        }
    }

    /// Sends message `index` to `target`, waiting for the broker's confirmation if `wait`.
    async fn send(
        &self,
        plan: &Plan,
        target: &Target,
        index: u64,
        transaction: Option<&str>,
        wait: bool,
    ) -> Result<(), ClientError> {
        match self {
            Sender::Stomp { client, ids } => {
                let mut frame = plan.frame(target, index, transaction);
                if let Some(ids) = ids {
                    let sequence = ids.sequence.fetch_add(1, Ordering::Relaxed) + 1;
                    let id = format!("{}:1:1:{sequence}", ids.connection_id);
                    frame.push_header(STOMP_MESSAGE_ID_HEADER, id);
                }
                if wait {
                    client.request_receipt(frame).await
                } else {
                    client.send_frame(frame).await
                }
            }
            Sender::OpenWire { producer, .. } => {
                let mode = if wait { SendMode::Sync } else { SendMode::Async };
                let message = plan.message(index);
                producer.send_with(&target.openwire, &message, mode).await.map(drop)
            }
            // Always confirmed: the plan waits for every AMQP send.
            Sender::Amqp { links, .. } => {
                let link = links
                    .iter()
                    .find(|(address, _)| *address == target.amqp)
                    .map(|(_, link)| link)
                    .ok_or_else(|| ClientError::protocol("no AMQP sender for the destination"))?;
                link.send(&plan.amqp_message(index)).await
            }
            Sender::Mqtt { client, pending } => {
                let topic = target
                    .mqtt
                    .as_deref()
                    .ok_or_else(|| ClientError::protocol("MQTT has no queues"))?;
                let qos = if plan.persistent { QoS::AtLeastOnce } else { QoS::AtMostOnce };
                let confirmation = client.publish(topic, plan.mqtt_payload(index), qos, false);
                let mut pending = pending.lock().await;
                pending.push_back(confirmation.await?);
                // Forget what is confirmed already (acks come in order), so that a long run
                // keeps no more than the window.
                while let Some(front) = pending.front_mut() {
                    match front.try_outcome() {
                        Some(outcome) => {
                            pending.pop_front();
                            outcome?;
                        }
                        None => break,
                    }
                }
                if wait {
                    while let Some(confirmation) = pending.pop_front() {
                        confirmation.wait().await?;
                    }
                }
                Ok(())
            }
        }
    }

    /// Commits transaction `id`, waiting for the broker.
    async fn commit(&self, id: &str) -> Result<(), ClientError> {
        match self {
            Sender::Stomp { client, .. } => client.commit(id).await,
            Sender::OpenWire { session, .. } => session.commit().await,
            // Refused before connecting (`amqp_refusal`).
            Sender::Amqp { .. } => {
                Err(ClientError::protocol(format!("no transactions over AMQP (commit {id})")))
            }
            // Refused before connecting (`mqtt_refusal`).
            Sender::Mqtt { .. } => {
                Err(ClientError::protocol(format!("no transactions over MQTT (commit {id})")))
            }
        }
    }

    async fn close(self) {
        match self {
            Sender::Stomp { client, .. } => Connection::Stomp(client).close().await,
            Sender::OpenWire { client, .. } => Connection::OpenWire(client).close().await,
            Sender::Amqp { client, .. } => Connection::Amqp(client).close().await,
            Sender::Mqtt { client, pending } => {
                // Whatever is still unconfirmed gets its chance before the DISCONNECT.
                for confirmation in pending.into_inner() {
                    let _ = confirmation.wait().await;
                }
                Connection::Mqtt(client).close().await
            }
        }
    }
}

/// One thread's connection and what it needs to replace it.
struct Link {
    dialer: Dialer,
    reconnect: Reconnect,
    /// `None` only while (re)connecting.
    sender: Option<Sender>,
}

impl Link {
    /// Connects (through the failover list, if any) and opens the thread's sender,
    /// resuming the OpenWire producer sequence after `last_sequence`.
    async fn open(
        &mut self,
        plan: &Plan,
        thread: usize,
        startup: bool,
        last_sequence: i64,
    ) -> Result<(), LoadError> {
        let dialer = &self.dialer;
        let sender = self
            .reconnect
            .connect(startup, |endpoint| async move {
                let connection = dialer.connect(&endpoint).await?;
                let ids = dialer.connection_id.as_deref();
                Sender::open(connection, plan, thread, ids, last_sequence).await.map_err(|source| {
                    LoadError::Connect {
                        thread: dialer.thread.clone(),
                        url: endpoint.to_string(),
                        source,
                    }
                })
            })
            .await?;
        self.sender = Some(sender);
        Ok(())
    }
}

/// One thread's sends: `plan.count` messages to each of its destinations, or as many as
/// fit in `plan.duration`.
///
/// Over a failover URL a lost connection is replaced and the sends resume at the first
/// message not confirmed: synchronous sends resend the one in flight, asynchronous ones
/// those since the last confirmation, a transaction is replayed whole (the broker rolled
/// it back). The resent messages carry their first ids (OpenWire: the same connection id,
/// producer and sequence; STOMP: the same [`STOMP_MESSAGE_ID_HEADER`]), so ferromq's
/// duplicate detection drops those it had stored. A replayed transaction keeps its ids
/// too: if its commit was done before the connection died, the replay is dropped as a
/// duplicate; if it was rolled back, the broker's audit forgot them with the rollback.
/// Against a broker without duplicate detection for STOMP (Apache ActiveMQ), a STOMP
/// message stored just before the connection died arrives twice.
async fn produce(
    thread_index: usize,
    link: &mut Link,
    plan: &Plan,
    start: Instant,
) -> Result<Outcome, LoadError> {
    let thread = link.dialer.thread.clone();
    let targets = plan.targets(thread_index);
    let deadline = plan.duration.map(|duration| start + duration);
    let limit = plan.expected(thread_index);
    let mut latencies = Histogram::default();
    let mut transaction: Option<String> = None;
    let mut transactions = 0u64;
    let mut in_transaction = 0u64;
    // The next message to send, and how many from the first are confirmed (a synchronous
    // send's receipt, an asynchronous one's later confirmation, a commit).
    let mut index = 0u64;
    let mut confirmed = 0u64;
    // The producer sequence of the last confirmed message: a resend resumes after it, so
    // every message gets the id it had the first time.
    let mut confirmed_sequence = 0i64;
    // Messages counted in the meter: a resent one is counted once.
    let mut metered = 0u64;
    loop {
        let last = match deadline {
            // The first send after the time is up is the last: it commits or confirms.
            Some(deadline) => Instant::now() >= deadline,
            None if index >= limit => break,
            None => index + 1 == limit,
        };
        let target = &targets[(index % targets.len() as u64) as usize];
        let Some(sender) = link.sender.as_ref() else {
            return Err(LoadError::Aborted(format!("{thread} has no connection")));
        };
        let step: Result<(), ClientError> = async {
            if plan.transaction_batch > 0 && transaction.is_none() {
                transactions += 1;
                let id = format!("tx-{transactions}");
                sender.begin(&id).await?;
                transaction = Some(id);
            }
            // Confirmations come in order: a confirmed send confirms every send before it.
            let checkpoint = plan.checkpoint.is_some_and(|every| (index + 1).is_multiple_of(every));
            let wait = plan.sync || ((last || checkpoint) && transaction.is_none());
            let asked = Instant::now();
            sender.send(plan, target, index, transaction.as_deref(), wait).await?;
            if plan.sync && plan.measuring() {
                latencies.record(asked.elapsed());
            }
            index += 1;
            match &transaction {
                None if wait => {
                    confirmed = index;
                    confirmed_sequence = sender.last_sequence();
                }
                None => {}
                Some(id) => {
                    in_transaction += 1;
                    if in_transaction == plan.transaction_batch || last {
                        in_transaction = 0;
                        let asked = Instant::now();
                        sender.commit(id).await?;
                        if !plan.sync && plan.measuring() {
                            latencies.record(asked.elapsed());
                        }
                        transaction = None;
                        confirmed = index;
                        confirmed_sequence = sender.last_sequence();
                    }
                }
            }
            Ok(())
        }
        .await;
        if let Err(error) = step {
            if !link.reconnect.enabled() || !connection_lost(&error) {
                return Err(LoadError::Failed { thread, after: confirmed, source: error });
            }
            tracing::warn!(thread, %error, resend_from = confirmed,
                "connection lost; reconnecting through the failover URL");
            if let Some(lost) = link.sender.take() {
                // A dead connection closes at once; a hung one must not hold us up.
                let _ = tokio::time::timeout(Duration::from_secs(1), lost.close()).await;
            }
            link.open(plan, thread_index, false, confirmed_sequence).await?;
            index = confirmed;
            transaction = None;
            in_transaction = 0;
            continue;
        }
        // A message counts once sent (confirmed when the send waits); in a transaction a
        // sampler sees it when sent, as the perf plugin does.
        if index > metered {
            metered = index;
            if let Some(meter) = &plan.meter {
                meter.count(thread_index);
            }
        }
        if last {
            break;
        }
        if !plan.sleep.is_zero() {
            tokio::time::sleep(plan.sleep).await;
        }
    }
    let finished = if index == 0 { start } else { Instant::now() };
    Ok(Outcome { sent: index, finished, latencies })
}
