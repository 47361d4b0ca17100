//! `ferromq producer` and `ferromq consumer`: ActiveMQ's `activemq producer` and
//! `activemq consumer` commands, with ActiveMQ's option names, on top of the load generator
//! in `client::load`. They speak OpenWire by default (`tcp://localhost:61616`, ActiveMQ's
//! default), to ferromq or to Apache ActiveMQ, and STOMP with a `stomp://` URL.
//!
//! Each prints a line per thread when it is ready and when it is done, then the summary
//! (`Produced 10000 messages in 1.23 s: 8130 msgs/s (...)`). Errors go to stderr through
//! `main`, with a non-zero exit; a consumer that stops on `--receiveTimeout` with fewer
//! messages than asked also exits non-zero.
//!
//! `ferromq dstat`, `browse`, `purge` and `query` (ActiveMQ's commands of those names) go
//! through a running broker's admin endpoint instead (`--url`, `--user`, `--password`;
//! `admin.rs` holds what the last three share).

pub mod admin;
pub mod browse;
pub mod consumer;
pub mod dstat;
pub mod perf;
pub mod producer;
pub mod purge;
pub mod query;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use client::load::{LoadError, LoadEvent, LoadReport, Observer};

/// The default `--brokerUrl`, ActiveMQ's: OpenWire on this machine. `localhost` is resolved
/// and every address tried, so a broker on `127.0.0.1` is found even where `localhost` is
/// `::1` first.
const DEFAULT_BROKER_URL: &str = "tcp://localhost:61616";

/// The options `ferromq producer` and `ferromq consumer` share, with ActiveMQ's names.
#[derive(Debug, clap::Args)]
pub struct CommonArgs {
    /// The broker: tcp://HOST:PORT or nio://HOST:PORT for OpenWire (default port 61616),
    /// stomp://HOST:PORT for STOMP (default port 61613), amqp://HOST:PORT for AMQP 1.0
    /// (default port 5672; no transactions or durable subscriptions); over TLS ssl://
    /// (61617), stomp+ssl:// (61612), amqp+ssl:// or amqps:// (5671). Several brokers of one
    /// protocol (OpenWire or STOMP) as failover:(URL,URL)?OPTIONS, with ActiveMQ's failover
    /// options randomize, initialReconnectDelay, maxReconnectDelay, useExponentialBackOff,
    /// backOffMultiplier, maxReconnectAttempts, startupMaxReconnectAttempts and timeout: a
    /// lost connection is replaced, unconfirmed sends are resent with their message ids (the
    /// broker's duplicate detection drops copies), consumers subscribe again. mqtt://HOST:PORT
    /// (default port 1883; mqtt+ssl:// 8883) for MQTT 3.1.1: topics only (topic://a.b is
    /// the MQTT topic a/b), persistent sends at QoS 1 and non-persistent at QoS 0, no
    /// transactions, durable subscriptions, selectors or failover.
    #[arg(long = "brokerUrl", value_name = "URL", default_value = DEFAULT_BROKER_URL)]
    broker_url: String,
    /// The user name.
    #[arg(long)]
    user: Option<String>,
    /// The password.
    #[arg(long)]
    password: Option<String>,
    /// For TLS URLs: a PEM file of the authorities the broker's certificate must chain to
    /// (default: the system's, /etc/ssl/certs/ca-certificates.crt).
    #[arg(long = "trustStore", value_name = "PEM")]
    trust_store: Option<std::path::PathBuf>,
    /// queue://NAME or topic://NAME; a bare NAME is a queue.
    #[arg(long, value_name = "DEST", default_value = "queue://TEST")]
    destination: String,
    /// Messages per thread.
    #[arg(long = "messageCount", value_name = "N", default_value_t = 1000)]
    message_count: u64,
}

impl CommonArgs {
    /// The broker and destination, parsed.
    fn target(&self) -> anyhow::Result<(client::load::BrokerUrl, client::load::DestinationName)> {
        let broker: client::load::BrokerUrl = self.broker_url.parse().map_err(load_error)?;
        let broker = broker.with_trust_store(self.trust_store.clone());
        let destination = self.destination.parse().map_err(load_error)?;
        Ok((broker, destination))
    }
}

/// The runtime the load threads run on.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("ferromq-load")
        .build()
        .context("cannot start the async runtime")
}

/// A load error as one message: its text already carries the cause, so it is not chained.
fn load_error(error: LoadError) -> anyhow::Error {
    anyhow::anyhow!("{error}")
}

/// Prints each event on stdout: `consumer-1: subscribed to ...`, `producer-1: produced ...`.
fn printer(verb: &'static str, ready: String) -> Observer {
    Arc::new(move |event: &LoadEvent| match event {
        LoadEvent::Ready { thread } => println!("{thread}: {ready}"),
        LoadEvent::Finished { thread, messages, expected, elapsed, idle_timeout } => {
            let mut line = format!("{thread}: {verb} {messages}");
            if messages < expected {
                line.push_str(&format!(" of {expected}"));
            }
            line.push_str(&format!(" messages in {:.2} s", elapsed.as_secs_f64()));
            if let Some(idle) = idle_timeout {
                line.push_str(&format!("; then nothing for {} ms", idle.as_millis()));
            }
            println!("{line}");
        }
        _ => {}
    })
}

/// Prints the summary; an incomplete run is an error.
fn finish(report: &LoadReport, stopped_why: &str) -> anyhow::Result<()> {
    println!("{report}");
    if report.is_complete() {
        Ok(())
    } else {
        anyhow::bail!("{} of {} messages: {stopped_why}", report.messages, report.expected)
    }
}

/// `--sleep 10` and other millisecond options.
fn millis(value: u64) -> Duration {
    Duration::from_millis(value)
}
