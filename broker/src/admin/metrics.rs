//! `GET /metrics`: the statistics in Prometheus' text exposition format (version 0.0.4),
//! written by hand: a `# HELP` and a `# TYPE` line per metric family, then one sample per
//! line, `name{label="value",...} number`.
//!
//! Families: `ferromq_info`, `ferromq_uptime_seconds`, `ferromq_connections{protocol}`,
//! `ferromq_connections_accepted_total`, `ferromq_destinations{kind}`, `ferromq_memory_bytes`,
//! `ferromq_store_used_bytes`, `ferromq_store_limit_bytes`, `ferromq_temp_used_bytes` and
//! `ferromq_temp_limit_bytes` (a broker with a temporary store), and per destination (labels
//! `destination` and `kind`) the gauges `ferromq_destination_{pending,in_flight,producers,
//! consumers,memory_bytes,slow_consumers}` and the counters `ferromq_destination_{enqueued,
//! dequeued,expired,dead_lettered,discarded}_total`.

use std::fmt::Write;

use super::{BrokerStats, DestinationStats};

/// The whole exposition.
pub(super) fn render(broker: &BrokerStats, destinations: &[DestinationStats]) -> String {
    let mut out = String::with_capacity(1024 + destinations.len() * 1024);
    family(&mut out, "ferromq_info", "gauge", "The broker's name and version (always 1).");
    sample(&mut out, "ferromq_info", &[("broker", &broker.name), ("version", &broker.version)], 1);
    family(&mut out, "ferromq_uptime_seconds", "gauge", "Seconds since the broker started.");
    sample(&mut out, "ferromq_uptime_seconds", &[], broker.uptime_seconds);
    family(&mut out, "ferromq_connections", "gauge", "Open client connections by protocol.");
    sample(&mut out, "ferromq_connections", &[("protocol", "stomp")], broker.connections.stomp);
    let openwire = broker.connections.openwire;
    sample(&mut out, "ferromq_connections", &[("protocol", "openwire")], openwire);
    sample(&mut out, "ferromq_connections", &[("protocol", "amqp")], broker.connections.amqp);
    sample(&mut out, "ferromq_connections", &[("protocol", "mqtt")], broker.connections.mqtt);
    let accepted = "ferromq_connections_accepted_total";
    family(&mut out, accepted, "counter", "Client connections accepted since start.");
    sample(&mut out, accepted, &[], broker.connections.accepted);
    family(&mut out, "ferromq_destinations", "gauge", "Queues and topics (not temporary).");
    sample(&mut out, "ferromq_destinations", &[("kind", "queue")], broker.destinations.queues);
    sample(&mut out, "ferromq_destinations", &[("kind", "topic")], broker.destinations.topics);
    let memory = "Bytes of messages held by all destinations.";
    family(&mut out, "ferromq_memory_bytes", "gauge", memory);
    sample(&mut out, "ferromq_memory_bytes", &[], broker.memory_bytes);
    if let Some(limit) = broker.memory_limit_bytes {
        let help = "The broker's memory limit for messages ([broker] memory_limit).";
        family(&mut out, "ferromq_memory_limit_bytes", "gauge", help);
        sample(&mut out, "ferromq_memory_limit_bytes", &[], limit);
    }
    let used = "Bytes the message store uses.";
    family(&mut out, "ferromq_store_used_bytes", "gauge", used);
    let store = [("store", broker.store.kind.as_str())];
    sample(&mut out, "ferromq_store_used_bytes", &store, broker.store.used_bytes);
    let limit = "The most bytes the message store may use (0: no limit).";
    family(&mut out, "ferromq_store_limit_bytes", "gauge", limit);
    sample(&mut out, "ferromq_store_limit_bytes", &store, broker.store.limit_bytes);
    if let Some(temp) = &broker.temp {
        let used = "Bytes the temporary store uses (non-persistent messages spilled from memory).";
        family(&mut out, "ferromq_temp_used_bytes", "gauge", used);
        sample(&mut out, "ferromq_temp_used_bytes", &[], temp.used_bytes);
        let limit =
            "The most bytes the temporary store may use ([broker] temp_limit; 0: no limit).";
        family(&mut out, "ferromq_temp_limit_bytes", "gauge", limit);
        sample(&mut out, "ferromq_temp_limit_bytes", &[], temp.limit_bytes);
    }

    type Field = fn(&DestinationStats) -> u64;
    let per_destination: [(&str, &str, &str, Field); 12] = [
        ("pending", "gauge", "Messages waiting for a consumer.", |d| d.pending),
        ("in_flight", "gauge", "Messages delivered and not acknowledged yet.", |d| d.in_flight),
        ("producers", "gauge", "Producers created for the destination.", |d| d.producers),
        ("consumers", "gauge", "Consumers attached.", |d| d.consumers),
        ("memory_bytes", "gauge", "Bytes of messages held.", |d| d.memory_bytes),
        ("memory_limit_bytes", "gauge", "The destination's memory limit, from its policy.", |d| {
            d.memory_limit_bytes
        }),
        ("enqueued_total", "counter", "Messages sent to the destination.", |d| d.enqueued),
        ("dequeued_total", "counter", "Messages acknowledged by consumers.", |d| d.dequeued),
        ("expired_total", "counter", "Messages that expired before delivery.", |d| d.expired),
        (
            "dead_lettered_total",
            "counter",
            "Messages dead-lettered (or dropped) after a poison ack or too many redeliveries.",
            |d| d.dead_lettered,
        ),
        (
            "discarded_total",
            "counter",
            "Messages discarded by a topic subscriber's pending message limit.",
            |d| d.discarded,
        ),
        (
            "slow_consumers",
            "gauge",
            "Consumers whose prefetch is full while messages wait for them.",
            |d| d.slow_consumers,
        ),
    ];
    for (suffix, kind, help, field) in per_destination {
        let name = format!("ferromq_destination_{suffix}");
        family(&mut out, &name, kind, help);
        for destination in destinations {
            let labels =
                [("destination", destination.name.as_str()), ("kind", destination.kind.as_str())];
            sample(&mut out, &name, &labels, field(destination));
        }
    }
    out
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: u64) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (index, (label, text)) in labels.iter().enumerate() {
            if index > 0 {
                out.push(',');
            }
            let _ = write!(out, "{label}=\"");
            escape(out, text);
            out.push('"');
        }
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

/// A label value: backslash, double quote and line feed escaped, as the format requires.
fn escape(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::{DestinationCounts, StatsKind, StoreStats, TempStats};

    #[test]
    fn destination_samples_carry_escaped_labels_after_help_and_type() {
        let broker = BrokerStats {
            name: "b".into(),
            version: "0.1.0".into(),
            uptime_seconds: 3,
            connections: Default::default(),
            destinations: DestinationCounts { queues: 1, topics: 0 },
            memory_bytes: 10,
            memory_limit_bytes: None,
            store: StoreStats { kind: "memory".into(), used_bytes: 0, limit_bytes: 0 },
            temp: Some(TempStats { used_bytes: 4096, limit_bytes: 1 << 30, full: false }),
        };
        let queue = DestinationStats {
            name: "odd \"name\"\\".into(),
            kind: StatsKind::Queue,
            pending: 42,
            in_flight: 0,
            enqueued: 50,
            dequeued: 8,
            expired: 0,
            dead_lettered: 0,
            producers: 0,
            consumers: 1,
            memory_bytes: 10,
            memory_limit_bytes: 1 << 20,
            discarded: 0,
            slow_consumers: 0,
            subscriptions: Vec::new(),
        };
        let text = render(&broker, &[queue]);
        assert!(text.contains(
            "# HELP ferromq_destination_pending Messages waiting for a consumer.\n\
             # TYPE ferromq_destination_pending gauge\n\
             ferromq_destination_pending{destination=\"odd \\\"name\\\"\\\\\",kind=\"queue\"} 42\n"
        ));
        assert!(text.contains("# TYPE ferromq_destination_enqueued_total counter\n"));
        assert!(text.contains(
            "ferromq_destination_memory_limit_bytes{destination=\"odd \\\"name\\\"\\\\\",kind=\"queue\"} 1048576\n"
        ));
        assert!(text.contains("ferromq_info{broker=\"b\",version=\"0.1.0\"} 1\n"));
        assert!(
            text.contains("# TYPE ferromq_temp_used_bytes gauge\nferromq_temp_used_bytes 4096\n")
        );
        assert!(text.contains("ferromq_temp_limit_bytes 1073741824\n"));
        assert!(text.ends_with('\n'));
    }
}
