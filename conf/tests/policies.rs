//! `[[policies]]`: seed 002's entry, every key, and the errors for bad entries.

use std::time::Duration;

use conf::{
    Config, DeadLetterStrategy, DispatchPolicy, MessageGroupMap, PolicyTarget,
    SlowConsumerStrategy, SubscriptionRecovery,
};

fn error_of(text: &str) -> String {
    match Config::parse(text, "ferromq.toml") {
        Ok(config) => panic!("expected an error, parsed {config:?}"),
        Err(error) => error.to_string(),
    }
}

/// Seed 002's `<policyEntry queue=">" ...>`, as it is written in ferromq's file.
pub const SEED_002: &str = include_str!("seed-002-policy.toml");

#[test]
fn seed_002_s_policy_loads() -> Result<(), conf::ConfigError> {
    let config = Config::parse(SEED_002, "ferromq.toml")?;
    let [policy] = &config.policies[..] else { panic!("one entry: {:?}", config.policies) };
    assert_eq!(policy.target(), Some(PolicyTarget::Queue(">")));
    assert_eq!(policy.optimized_dispatch, Some(true));
    assert_eq!(policy.lazy_dispatch, Some(false));
    assert_eq!(policy.producer_flow_control, Some(false));
    assert_eq!(policy.memory_limit, Some(128 << 20));
    assert_eq!(policy.strict_order_dispatch, Some(true));
    assert_eq!(policy.dispatch_policy, Some(DispatchPolicy::StrictOrder));
    assert_eq!(policy.message_group_map, Some(MessageGroupMap::Simple));
    assert_eq!(
        policy.subscription_recovery,
        Some(SubscriptionRecovery::Timed { recover_duration_ms: Duration::from_secs(360) })
    );
    // Keys left out stay unset, so the section defaults apply.
    assert_eq!(policy.queue_prefetch, None);
    assert_eq!(policy.dead_letter, None);
    Ok(())
}

#[test]
fn every_key_of_an_entry_parses() -> Result<(), conf::ConfigError> {
    let text = r#"
[[policies]]
topic = "PRICES.>"
memory_limit = 1048576
queue_prefetch = 10
queue_browser_prefetch = 20
topic_prefetch = 30
durable_topic_prefetch = 40
message_group_map = { kind = "hash_bucket", buckets = 16 }
subscription_recovery = { kind = "fixed_size", maximum_size = "8 kb" }
dead_letter = { strategy = "individual", queue_prefix = "DLQ." }
expire_messages_period_ms = 0
gc_inactive_destinations = true
inactive_timeout_before_gc_ms = 5000
slow_consumer_strategy = { max_slow_duration_ms = 2000, check_period_ms = 500, abort_connection = true }
pending_message_limit = 10
advisory_for_slow_consumers = true
advisory_for_fast_producers = true
advisory_when_full = true
advisory_for_discarding_messages = true
advisory_for_delivery = true
advisory_for_consumed = true
send_advisory_if_no_consumers = true

[[policies]]
temp_queue = true
memory_limit = "1 mb"
"#;
    let config = Config::parse(text, "ferromq.toml")?;
    let policy = &config.policies[0];
    assert_eq!(policy.target(), Some(PolicyTarget::Topic("PRICES.>")));
    assert_eq!(policy.memory_limit, Some(1 << 20));
    assert_eq!(
        (
            policy.queue_prefetch,
            policy.queue_browser_prefetch,
            policy.topic_prefetch,
            policy.durable_topic_prefetch
        ),
        (Some(10), Some(20), Some(30), Some(40))
    );
    assert_eq!(policy.message_group_map, Some(MessageGroupMap::HashBucket { buckets: 16 }));
    assert_eq!(
        policy.subscription_recovery,
        Some(SubscriptionRecovery::FixedSize { maximum_size: 8 << 10 })
    );
    let dead_letter = policy.dead_letter.as_ref().expect("dead_letter");
    assert_eq!(dead_letter.strategy, DeadLetterStrategy::Individual);
    assert_eq!(dead_letter.queue_prefix, "DLQ.");
    assert_eq!(policy.expire_messages_period, Some(Duration::ZERO));
    assert_eq!(policy.inactive_timeout_before_gc, Some(Duration::from_secs(5)));
    assert_eq!(
        policy.slow_consumer_strategy,
        Some(SlowConsumerStrategy {
            max_slow_count: -1,
            max_slow_duration: Duration::from_secs(2),
            check_period: Duration::from_millis(500),
            abort_connection: true,
        })
    );
    assert_eq!(policy.pending_message_limit, Some(10));
    assert_eq!(config.policies[1].target(), Some(PolicyTarget::TempQueue));
    // What the file says is what a written configuration says.
    let written = toml::to_string(&config).expect("serializes");
    assert_eq!(Config::parse(&written, "written.toml")?, config);
    Ok(())
}

#[test]
fn bad_entries_are_refused_with_their_line() {
    assert_eq!(
        error_of("[[policies]]\nmemory_limit = \"1 mb\"\n"),
        "ferromq.toml:1: `policies[0]`: needs exactly one of `queue = \"PATTERN\"`, \
         `topic = \"PATTERN\"`, `temp_queue = true` or `temp_topic = true`"
    );
    assert_eq!(
        error_of("[[policies]]\nqueue = \">\"\ntopic = \">\"\n"),
        "ferromq.toml:1: `policies[0]`: needs exactly one of `queue = \"PATTERN\"`, \
         `topic = \"PATTERN\"`, `temp_queue = true` or `temp_topic = true`"
    );
    assert_eq!(
        error_of("[[policies]]\nqueue = \"A.>.B\"\n"),
        "ferromq.toml:2: `policies[0].queue`: `A.>.B`: `>` matches all the remaining levels, so \
         it may only be the whole last level"
    );
    assert_eq!(
        error_of("[[policies]]\nqueue = \">\"\nmemory_limit = \"12 parsecs\"\n"),
        "ferromq.toml:3: `policies[0].memory_limit`: invalid value: string \"12 parsecs\", \
         expected a number of bytes, or a size such as \"128 mb\""
    );
    assert_eq!(
        error_of("[[policies]]\nqueue = \">\"\nmemory_limit = 10\n"),
        "ferromq.toml:3: `policies[0].memory_limit`: 10 bytes is less than 65536 (64 KiB)"
    );
    assert_eq!(
        error_of("[[policies]]\nqueue = \">\"\nqueue_prefetch = 0\n"),
        "ferromq.toml:3: `policies[0].queue_prefetch`: must be at least 1"
    );
    assert_eq!(
        error_of("[[policies]]\nqueue = \">\"\noptimised_dispatch = true\n"),
        "ferromq.toml:3: `policies[0].optimised_dispatch`: unknown key `optimised_dispatch` in \
         [[policies]] (known keys: queue, topic, temp_queue, temp_topic, memory_limit, \
         producer_flow_control, queue_prefetch, queue_browser_prefetch, topic_prefetch, \
         durable_topic_prefetch, optimized_dispatch, lazy_dispatch, strict_order_dispatch, \
         dispatch_policy, message_group_map, subscription_recovery, dead_letter, \
         expire_messages_period_ms, gc_inactive_destinations, inactive_timeout_before_gc_ms, \
         slow_consumer_strategy, pending_message_limit, advisory_for_slow_consumers, \
         advisory_for_fast_producers, advisory_when_full, advisory_for_discarding_messages, \
         advisory_for_delivery, advisory_for_consumed, send_advisory_if_no_consumers, \
         max_destinations)"
    );
    let recovery =
        error_of("[[policies]]\ntopic = \">\"\nsubscription_recovery = { kind = \"forever\" }\n");
    assert!(
        recovery.starts_with("ferromq.toml:3: `policies[0].subscription_recovery"),
        "{recovery}"
    );
    assert!(recovery.contains("forever"), "{recovery}");
    assert_eq!(
        error_of(
            "[[policies]]\ntopic = \">\"\nsubscription_recovery = { kind = \"fixed_count\", maximum_size = 0 }\n"
        ),
        "ferromq.toml:3: `policies[0].subscription_recovery.maximum_size`: must be at least 1 \
         (use kind = \"none\" for no recovery)"
    );
    assert_eq!(
        error_of(
            "[[policies]]\nqueue = \">\"\ndead_letter = { strategy = \"shared\", queue = \"\" }\n"
        ),
        "ferromq.toml:3: `policies[0].dead_letter.queue`: must not be empty"
    );
}

#[test]
fn max_destinations_is_a_queue_entry_s_count_and_the_broker_s() -> Result<(), conf::ConfigError> {
    let text = "[destinations]\nmax_destinations = 5000\n\
                [[policies]]\nqueue = \"TENANT.>\"\nmax_destinations = 100\n\
                [[policies]]\nqueue = \">\"\nmax_destinations = -1\n";
    let config = Config::parse(text, "ferromq.toml")?;
    assert_eq!(config.destinations.max_destinations, 5000);
    assert_eq!(config.policies[0].max_destinations, Some(100));
    assert_eq!(config.policies[1].max_destinations, Some(-1));
    // Left out: no limit, as ActiveMQ's maxDestinations (-1).
    let default = Config::parse("", "ferromq.toml")?;
    assert_eq!(default.destinations.max_destinations, -1);
    assert_eq!(
        Config::parse("[[policies]]\nqueue = \">\"\n", "f.toml")?.policies[0].max_destinations,
        None
    );
    Ok(())
}

#[test]
fn bad_max_destinations_are_refused_with_their_line() {
    assert_eq!(
        error_of("[destinations]\nmax_destinations = -2\n"),
        "ferromq.toml:2: `destinations.max_destinations`: must be -1 (no limit) or more"
    );
    assert_eq!(
        error_of("[[policies]]\nqueue = \">\"\nmax_destinations = -5\n"),
        "ferromq.toml:3: `policies[0].max_destinations`: must be -1 (no limit) or more"
    );
    let topic = error_of("[[policies]]\ntopic = \">\"\nmax_destinations = 10\n");
    assert!(
        topic.starts_with("ferromq.toml:3: `policies[0].max_destinations`: limits queues only"),
        "{topic}"
    );
    let temporary = error_of("[[policies]]\ntemp_queue = true\nmax_destinations = 10\n");
    assert!(temporary.contains("limits queues only"), "{temporary}");
    let text = error_of("[destinations]\nmax_destinations = \"many\"\n");
    assert!(text.starts_with("ferromq.toml:2: `destinations.max_destinations`"), "{text}");
}
