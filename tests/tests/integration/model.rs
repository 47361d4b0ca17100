//! A randomized model test of one queue.
//!
//! Each iteration starts a broker and drives one queue with a producer and one to three
//! consumers on connections of their own (ack modes `client` and `client-individual`,
//! prefetch 1 to 5) through random steps: send, receive, ack, nack, close a consumer
//! (UNSUBSCRIBE or dropping its connection) and open a new one. A reference model keeps the
//! messages not yet acknowledged and what each consumer holds, and every delivery is checked
//! against it. At the end one consumer drains the queue: exactly the unacknowledged messages
//! must arrive, none lost, none twice.
//!
//! The seed is printed; `FERROMQ_MODEL_SEED=<seed>` replays a run.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::time::Duration;

use anyhow::{bail, ensure, Context as _};
use broker::BrokerHandle;
use client::{AckMode, ReceivedMessage, StompClient, Subscription};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tests::{connect, start_broker, stored_count, ARRIVES, PERSISTENT};

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
    trace: VecDeque<String>,
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
        let broker = start_broker(|_| {}).await?;
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
            trace: VecDeque::new(),
            counts: Counts::default(),
        };
        run.open().await?;
        Ok(run)
    }

    fn note(&mut self, event: String) {
        if self.trace.len() == TRACE_LEN {
            self.trace.pop_front();
        }
        self.trace.push_back(event);
    }

    fn pick_step(&mut self) -> Step {
        let total: u32 = WEIGHTS.iter().map(|(_, w)| w).sum();
        let mut roll = self.rng.gen_range(0..total);
        for (step, weight) in WEIGHTS {
            if roll < *weight {
                return *step;
            }
            roll -= weight;
        }
        Step::Send
    }

    async fn step(&mut self) -> anyhow::Result<()> {
        match self.pick_step() {
            Step::Send => self.send().await,
            Step::Receive => self.receive().await,
            Step::Ack => self.acknowledge(true).await,
            Step::Nack => self.acknowledge(false).await,
            Step::Close => self.close_one().await,
            Step::Open if self.consumers.len() < MAX_CONSUMERS => self.open().await,
            Step::Open => Ok(()),
        }
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
        self.note(format!("send m{seq}"));
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
        self.note(format!("open {name} ({}, prefetch {prefetch})", mode.as_str()));
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
        let message = match consumer.subscription.try_recv() {
            Some(message) => message,
            None => match tokio::time::timeout(RECEIVE_WAIT, consumer.subscription.recv()).await {
                Err(_) => return Ok(()),
                Ok(Some(message)) => message,
                Ok(None) => bail!("the connection of consumer {} ended", consumer.name),
            },
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
        self.note(format!(
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
        self.note(format!("{name} {verb} m{target}, covering {covered:?}"));
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
        self.note(format!("{name} {how}, returning {held:?}"));
        Ok(())
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
        self.note(format!("drain expects {missing:?}"));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_matches_the_reference_model_under_random_steps() -> anyhow::Result<()> {
    let seed = base_seed()?;
    println!("model seed {seed} (replay with FERROMQ_MODEL_SEED={seed})");
    let started = std::time::Instant::now();
    let mut counts = Counts::default();
    for iteration in 0..ITERATIONS {
        let mut run = Run::start(seed.wrapping_add(iteration)).await?;
        let mut outcome = Ok(());
        for step in 0..STEPS {
            outcome = run.step().await.with_context(|| format!("step {step}"));
            if outcome.is_err() {
                break;
            }
        }
        if outcome.is_ok() {
            outcome = run.drain().await.context("final drain");
        }
        if let Err(error) = outcome {
            let trace: Vec<String> = run.trace.iter().cloned().collect();
            return Err(error.context(format!(
                "model seed {seed}, iteration {iteration}; last steps:\n  {}",
                trace.join("\n  ")
            )));
        }
        counts.add(run.counts);
        let Run { broker, .. } = run;
        broker.shutdown().await;
    }
    println!("{ITERATIONS} iterations of {STEPS} steps in {:?}: {counts:?}", started.elapsed());
    Ok(())
}
