//! `ferromq consumer`.

use clap::{ArgAction, Args, ValueEnum};
use client::load::{run_consumer_observed, ConsumerAckMode, ConsumerOptions};

use super::{finish, load_error, millis, printer, runtime, CommonArgs};

/// Receives messages from the broker, like ActiveMQ's `activemq consumer`, and reports the
/// throughput. Each thread has its own connection and subscription and receives
/// --messageCount messages.
#[derive(Debug, Args)]
pub struct ConsumerArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Threads, each with its own connection and subscription.
    #[arg(
        long = "parallelThreads",
        value_name = "N",
        default_value_t = 1,
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    parallel_threads: u16,
    /// Acknowledge in transactions of this many messages; 0 for none (then --ackMode
    /// applies). A last partial batch is committed.
    #[arg(long = "transactionBatchSize", value_name = "N", default_value_t = 0)]
    transaction_batch_size: u64,
    /// ActiveMQ's spelling of transactions: with true, a transaction every --batchSize
    /// messages (unless --transactionBatchSize is given).
    #[arg(long, value_name = "true|false", default_value_t = false, action = ArgAction::Set)]
    transacted: bool,
    /// Messages per transaction with --transacted true, and per acknowledgement with
    /// CLIENT_ACKNOWLEDGE.
    #[arg(
        long = "batchSize",
        value_name = "N",
        default_value_t = 10,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    batch_size: u64,
    /// How messages are acknowledged outside transactions (DUPS_OK_ACKNOWLEDGE is accepted
    /// and acknowledges like AUTO_ACKNOWLEDGE).
    #[arg(long = "ackMode", value_name = "MODE", value_enum, default_value_t = AckModeArg::Auto)]
    ack_mode: AckModeArg,
    /// A durable subscription (needs a topic://NAME destination and --clientId).
    #[arg(long, value_name = "true|false", default_value_t = false, action = ArgAction::Set)]
    durable: bool,
    /// The connection's client id; with several threads, thread N uses ID-N.
    #[arg(long = "clientId", value_name = "ID")]
    client_id: Option<String>,
    /// The durable subscription's name.
    #[arg(long = "subscriptionName", value_name = "NAME", default_value = "ferromq-consumer")]
    subscription_name: String,
    /// Milliseconds to sleep after each message.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    sleep: u64,
    /// Stop a thread when no message came for this many milliseconds (the command then
    /// exits non-zero); 0 waits forever, as ActiveMQ's tool does.
    #[arg(long = "receiveTimeout", value_name = "MS", default_value_t = 0)]
    receive_timeout: u64,
}

/// `--ackMode` values: ActiveMQ's JMS session mode names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AckModeArg {
    #[value(name = "AUTO_ACKNOWLEDGE")]
    Auto,
    #[value(name = "CLIENT_ACKNOWLEDGE")]
    Client,
    #[value(name = "INDIVIDUAL_ACKNOWLEDGE")]
    Individual,
    #[value(name = "DUPS_OK_ACKNOWLEDGE")]
    DupsOk,
}

/// Runs `ferromq consumer`.
pub fn run(args: ConsumerArgs) -> anyhow::Result<()> {
    let (broker, destination) = args.common.target()?;
    let transaction_batch_size = match (args.transaction_batch_size, args.transacted) {
        (0, true) => args.batch_size,
        (size, _) => size,
    };
    let options = ConsumerOptions {
        broker,
        destination,
        message_count: args.common.message_count,
        parallel_threads: usize::from(args.parallel_threads),
        transaction_batch_size,
        ack_mode: match args.ack_mode {
            AckModeArg::Auto | AckModeArg::DupsOk => ConsumerAckMode::Auto,
            AckModeArg::Client => ConsumerAckMode::Client,
            AckModeArg::Individual => ConsumerAckMode::ClientIndividual,
        },
        ack_batch_size: args.batch_size,
        durable: args.durable,
        client_id: args.client_id,
        subscription_name: args.subscription_name,
        receive_timeout: millis(args.receive_timeout),
        sleep: millis(args.sleep),
        user: args.common.user,
        password: args.common.password,
        ..ConsumerOptions::default()
    };
    let ready = format!(
        "subscribed to {}{}, waiting for {} messages",
        options.destination,
        if options.durable {
            format!(" (durable subscription {})", options.subscription_name)
        } else {
            String::new()
        },
        options.message_count
    );
    let stopped_why =
        format!("no message arrived within --receiveTimeout {} ms", args.receive_timeout);
    let report = runtime()?
        .block_on(run_consumer_observed(options, printer("consumed", ready)))
        .map_err(load_error)?;
    finish(&report, &stopped_why)
}
