//! Randomized model tests: one queue, and one topic with durable and non-durable
//! subscriptions and transactions.
//!
//! The queue model: each iteration starts a broker and drives one queue with a producer and
//! one to three consumers on connections of their own (ack modes `client` and
//! `client-individual`, prefetch 1 to 5) through random steps: send, receive, ack, nack, close
//! a consumer (UNSUBSCRIBE or dropping its connection) and open a new one. A reference model
//! keeps the messages not yet acknowledged and what each consumer holds, and every delivery is
//! checked against it. At the end one consumer drains the queue: exactly the unacknowledged
//! messages must arrive, none lost, none twice.
//!
//! The topic model is described at [`topic_matches_the_reference_model_under_random_steps`].
//!
//! The seed is printed; `FERROMQ_MODEL_SEED=<seed>` replays a run.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::time::Duration;

use anyhow::{bail, ensure, Context as _};
use broker::BrokerHandle;
use client::{AckMode, ReceivedMessage, StompClient, Subscription};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tests::{
    connect, connect_as, durable_key, start_broker, stored_count, stored_count_of,
    wait_durable_inactive, ARRIVES, PERSISTENT, SUBSCRIPTION_NAME,
};

const ITERATIONS: u64 = 20;
const STEPS: usize = 300;
const MAX_CONSUMERS: usize = 3;
const QUEUE_NAME: &str = "model";
const QUEUE: &str = "/queue/model";
/// The header carrying a message's sequence number (its send order).
const SEQ: &str = "model-seq";
/// How long a receive step waits when nothing is buffered yet.
const RECEIVE_WAIT: Duration = Duration::from_millis(10);
/// Steps of history kept for the failure message.
const TRACE_LEN: usize = 40;

// ---------------------------------------------------------------------------------------------
// Shared by both models.

/// The run's base seed: `FERROMQ_MODEL_SEED`, or one drawn from the clock.
fn base_seed() -> anyhow::Result<u64> {
    match std::env::var("FERROMQ_MODEL_SEED") {
        Ok(text) => text.trim().parse().with_context(|| format!("FERROMQ_MODEL_SEED={text:?}")),
        Err(_) => {
            Ok(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos()
                as u64)
        }
    }
}

/// The last [`TRACE_LEN`] steps of a run, for the failure message.
#[derive(Default)]
struct Trace(VecDeque<String>);

impl Trace {
    fn note(&mut self, event: String) {
        if self.0.len() == TRACE_LEN {
            self.0.pop_front();
        }
        self.0.push_back(event);
    }

    /// `error` with the `model`'s seed, the iteration and the last steps.
    fn failure(
        &self,
        error: anyhow::Error,
        model: &str,
        seed: u64,
        iteration: u64,
    ) -> anyhow::Error {
        let trace: Vec<String> = self.0.iter().cloned().collect();
        error.context(format!(
            "{model} seed {seed}, iteration {iteration}; last steps:\n  {}",
            trace.join("\n  ")
        ))
    }
}

/// One iteration of a model: random steps checked against the model, then a final drain.
trait ModelRun {
    async fn step(&mut self) -> anyhow::Result<()>;
    async fn drain(&mut self) -> anyhow::Result<()>;
}

/// Takes `steps` random steps, stopping at the first failure, then the final drain.
async fn steps_then_drain(run: &mut impl ModelRun, steps: usize) -> anyhow::Result<()> {
    for step in 0..steps {
        run.step().await.with_context(|| format!("step {step}"))?;
    }
    run.drain().await.context("final drain")
}

/// A step drawn at random, each with its weight's share of the sum of `weights`.
fn pick<S: Copy>(rng: &mut StdRng, weights: &[(S, u32)]) -> S {
    let total: u32 = weights.iter().map(|(_, w)| w).sum();
    let mut roll = rng.gen_range(0..total);
    for (step, weight) in weights {
        if roll < *weight {
            return *step;
        }
        roll -= weight;
    }
    unreachable!("a roll below the sum of the weights")
}

/// A delivery already buffered, or arriving within [`RECEIVE_WAIT`]; `None` if none came.
/// `whose` names the consumer if its connection ended.
async fn receive_soon(
    subscription: &mut Subscription,
    whose: impl FnOnce() -> String,
) -> anyhow::Result<Option<ReceivedMessage>> {
    if let Some(message) = subscription.try_recv() {
        return Ok(Some(message));
    }
    match tokio::time::timeout(RECEIVE_WAIT, subscription.recv()).await {
        Err(_) => Ok(None),
        Ok(Some(message)) => Ok(Some(message)),
        Ok(None) => bail!("the connection of {} ended", whose()),
    }
}

// ---------------------------------------------------------------------------------------------
// The queue model.

/// A consumer as the model sees it.
struct Consumer {
    name: String,
    client: StompClient,
    subscription: Subscription,
    mode: AckMode,
    prefetch: usize,
    /// Received and neither acknowledged nor given back, in delivery order.
    held: Vec<(u64, ReceivedMessage)>,
    /// The last message this consumer received as a first delivery.
    last_first_delivery: Option<u64>,
}

/// One iteration: the broker, its clients and the reference model.
struct Run {
    rng: StdRng,
    broker: BrokerHandle,
    producer: StompClient,
    consumers: Vec<Consumer>,
    /// Sent and not acknowledged.
    unacked: BTreeSet<u64>,
    /// Delivered to some consumer at least once (as far as the test has seen).
    delivered: HashSet<u64>,
    next_seq: u64,
    next_consumer: usize,
    trace: Trace,
    counts: Counts,
}

/// What a run exercised, printed so that a reader can see the model is not idle.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    sent: u64,
    received: u64,
    redelivered: u64,
    acked: u64,
    nacked: u64,
    closed: u64,
    drained: u64,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.sent += other.sent;
        self.received += other.received;
        self.redelivered += other.redelivered;
        self.acked += other.acked;
        self.nacked += other.nacked;
        self.closed += other.closed;
        self.drained += other.drained;
    }
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Send,
    Receive,
    Ack,
    Nack,
    Close,
    Open,
}

const WEIGHTS: &[(Step, u32)] = &[
    (Step::Send, 25),
    (Step::Receive, 35),
    (Step::Ack, 15),
    (Step::Nack, 5),
    (Step::Close, 4),
    (Step::Open, 6),
];

impl Run {
    async fn start(seed: u64) -> anyhow::Result<Run> {
        // The model redelivers NACKed and returned messages however often they come back.
        let broker = start_broker(|config| config.dead_letter.max_redeliveries = -1).await?;
        let producer = connect(&broker).await?;
        let mut run = Run {
            rng: StdRng::seed_from_u64(seed),
            broker,
            producer,
            consumers: Vec::new(),
            unacked: BTreeSet::new(),
            delivered: HashSet::new(),
            next_seq: 0,
            next_consumer: 0,
            trace: Trace::default(),
            counts: Counts::default(),
        };
        run.open().await?;
        Ok(run)
    }

    async fn send(&mut self) -> anyhow::Result<()> {
        let seq = self.next_seq;
        self.next_seq += 1;
        let seq_text = seq.to_string();
        self.producer
            .send_with_receipt(QUEUE, format!("m{seq}"), &[PERSISTENT, (SEQ, &seq_text)])
            .await
            .with_context(|| format!("sending m{seq}"))?;
        self.unacked.insert(seq);
        self.counts.sent += 1;
        self.trace.note(format!("send m{seq}"));
        Ok(())
    }

    async fn open(&mut self) -> anyhow::Result<()> {
        let name = format!("c{}", self.next_consumer);
        self.next_consumer += 1;
        let mode = if self.rng.gen_bool(0.5) { AckMode::Client } else { AckMode::ClientIndividual };
        let prefetch = self.rng.gen_range(1..=5usize);
        let client = connect(&self.broker).await?;
        let prefetch_text = prefetch.to_string();
        let subscription = client
            .subscribe(QUEUE, mode, &[("activemq.prefetchSize", &prefetch_text)])
            .await
            .with_context(|| format!("subscribing {name}"))?;
        self.trace.note(format!("open {name} ({}, prefetch {prefetch})", mode.as_str()));
        self.consumers.push(Consumer {
            name,
            client,
            subscription,
            mode,
            prefetch,
            held: Vec::new(),
            last_first_delivery: None,
        });
        Ok(())
    }

    async fn receive(&mut self) -> anyhow::Result<()> {
        if self.consumers.is_empty() {
            return Ok(());
        }
        let index = self.rng.gen_range(0..self.consumers.len());
        let consumer = &mut self.consumers[index];
        let whose = || format!("consumer {}", consumer.name);
        let Some(message) = receive_soon(&mut consumer.subscription, whose).await? else {
            return Ok(());
        };
        self.accept_delivery(index, message)
    }

    /// Checks a delivery to consumer `index` against the model and records it.
    fn accept_delivery(&mut self, index: usize, message: ReceivedMessage) -> anyhow::Result<()> {
        let seq: u64 = message
            .header(SEQ)
            .with_context(|| format!("a MESSAGE without {SEQ}: {message:?}"))?
            .parse()?;
        let redelivered = message.redelivered();
        let name = self.consumers[index].name.clone();
        self.trace.note(format!(
            "{name} receives m{seq}{}",
            if redelivered { " (redelivered)" } else { "" }
        ));
        ensure!(
            self.unacked.contains(&seq),
            "{name} received m{seq}, which was acknowledged or never sent"
        );
        if let Some(holder) = self.consumers.iter().find(|c| c.held.iter().any(|(s, _)| *s == seq))
        {
            bail!("{name} received m{seq}, which {} holds unacknowledged", holder.name);
        }
        ensure!(
            redelivered || !self.delivered.contains(&seq),
            "{name} received m{seq} again without redelivered:true: {message:?}"
        );
        let consumer = &mut self.consumers[index];
        if !redelivered {
            if let Some(last) = consumer.last_first_delivery {
                ensure!(
                    last < seq,
                    "{name} got first delivery m{seq} after m{last}: out of send order"
                );
            }
            consumer.last_first_delivery = Some(seq);
        }
        consumer.held.push((seq, message));
        ensure!(
            consumer.held.len() <= consumer.prefetch,
            "{name} holds {} unacknowledged messages with prefetch {}",
            consumer.held.len(),
            consumer.prefetch
        );
        self.delivered.insert(seq);
        self.counts.received += 1;
        self.counts.redelivered += u64::from(redelivered);
        Ok(())
    }

    /// ACK (`positive`) or NACK one held message of a random consumer holding any.
    async fn acknowledge(&mut self, positive: bool) -> anyhow::Result<()> {
        let holding: Vec<usize> =
            (0..self.consumers.len()).filter(|&i| !self.consumers[i].held.is_empty()).collect();
        if holding.is_empty() {
            return Ok(());
        }
        let index = holding[self.rng.gen_range(0..holding.len())];
        let position = self.rng.gen_range(0..self.consumers[index].held.len());
        let consumer = &mut self.consumers[index];
        let message = &consumer.held[position].1;
        let result = if positive {
            consumer.client.ack(message).await
        } else {
            consumer.client.nack(message).await
        };
        let verb = if positive { "acks" } else { "nacks" };
        let target = consumer.held[position].0;
        result.with_context(|| format!("{} {verb} m{target}", consumer.name))?;
        // A `client` ack or nack covers every earlier delivery of the subscription.
        let covered: Vec<u64> = match consumer.mode {
            AckMode::Client => consumer.held.drain(..=position).map(|(seq, _)| seq).collect(),
            _ => vec![consumer.held.remove(position).0],
        };
        let name = consumer.name.clone();
        self.trace.note(format!("{name} {verb} m{target}, covering {covered:?}"));
        if !positive {
            self.counts.nacked += covered.len() as u64;
        }
        if positive {
            self.counts.acked += covered.len() as u64;
            for seq in covered {
                ensure!(self.unacked.remove(&seq), "m{seq} was acknowledged twice");
            }
        }
        Ok(())
    }

    async fn close_one(&mut self) -> anyhow::Result<()> {
        if self.consumers.is_empty() {
            return Ok(());
        }
        let index = self.rng.gen_range(0..self.consumers.len());
        let consumer = self.consumers.remove(index);
        let abrupt = self.rng.gen_bool(0.5);
        self.close(consumer, abrupt).await
    }

    /// Closes a consumer: UNSUBSCRIBE and DISCONNECT, or dropping the connection.
    async fn close(&mut self, consumer: Consumer, abrupt: bool) -> anyhow::Result<()> {
        let held: Vec<u64> = consumer.held.iter().map(|(seq, _)| *seq).collect();
        let name = consumer.name.clone();
        if abrupt {
            drop(consumer);
        } else {
            consumer
                .subscription
                .unsubscribe()
                .await
                .with_context(|| format!("unsubscribing {name}"))?;
            consumer.client.disconnect().await.with_context(|| format!("disconnecting {name}"))?;
        }
        self.counts.closed += 1;
        let how = if abrupt { "drops its connection" } else { "unsubscribes" };
        self.trace.note(format!("{name} {how}, returning {held:?}"));
        Ok(())
    }
}

impl ModelRun for Run {
    async fn step(&mut self) -> anyhow::Result<()> {
        match pick(&mut self.rng, WEIGHTS) {
            Step::Send => self.send().await,
            Step::Receive => self.receive().await,
            Step::Ack => self.acknowledge(true).await,
            Step::Nack => self.acknowledge(false).await,
            Step::Close => self.close_one().await,
            Step::Open if self.consumers.len() < MAX_CONSUMERS => self.open().await,
            Step::Open => Ok(()),
        }
    }

    /// Closes every consumer, then drains the queue with a fresh one and checks that exactly
    /// the unacknowledged messages arrive.
    async fn drain(&mut self) -> anyhow::Result<()> {
        while let Some(consumer) = self.consumers.pop() {
            let abrupt = self.rng.gen_bool(0.5);
            self.close(consumer, abrupt).await?;
        }
        let client = connect(&self.broker).await?;
        let mut subscription = client.subscribe(QUEUE, AckMode::ClientIndividual, &[]).await?;
        let mut missing = self.unacked.clone();
        let mut last_first_delivery = None;
        self.trace.note(format!("drain expects {missing:?}"));
        while let Some(&next) = missing.first() {
            let message = subscription
                .recv_timeout(ARRIVES)
                .await
                .with_context(|| format!("draining, still missing {missing:?} (e.g. m{next})"))?;
            let seq: u64 =
                message.header(SEQ).context("a MESSAGE without its sequence")?.parse()?;
            ensure!(
                missing.remove(&seq),
                "the drain received m{seq}, which is acknowledged or was received twice"
            );
            ensure!(
                message.redelivered() || !self.delivered.contains(&seq),
                "the drain received m{seq} again without redelivered:true"
            );
            if !message.redelivered() {
                ensure!(
                    last_first_delivery < Some(seq),
                    "drain: first delivery m{seq} after m{last_first_delivery:?}"
                );
                last_first_delivery = Some(seq);
            }
            client.ack(&message).await.with_context(|| format!("drain acks m{seq}"))?;
            self.counts.drained += 1;
        }
        self.unacked.clear();
        let stats = self.broker.queue_stats(QUEUE_NAME).await.context("the queue exists")?;
        ensure!(
            stats.ready == 0 && stats.in_flight == 0,
            "messages left after the drain: {stats:?}"
        );
        ensure!(
            stored_count(&self.broker, QUEUE_NAME)? == 0,
            "stored messages left after the drain"
        );
        client.disconnect().await?;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_matches_the_reference_model_under_random_steps() -> anyhow::Result<()> {
    let seed = base_seed()?;
    println!("model seed {seed} (replay with FERROMQ_MODEL_SEED={seed})");
    let started = std::time::Instant::now();
    let mut counts = Counts::default();
    for iteration in 0..ITERATIONS {
        let mut run = Run::start(seed.wrapping_add(iteration)).await?;
        if let Err(error) = steps_then_drain(&mut run, STEPS).await {
            return Err(run.trace.failure(error, "model", seed, iteration));
        }
        counts.add(run.counts);
        let Run { broker, .. } = run;
        broker.shutdown().await;
    }
    println!("{ITERATIONS} iterations of {STEPS} steps in {:?}: {counts:?}", started.elapsed());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The topic model.

const TOPIC_ITERATIONS: u64 = 12;
const TOPIC_STEPS: usize = 400;
const TOPIC_NAME: &str = "model-topic";
const TOPIC: &str = "/topic/model-topic";
const MAX_NON_DURABLE: usize = 2;

/// A consumer attached to a durable subscription.
struct DurableConsumer {
    client: StompClient,
    subscription: Subscription,
    mode: AckMode,
    prefetch: usize,
    /// Received and neither acknowledged nor given back, in delivery order.
    held: Vec<(u64, ReceivedMessage)>,
    /// The open transaction of this consumer's connection: its name and the messages it
    /// acknowledged.
    transaction: Option<(String, Vec<u64>)>,
}

/// A durable subscription as the model sees it.
struct Durable {
    client_id: String,
    name: String,
    /// Published (committed) since the subscription was created and not acknowledged (in a
    /// committed transaction), in publication order.
    expected: BTreeSet<u64>,
    /// Seen delivered at least once.
    delivered: HashSet<u64>,
    /// The last message the subscription delivered for the first time, over all its consumers.
    last_first_delivery: Option<u64>,
    consumer: Option<DurableConsumer>,
    /// The last consumer's connection was dropped: the broker frees the subscription when it
    /// notices, in its own time.
    dropped: bool,
}

/// A non-durable subscriber: it gets what is published while it is subscribed.
struct NonDurable {
    name: String,
    client: StompClient,
    subscription: Subscription,
    mode: AckMode,
    prefetch: usize,
    expected: BTreeSet<u64>,
    delivered: HashSet<u64>,
    last_first_delivery: Option<u64>,
    held: Vec<(u64, ReceivedMessage)>,
}

/// What a topic run exercised.
#[derive(Debug, Default, Clone, Copy)]
struct TopicCounts {
    published: u64,
    sent_in_aborted: u64,
    received: u64,
    redelivered: u64,
    acked: u64,
    acked_in_committed: u64,
    acked_in_aborted: u64,
    nacked: u64,
    attached: u64,
    detached: u64,
    drained: u64,
}

impl TopicCounts {
    fn add(&mut self, o: TopicCounts) {
        self.published += o.published;
        self.sent_in_aborted += o.sent_in_aborted;
        self.received += o.received;
        self.redelivered += o.redelivered;
        self.acked += o.acked;
        self.acked_in_committed += o.acked_in_committed;
        self.acked_in_aborted += o.acked_in_aborted;
        self.nacked += o.nacked;
        self.attached += o.attached;
        self.detached += o.detached;
        self.drained += o.drained;
    }
}

#[derive(Debug, Clone, Copy)]
enum TopicStep {
    Send,
    Begin,
    Commit,
    Abort,
    Receive,
    Ack,
    AckInTransaction,
    EndAckTransaction,
    Nack,
    Attach,
    Detach,
    Subscribe,
    Unsubscribe,
}

const TOPIC_WEIGHTS: &[(TopicStep, u32)] = &[
    (TopicStep::Send, 20),
    (TopicStep::Begin, 4),
    (TopicStep::Commit, 3),
    (TopicStep::Abort, 2),
    (TopicStep::Receive, 35),
    (TopicStep::Ack, 14),
    (TopicStep::AckInTransaction, 8),
    (TopicStep::EndAckTransaction, 4),
    (TopicStep::Nack, 3),
    (TopicStep::Attach, 5),
    (TopicStep::Detach, 3),
    (TopicStep::Subscribe, 2),
    (TopicStep::Unsubscribe, 2),
];

/// Which consumer a delivery went to.
#[derive(Debug, Clone, Copy)]
enum Who {
    Durable(usize),
    NonDurable(usize),
}

struct TopicRun {
    rng: StdRng,
    broker: BrokerHandle,
    producer: StompClient,
    /// The producer's open transaction and what it sent in it, in order.
    producer_tx: Option<(String, Vec<u64>)>,
    durables: Vec<Durable>,
    non_durables: Vec<NonDurable>,
    next_seq: u64,
    next_name: u64,
    trace: Trace,
    counts: TopicCounts,
}

impl TopicRun {
    async fn start(seed: u64) -> anyhow::Result<TopicRun> {
        // The model redelivers NACKed and returned messages however often they come back.
        let broker = start_broker(|config| config.dead_letter.max_redeliveries = -1).await?;
        let producer = connect(&broker).await?;
        let mut rng = StdRng::seed_from_u64(seed);
        let durable_count = rng.gen_range(1..=3);
        let mut run = TopicRun {
            rng,
            broker,
            producer,
            producer_tx: None,
            durables: Vec::new(),
            non_durables: Vec::new(),
            next_seq: 0,
            next_name: 0,
            trace: Trace::default(),
            counts: TopicCounts::default(),
        };
        // Every durable subscription is created before anything is published (the model
        // compares deliveries with what was published since each one's creation).
        for index in 0..durable_count {
            run.durables.push(Durable {
                client_id: format!("model-client-{index}"),
                name: format!("model-sub-{index}"),
                expected: BTreeSet::new(),
                delivered: HashSet::new(),
                last_first_delivery: None,
                consumer: None,
                dropped: false,
            });
            run.attach(index).await?;
        }
        let non_durable_count = run.rng.gen_range(0..=MAX_NON_DURABLE);
        for _ in 0..non_durable_count {
            run.subscribe().await?;
        }
        Ok(run)
    }

    fn fresh_name(&mut self, prefix: &str) -> String {
        self.next_name += 1;
        format!("{prefix}{}", self.next_name)
    }

    /// A message becomes visible: every durable subscription and every current non-durable
    /// subscriber expects it.
    fn publish(&mut self, seq: u64) {
        for durable in &mut self.durables {
            durable.expected.insert(seq);
        }
        for subscriber in &mut self.non_durables {
            subscriber.expected.insert(seq);
        }
        self.counts.published += 1;
    }

    async fn send(&mut self) -> anyhow::Result<()> {
        let seq = self.next_seq;
        self.next_seq += 1;
        let seq_text = seq.to_string();
        let persistent = self.rng.gen_bool(0.5);
        let mut headers = vec![(SEQ, seq_text.as_str())];
        if persistent {
            headers.push(PERSISTENT);
        }
        let transaction = self.producer_tx.as_ref().map(|(name, _)| name.clone());
        if let Some(name) = &transaction {
            headers.push(("transaction", name.as_str()));
        }
        self.producer
            .send_with_receipt(TOPIC, format!("m{seq}"), &headers)
            .await
            .with_context(|| format!("sending m{seq}"))?;
        match &mut self.producer_tx {
            Some((name, pending)) => {
                pending.push(seq);
                let name = name.clone();
                self.trace.note(format!("send m{seq} in {name} (persistent {persistent})"));
            }
            None => {
                self.publish(seq);
                self.trace.note(format!("publish m{seq} (persistent {persistent})"));
            }
        }
        Ok(())
    }

    async fn begin(&mut self) -> anyhow::Result<()> {
        if self.producer_tx.is_some() {
            return Ok(());
        }
        let name = self.fresh_name("send-tx-");
        self.producer.begin(&name).await.with_context(|| format!("BEGIN {name}"))?;
        self.trace.note(format!("producer begins {name}"));
        self.producer_tx = Some((name, Vec::new()));
        Ok(())
    }

    async fn end_send_transaction(&mut self, commit: bool) -> anyhow::Result<()> {
        let Some((name, pending)) = self.producer_tx.take() else { return Ok(()) };
        if commit {
            self.producer.commit(&name).await.with_context(|| format!("COMMIT {name}"))?;
            for seq in &pending {
                self.publish(*seq);
            }
        } else {
            self.producer.abort(&name).await.with_context(|| format!("ABORT {name}"))?;
            self.counts.sent_in_aborted += pending.len() as u64;
        }
        let verb = if commit { "commits" } else { "aborts" };
        self.trace.note(format!("producer {verb} {name} with {pending:?}"));
        Ok(())
    }

    async fn attach(&mut self, index: usize) -> anyhow::Result<()> {
        let durable = &self.durables[index];
        let (client_id, name, dropped) =
            (durable.client_id.clone(), durable.name.clone(), durable.dropped);
        if dropped {
            wait_durable_inactive(&self.broker, &client_id, &name).await?;
        }
        let mode = if self.rng.gen_bool(0.5) { AckMode::Client } else { AckMode::ClientIndividual };
        let prefetch = self.rng.gen_range(1..=5usize);
        let prefetch_text = prefetch.to_string();
        let client = connect_as(&self.broker, &client_id).await?;
        let subscription = client
            .subscribe(
                TOPIC,
                mode,
                &[(SUBSCRIPTION_NAME, name.as_str()), ("activemq.prefetchSize", &prefetch_text)],
            )
            .await
            .with_context(|| format!("attaching to durable {name}"))?;
        self.trace.note(format!("attach {name} ({}, prefetch {prefetch})", mode.as_str()));
        let durable = &mut self.durables[index];
        durable.dropped = false;
        durable.consumer = Some(DurableConsumer {
            client,
            subscription,
            mode,
            prefetch,
            held: Vec::new(),
            transaction: None,
        });
        self.counts.attached += 1;
        Ok(())
    }

    /// Detaches durable `index`'s consumer: DISCONNECT, or dropping the connection. Its open
    /// transaction rolls back; what it held goes back to the subscription.
    async fn detach(&mut self, index: usize, abrupt: bool) -> anyhow::Result<()> {
        let durable = &mut self.durables[index];
        let Some(consumer) = durable.consumer.take() else { return Ok(()) };
        let held: Vec<u64> = consumer.held.iter().map(|(seq, _)| *seq).collect();
        let in_transaction = consumer.transaction.as_ref().map(|(_, acked)| acked.clone());
        let name = durable.name.clone();
        if abrupt {
            drop(consumer);
            durable.dropped = true;
        } else {
            consumer.client.disconnect().await.with_context(|| format!("disconnecting {name}"))?;
        }
        let how = if abrupt { "drops its connection" } else { "disconnects" };
        self.trace.note(format!(
            "{name} {how}, returning {held:?} and rolling back acks {in_transaction:?}"
        ));
        self.counts.detached += 1;
        Ok(())
    }

    async fn subscribe(&mut self) -> anyhow::Result<()> {
        let name = self.fresh_name("nd");
        let mode = if self.rng.gen_bool(0.5) { AckMode::Auto } else { AckMode::ClientIndividual };
        let prefetch = self.rng.gen_range(1..=5usize);
        let prefetch_text = prefetch.to_string();
        let client = connect(&self.broker).await?;
        let subscription = client
            .subscribe(TOPIC, mode, &[("activemq.prefetchSize", &prefetch_text)])
            .await
            .with_context(|| format!("subscribing {name}"))?;
        self.trace.note(format!("subscribe {name} ({}, prefetch {prefetch})", mode.as_str()));
        self.non_durables.push(NonDurable {
            name,
            client,
            subscription,
            mode,
            prefetch,
            expected: BTreeSet::new(),
            delivered: HashSet::new(),
            last_first_delivery: None,
            held: Vec::new(),
        });
        Ok(())
    }

    async fn unsubscribe(&mut self) -> anyhow::Result<()> {
        if self.non_durables.is_empty() {
            return Ok(());
        }
        let index = self.rng.gen_range(0..self.non_durables.len());
        let subscriber = self.non_durables.remove(index);
        let name = subscriber.name.clone();
        if self.rng.gen_bool(0.5) {
            drop(subscriber);
            self.trace.note(format!("{name} drops its connection"));
        } else {
            subscriber
                .subscription
                .unsubscribe()
                .await
                .with_context(|| format!("UNSUBSCRIBE {name}"))?;
            subscriber
                .client
                .disconnect()
                .await
                .with_context(|| format!("disconnecting {name}"))?;
            self.trace.note(format!("{name} unsubscribes"));
        }
        Ok(())
    }

    /// Every consumer that can receive now.
    fn receivers(&self) -> Vec<Who> {
        let durables = (0..self.durables.len())
            .filter(|&i| self.durables[i].consumer.is_some())
            .map(Who::Durable);
        let non_durables = (0..self.non_durables.len()).map(Who::NonDurable);
        durables.chain(non_durables).collect()
    }

    fn subscription_of(&mut self, who: Who) -> Option<&mut Subscription> {
        match who {
            Who::Durable(i) => self.durables[i].consumer.as_mut().map(|c| &mut c.subscription),
            Who::NonDurable(i) => Some(&mut self.non_durables[i].subscription),
        }
    }

    async fn receive(&mut self) -> anyhow::Result<()> {
        let receivers = self.receivers();
        if receivers.is_empty() {
            return Ok(());
        }
        let who = receivers[self.rng.gen_range(0..receivers.len())];
        let Some(subscription) = self.subscription_of(who) else { return Ok(()) };
        let Some(message) = receive_soon(subscription, || format!("{who:?}")).await? else {
            return Ok(());
        };
        self.accept(who, message)
    }

    /// Checks a delivery against the model and records it.
    fn accept(&mut self, who: Who, message: ReceivedMessage) -> anyhow::Result<()> {
        let seq: u64 = message
            .header(SEQ)
            .with_context(|| format!("a MESSAGE without {SEQ}: {message:?}"))?
            .parse()?;
        let redelivered = message.redelivered();
        self.counts.received += 1;
        self.counts.redelivered += u64::from(redelivered);
        let flag = if redelivered { " (redelivered)" } else { "" };
        match who {
            Who::Durable(index) => {
                let durable = &mut self.durables[index];
                let name = durable.name.clone();
                let consumer = durable.consumer.as_mut().context("a delivery to no consumer")?;
                let event = format!("{name} receives m{seq}{flag}");
                ensure!(
                    durable.expected.contains(&seq),
                    "{event}: acknowledged, never published, or published before it existed"
                );
                ensure!(
                    !consumer.held.iter().any(|(s, _)| *s == seq),
                    "{event}: it already holds it unacknowledged"
                );
                ensure!(
                    !consumer.transaction.as_ref().is_some_and(|(_, acked)| acked.contains(&seq)),
                    "{event}: acknowledged in the open transaction"
                );
                ensure!(
                    redelivered || !durable.delivered.contains(&seq),
                    "{event}: delivered before, yet not marked redelivered"
                );
                if !redelivered {
                    ensure!(
                        durable.last_first_delivery < Some(seq),
                        "{event}: first delivery after m{:?}, out of publication order",
                        durable.last_first_delivery
                    );
                    durable.last_first_delivery = Some(seq);
                }
                durable.delivered.insert(seq);
                consumer.held.push((seq, message));
                ensure!(
                    consumer.held.len() <= consumer.prefetch,
                    "{event}: holds {} unacknowledged with prefetch {}",
                    consumer.held.len(),
                    consumer.prefetch
                );
                self.trace.note(event);
            }
            Who::NonDurable(index) => {
                let subscriber = &mut self.non_durables[index];
                let event = format!("{} receives m{seq}{flag}", subscriber.name);
                ensure!(
                    subscriber.expected.contains(&seq),
                    "{event}: acknowledged, or not published while it was subscribed"
                );
                ensure!(
                    !subscriber.held.iter().any(|(s, _)| *s == seq),
                    "{event}: it already holds it unacknowledged"
                );
                ensure!(
                    redelivered || !subscriber.delivered.contains(&seq),
                    "{event}: delivered before, yet not marked redelivered"
                );
                if !redelivered {
                    ensure!(
                        subscriber.last_first_delivery < Some(seq),
                        "{event}: first delivery after m{:?}, out of publication order",
                        subscriber.last_first_delivery
                    );
                    subscriber.last_first_delivery = Some(seq);
                }
                subscriber.delivered.insert(seq);
                if subscriber.mode == AckMode::Auto {
                    // Nothing is ever redelivered to an auto subscriber, and nothing skipped.
                    ensure!(!redelivered, "{event}: an auto-ack subscriber got a redelivery");
                    ensure!(
                        subscriber.expected.first() == Some(&seq),
                        "{event}: expected m{:?} first (nothing may be skipped)",
                        subscriber.expected.first()
                    );
                    subscriber.expected.remove(&seq);
                } else {
                    subscriber.held.push((seq, message));
                    ensure!(
                        subscriber.held.len() <= subscriber.prefetch,
                        "{event}: holds {} unacknowledged with prefetch {}",
                        subscriber.held.len(),
                        subscriber.prefetch
                    );
                }
                self.trace.note(event);
            }
        }
        Ok(())
    }

    /// ACK (`positive`) or NACK one held message of a random holder; `in_transaction` acks in
    /// the holder's transaction (durable consumers only), beginning one if needed.
    async fn acknowledge(&mut self, positive: bool, in_transaction: bool) -> anyhow::Result<()> {
        let mut holders: Vec<Who> = (0..self.durables.len())
            .filter(|&i| self.durables[i].consumer.as_ref().is_some_and(|c| !c.held.is_empty()))
            .map(Who::Durable)
            .collect();
        if !in_transaction {
            holders.extend(
                (0..self.non_durables.len())
                    .filter(|&i| !self.non_durables[i].held.is_empty())
                    .map(Who::NonDurable),
            );
        }
        if holders.is_empty() {
            return Ok(());
        }
        let who = holders[self.rng.gen_range(0..holders.len())];
        match who {
            Who::Durable(index) => {
                let position = {
                    let held = self.durables[index].consumer.as_ref().map_or(0, |c| c.held.len());
                    self.rng.gen_range(0..held)
                };
                let transaction_name = self.fresh_name("ack-tx-");
                let durable = &mut self.durables[index];
                let name = durable.name.clone();
                let consumer = durable.consumer.as_mut().context("a holder without consumer")?;
                if in_transaction && consumer.transaction.is_none() {
                    consumer
                        .client
                        .begin(&transaction_name)
                        .await
                        .with_context(|| format!("{name} BEGIN {transaction_name}"))?;
                    consumer.transaction = Some((transaction_name, Vec::new()));
                }
                let (target, message) = &consumer.held[position];
                let target = *target;
                let result = match (&consumer.transaction, in_transaction, positive) {
                    (Some((tx, _)), true, _) => {
                        consumer.client.ack_with(message, &[("transaction", tx.as_str())]).await
                    }
                    (_, _, true) => consumer.client.ack(message).await,
                    (_, _, false) => consumer.client.nack(message).await,
                };
                result.with_context(|| format!("{name} acknowledging m{target}"))?;
                let covered: Vec<u64> = match consumer.mode {
                    AckMode::Client => consumer.held.drain(..=position).map(|(s, _)| s).collect(),
                    _ => vec![consumer.held.remove(position).0],
                };
                let what = match (in_transaction, positive) {
                    (true, _) => {
                        let (tx, acked) =
                            consumer.transaction.as_mut().context("the transaction just begun")?;
                        acked.extend(&covered);
                        format!("acks in {tx}")
                    }
                    (false, true) => {
                        for seq in &covered {
                            ensure!(durable.expected.remove(seq), "{name}: m{seq} acked twice");
                        }
                        self.counts.acked += covered.len() as u64;
                        "acks".to_owned()
                    }
                    (false, false) => {
                        self.counts.nacked += covered.len() as u64;
                        "nacks".to_owned()
                    }
                };
                self.trace.note(format!("{name} {what} m{target}, covering {covered:?}"));
            }
            Who::NonDurable(index) => {
                let subscriber = &mut self.non_durables[index];
                let position = self.rng.gen_range(0..subscriber.held.len());
                let (target, message) = &subscriber.held[position];
                let target = *target;
                let result = if positive {
                    subscriber.client.ack(message).await
                } else {
                    subscriber.client.nack(message).await
                };
                result.with_context(|| format!("{} acknowledging m{target}", subscriber.name))?;
                subscriber.held.remove(position);
                if positive {
                    subscriber.expected.remove(&target);
                    self.counts.acked += 1;
                } else {
                    self.counts.nacked += 1;
                }
                let verb = if positive { "acks" } else { "nacks" };
                let event = format!("{} {verb} m{target}", subscriber.name);
                self.trace.note(event);
            }
        }
        Ok(())
    }

    async fn end_ack_transaction(&mut self, index: usize, commit: bool) -> anyhow::Result<()> {
        let durable = &mut self.durables[index];
        let name = durable.name.clone();
        let Some(consumer) = durable.consumer.as_mut() else { return Ok(()) };
        let Some((tx, acked)) = consumer.transaction.take() else { return Ok(()) };
        if commit {
            consumer.client.commit(&tx).await.with_context(|| format!("{name} COMMIT {tx}"))?;
            for seq in &acked {
                ensure!(durable.expected.remove(seq), "{name}: m{seq} acked twice");
            }
            self.counts.acked_in_committed += acked.len() as u64;
        } else {
            consumer.client.abort(&tx).await.with_context(|| format!("{name} ABORT {tx}"))?;
            self.counts.acked_in_aborted += acked.len() as u64;
        }
        let verb = if commit { "commits" } else { "aborts" };
        self.trace.note(format!("{name} {verb} {tx}, which acked {acked:?}"));
        Ok(())
    }

    async fn drain_non_durable(&mut self, index: usize) -> anyhow::Result<()> {
        let subscriber = &mut self.non_durables[index];
        for (seq, message) in subscriber.held.drain(..) {
            subscriber.client.ack(&message).await.with_context(|| format!("drain acks m{seq}"))?;
            subscriber.expected.remove(&seq);
        }
        let name = subscriber.name.clone();
        let missing = subscriber.expected.clone();
        self.trace.note(format!("drain {name} expects {missing:?}"));
        while let Some(&next) = self.non_durables[index].expected.first() {
            let message = self.non_durables[index]
                .subscription
                .recv_timeout(ARRIVES)
                .await
                .with_context(|| format!("draining {name}: m{next} never arrived"))?;
            self.accept(Who::NonDurable(index), message)?;
            let subscriber = &mut self.non_durables[index];
            if let Some((seq, message)) = subscriber.held.pop() {
                subscriber
                    .client
                    .ack(&message)
                    .await
                    .with_context(|| format!("drain acks m{seq}"))?;
                subscriber.expected.remove(&seq);
            }
            self.counts.drained += 1;
        }
        Ok(())
    }

    async fn drain_durable(&mut self, index: usize) -> anyhow::Result<()> {
        self.attach(index).await?;
        let name = self.durables[index].name.clone();
        let client_id = self.durables[index].client_id.clone();
        self.trace.note(format!("drain {name} expects {:?}", self.durables[index].expected));
        while let Some(&next) = self.durables[index].expected.first() {
            let consumer = self.durables[index].consumer.as_mut().context("attached")?;
            let message = consumer
                .subscription
                .recv_timeout(ARRIVES)
                .await
                .with_context(|| format!("draining {name}: m{next} never arrived"))?;
            self.accept(Who::Durable(index), message)?;
            let durable = &mut self.durables[index];
            let consumer = durable.consumer.as_mut().context("attached")?;
            if let Some((seq, message)) = consumer.held.pop() {
                // Acknowledge each on its own, whatever the ack mode (it is the last delivery).
                consumer
                    .client
                    .ack(&message)
                    .await
                    .with_context(|| format!("drain acks m{seq}"))?;
                if consumer.mode == AckMode::Client {
                    for (earlier, _) in consumer.held.drain(..) {
                        durable.expected.remove(&earlier);
                    }
                }
                durable.expected.remove(&seq);
            }
            self.counts.drained += 1;
        }
        let stats = self
            .broker
            .durable_subscription_stats(&client_id, &name)
            .await
            .context("the durable subscription exists")?;
        ensure!(
            stats.ready == 0 && stats.in_flight == 0,
            "{name}: messages left after the drain: {stats:?}"
        );
        let stored = stored_count_of(&self.broker, &durable_key(TOPIC_NAME, &client_id, &name))?;
        ensure!(stored == 0, "{name}: {stored} stored messages left after the drain");
        Ok(())
    }
}

impl ModelRun for TopicRun {
    async fn step(&mut self) -> anyhow::Result<()> {
        match pick(&mut self.rng, TOPIC_WEIGHTS) {
            TopicStep::Send => self.send().await,
            TopicStep::Begin => self.begin().await,
            TopicStep::Commit => self.end_send_transaction(true).await,
            TopicStep::Abort => self.end_send_transaction(false).await,
            TopicStep::Receive => self.receive().await,
            TopicStep::Ack => self.acknowledge(true, false).await,
            TopicStep::AckInTransaction => self.acknowledge(true, true).await,
            TopicStep::Nack => self.acknowledge(false, false).await,
            TopicStep::EndAckTransaction => {
                let open: Vec<usize> = (0..self.durables.len())
                    .filter(|&i| {
                        self.durables[i].consumer.as_ref().is_some_and(|c| c.transaction.is_some())
                    })
                    .collect();
                if open.is_empty() {
                    return Ok(());
                }
                let index = open[self.rng.gen_range(0..open.len())];
                let commit = self.rng.gen_bool(0.5);
                self.end_ack_transaction(index, commit).await
            }
            TopicStep::Attach => {
                let detached: Vec<usize> = (0..self.durables.len())
                    .filter(|&i| self.durables[i].consumer.is_none())
                    .collect();
                if detached.is_empty() {
                    return Ok(());
                }
                let index = detached[self.rng.gen_range(0..detached.len())];
                self.attach(index).await
            }
            TopicStep::Detach => {
                let attached: Vec<usize> = (0..self.durables.len())
                    .filter(|&i| self.durables[i].consumer.is_some())
                    .collect();
                if attached.is_empty() {
                    return Ok(());
                }
                let index = attached[self.rng.gen_range(0..attached.len())];
                let abrupt = self.rng.gen_bool(0.5);
                self.detach(index, abrupt).await
            }
            TopicStep::Subscribe if self.non_durables.len() < MAX_NON_DURABLE => {
                self.subscribe().await
            }
            TopicStep::Subscribe => Ok(()),
            TopicStep::Unsubscribe => self.unsubscribe().await,
        }
    }

    /// Ends every transaction, then checks that every subscriber gets exactly what the model
    /// expects: non-durable subscribers in place, durable subscriptions through a fresh
    /// consumer each; then that nothing is left in the broker or the store.
    async fn drain(&mut self) -> anyhow::Result<()> {
        let commit = self.rng.gen_bool(0.5);
        self.end_send_transaction(commit).await?;
        for index in 0..self.durables.len() {
            let commit = self.rng.gen_bool(0.5);
            self.end_ack_transaction(index, commit).await?;
        }
        for index in 0..self.non_durables.len() {
            self.drain_non_durable(index).await?;
        }
        for index in 0..self.durables.len() {
            let abrupt = self.rng.gen_bool(0.5);
            self.detach(index, abrupt).await?;
        }
        for index in 0..self.durables.len() {
            self.drain_durable(index).await?;
        }
        Ok(())
    }
}

/// The topic model: each iteration starts a broker with one topic, one to three durable
/// subscriptions (each its own client id and name, created first) and zero to two
/// non-durable subscribers, and takes random steps: publish (persistent or not, inside or
/// outside the producer's transaction), begin / commit / abort the producer's transaction,
/// receive, ack, ack inside a transaction of the consumer's connection, commit / abort that,
/// nack, detach a durable consumer (DISCONNECT or dropping the connection) and attach one
/// again (ack mode `client` or `client-individual`, prefetch 1 to 5), subscribe and
/// unsubscribe non-durable subscribers (auto or client-individual).
///
/// The reference model: a durable subscription expects, in publication order, every message
/// published since it was created and not acknowledged (a committed transaction's sends are
/// published at the commit, an aborted one's never; acks in a transaction count at its
/// commit); a non-durable subscriber expects what was published while it was subscribed.
/// Each delivery must be expected, not held already, never a repeat unless marked
/// redelivered, and first deliveries come in publication order. At the end every
/// subscription must deliver exactly what it still expects, and nothing stays stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_matches_the_reference_model_under_random_steps() -> anyhow::Result<()> {
    let seed = base_seed()?;
    println!("topic model seed {seed} (replay with FERROMQ_MODEL_SEED={seed})");
    let started = std::time::Instant::now();
    let mut counts = TopicCounts::default();
    for iteration in 0..TOPIC_ITERATIONS {
        let mut run = TopicRun::start(seed.wrapping_add(iteration)).await?;
        if let Err(error) = steps_then_drain(&mut run, TOPIC_STEPS).await {
            return Err(run.trace.failure(error, "topic model", seed, iteration));
        }
        counts.add(run.counts);
        let TopicRun { broker, .. } = run;
        broker.shutdown().await;
    }
    println!(
        "{TOPIC_ITERATIONS} iterations of {TOPIC_STEPS} steps in {:?}: {counts:?}",
        started.elapsed()
    );
    Ok(())
}
