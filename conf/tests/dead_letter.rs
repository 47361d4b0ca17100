//! `[dead_letter]` and `destinations.expire_messages_period_ms`: defaults, a full section, and
//! the errors for bad values.

use std::time::Duration;

use conf::{Config, DeadLetterConfig, DeadLetterStrategy};

fn error_of(text: &str) -> String {
    match Config::parse(text, "ferromq.toml") {
        Ok(config) => panic!("expected an error, parsed {config:?}"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn dead_letter_defaults_are_activemq_s() {
    let config = Config::default();
    let dead_letter = &config.dead_letter;
    assert_eq!(dead_letter.strategy, DeadLetterStrategy::Shared);
    assert_eq!(dead_letter.queue, "ActiveMQ.DLQ");
    assert_eq!(dead_letter.queue_prefix, "ActiveMQ.DLQ.Queue.");
    assert_eq!(dead_letter.topic_prefix, "ActiveMQ.DLQ.Topic.");
    assert_eq!(dead_letter.max_redeliveries, 6);
    assert_eq!(dead_letter.redelivery_limit(), Some(6));
    assert!(!dead_letter.process_non_persistent);
    assert!(dead_letter.process_expired);
    assert_eq!(config.destinations.expire_messages_period, Duration::from_secs(30));
}

#[test]
fn a_full_dead_letter_section_is_read() -> Result<(), conf::ConfigError> {
    let config = Config::parse(
        "[destinations]\nexpire_messages_period_ms = 0\n\n[dead_letter]\nstrategy = \"individual\"\n\
         queue = \"DLQ\"\nqueue_prefix = \"DLQ.Q.\"\ntopic_prefix = \"DLQ.T.\"\nmax_redeliveries = -1\n\
         process_non_persistent = true\nprocess_expired = false\n",
        "ferromq.toml",
    )?;
    assert_eq!(config.destinations.expire_messages_period, Duration::ZERO);
    assert_eq!(
        config.dead_letter,
        DeadLetterConfig {
            strategy: DeadLetterStrategy::Individual,
            queue: "DLQ".to_owned(),
            queue_prefix: "DLQ.Q.".to_owned(),
            topic_prefix: "DLQ.T.".to_owned(),
            max_redeliveries: -1,
            process_non_persistent: true,
            process_expired: false,
        }
    );
    assert_eq!(config.dead_letter.redelivery_limit(), None);
    let discarding = Config::parse("[dead_letter]\nstrategy = \"discarding\"\n", "f.toml")?;
    assert_eq!(discarding.dead_letter.strategy, DeadLetterStrategy::Discarding);
    Ok(())
}

#[test]
fn bad_dead_letter_values_are_refused_with_their_line() {
    assert_eq!(
        error_of("[dead_letter]\n\nmax_redeliveries = -2\n"),
        "ferromq.toml:3: `dead_letter.max_redeliveries`: -2 is below -1 (-1 means no maximum)"
    );
    assert_eq!(
        error_of("[dead_letter]\nmax_redeliveries = \"six\"\n"),
        "ferromq.toml:2: `dead_letter.max_redeliveries`: invalid type: string \"six\", expected a \
         whole number, or -1 for no maximum"
    );
    assert_eq!(
        error_of("[dead_letter]\nqueue = \"DLQ.>\"\n"),
        "ferromq.toml:2: `dead_letter.queue`: `DLQ.>` contains `>`: a dead-letter queue needs a \
         plain name, without wildcards or `,`"
    );
    assert_eq!(
        error_of("[dead_letter]\nqueue_prefix = \"\"\n"),
        "ferromq.toml:2: `dead_letter.queue_prefix`: must not be empty"
    );
    assert_eq!(
        error_of("[dead_letter]\ntopic_prefix = \"DLQ..T.\"\n"),
        "ferromq.toml:2: `dead_letter.topic_prefix`: `DLQ..T.` has an empty level: levels are \
         separated by single dots, e.g. \"ActiveMQ.DLQ\""
    );
    assert!(error_of("[dead_letter]\nstrategy = \"per-queue\"\n")
        .starts_with("ferromq.toml:2: `dead_letter.strategy`: unknown variant `per-queue`"));
    assert_eq!(
        error_of("[dead_letter]\nenabled = true\n"),
        "ferromq.toml:2: `dead_letter.enabled`: unknown key `enabled` in [dead_letter] (known \
         keys: strategy, queue, queue_prefix, topic_prefix, max_redeliveries, \
         process_non_persistent, process_expired)"
    );
    assert_eq!(
        error_of("[destinations]\nexpire_messages_period_ms = 90000000\n"),
        "ferromq.toml:2: `destinations.expire_messages_period_ms`: 90000000 ms is more than a day \
         (at most 86400000 ms)"
    );
}
