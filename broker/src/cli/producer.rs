//! `ferromq producer`.

use clap::{ArgAction, Args};
use client::load::{run_producer_observed, ProducerOptions};

use super::{finish, load_error, millis, printer, runtime, CommonArgs};

/// Sends messages to the broker, like ActiveMQ's `activemq producer`, and reports the
/// throughput. Each thread has its own connection and sends --messageCount messages.
#[derive(Debug, Args)]
pub struct ProducerArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// 0: a text message "test message: N"; otherwise a bytes message of this many bytes.
    #[arg(long = "messageSize", value_name = "BYTES", default_value_t = 0)]
    message_size: usize,
    /// A fixed text body (with --messageSize 0).
    #[arg(long, value_name = "TEXT")]
    message: Option<String>,
    /// Persistent messages.
    #[arg(long, value_name = "true|false", default_value_t = true, action = ArgAction::Set)]
    persistent: bool,
    /// Threads, each with its own connection.
    #[arg(
        long = "parallelThreads",
        value_name = "N",
        default_value_t = 1,
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    parallel_threads: u16,
    /// Messages per transaction; 0 for no transactions. A last partial batch is committed.
    #[arg(long = "transactionBatchSize", value_name = "N", default_value_t = 0)]
    transaction_batch_size: u64,
    /// Time to live of each message in milliseconds; 0 for none.
    #[arg(long = "msgTTL", value_name = "MS", default_value_t = 0)]
    msg_ttl: u64,
    /// The JMSXGroupID of every message.
    #[arg(long = "msgGroupID", value_name = "ID")]
    msg_group_id: Option<String>,
    /// Milliseconds to sleep after each send.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    sleep: u64,
    /// Wait for the broker's receipt after each send. Default: true for persistent
    /// messages outside transactions, as ActiveMQ's JMS client does.
    #[arg(long = "syncSend", value_name = "true|false", action = ArgAction::Set)]
    sync_send: Option<bool>,
}

/// Runs `ferromq producer`.
pub fn run(args: ProducerArgs) -> anyhow::Result<()> {
    let (broker, destination) = args.common.target()?;
    let options = ProducerOptions {
        broker,
        destination,
        message_count: args.common.message_count,
        message_size: args.message_size,
        message: args.message,
        persistent: args.persistent,
        parallel_threads: usize::from(args.parallel_threads),
        transaction_batch_size: args.transaction_batch_size,
        msg_ttl: millis(args.msg_ttl),
        msg_group_id: args.msg_group_id,
        sleep: millis(args.sleep),
        sync_send: args.sync_send,
        user: args.common.user,
        password: args.common.password,
        ..ProducerOptions::default()
    };
    let ready = format!(
        "connected to {}, sending {} {} messages to {}",
        options.broker,
        options.message_count,
        if options.persistent { "persistent" } else { "non-persistent" },
        options.destination
    );
    let report = runtime()?
        .block_on(run_producer_observed(options, printer("produced", ready)))
        .map_err(load_error)?;
    finish(&report, "the producer stopped early")
}
