//! [`ConsumerOptions`] and [`run_consumer`]: ActiveMQ's `consumer` command.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use protocol::stomp::{Command, Frame, Version};
use tokio::task::JoinSet;

use super::failover::Reconnect;
use super::producer::panicked;
use super::report::Histogram;
use super::{
    amqp_failover_refusal, amqp_refusal, connection_lost, mqtt_refusal, no_observer, now_micros,
    thread_label, BrokerUrl, Connection, DestinationName, Dialer, LoadError, LoadEvent, LoadReport,
    Meter, Observer, Role, WireProtocol, SENT_AT_PROPERTY,
};
use crate::amqp::{self, AmqpClient};
use crate::mqtt::{MqttClient, QoS};
use crate::openwire::{self, Consumer, OpenWireClient, Session, SessionMode, SubscribeOptions};
use crate::{AckMode, ClientError, ReceivedMessage, StompClient, Subscription};

/// How a consumer acknowledges, named after the JMS session modes of ActiveMQ's tool.
///
/// Every mode acknowledges only the messages a thread counts, so messages the broker
/// pushed ahead (prefetch) to a thread that stops are redelivered to the others, as with
/// JMS. Over OpenWire each is the JMS session mode of the same name (auto acknowledgements
/// batched as [`crate::openwire::Consumer`] says); on the wire over STOMP:
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ConsumerAckMode {
    /// `AUTO_ACKNOWLEDGE` (the default): each message is acknowledged as it is received,
    /// without waiting (STOMP `client-individual` and an ACK per message; the last ACK of a
    /// thread waits for its receipt).
    #[default]
    Auto,
    /// `CLIENT_ACKNOWLEDGE`: every [`ConsumerOptions::ack_batch_size`] messages one
    /// cumulative ACK that waits for its receipt (STOMP `client`), like ActiveMQ's tool
    /// calling `acknowledge()` every `batchSize` messages. The last partial batch is
    /// acknowledged too.
    Client,
    /// `INDIVIDUAL_ACKNOWLEDGE`: each message acknowledged alone, waiting for the receipt
    /// (STOMP `client-individual`).
    ClientIndividual,
}

impl ConsumerAckMode {
    /// ActiveMQ's name: `AUTO_ACKNOWLEDGE`, `CLIENT_ACKNOWLEDGE` or `INDIVIDUAL_ACKNOWLEDGE`.
    pub fn activemq_name(self) -> &'static str {
        match self {
            ConsumerAckMode::Auto => "AUTO_ACKNOWLEDGE",
            ConsumerAckMode::Client => "CLIENT_ACKNOWLEDGE",
            ConsumerAckMode::ClientIndividual => "INDIVIDUAL_ACKNOWLEDGE",
        }
    }
}

/// What [`run_consumer`] receives; the defaults are ActiveMQ's `consumer` command's.
#[derive(Debug, Clone)]
pub struct ConsumerOptions {
    /// The broker; default `tcp://localhost:61616` (OpenWire).
    pub broker: BrokerUrl,
    /// Where to receive from; default `queue://TEST`.
    pub destination: DestinationName,
    /// Messages per thread, as in ActiveMQ; default 1000.
    pub message_count: u64,
    /// Threads, each with its own connection and subscription; default 1.
    pub parallel_threads: usize,
    /// Messages per transaction; 0 (the default) receives outside transactions, acking
    /// per [`ConsumerOptions::ack_mode`].
    pub transaction_batch_size: u64,
    /// How to acknowledge outside transactions; default auto.
    pub ack_mode: ConsumerAckMode,
    /// Messages per cumulative ACK in [`ConsumerAckMode::Client`]; default 10 (ActiveMQ's
    /// `batchSize`). Must be at least 1.
    pub ack_batch_size: u64,
    /// A durable subscription on a topic, named [`ConsumerOptions::subscription_name`]
    /// under [`ConsumerOptions::client_id`] (both required); default false.
    pub durable: bool,
    /// The connection's client id (OpenWire ConnectionInfo's, STOMP `client-id`), if any. With several threads each
    /// connection needs its own, so thread N uses `ID-N`.
    pub client_id: Option<String>,
    /// The durable subscription's name (`activemq.subscriptionName` over STOMP); default
    /// `ferromq-consumer`.
    pub subscription_name: String,
    /// A thread stops after waiting this long for a message, with fewer messages than
    /// asked for. Zero (the default) waits forever, as ActiveMQ's tool does.
    pub receive_timeout: Duration,
    /// A pause after each message; default none.
    pub sleep: Duration,
    /// The login, if any.
    pub user: Option<String>,
    /// The passcode, if any.
    pub password: Option<String>,
    /// Receive for this long, from the first message of any thread, instead of
    /// [`ConsumerOptions::message_count`] messages per thread.
    pub duration: Option<Duration>,
    /// Each thread's destination (one per thread), used instead of
    /// [`ConsumerOptions::destination`] (the perf tool's `totalDests`).
    pub thread_destinations: Option<Vec<DestinationName>>,
    /// Names the threads `PREFIX0`, `PREFIX1`, ... (the perf tool's `JmsConsumer0`) instead
    /// of `consumer-1`, ...; a durable thread then uses its name as its client id and its
    /// subscription name, as the perf plugin does.
    pub thread_prefix: Option<String>,
    /// Live per-thread counts, read by a sampler or a progress display; latencies are
    /// recorded only while it is measuring.
    pub meter: Option<Meter>,
    /// Measure end-to-end latency (from the send time a producer put in
    /// [`SENT_AT_PROPERTY`] to the message's arrival) instead of the waits of acknowledging.
    /// Producer and consumer must share a clock: run them on one machine.
    pub end_to_end_latency: bool,
    /// A JMS message selector, if any.
    pub selector: Option<String>,
    /// Remove a durable subscription when the thread is done (the perf plugin's
    /// `consumer.unsubscribe`); default false.
    pub unsubscribe: bool,
}

impl Default for ConsumerOptions {
    fn default() -> ConsumerOptions {
        ConsumerOptions {
            broker: BrokerUrl::default(),
            destination: DestinationName::queue("TEST"),
            message_count: 1000,
            parallel_threads: 1,
            transaction_batch_size: 0,
            ack_mode: ConsumerAckMode::Auto,
            ack_batch_size: 10,
            durable: false,
            client_id: None,
            subscription_name: "ferromq-consumer".to_owned(),
            receive_timeout: Duration::ZERO,
            sleep: Duration::ZERO,
            user: None,
            password: None,
            duration: None,
            thread_destinations: None,
            thread_prefix: None,
            meter: None,
            end_to_end_latency: false,
            selector: None,
            unsubscribe: false,
        }
    }
}

impl ConsumerOptions {
    /// The client id of thread `index` (from 0).
    fn thread_client_id(&self, index: usize) -> Option<String> {
        if let (Some(prefix), true) = (&self.thread_prefix, self.durable) {
            return Some(thread_label(Some(prefix), "consumer", index));
        }
        let id = self.client_id.as_ref().filter(|id| !id.is_empty())?;
        Some(if self.parallel_threads == 1 { id.clone() } else { format!("{id}-{}", index + 1) })
    }

    fn validate(&self) -> Result<(), LoadError> {
        let invalid = |reason: String| Err(LoadError::InvalidOptions(reason));
        if self.parallel_threads == 0 {
            return invalid("parallel threads must be at least 1".into());
        }
        if self.ack_batch_size == 0 {
            return invalid("the acknowledgement batch size must be at least 1".into());
        }
        let selector = self.selector.as_deref().is_some_and(|s| !s.trim().is_empty());
        let asked = [
            (self.transaction_batch_size > 0, "a transaction batch size"),
            (self.durable, "a durable subscription"),
            (selector, "a selector"),
        ];
        if let Some(refused) = amqp_refusal(&self.broker, &asked) {
            return Err(refused);
        }
        if let Some(refused) = amqp_failover_refusal(&self.broker) {
            return Err(refused);
        }
        let mut destinations = vec![&self.destination];
        if let Some(list) = &self.thread_destinations {
            destinations = list.iter().collect();
        }
        if let Some(refused) = mqtt_refusal(&self.broker, &destinations, &asked) {
            return Err(refused);
        }
        if let Some(list) = &self.thread_destinations {
            if list.len() != self.parallel_threads {
                return invalid(format!(
                    "{} threads need {} destinations, got {}",
                    self.parallel_threads,
                    self.parallel_threads,
                    list.len()
                ));
            }
        }
        if self.durable {
            let destinations = match &self.thread_destinations {
                Some(list) => list.iter().collect(),
                None => vec![&self.destination],
            };
            if let Some(queue) = destinations.iter().find(|d| !d.is_topic()) {
                return invalid(format!(
                    "a durable subscription needs a topic (topic://NAME); {queue} is a queue"
                ));
            }
            if self.thread_prefix.is_some() {
                return Ok(());
            }
            if self.client_id.as_deref().unwrap_or("").is_empty() {
                return invalid("a durable subscription needs a client id".into());
            }
            if self.subscription_name.is_empty() {
                return invalid("a durable subscription needs a subscription name".into());
            }
        }
        Ok(())
    }
}

/// Receives messages as [`ConsumerOptions`] says and reports how fast.
pub async fn run_consumer(options: ConsumerOptions) -> Result<LoadReport, LoadError> {
    run_consumer_observed(options, no_observer()).await
}

/// [`run_consumer`], telling `observer` when each thread has subscribed and when it is done.
pub async fn run_consumer_observed(
    options: ConsumerOptions,
    observer: Observer,
) -> Result<LoadReport, LoadError> {
    options.validate()?;
    let plan = Arc::new(Plan::new(&options));
    let mut workers = JoinSet::new();
    for index in 0..options.parallel_threads {
        let thread = thread_label(options.thread_prefix.as_deref(), "consumer", index);
        let client_id = options.thread_client_id(index);
        let (options, plan, observer) = (options.clone(), plan.clone(), observer.clone());
        workers.spawn(async move {
            let dialer = Dialer {
                broker: options.broker.clone(),
                user: options.user.clone(),
                password: options.password.clone(),
                client_id,
                connection_id: None,
                thread: thread.clone(),
            };
            let mut link = Link {
                reconnect: Reconnect::new(options.broker.clone(), thread.clone()),
                durable_name: plan.durable_name(&thread),
                target: index,
                receiver: None,
                dialer,
            };
            link.open(&plan, true).await?;
            observer(&LoadEvent::Ready { thread: thread.clone() });
            let outcome = consume(index, &mut link, &plan).await;
            // Closing also releases the messages pushed to us and not counted; a durable
            // subscription stays (closing is not unsubscribing) unless asked to go.
            let unsubscribe = link.durable_name.filter(|_| plan.unsubscribe);
            let closed = match link.receiver {
                Some(receiver) => receiver.close(unsubscribe.as_deref()).await,
                None => Ok(()),
            };
            let outcome = outcome?;
            if let Err(source) = closed {
                return Err(LoadError::Failed { thread, after: outcome.received, source });
            }
            observer(&LoadEvent::Finished {
                thread,
                messages: outcome.received,
                expected: plan.expected(),
                elapsed: outcome.elapsed(),
                idle_timeout: outcome.timed_out.then_some(plan.receive_timeout),
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
    let (mut first, mut last) = (None::<Instant>, None::<Instant>);
    for (_, outcome) in &outcomes {
        latencies.merge(&outcome.latencies);
        if let (Some(a), Some(b)) = (outcome.first, outcome.last) {
            first = Some(first.map_or(a, |f| f.min(a)));
            last = Some(last.map_or(b, |l| l.max(b)));
        }
    }
    let per_thread: Vec<u64> = outcomes.iter().map(|(_, outcome)| outcome.received).collect();
    Ok(LoadReport {
        role: Role::Consumer,
        messages: per_thread.iter().sum(),
        expected: plan.expected() * options.parallel_threads as u64,
        elapsed: match (first, last) {
            (Some(first), Some(last)) => last - first,
            _ => Duration::ZERO,
        },
        per_thread,
        latency: latencies.latencies(plan.latency_label),
    })
}

/// How the threads acknowledge, decided once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Acking {
    /// ACK per message in a transaction committed every N messages.
    Transacted(u64),
    /// ACK per message, not waited for.
    Auto,
    /// A cumulative ACK every N messages, waited for.
    Cumulative(u64),
    /// ACK per message, waited for.
    Individual,
}

/// Where a thread receives from, in the STOMP, OpenWire and AMQP forms.
struct Target {
    stomp: String,
    openwire: openwire::Destination,
    amqp: String,
    /// `None` for a queue (refused over MQTT before connecting).
    mqtt: Option<String>,
    name: String,
}

impl Target {
    fn new(destination: &DestinationName) -> Target {
        Target {
            stomp: destination.stomp_destination(),
            openwire: destination.openwire_destination(),
            amqp: destination.amqp_address(),
            mqtt: destination.mqtt_topic(),
            name: destination.to_string(),
        }
    }
}

/// The link credit of an AMQP receiver: ActiveMQ's default queue prefetch, as the OpenWire
/// consumers here have.
const AMQP_CREDIT: u32 = 1000;

struct Plan {
    /// One destination for every thread, or one per thread.
    targets: Vec<Target>,
    count: u64,
    duration: Option<Duration>,
    /// The run's clock: the first message of any thread.
    clock: OnceLock<Instant>,
    meter: Option<Meter>,
    end_to_end: bool,
    selector: Option<String>,
    unsubscribe: bool,
    acking: Acking,
    /// The subscription name of every thread, or `None` when each uses its thread name
    /// (or the subscription is not durable).
    durable_name: Option<String>,
    durable_per_thread: bool,
    receive_timeout: Duration,
    sleep: Duration,
    latency_label: &'static str,
}

impl Plan {
    fn new(options: &ConsumerOptions) -> Plan {
        let acking = match (options.transaction_batch_size, options.ack_mode) {
            (batch, _) if batch > 0 => Acking::Transacted(batch),
            // AMQP accepts each message alone and nothing answers an accept: every mode is
            // one accept per message, not waited for (transactions are refused before).
            _ if options.broker.protocol() == WireProtocol::Amqp => Acking::Auto,
            // The MQTT client acknowledges each message as it arrives (PUBACK at QoS 1,
            // PUBREC/PUBCOMP at QoS 2): every mode is that.
            _ if options.broker.protocol() == WireProtocol::Mqtt => Acking::Auto,
            (_, ConsumerAckMode::Auto) => Acking::Auto,
            (_, ConsumerAckMode::Client) => Acking::Cumulative(options.ack_batch_size),
            (_, ConsumerAckMode::ClientIndividual) => Acking::Individual,
        };
        let targets = match &options.thread_destinations {
            Some(list) => list.iter().map(Target::new).collect(),
            None => vec![Target::new(&options.destination)],
        };
        let durable_per_thread = options.durable && options.thread_prefix.is_some();
        Plan {
            targets,
            count: options.message_count,
            duration: options.duration,
            clock: OnceLock::new(),
            meter: options.meter.clone(),
            end_to_end: options.end_to_end_latency,
            selector: options.selector.clone().filter(|s| !s.trim().is_empty()),
            unsubscribe: options.unsubscribe,
            acking,
            durable_name: (options.durable && !durable_per_thread)
                .then(|| options.subscription_name.clone()),
            durable_per_thread,
            receive_timeout: options.receive_timeout,
            sleep: options.sleep,
            latency_label: match acking {
                _ if options.end_to_end_latency => "end-to-end latency",
                Acking::Transacted(_) => "commit latency",
                Acking::Auto => "gap between messages",
                Acking::Cumulative(_) | Acking::Individual => "ack latency",
            },
        }
    }

    /// Thread `thread`'s destination.
    fn target(&self, thread: usize) -> &Target {
        // One target, or one per thread (checked by `validate`).
        &self.targets[thread % self.targets.len()]
    }

    /// The durable subscription name of thread `thread`, if durable.
    fn durable_name(&self, thread: &str) -> Option<String> {
        if self.durable_per_thread {
            Some(thread.to_owned())
        } else {
            self.durable_name.clone()
        }
    }

    /// The messages each thread is asked for (none in particular for a duration).
    fn expected(&self) -> u64 {
        if self.duration.is_some() {
            0
        } else {
            self.count
        }
    }

    /// Whether latencies are recorded now.
    fn measuring(&self) -> bool {
        self.meter.as_ref().is_none_or(Meter::is_measuring)
    }

    /// Starts the run's clock at the first message of any thread.
    fn start_clock(&self) -> Instant {
        *self.clock.get_or_init(|| match &self.meter {
            Some(meter) => meter.mark_start(),
            None => Instant::now(),
        })
    }

    fn stomp_ack_mode(&self) -> AckMode {
        match self.acking {
            Acking::Cumulative(_) => AckMode::Client,
            Acking::Transacted(_) | Acking::Auto | Acking::Individual => AckMode::ClientIndividual,
        }
    }

    fn session_mode(&self) -> SessionMode {
        match self.acking {
            Acking::Transacted(_) => SessionMode::Transacted,
            Acking::Auto => SessionMode::Auto,
            Acking::Cumulative(_) => SessionMode::Client,
            Acking::Individual => SessionMode::Individual,
        }
    }
}

/// One thread's subscription, over the protocol of its connection.
enum Receiver {
    Stomp { client: StompClient, subscription: Subscription },
    OpenWire { client: OpenWireClient, session: Session, consumer: Consumer },
    Amqp { client: AmqpClient, link: amqp::Receiver },
    Mqtt { client: MqttClient },
}

/// A message one [`Receiver`] received.
enum Received {
    Stomp(ReceivedMessage),
    OpenWire(Box<openwire::Message>),
    Amqp(Box<amqp::Delivery>),
    /// MQTT messages carry nothing the load generator reads but their arrival.
    Mqtt,
}

impl Received {
    /// The message id, the key under which a thread remembers what it counted.
    fn id(&self) -> Option<String> {
        match self {
            Received::Stomp(message) => message.message_id().map(str::to_owned),
            Received::OpenWire(message) => message.message_id(),
            // Failover is refused over AMQP, the only case that needs the id.
            Received::Amqp(_) | Received::Mqtt => None,
        }
    }
}

impl Receiver {
    /// Subscribes to `target` (and waits for the broker to confirm), durably as
    /// `durable_name` if given.
    async fn subscribe(
        connection: Connection,
        plan: &Plan,
        target: &Target,
        durable_name: Option<&str>,
    ) -> Result<Receiver, ClientError> {
        match connection {
            Connection::Stomp(client) => {
                let mut headers = Vec::new();
                if let Some(name) = durable_name {
                    headers.push(("activemq.subscriptionName", name));
                }
                if let Some(selector) = &plan.selector {
                    headers.push(("selector", selector.as_str()));
                }
                let subscription =
                    client.subscribe(&target.stomp, plan.stomp_ack_mode(), &headers).await?;
                Ok(Receiver::Stomp { client, subscription })
            }
            Connection::OpenWire(client) => {
                let session = client.session(plan.session_mode()).await?;
                let mut options = SubscribeOptions::new(target.openwire.clone());
                options.durable_name = durable_name.map(str::to_owned);
                options.selector.clone_from(&plan.selector);
                let consumer = session.consumer(options).await?;
                Ok(Receiver::OpenWire { client, session, consumer })
            }
            Connection::Amqp(client) => {
                let link = client.receiver(&target.amqp, AMQP_CREDIT).await?;
                Ok(Receiver::Amqp { client, link })
            }
            Connection::Mqtt(client) => {
                let topic = target
                    .mqtt
                    .as_deref()
                    .ok_or_else(|| ClientError::protocol("MQTT has no queues"))?;
                // QoS 1: a persistent publish is delivered at least once, a QoS 0 at most.
                client.subscribe(topic, QoS::AtLeastOnce).await?;
                Ok(Receiver::Mqtt { client })
            }
        }
    }

    fn is_closed(&self) -> bool {
        match self {
            Receiver::Stomp { client, .. } => client.is_closed(),
            Receiver::OpenWire { client, .. } => client.is_closed(),
            // A closed AMQP connection shows as an error from `receive`.
            Receiver::Amqp { .. } | Receiver::Mqtt { .. } => false,
        }
    }

    /// Starts transaction `id` (OpenWire sessions begin with their first message).
    async fn begin(&self, id: &str) -> Result<(), ClientError> {
        match self {
            Receiver::Stomp { client, .. } => {
                client.send_frame(Frame::new(Command::Begin).header("transaction", id)).await
            }
            Receiver::OpenWire { .. } | Receiver::Amqp { .. } | Receiver::Mqtt { .. } => Ok(()),
        }
    }

    /// The next message, waiting at most `wait` (`Duration::MAX`: forever); `None` if none
    /// came in time.
    async fn receive(&mut self, wait: Duration) -> Result<Option<Received>, ClientError> {
        match self {
            Receiver::Stomp { client, subscription } => {
                match subscription.recv_timeout(wait).await {
                    Ok(message) => Ok(Some(Received::Stomp(message))),
                    // Our own receive timeout, not a dead connection.
                    Err(ClientError::Timeout { .. }) if !client.is_closed() => Ok(None),
                    Err(error) => Err(error),
                }
            }
            Receiver::OpenWire { consumer, .. } if wait == Duration::MAX => {
                consumer.recv().await.map(|m| Some(Received::OpenWire(Box::new(m))))
            }
            Receiver::OpenWire { consumer, .. } => {
                Ok(consumer.receive(wait).await?.map(|m| Received::OpenWire(Box::new(m))))
            }
            Receiver::Amqp { link, .. } => loop {
                // `Duration::MAX` overflows the timer: wait in long slices instead.
                let slice = wait.min(Duration::from_secs(3600));
                match link.receive(slice).await? {
                    Some(delivery) => break Ok(Some(Received::Amqp(Box::new(delivery)))),
                    None if wait == Duration::MAX => continue,
                    None => break Ok(None),
                }
            },
            Receiver::Mqtt { client } => loop {
                let slice = wait.min(Duration::from_secs(3600));
                match client.recv(slice).await? {
                    Some(_) => break Ok(Some(Received::Mqtt)),
                    None if wait == Duration::MAX => continue,
                    None => break Ok(None),
                }
            },
        }
    }

    /// Acknowledges `message` in the transaction `id` (OpenWire: the session's transaction
    /// acknowledges what its consumers received).
    async fn ack_in_transaction(&self, message: &Received, id: &str) -> Result<(), ClientError> {
        match (self, message) {
            (Receiver::Stomp { client, .. }, Received::Stomp(message)) => {
                client.send_frame(ack_frame(client.version(), message, Some(id))?).await
            }
            _ => Ok(()),
        }
    }

    /// Acknowledges `message` without waiting, but for the `last` one (OpenWire: the auto
    /// acknowledge session does it, and closing the consumer waits for the last).
    async fn auto_ack(&self, message: &Received, last: bool) -> Result<(), ClientError> {
        match (self, message) {
            (Receiver::Amqp { link, .. }, Received::Amqp(delivery)) if !delivery.settled => {
                link.accept(delivery).await
            }
            (Receiver::Stomp { client, .. }, Received::Stomp(message)) => {
                let ack = ack_frame(client.version(), message, None)?;
                if last {
                    client.request_receipt(ack).await
                } else {
                    client.send_frame(ack).await
                }
            }
            _ => Ok(()),
        }
    }

    /// Acknowledges `message` (cumulatively in client mode) and waits for the broker.
    async fn ack(&self, message: &Received) -> Result<(), ClientError> {
        match (self, message) {
            (Receiver::Stomp { client, .. }, Received::Stomp(message)) => client.ack(message).await,
            (Receiver::OpenWire { consumer, .. }, Received::OpenWire(message)) => {
                consumer.ack(message).await
            }
            (Receiver::Amqp { link, .. }, Received::Amqp(delivery)) => match delivery.settled {
                true => Ok(()),
                false => link.accept(delivery).await,
            },
            // Acknowledged by the client as it arrived.
            (Receiver::Mqtt { .. }, Received::Mqtt) => Ok(()),
            _ => Err(ClientError::protocol("a message acknowledged on the wrong connection")),
        }
    }

    async fn commit(&self, id: &str) -> Result<(), ClientError> {
        match self {
            Receiver::Stomp { client, .. } => client.commit(id).await,
            Receiver::OpenWire { session, .. } => session.commit().await,
            // Refused before connecting (`amqp_refusal`).
            Receiver::Amqp { .. } => {
                Err(ClientError::protocol(format!("no transactions over AMQP (commit {id})")))
            }
            Receiver::Mqtt { .. } => {
                Err(ClientError::protocol(format!("no transactions over MQTT (commit {id})")))
            }
        }
    }

    async fn abort(&self, id: &str) -> Result<(), ClientError> {
        match self {
            Receiver::Stomp { client, .. } => client.abort(id).await,
            Receiver::OpenWire { session, .. } => session.rollback().await,
            Receiver::Amqp { .. } => {
                Err(ClientError::protocol(format!("no transactions over AMQP (abort {id})")))
            }
            Receiver::Mqtt { .. } => {
                Err(ClientError::protocol(format!("no transactions over MQTT (abort {id})")))
            }
        }
    }

    /// Closes the subscription and the connection, first removing the durable
    /// subscription `unsubscribe` if given (only that outcome is reported).
    async fn close(self, unsubscribe: Option<&str>) -> Result<(), ClientError> {
        let mut outcome = Ok(());
        match self {
            Receiver::Stomp { client, subscription } => {
                if let Some(name) = unsubscribe {
                    let frame = Frame::new(Command::Unsubscribe)
                        .header("id", subscription.id())
                        .header("activemq.subscriptionName", name);
                    outcome = client.request_receipt(frame).await;
                }
                Connection::Stomp(client).close().await;
            }
            Receiver::OpenWire { client, session, consumer } => {
                if let Some(name) = unsubscribe {
                    outcome = match consumer.close().await {
                        Ok(()) => session.unsubscribe(name).await,
                        Err(error) => Err(error),
                    };
                }
                Connection::OpenWire(client).close().await;
            }
            // Closing the connection releases what was delivered and not accepted; durable
            // subscriptions are refused over AMQP, so there is nothing to unsubscribe.
            Receiver::Amqp { client, .. } => Connection::Amqp(client).close().await,
            Receiver::Mqtt { client } => Connection::Mqtt(client).close().await,
        }
        outcome
    }

    /// The send time a producer put in `message`, if any.
    fn sent_at(message: &Received) -> Option<i64> {
        match message {
            Received::Stomp(message) => message.header(SENT_AT_PROPERTY)?.parse().ok(),
            Received::OpenWire(message) => {
                let value = message.property(SENT_AT_PROPERTY)?;
                // A STOMP producer's header arrives as a string property.
                value.as_i64().or_else(|| value.as_str()?.parse().ok())
            }
            Received::Amqp(delivery) => {
                match delivery.message.application_properties.as_ref()?.get(SENT_AT_PROPERTY)? {
                    amqp::Value::Long(micros) => Some(*micros),
                    // A STOMP producer's header arrives as a string.
                    other => other.as_str()?.parse().ok(),
                }
            }
            // 3.1.1 has no properties to carry it.
            Received::Mqtt => None,
        }
    }
}

struct Outcome {
    received: u64,
    first: Option<Instant>,
    last: Option<Instant>,
    timed_out: bool,
    latencies: Histogram,
}

impl Outcome {
    fn elapsed(&self) -> Duration {
        match (self.first, self.last) {
            (Some(first), Some(last)) => last - first,
            _ => Duration::ZERO,
        }
    }
}

/// How long one receive of a timed run waits before looking at the clock again.
const CLOCK_SLICE: Duration = Duration::from_millis(100);

/// One thread's subscription and what it needs to subscribe again.
struct Link {
    dialer: Dialer,
    reconnect: Reconnect,
    /// The thread's index, which picks its destination.
    target: usize,
    durable_name: Option<String>,
    /// `None` only while (re)subscribing.
    receiver: Option<Receiver>,
}

impl Link {
    /// Connects (through the failover list, if any) and subscribes: the same
    /// destination, selector, durable subscription and client id every time.
    async fn open(&mut self, plan: &Plan, startup: bool) -> Result<(), LoadError> {
        let (dialer, durable_name) = (&self.dialer, self.durable_name.as_deref());
        let target = plan.target(self.target);
        let receiver = self
            .reconnect
            .connect(startup, |endpoint| async move {
                let connection = dialer.connect(&endpoint).await?;
                Receiver::subscribe(connection, plan, target, durable_name).await.map_err(
                    |source| LoadError::Subscribe {
                        thread: dialer.thread.clone(),
                        destination: target.name.clone(),
                        source,
                    },
                )
            })
            .await?;
        self.receiver = Some(receiver);
        Ok(())
    }
}

/// The ids of the messages a thread counted lately, so that one redelivered after a
/// reconnect (its acknowledgement lost with the connection) is acknowledged again but not
/// counted twice. Bounded: a redelivery comes back within the prefetch window of the lost
/// connection, far fewer than this many messages later.
#[derive(Default)]
struct CountedIds {
    ids: HashSet<String>,
    order: VecDeque<String>,
}

/// How many ids [`CountedIds`] keeps.
const COUNTED_IDS_KEPT: usize = 65_536;

impl CountedIds {
    fn contains(&self, id: &str) -> bool {
        self.ids.contains(id)
    }

    fn insert(&mut self, id: String) {
        if self.ids.insert(id.clone()) {
            self.order.push_back(id);
            if self.order.len() > COUNTED_IDS_KEPT {
                if let Some(oldest) = self.order.pop_front() {
                    self.ids.remove(&oldest);
                }
            }
        }
    }
}

/// What one step of [`consume`] says next.
enum Next {
    Receive,
    Stop,
}

/// One thread's receives: `plan.count` messages, or all that come until `plan.duration`
/// after the run's first message.
///
/// Over a failover URL a lost connection is replaced and the thread subscribes again;
/// what the broker had pushed and not seen acknowledged comes again (to this thread or
/// another): a message this thread already counted is acknowledged again, not counted.
async fn consume(thread_index: usize, link: &mut Link, plan: &Plan) -> Result<Outcome, LoadError> {
    let thread = link.dialer.thread.clone();
    let idle_limit = (!plan.receive_timeout.is_zero()).then_some(plan.receive_timeout);
    let mut outcome = Outcome {
        received: 0,
        first: None,
        last: None,
        timed_out: false,
        latencies: Histogram::default(),
    };
    let mut transaction: Option<String> = None;
    let mut transactions = 0u64;
    // Messages in the open transaction, or received since the last cumulative ACK.
    let mut in_batch = 0u64;
    // Client mode: the last message received and not yet acknowledged.
    let mut unacked: Option<Received> = None;
    let mut counted = link.reconnect.enabled().then(CountedIds::default);
    let mut idle_since = Instant::now();
    loop {
        let wait = match plan.duration {
            None if outcome.received >= plan.count => break,
            None => idle_limit.unwrap_or(Duration::MAX),
            Some(duration) => match plan.clock.get() {
                Some(start) => {
                    let left = (*start + duration).saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    left.min(CLOCK_SLICE)
                }
                None => CLOCK_SLICE,
            },
        };
        let Some(receiver) = link.receiver.as_mut() else {
            return Err(LoadError::Aborted(format!("{thread} has no subscription")));
        };
        let step: Result<Next, ClientError> = async {
            if let (Acking::Transacted(_), None) = (plan.acking, &transaction) {
                transactions += 1;
                let id = format!("tx-{transactions}");
                receiver.begin(&id).await?;
                transaction = Some(id);
            }
            let message = match receiver.receive(wait).await {
                Ok(Some(message)) => message,
                Ok(None) if !receiver.is_closed() => {
                    // A timed run's slice ended: look at the clock (and the idle limit)
                    // again.
                    let idle_over = idle_limit.is_some_and(|limit| idle_since.elapsed() >= limit);
                    if plan.duration.is_some() && !idle_over {
                        return Ok(Next::Receive);
                    }
                    outcome.timed_out = true;
                    return Ok(Next::Stop);
                }
                Ok(None) => return Err(ClientError::Closed),
                Err(error) => return Err(error),
            };
            let now = Instant::now();
            idle_since = now;
            let id = counted.as_ref().and(message.id());
            if let (Some(counted), Some(id)) = (&counted, &id) {
                if counted.contains(id) {
                    // Counted before the reconnect; its acknowledgement was lost with the
                    // connection.
                    match plan.acking {
                        Acking::Transacted(_) => {
                            let tx = transaction.as_deref().unwrap_or_default();
                            receiver.ack_in_transaction(&message, tx).await?;
                        }
                        Acking::Auto => receiver.auto_ack(&message, false).await?,
                        Acking::Cumulative(_) | Acking::Individual => {
                            receiver.ack(&message).await?
                        }
                    }
                    return Ok(Next::Receive);
                }
            }
            plan.start_clock();
            let measuring = plan.measuring();
            if plan.end_to_end {
                if let (Some(sent), true) = (Receiver::sent_at(&message), measuring) {
                    let micros = u64::try_from(now_micros().saturating_sub(sent)).unwrap_or(0);
                    outcome.latencies.record(Duration::from_micros(micros));
                }
            } else if plan.acking == Acking::Auto && measuring {
                if let Some(previous) = outcome.last {
                    outcome.latencies.record(now - previous);
                }
            }
            // The waits of acknowledging, unless end-to-end latency is measured instead.
            let record_waits = measuring && !plan.end_to_end;
            outcome.first.get_or_insert(now);
            outcome.received += 1;
            if let (Some(counted), Some(id)) = (&mut counted, id) {
                counted.insert(id);
            }
            if let Some(meter) = &plan.meter {
                meter.count(thread_index);
            }
            let last = plan.duration.is_none() && outcome.received == plan.count;
            match plan.acking {
                Acking::Transacted(batch) => {
                    let id = transaction.as_deref().unwrap_or_default();
                    receiver.ack_in_transaction(&message, id).await?;
                    in_batch += 1;
                    if in_batch == batch || last {
                        in_batch = 0;
                        let asked = Instant::now();
                        receiver.commit(id).await?;
                        if record_waits {
                            outcome.latencies.record(asked.elapsed());
                        }
                        transaction = None;
                    }
                }
                Acking::Auto => receiver.auto_ack(&message, last).await?,
                Acking::Cumulative(batch) => {
                    in_batch += 1;
                    if in_batch == batch || last {
                        in_batch = 0;
                        let asked = Instant::now();
                        receiver.ack(&message).await?;
                        if record_waits {
                            outcome.latencies.record(asked.elapsed());
                        }
                        unacked = None;
                    } else {
                        unacked = Some(message);
                    }
                }
                Acking::Individual => {
                    let asked = Instant::now();
                    receiver.ack(&message).await?;
                    if record_waits {
                        outcome.latencies.record(asked.elapsed());
                    }
                }
            }
            outcome.last = Some(Instant::now());
            Ok(Next::Receive)
        }
        .await;
        match step {
            Ok(Next::Receive) => {}
            Ok(Next::Stop) => break,
            Err(error) if link.reconnect.enabled() && connection_lost(&error) => {
                tracing::warn!(%thread, %error, received = outcome.received,
                    "connection lost; subscribing again through the failover URL");
                if let Some(lost) = link.receiver.take() {
                    // A dead connection closes at once; a hung one must not hold us up.
                    let _ = tokio::time::timeout(Duration::from_secs(1), lost.close(None)).await;
                }
                // The broker rolled back the open transaction and forgot what was not
                // acknowledged: those messages come again, and are acknowledged then.
                transaction = None;
                in_batch = 0;
                unacked = None;
                link.open(plan, false).await?;
                idle_since = Instant::now();
                continue;
            }
            Err(source) => {
                return Err(LoadError::Failed { thread, after: outcome.received, source })
            }
        }
        if !plan.sleep.is_zero() {
            tokio::time::sleep(plan.sleep).await;
        }
    }
    // Stopped by the clock or the receive timeout: settle what was counted.
    let failed =
        |source| LoadError::Failed { thread: thread.clone(), after: outcome.received, source };
    let Some(receiver) = link.receiver.as_ref() else {
        return Ok(outcome);
    };
    if let Some(id) = transaction {
        if outcome.received > 0 {
            receiver.commit(&id).await.map_err(failed)?;
        } else {
            receiver.abort(&id).await.map_err(failed)?;
        }
    }
    if let Some(message) = unacked {
        receiver.ack(&message).await.map_err(failed)?;
    }
    Ok(outcome)
}

/// An ACK for `message` without a receipt (the client's own `ack` always asks for one), in
/// `transaction` if any.
fn ack_frame(
    version: Version,
    message: &ReceivedMessage,
    transaction: Option<&str>,
) -> Result<Frame, ClientError> {
    let header = |name: &str| {
        message.header(name).ok_or_else(|| {
            ClientError::protocol(format!("cannot ACK a MESSAGE without a {name} header"))
        })
    };
    let mut frame = Frame::new(Command::Ack);
    match version {
        Version::V1_2 => frame.push_header("id", header("ack")?),
        Version::V1_1 => {
            frame.push_header("message-id", header("message-id")?);
            frame.push_header("subscription", header("subscription")?);
        }
        Version::V1_0 => frame.push_header("message-id", header("message-id")?),
    }
    if let Some(transaction) = transaction {
        frame.push_header("transaction", transaction);
    }
    Ok(frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durable_subscriptions_need_a_topic_and_a_client_id() {
        let durable_queue = ConsumerOptions {
            durable: true,
            client_id: Some("c1".into()),
            ..ConsumerOptions::default()
        };
        let error = durable_queue.validate().expect_err("queue").to_string();
        assert!(error.contains("needs a topic") && error.contains("queue://TEST"), "{error}");
        let no_id = ConsumerOptions {
            durable: true,
            destination: DestinationName::topic("t"),
            ..ConsumerOptions::default()
        };
        assert!(no_id.validate().expect_err("id").to_string().contains("client id"));
        let fine = ConsumerOptions { client_id: Some("c1".into()), ..no_id };
        fine.validate().expect("valid");
        assert_eq!(fine.thread_client_id(0).as_deref(), Some("c1"));
        let two = ConsumerOptions { parallel_threads: 2, ..fine };
        assert_eq!(two.thread_client_id(1).as_deref(), Some("c1-2"));
    }

    #[test]
    fn ack_modes_map_onto_stomp_and_openwire() {
        let plan = |options: ConsumerOptions| Plan::new(&options);
        let auto = plan(ConsumerOptions::default());
        assert_eq!((auto.acking, auto.stomp_ack_mode()), (Acking::Auto, AckMode::ClientIndividual));
        assert_eq!(auto.session_mode(), SessionMode::Auto);
        let client =
            plan(ConsumerOptions { ack_mode: ConsumerAckMode::Client, ..Default::default() });
        assert_eq!(
            (client.acking, client.stomp_ack_mode()),
            (Acking::Cumulative(10), AckMode::Client)
        );
        let transacted = plan(ConsumerOptions {
            ack_mode: ConsumerAckMode::Client,
            transaction_batch_size: 100,
            ..Default::default()
        });
        assert_eq!(transacted.acking, Acking::Transacted(100));
        assert_eq!(transacted.session_mode(), SessionMode::Transacted);
        assert_eq!(transacted.latency_label, "commit latency");
    }

    #[test]
    fn ack_frames_follow_the_version() {
        let message = ReceivedMessage {
            frame: Frame::new(Command::Message)
                .header("subscription", "sub-1")
                .header("message-id", "ID:1")
                .header("ack", "a-1"),
        };
        let v12 = ack_frame(Version::V1_2, &message, Some("tx-1")).expect("1.2");
        assert_eq!((v12.get("id"), v12.get("transaction")), (Some("a-1"), Some("tx-1")));
        let v11 = ack_frame(Version::V1_1, &message, None).expect("1.1");
        assert_eq!((v11.get("message-id"), v11.get("subscription")), (Some("ID:1"), Some("sub-1")));
        assert_eq!(v11.get("receipt"), None);
    }
}
