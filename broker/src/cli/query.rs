//! `ferromq query`: ActiveMQ's `activemq query`, the attributes of the broker's objects
//! (the broker, queues, topics, connections, durable subscriptions, consumers, producers),
//! read from the admin endpoint instead of JMX. Objects are chosen as ActiveMQ chooses its
//! MBeans: `-QQueue=orders`, `-QTopic=*` (names with `*` and `?`), `-xQTopic=ActiveMQ.Advisory.*`
//! to leave some out, `--objname type=Broker,destinationType=Queue,destinationName=FOO*` over
//! the same keys ActiveMQ's object names have (`--xobjname` to leave out); with none of them,
//! every object. Each object is printed as its keys and attributes, `Name = value` a line,
//! then a blank line; `--view QueueSize,EnqueueCount` keeps only those.
//!
//! ```text
//! type = Broker
//! brokerName = localhost
//! destinationType = Queue
//! destinationName = orders
//! QueueSize = 6
//! ...
//! ```

use broker::admin::{AdminClient, AdminClientError, BrokerStats, DestinationStats, StatsKind};

use super::admin::{
    one_line, runtime, wildcard_match, ConnectionView, ConsumerView, DurableSubscriptionView,
    EndpointArgs, ProducerView,
};

#[derive(Debug, clap::Args)]
pub struct QueryArgs {
    #[command(flatten)]
    endpoint: EndpointArgs,
    /// Objects of TYPE named NAME (wildcards * and ?): -QQueue=orders, -QTopic=*. TYPE is
    /// Broker, Queue, Topic, Connection (by id or client id), Subscription (a durable
    /// subscription, by name or CLIENTID:NAME), Consumer or Producer (by id or connection id).
    #[arg(short = 'Q', value_name = "TYPE=NAME")]
    include: Vec<String>,
    /// Leave out objects of TYPE named NAME: -xQTopic=ActiveMQ.Advisory.*
    #[arg(short = 'x', value_name = "QTYPE=NAME")]
    exclude: Vec<String>,
    /// Objects whose keys match, as a JMX object name: key=value pairs, comma-separated
    /// (keys type, brokerName, destinationType, destinationName, connectionName, clientId,
    /// subscriptionName, consumerId, producerId, endpoint; values with * and ?).
    #[arg(long, value_name = "QUERY")]
    objname: Vec<String>,
    /// Leave out the objects whose keys match.
    #[arg(long, value_name = "QUERY")]
    xobjname: Vec<String>,
    /// Only these attributes (and keys), comma-separated: --view QueueSize,EnqueueCount.
    #[arg(long, value_name = "ATTRIBUTES", value_delimiter = ',')]
    view: Vec<String>,
}

/// The kinds of object, as `-Q` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Broker,
    Queue,
    Topic,
    Connection,
    Subscription,
    Consumer,
    Producer,
}

const KINDS: [(&str, Kind); 7] = [
    ("Broker", Kind::Broker),
    ("Queue", Kind::Queue),
    ("Topic", Kind::Topic),
    ("Connection", Kind::Connection),
    ("Subscription", Kind::Subscription),
    ("Consumer", Kind::Consumer),
    ("Producer", Kind::Producer),
];

impl Kind {
    fn parse(text: &str) -> anyhow::Result<Kind> {
        KINDS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(text))
            .map(|(_, kind)| *kind)
            .ok_or_else(|| {
                let known: Vec<&str> = KINDS.iter().map(|(name, _)| *name).collect();
                anyhow::anyhow!("unknown object type `{text}`: use one of {}", known.join(", "))
            })
    }
}

/// `-QType=NAME`.
#[derive(Debug)]
struct TypeQuery {
    kind: Kind,
    name: String,
}

impl TypeQuery {
    fn parse(text: &str) -> anyhow::Result<TypeQuery> {
        let (kind, name) = text
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("write -QTYPE=NAME (-QQueue=orders), not -Q{text}"))?;
        Ok(TypeQuery { kind: Kind::parse(kind.trim())?, name: name.trim().to_owned() })
    }

    fn matches(&self, object: &Object) -> bool {
        self.kind == object.kind && object.names.iter().any(|n| wildcard_match(&self.name, n))
    }
}

/// `--objname key=value,key=value`.
#[derive(Debug)]
struct NameQuery {
    keys: Vec<(String, String)>,
}

impl NameQuery {
    fn parse(text: &str) -> anyhow::Result<NameQuery> {
        // `org.apache.activemq:type=Broker,...`: the JMX domain is left out.
        let text = match text.split_once(':') {
            Some((domain, rest)) if !domain.contains('=') => rest,
            _ => text,
        };
        let keys = text
            .split(',')
            .map(str::trim)
            .filter(|pair| !pair.is_empty())
            .map(|pair| match pair.split_once('=') {
                Some((key, value)) => Ok((key.trim().to_owned(), value.trim().to_owned())),
                None => Err(anyhow::anyhow!("`{pair}` in --objname is not key=value")),
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(NameQuery { keys })
    }

    fn matches(&self, object: &Object) -> bool {
        self.keys.iter().all(|(key, pattern)| {
            object
                .keys
                .iter()
                .any(|(k, value)| k.eq_ignore_ascii_case(key) && wildcard_match(pattern, value))
        })
    }

    /// The kinds that can match: what the keys imply, or every kind.
    fn kinds(&self) -> Vec<Kind> {
        let has = |name: &str| self.keys.iter().any(|(key, _)| key.eq_ignore_ascii_case(name));
        let value = |name: &str| {
            self.keys.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone())
        };
        if has("producerId") || value("endpoint").is_some_and(|v| v == "Producer") {
            return vec![Kind::Producer];
        }
        if has("subscriptionName") {
            return vec![Kind::Subscription];
        }
        if has("consumerId") || value("endpoint").is_some_and(|v| v == "Consumer") {
            return vec![Kind::Consumer, Kind::Subscription];
        }
        if has("connectionName") || has("clientId") {
            return vec![Kind::Connection, Kind::Subscription, Kind::Consumer, Kind::Producer];
        }
        if has("destinationType") || has("destinationName") {
            return vec![
                Kind::Queue,
                Kind::Topic,
                Kind::Subscription,
                Kind::Consumer,
                Kind::Producer,
            ];
        }
        KINDS.iter().map(|(_, kind)| *kind).collect()
    }
}

/// One object: its kind, the names `-Q` matches, its object-name keys and its attributes.
#[derive(Debug, Clone)]
struct Object {
    kind: Kind,
    names: Vec<String>,
    keys: Vec<(String, String)>,
    attributes: Vec<(&'static str, String)>,
}

pub fn run(args: QueryArgs) -> anyhow::Result<()> {
    let include: Vec<TypeQuery> =
        args.include.iter().map(|q| TypeQuery::parse(q)).collect::<anyhow::Result<_>>()?;
    let exclude: Vec<TypeQuery> = args
        .exclude
        .iter()
        .map(|q| {
            let query = q.strip_prefix('Q').ok_or_else(|| {
                anyhow::anyhow!("write -xQTYPE=NAME (-xQTopic=ActiveMQ.Advisory.*), not -x{q}")
            })?;
            TypeQuery::parse(query)
        })
        .collect::<anyhow::Result<_>>()?;
    let objname: Vec<NameQuery> =
        args.objname.iter().map(|q| NameQuery::parse(q)).collect::<anyhow::Result<_>>()?;
    let xobjname: Vec<NameQuery> =
        args.xobjname.iter().map(|q| NameQuery::parse(q)).collect::<anyhow::Result<_>>()?;

    let mut kinds: Vec<Kind> = include.iter().map(|q| q.kind).collect();
    kinds.extend(objname.iter().flat_map(NameQuery::kinds));
    if include.is_empty() && objname.is_empty() {
        kinds = KINDS.iter().map(|(_, kind)| *kind).collect();
    }
    kinds.sort();
    kinds.dedup();

    let client = args.endpoint.client()?;
    let named: Vec<Kind> = include.iter().map(|q| q.kind).collect();
    let objects = runtime()?.block_on(read(&client, &kinds, &named))?;
    let chosen = objects.iter().filter(|object| {
        let included = (include.is_empty() && objname.is_empty())
            || include.iter().any(|q| q.matches(object))
            || objname.iter().any(|q| q.matches(object));
        let excluded =
            exclude.iter().any(|q| q.matches(object)) || xobjname.iter().any(|q| q.matches(object));
        included && !excluded
    });
    let view: Vec<&str> = args.view.iter().map(|v| v.trim()).filter(|v| !v.is_empty()).collect();
    let shown = |name: &str| view.is_empty() || view.iter().any(|v| v.eq_ignore_ascii_case(name));
    let mut out = String::new();
    for object in chosen {
        let keys = object.keys.iter().map(|(k, v)| (k.as_str(), v));
        let attributes = object.attributes.iter().map(|(k, v)| (*k, v));
        for (name, value) in keys.chain(attributes).filter(|(name, _)| shown(name)) {
            out.push_str(&format!("{name} = {value}\n"));
        }
        out.push('\n');
    }
    print!("{out}");
    Ok(())
}

/// The list at `path`. A broker that has no such list (404, an older ferromq) lists nothing,
/// with a note on stderr, unless `explicit` (`-Q` named the kind): then it is an error.
async fn list<T: serde::de::DeserializeOwned>(
    client: &AdminClient,
    path: &str,
    explicit: bool,
) -> anyhow::Result<Vec<T>> {
    match client.get_json(path).await {
        Ok(list) => Ok(list),
        Err(AdminClientError::Status { status: 404, .. }) if !explicit => {
            eprintln!("ferromq: {}{path} is not there (an older broker?): left out", client.url());
            Ok(Vec::new())
        }
        Err(error) => Err(one_line(error)),
    }
}

/// Every object of `kinds`, in kind then name order; `named`: the kinds `-Q` named.
async fn read(client: &AdminClient, kinds: &[Kind], named: &[Kind]) -> anyhow::Result<Vec<Object>> {
    let broker: BrokerStats = client.broker().await.map_err(one_line)?;
    let name = broker.name.clone();
    let base = |extra: &[(&str, String)]| {
        let mut keys =
            vec![("type".to_owned(), "Broker".to_owned()), ("brokerName".to_owned(), name.clone())];
        keys.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        keys
    };
    let mut objects = Vec::new();
    let wants = |kind| kinds.contains(&kind);
    let destinations: Vec<DestinationStats> =
        match wants(Kind::Broker) || wants(Kind::Queue) || wants(Kind::Topic) {
            true => client.destinations().await.map_err(one_line)?,
            false => Vec::new(),
        };
    if wants(Kind::Broker) {
        objects.push(broker_object(&broker, &destinations, base(&[])));
    }
    for destination in &destinations {
        let (kind, type_name) = match destination.kind {
            StatsKind::Queue => (Kind::Queue, "Queue"),
            StatsKind::Topic => (Kind::Topic, "Topic"),
        };
        if !wants(kind) {
            continue;
        }
        let keys = base(&[
            ("destinationType", type_name.to_owned()),
            ("destinationName", destination.name.clone()),
        ]);
        let limit = match destination.memory_limit_bytes {
            0 => broker.memory_limit_bytes.unwrap_or(0),
            own => own,
        };
        let percent = match limit {
            0 => 0,
            limit => destination.memory_bytes.saturating_mul(100) / limit,
        };
        let attributes = vec![
            ("Name", destination.name.clone()),
            ("QueueSize", (destination.pending + destination.in_flight).to_string()),
            ("InFlightCount", destination.in_flight.to_string()),
            ("EnqueueCount", destination.enqueued.to_string()),
            ("DequeueCount", destination.dequeued.to_string()),
            ("ExpiredCount", destination.expired.to_string()),
            ("DeadLetteredCount", destination.dead_lettered.to_string()),
            ("ConsumerCount", destination.consumers.to_string()),
            ("ProducerCount", destination.producers.to_string()),
            ("MemoryUsageByteCount", destination.memory_bytes.to_string()),
            ("MemoryLimit", limit.to_string()),
            ("MemoryPercentUsage", percent.to_string()),
            ("SlowConsumerCount", destination.slow_consumers.to_string()),
        ];
        objects.push(Object { kind, names: vec![destination.name.clone()], keys, attributes });
    }
    if wants(Kind::Connection) {
        let explicit = named.contains(&Kind::Connection);
        let connections: Vec<ConnectionView> = list(client, "/api/connections", explicit).await?;
        for connection in connections {
            let mut extra = vec![
                ("connector", "clientConnectors".to_owned()),
                ("connectionName", connection.id.clone()),
            ];
            if let Some(client_id) = &connection.client_id {
                extra.push(("clientId", client_id.clone()));
            }
            let attributes = vec![
                ("ConnectionId", connection.id.clone()),
                ("ClientId", connection.client_id.clone().unwrap_or_default()),
                ("RemoteAddress", connection.remote.clone()),
                ("UserName", connection.user.clone().unwrap_or_default()),
                ("Protocol", connection.protocol.clone()),
                ("ConnectedSince", connection.connected_since_ms.to_string()),
                ("ConsumerCount", connection.consumers.to_string()),
                ("ProducerCount", connection.producers.to_string()),
            ];
            let mut names = vec![connection.id.clone()];
            names.extend(connection.client_id.clone());
            objects.push(Object { kind: Kind::Connection, names, keys: base(&extra), attributes });
        }
    }
    if wants(Kind::Subscription) {
        let explicit = named.contains(&Kind::Subscription);
        let subscriptions: Vec<DurableSubscriptionView> =
            list(client, "/api/subscriptions", explicit).await?;
        for subscription in subscriptions {
            let keys = base(&[
                ("destinationType", "Topic".to_owned()),
                ("destinationName", subscription.topic.clone()),
                ("endpoint", "Consumer".to_owned()),
                ("clientId", subscription.client_id.clone()),
                ("subscriptionName", subscription.subscription_name.clone()),
            ]);
            let attributes = vec![
                ("ClientId", subscription.client_id.clone()),
                ("SubscriptionName", subscription.subscription_name.clone()),
                ("DestinationName", subscription.topic.clone()),
                ("Selector", subscription.selector.clone().unwrap_or_default()),
                ("Active", subscription.active.to_string()),
                ("PendingQueueSize", subscription.pending.to_string()),
            ];
            let names = vec![
                subscription.subscription_name.clone(),
                format!("{}:{}", subscription.client_id, subscription.subscription_name),
            ];
            objects.push(Object { kind: Kind::Subscription, names, keys, attributes });
        }
    }
    if wants(Kind::Consumer) {
        let explicit = named.contains(&Kind::Consumer);
        let consumers: Vec<ConsumerView> = list(client, "/api/consumers", explicit).await?;
        for consumer in consumers {
            let keys = base(&[
                ("destinationType", capitalized(&consumer.destination.kind)),
                ("destinationName", consumer.destination.name.clone()),
                ("endpoint", "Consumer".to_owned()),
                ("connectionName", consumer.connection_id.clone()),
                ("consumerId", consumer.consumer_id.clone()),
            ]);
            let attributes = vec![
                ("ConnectionId", consumer.connection_id.clone()),
                ("ConsumerId", consumer.consumer_id.clone()),
                ("DestinationName", consumer.destination.name.clone()),
                ("Selector", consumer.selector.clone().unwrap_or_default()),
                ("PrefetchSize", consumer.prefetch.to_string()),
                ("MessageCountAwaitingAcknowledge", consumer.in_flight.to_string()),
                ("SubscriptionName", consumer.durable_subscription.clone().unwrap_or_default()),
            ];
            let names = vec![consumer.consumer_id.clone(), consumer.connection_id.clone()];
            objects.push(Object { kind: Kind::Consumer, names, keys, attributes });
        }
    }
    if wants(Kind::Producer) {
        let explicit = named.contains(&Kind::Producer);
        let producers: Vec<ProducerView> = list(client, "/api/producers", explicit).await?;
        for producer in producers {
            let mut extra = vec![
                ("endpoint", "Producer".to_owned()),
                ("connectionName", producer.connection_id.clone()),
                ("producerId", producer.producer_id.clone()),
            ];
            if let Some(destination) = &producer.destination {
                extra.push(("destinationType", capitalized(&destination.kind)));
                extra.push(("destinationName", destination.name.clone()));
            }
            let attributes = vec![
                ("ConnectionId", producer.connection_id.clone()),
                ("ProducerId", producer.producer_id.clone()),
                (
                    "DestinationName",
                    producer.destination.as_ref().map(|d| d.name.clone()).unwrap_or_default(),
                ),
                ("SentCount", producer.sent.to_string()),
            ];
            let names = vec![producer.producer_id.clone(), producer.connection_id.clone()];
            objects.push(Object { kind: Kind::Producer, names, keys: base(&extra), attributes });
        }
    }
    objects.sort_by(|a, b| (a.kind, &a.names).cmp(&(b.kind, &b.names)));
    Ok(objects)
}

fn broker_object(
    broker: &BrokerStats,
    destinations: &[DestinationStats],
    keys: Vec<(String, String)>,
) -> Object {
    let percent = |used: u64, limit: u64| match limit {
        0 => 0,
        limit => used.saturating_mul(100) / limit,
    };
    let sum = |value: fn(&DestinationStats) -> u64| destinations.iter().map(value).sum::<u64>();
    let memory_limit = broker.memory_limit_bytes.unwrap_or(0);
    let (temp_used, temp_limit) =
        broker.temp.map_or((0, 0), |temp| (temp.used_bytes, temp.limit_bytes));
    let attributes = vec![
        ("BrokerName", broker.name.clone()),
        ("BrokerVersion", broker.version.clone()),
        ("UptimeMillis", (broker.uptime_seconds * 1000).to_string()),
        ("CurrentConnectionsCount", broker.connections.open().to_string()),
        ("TotalConnectionsCount", broker.connections.accepted.to_string()),
        ("QueueCount", broker.destinations.queues.to_string()),
        ("TopicCount", broker.destinations.topics.to_string()),
        ("TotalEnqueueCount", sum(|d| d.enqueued).to_string()),
        ("TotalDequeueCount", sum(|d| d.dequeued).to_string()),
        ("TotalConsumerCount", sum(|d| d.consumers).to_string()),
        ("TotalProducerCount", sum(|d| d.producers).to_string()),
        ("TotalMessageCount", sum(|d| d.pending + d.in_flight).to_string()),
        ("MemoryLimit", memory_limit.to_string()),
        ("MemoryPercentUsage", percent(broker.memory_bytes, memory_limit).to_string()),
        ("StoreType", broker.store.kind.clone()),
        ("StoreLimit", broker.store.limit_bytes.to_string()),
        (
            "StorePercentUsage",
            percent(broker.store.used_bytes, broker.store.limit_bytes).to_string(),
        ),
        ("TempLimit", temp_limit.to_string()),
        ("TempPercentUsage", percent(temp_used, temp_limit).to_string()),
    ];
    Object { kind: Kind::Broker, names: vec![broker.name.clone()], keys, attributes }
}

/// `queue` as `Queue`.
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(name: &str) -> Object {
        Object {
            kind: Kind::Queue,
            names: vec![name.to_owned()],
            keys: vec![
                ("type".to_owned(), "Broker".to_owned()),
                ("destinationType".to_owned(), "Queue".to_owned()),
                ("destinationName".to_owned(), name.to_owned()),
            ],
            attributes: Vec::new(),
        }
    }

    #[test]
    fn type_queries_match_kind_and_wildcard_name() {
        let query = TypeQuery::parse("Queue=TEST.*").expect("parses");
        assert!(query.matches(&queue("TEST.FOO")));
        assert!(!query.matches(&queue("OTHER")));
        let topic = TypeQuery::parse("topic=*").expect("any case");
        assert!(!topic.matches(&queue("TEST.FOO")));
        assert!(TypeQuery::parse("Queue").is_err());
        let error = TypeQuery::parse("Table=x").expect_err("unknown");
        assert!(error.to_string().contains("Queue, Topic"), "{error}");
    }

    #[test]
    fn object_name_queries_match_every_key_and_imply_kinds() {
        let query = NameQuery::parse(
            "org.apache.activemq:type=Broker,destinationType=Queue,destinationName=FOO*",
        )
        .expect("parses");
        assert!(query.matches(&queue("FOO.BAR")));
        assert!(!query.matches(&queue("BAR")));
        assert!(query.kinds().contains(&Kind::Queue) && !query.kinds().contains(&Kind::Broker));
        assert!(NameQuery::parse("type").is_err());
        assert_eq!(NameQuery::parse("type=Broker").expect("parses").kinds().len(), KINDS.len());
    }
}
