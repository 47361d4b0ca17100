//! Loading configuration files: defaults, a full file, and the exact text of every kind of error.

use std::path::PathBuf;
use std::time::Duration;

use conf::{Config, ConfigError, Scheme, StoreKind, SyncMode, VirtualTopicConfig};

const EXAMPLE: &str = include_str!("../ferromq.example.toml");

/// The Display text of parsing `text` as `ferromq.toml`, which must fail.
fn error_of(text: &str) -> String {
    match Config::parse(text, "ferromq.toml") {
        Ok(config) => panic!("expected an error, parsed {config:?}"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn an_empty_file_is_the_default_configuration() -> Result<(), ConfigError> {
    assert_eq!(Config::parse("", "empty.toml")?, Config::default());
    assert_eq!(
        Config::parse("# nothing\n\n[broker]\n[transport]\n", "empty.toml")?,
        Config::default()
    );
    Ok(())
}

#[test]
fn the_defaults_are_the_documented_ones() -> Result<(), ConfigError> {
    let config = Config::default();
    config.validate()?;
    assert_eq!(config.broker.name, "localhost");
    assert_eq!(config.broker.data_dir, PathBuf::from("data"));
    assert_eq!(config.broker.shutdown_timeout, Duration::from_millis(10_000));
    assert_eq!(config.transport.connectors.len(), 2);
    assert_eq!(config.transport.connectors[0].to_string(), "tcp://127.0.0.1:61616");
    assert_eq!(config.transport.connectors[1].to_string(), "stomp://127.0.0.1:61613");
    assert_eq!(config.transport.max_connections, 1000);
    assert_eq!(config.transport.connect_timeout, Duration::from_millis(30_000));
    assert_eq!(config.transport.max_frame_size, 104_857_600);
    assert_eq!(config.transport.max_headers, 1000);
    assert_eq!(config.transport.max_header_length, 10_240);
    assert_eq!(config.transport.heart_beat_grace, 1.5);
    assert_eq!(config.store.kind, StoreKind::Journal);
    assert_eq!(config.store.max_size, 64 << 30);
    assert_eq!(config.store.segment_size, 32 << 20);
    assert_eq!(config.store.checkpoint_bytes, 8 << 20);
    assert_eq!(config.store.checkpoint_interval, Duration::from_secs(5));
    assert_eq!(config.store.compaction_threshold, 0.5);
    assert!(!config.store.refuse_on_corruption);
    assert_eq!(config.store.sync, SyncMode::Always);
    assert_eq!(config.store.sync_interval, Duration::from_millis(1000));
    assert_eq!(config.destinations.queue_prefetch, 1000);
    assert_eq!(
        config.virtual_topics,
        [VirtualTopicConfig {
            name: "VirtualTopic.>".to_owned(),
            prefix: "Consumer.*.".to_owned()
        }]
    );
    assert_eq!(config.virtual_topics, [VirtualTopicConfig::default()]);
    assert!(config.warnings().is_empty());
    Ok(())
}

#[test]
fn the_example_file_parses_to_the_defaults() -> Result<(), ConfigError> {
    assert_eq!(Config::parse(EXAMPLE, "ferromq.example.toml")?, Config::default());
    Ok(())
}

const FULL: &str = r#"
[broker]
name = "orders-1"
data_dir = "/var/lib/ferromq"
shutdown_timeout_ms = 0

[transport]
connectors = [
    "stomp://0.0.0.0:61613?maximumConnections=5000&useQueueForAccept=false",
    "stomp+nio://[::1]:61614?wireFormat.maxFrameSize=1048576",
    "stomp://localhost:0",
    "stomp://localhost:0",
]
max_connections = 10
connect_timeout_ms = 5000
max_frame_size = 65536
max_headers = 20
max_header_length = 4096
heart_beat_grace_multiplier = 2

[store]
kind = "memory"
sync = "periodic"
sync_interval_ms = 250

[destinations]
queue_prefetch = 1

[[virtual_topics]]
name = "Orders.>"
prefix = "Group.*."

[[virtual_topics]]
name = "Prices.*.Live"
"#;

#[test]
fn a_full_file_sets_every_key() -> Result<(), ConfigError> {
    let config = Config::parse(FULL, "full.toml")?;
    assert_eq!(config.broker.name, "orders-1");
    assert_eq!(config.broker.data_dir, PathBuf::from("/var/lib/ferromq"));
    assert_eq!(config.broker.shutdown_timeout, Duration::ZERO);
    let transport = &config.transport;
    let rendered: Vec<String> = transport.connectors.iter().map(ToString::to_string).collect();
    assert_eq!(
        rendered,
        [
            "stomp://0.0.0.0:61613?maximumConnections=5000&useQueueForAccept=false",
            "stomp+nio://[::1]:61614?wireFormat.maxFrameSize=1048576",
            "stomp://localhost:0",
            "stomp://localhost:0",
        ]
    );
    assert_eq!(transport.connectors[1].scheme, Scheme::StompNio);
    assert_eq!(transport.connectors[1].host, "::1");
    assert_eq!(transport.max_connections_for(&transport.connectors[0]), 5000);
    assert_eq!(transport.max_connections_for(&transport.connectors[1]), 10);
    assert_eq!(transport.max_frame_size_for(&transport.connectors[0]), 65536);
    assert_eq!(transport.max_frame_size_for(&transport.connectors[1]), 1_048_576);
    assert_eq!(transport.connect_timeout, Duration::from_secs(5));
    assert_eq!(transport.max_headers, 20);
    assert_eq!(transport.max_header_length, 4096);
    assert_eq!(transport.heart_beat_grace, 2.0);
    assert_eq!(config.store.sync, SyncMode::Periodic);
    assert_eq!(config.store.sync_interval, Duration::from_millis(250));
    assert_eq!(config.destinations.queue_prefetch, 1);
    assert_eq!(
        config.virtual_topics,
        [
            VirtualTopicConfig { name: "Orders.>".to_owned(), prefix: "Group.*.".to_owned() },
            VirtualTopicConfig {
                name: "Prices.*.Live".to_owned(),
                prefix: "Consumer.*.".to_owned()
            },
        ]
    );
    assert_eq!(
        config.warnings(),
        [
            "connector stomp://0.0.0.0:61613?maximumConnections=5000&useQueueForAccept=false: option \
             useQueueForAccept has no effect in ferromq: connections are accepted asynchronously, \
             without a hand-off queue",
            "connector stomp://0.0.0.0:61613?maximumConnections=5000&useQueueForAccept=false is \
             reachable from other machines and [authentication] is off: whoever reaches it can \
             read and write every destination; set [authentication] enabled = true with \
             [[users]] (see the README's minimal secure configuration)"
        ]
    );
    Ok(())
}

#[test]
fn a_configuration_written_as_toml_reads_back_equal() -> Result<(), Box<dyn std::error::Error>> {
    let no_virtual_topics = Config { virtual_topics: Vec::new(), ..Config::default() };
    for config in [Config::default(), Config::parse(FULL, "full.toml")?, no_virtual_topics] {
        let text = toml::to_string(&config)?;
        assert_eq!(Config::parse(&text, "written.toml")?, config, "{text}");
    }
    Ok(())
}

#[test]
fn load_reads_a_file_and_names_it_in_errors() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("ferromq.toml");
    std::fs::write(&path, "[broker]\nname = \"b1\"\n")?;
    assert_eq!(Config::load(&path)?.broker.name, "b1");

    std::fs::write(&path, "[broker]\nname = \"b1\"\nnmae = \"b2\"\n")?;
    let error = Config::load(&path).err().ok_or("a misspelt key must be refused")?;
    assert_eq!(error.origin, path.display().to_string());
    assert_eq!(error.line, Some(3));
    assert_eq!(error.key, "broker.nmae");
    Ok(())
}

#[test]
fn load_of_a_missing_file_names_the_path() {
    let path = PathBuf::from("/nonexistent/ferromq.toml");
    let error = Config::load(&path).expect_err("the file does not exist");
    assert_eq!(
        error.to_string(),
        "cannot read configuration file /nonexistent/ferromq.toml: No such file or directory (os error 2)"
    );
    assert_eq!(error.io_error().map(std::io::Error::kind), Some(std::io::ErrorKind::NotFound));
    assert!(std::error::Error::source(&error).is_some());
}

#[test]
fn an_unknown_key_is_refused_with_the_known_ones() {
    assert_eq!(
        error_of("[transport]\nmax_connections = 5\nuse_epoll = true\n"),
        "ferromq.toml:3: `transport.use_epoll`: unknown key `use_epoll` in [transport] (known keys: \
         connectors, max_connections, connect_timeout_ms, max_frame_size, max_headers, \
         max_header_length, heart_beat_grace_multiplier)"
    );
    // A duration key without its unit suffix is unknown too.
    assert_eq!(
        error_of("[store]\nsync_interval = 5\n"),
        "ferromq.toml:2: `store.sync_interval`: unknown key `sync_interval` in [store] (known keys: \
         kind, sync, sync_interval_ms, max_size, segment_size, checkpoint_bytes, \
         checkpoint_interval_ms, compaction_threshold, refuse_on_corruption, engine, url, \
         lease_ms, lease_renew_ms)"
    );
}

#[test]
fn memory_limits_have_defaults_and_a_floor() {
    let config = Config::default();
    assert_eq!(config.broker.memory_limit, 1 << 30);
    assert_eq!(config.destinations.memory_limit, 64 << 20);
    assert_eq!(config.broker.temp_limit, 50 << 30);
    assert_eq!(
        error_of("[broker]\ntemp_limit = 1000\n"),
        "ferromq.toml:2: `broker.temp_limit`: 1000 bytes is less than 16777216 (16 MiB, four \
         temporary store data files); use 0 for no limit"
    );
    assert_eq!(
        error_of("[destinations]\nmemory_limit = 1000\n"),
        "ferromq.toml:2: `destinations.memory_limit`: 1000 bytes is less than 65536 (64 KiB)"
    );
}

#[test]
fn every_size_takes_a_number_or_a_text_with_a_unit() -> Result<(), ConfigError> {
    let config = Config::parse(
        "[broker]\nmemory_limit = \"512 mb\"\ntemp_limit = \"1 gb\"\n\
         [transport]\nmax_frame_size = \"10 MiB\"\n\
         [store]\nmax_size = \"128 mb\"\nsegment_size = \"16mb\"\ncheckpoint_bytes = \"4 mb\"\n\
         [destinations]\nmemory_limit = \"32 mb\"\n\
         [[policies]]\nqueue = \">\"\nmemory_limit = \"8 mb\"\n",
        "ferromq.toml",
    )?;
    assert_eq!(config.broker.memory_limit, 512 << 20);
    assert_eq!(config.broker.temp_limit, 1 << 30);
    assert_eq!(config.transport.max_frame_size, 10 << 20);
    assert_eq!(config.store.max_size, 128 << 20);
    assert_eq!(config.store.segment_size, 16 << 20);
    assert_eq!(config.store.checkpoint_bytes, 4 << 20);
    assert_eq!(config.destinations.memory_limit, 32 << 20);
    assert_eq!(config.policies[0].memory_limit, Some(8 << 20));
    // "20 mb" reads as a size, and is then held to the store's floor like any number.
    let error = error_of("[store]\nmax_size = \"20 mb\"\n");
    assert!(error.contains("20971520 bytes is less than four data files"), "{error}");
    // Plain numbers still work, and a size that is not one is refused with the key.
    let plain = Config::parse("[store]\nmax_size = 268435456\n", "f.toml")?;
    assert_eq!(plain.store.max_size, 256 << 20);
    let error = error_of("[store]\nmax_size = \"20 parsecs\"\n");
    assert!(error.starts_with("ferromq.toml:2: `store.max_size`"), "{error}");
    assert!(error.contains("a size such as \"128 mb\""), "{error}");
    Ok(())
}

#[test]
fn an_unknown_key_is_found_in_dotted_and_inline_form() {
    assert_eq!(
        error_of("\n\nbroker.nmae = \"x\"\n"),
        "ferromq.toml:3: `broker.nmae`: unknown key `nmae` in [broker] (known keys: name, data_dir, \
         shutdown_timeout_ms, scheduler, memory_limit, temp_limit, send_fail_if_no_space, \
         send_fail_if_no_space_after_timeout_ms, standby, lock_retry_ms)"
    );
    assert_eq!(
        error_of("[broker]\nstore = 1\n"),
        "ferromq.toml:2: `broker.store`: unknown key `store` in [broker] (known keys: name, data_dir, \
         shutdown_timeout_ms, scheduler, memory_limit, temp_limit, send_fail_if_no_space, \
         send_fail_if_no_space_after_timeout_ms, standby, lock_retry_ms)"
    );
    assert_eq!(
        error_of("\nstore = { kind = \"memory\", fsync = true }\n"),
        "ferromq.toml:2: `store.fsync`: unknown key `fsync` in [store] (known keys: kind, sync, \
         sync_interval_ms, max_size, segment_size, checkpoint_bytes, checkpoint_interval_ms, \
         compaction_threshold, refuse_on_corruption, engine, \
         url, lease_ms, lease_renew_ms)"
    );
}

#[test]
fn an_unknown_section_is_refused() {
    assert_eq!(
        error_of("[broker]\nname = \"b\"\n\n[cluster]\npeers = []\n"),
        "ferromq.toml:4: `cluster`: unknown section [cluster] (known sections: broker, transport, \
         store, destinations, dead_letter, admin, tls, authentication, users, authorization, \
         virtual_topics, composite_destinations, policies)"
    );
    assert_eq!(
        error_of("name = \"b\"\n"),
        "ferromq.toml:1: `name`: unknown key `name` at the top level (known sections: broker, \
         transport, store, destinations, dead_letter, admin, tls, authentication, users, \
         authorization, virtual_topics, composite_destinations, policies)"
    );
    assert_eq!(
        error_of("[transport.tls]\ncert = \"x\"\n"),
        "ferromq.toml:1: `transport.tls`: unknown key `tls` in [transport] (known keys: connectors, \
         max_connections, connect_timeout_ms, max_frame_size, max_headers, max_header_length, \
         heart_beat_grace_multiplier)"
    );
}

#[test]
fn a_section_that_is_not_a_table_is_refused() {
    assert_eq!(
        error_of("transport = 5\n"),
        "ferromq.toml:1: `transport`: must be a table ([transport]), not an integer"
    );
    assert_eq!(
        error_of("[[store]]\nkind = \"memory\"\n"),
        "ferromq.toml:1: `store`: must be a table ([store]), not an array of tables"
    );
}

#[test]
fn a_value_of_the_wrong_type_is_refused() {
    assert_eq!(
        error_of("[transport]\nmax_connections = \"x\"\n"),
        "ferromq.toml:2: `transport.max_connections`: invalid type: string \"x\", expected a whole number"
    );
    assert_eq!(
        error_of("[broker]\nname = 5\n"),
        "ferromq.toml:2: `broker.name`: invalid type: integer `5`, expected a string"
    );
    assert_eq!(
        error_of("[transport]\nheart_beat_grace_multiplier = \"1.5\"\n"),
        "ferromq.toml:2: `transport.heart_beat_grace_multiplier`: invalid type: string \"1.5\", expected a number"
    );
    assert_eq!(
        error_of("[destinations]\nqueue_prefetch = 5000000000\n"),
        "ferromq.toml:2: `destinations.queue_prefetch`: invalid value: integer `5000000000`, expected a \
         smaller whole number"
    );
    assert_eq!(
        error_of("[store]\nsync = \"sometimes\"\n"),
        "ferromq.toml:2: `store.sync`: unknown variant `sometimes`, expected one of `always`, `periodic`, `never`"
    );
}

#[test]
fn durations_must_be_whole_non_negative_milliseconds_up_to_a_day() {
    assert_eq!(
        error_of("[broker]\nshutdown_timeout_ms = -1\n"),
        "ferromq.toml:2: `broker.shutdown_timeout_ms`: invalid value: integer `-1`, expected a whole number \
         of milliseconds"
    );
    assert_eq!(
        error_of("[broker]\nshutdown_timeout_ms = 1.5\n"),
        "ferromq.toml:2: `broker.shutdown_timeout_ms`: invalid type: floating point `1.5`, expected a whole \
         number of milliseconds"
    );
    assert_eq!(
        error_of("[transport]\n\nconnect_timeout_ms = 86_400_001\n"),
        "ferromq.toml:3: `transport.connect_timeout_ms`: 86400001 ms is more than a day (at most 86400000 ms)"
    );
    assert_eq!(
        error_of("[store]\nsync = \"periodic\"\nsync_interval_ms = 0\n"),
        "ferromq.toml:3: `store.sync_interval_ms`: must be at least 1 millisecond"
    );
}

#[test]
fn journal_settings_are_checked() {
    assert_eq!(
        error_of("[store]\nsegment_size = 1000\n"),
        "ferromq.toml:2: `store.segment_size`: 1000 bytes is outside 1048576 (1 MiB) to 1073741824 (1 GiB)"
    );
    assert_eq!(
        error_of("[store]\ncompaction_threshold = 1.5\n"),
        "ferromq.toml:2: `store.compaction_threshold`: 1.5 is not between 0 and 1 (exclusive)"
    );
    assert_eq!(
        error_of("\n[store]\nmax_size = 1048576\n"),
        "ferromq.toml:3: `store.max_size`: 1048576 bytes is less than four data files (134217728 bytes); use 0 for no limit"
    );
}

#[test]
fn the_postgres_lease_settings_are_checked() -> Result<(), ConfigError> {
    let config = Config::parse("[store]\nlease_ms = 1500\nlease_renew_ms = 300\n", "ferromq.toml")?;
    assert_eq!(config.store.lease, Duration::from_millis(1500));
    assert_eq!(config.store.lease_renew, Duration::from_millis(300));
    assert_eq!(Config::default().store.lease, Duration::from_millis(10_000));
    assert_eq!(
        error_of("[store]\nlease_ms = 10_000\nlease_renew_ms = 4000\n"),
        "ferromq.toml:3: `store.lease_renew_ms`: 4000 ms is more than a third of store.lease_ms \
         (10000 ms): a failed renewal could not be retried before the broker must stop serving; \
         renew more often or lengthen the lease"
    );
    assert_eq!(
        error_of("[store]\nlease_ms = 200\nlease_renew_ms = 50\n"),
        "ferromq.toml:2: `store.lease_ms`: 200 ms is less than 300 ms"
    );
    assert_eq!(
        error_of("[store]\nlease_renew_ms = 0\n"),
        "ferromq.toml:2: `store.lease_renew_ms`: must be at least 1 millisecond"
    );
    Ok(())
}

#[test]
fn the_jdbc_store_takes_a_sqlite_or_postgres_url() -> Result<(), ConfigError> {
    let config = Config::parse(
        "[store]\nkind = \"jdbc\"\nurl = \"postgres://broker:pw@db:5432/ferromq\"\n",
        "ferromq.toml",
    )?;
    assert_eq!(config.store.kind, StoreKind::Jdbc);
    assert_eq!(config.store.url, "postgres://broker:pw@db:5432/ferromq");
    assert_eq!(Config::default().store.url, "sqlite://ferromq.db");
    assert_eq!(
        error_of("[store]\nkind = \"jdbc\"\nurl = \"mysql://db/ferromq\"\n"),
        "ferromq.toml:3: `store.url`: expected sqlite://PATH or postgres://user:password@host:port/database"
    );
    Ok(())
}

#[test]
fn an_unknown_store_kind_is_refused_with_the_available_ones() {
    assert_eq!(
        error_of("[store]\nkind = \"kahadb\"\n"),
        "ferromq.toml:2: `store.kind`: unknown store kind `kahadb` (available: journal, memory, lsm, jdbc)"
    );
}

#[test]
fn limits_must_be_at_least_one() {
    for (key, section) in [
        ("max_connections", "transport"),
        ("max_frame_size", "transport"),
        ("max_headers", "transport"),
        ("max_header_length", "transport"),
        ("queue_prefetch", "destinations"),
    ] {
        assert_eq!(
            error_of(&format!("[{section}]\n# a comment\n{key} = 0\n")),
            format!("ferromq.toml:3: `{section}.{key}`: must be at least 1")
        );
    }
}

#[test]
fn a_header_longer_than_a_frame_is_refused_on_the_line_written() {
    // Both keys written: the header length is blamed.
    assert_eq!(
        error_of("[transport]\nmax_header_length = 2000\nmax_frame_size = 1000\n"),
        "ferromq.toml:2: `transport.max_header_length`: max_header_length (2000) is larger than \
         max_frame_size (1000); no frame could carry such a header"
    );
    // Only the frame size written: it is the one to blame.
    assert_eq!(
        error_of("[transport]\nmax_connections = 3\nmax_frame_size = 1000\n"),
        "ferromq.toml:3: `transport.max_frame_size`: max_header_length (10240) is larger than \
         max_frame_size (1000); no frame could carry such a header"
    );
}

#[test]
fn the_heart_beat_grace_must_be_a_sensible_multiplier() {
    assert_eq!(
        error_of("[transport]\nheart_beat_grace_multiplier = 0.5\n"),
        "ferromq.toml:2: `transport.heart_beat_grace_multiplier`: 0.5 is outside 1..=10: the multiplier \
         applies to the negotiated heart-beat interval"
    );
}

#[test]
fn broker_name_and_data_dir_must_not_be_empty() {
    assert_eq!(
        error_of("[broker]\nname = \" \"\n"),
        "ferromq.toml:2: `broker.name`: must not be empty"
    );
    assert_eq!(
        error_of("[broker]\ndata_dir = \"\"\n"),
        "ferromq.toml:2: `broker.data_dir`: must not be empty (use \".\" for the working directory)"
    );
}

#[test]
fn a_bad_connector_is_refused_on_its_own_line() {
    let text = "[transport]\nconnectors = [\n  \"stomp://127.0.0.1:61613\",\n  \"stomp://127.0.0.1:99999\",\n]\n";
    assert_eq!(
        error_of(text),
        "ferromq.toml:4: `transport.connectors[1]`: port 99999 is out of range (0-65535)"
    );
    assert_eq!(
        error_of("[transport]\nconnectors = [\"vm://0.0.0.0:61614\"]\n"),
        "ferromq.toml:2: `transport.connectors[0]`: `vm://` (in-process) connectors are not \
         implemented yet; available: stomp://, stomp+nio://, tcp://, nio://, amqp://, amqp+nio://, \
         ssl://, nio+ssl://, stomp+ssl://, stomp+nio+ssl://, amqp+ssl://, mqtt://, mqtt+nio://, \
         mqtt+ssl://, mqtt+nio+ssl://, ws://, wss://"
    );
    assert_eq!(
        error_of("[transport]\nconnectors = [\"stomp://h:1?soTimeout=5\"]\n"),
        "ferromq.toml:2: `transport.connectors[0]`: unknown option soTimeout; available: \
         maximumConnections, wireFormat.maxFrameSize, on WebSocket connectors allowedOrigins, and on \
         TLS connectors needClientAuth, wantClientAuth, transport.enabledProtocols, \
         transport.enabledCipherSuites"
    );
    assert_eq!(
        error_of("[transport]\nconnectors = [61613]\n"),
        "ferromq.toml:2: `transport.connectors[0]`: expected a connector URI string, e.g. \
         \"stomp://127.0.0.1:61613\", not an integer"
    );
    assert_eq!(
        error_of("[transport]\nconnectors = \"stomp://127.0.0.1:61613\"\n"),
        "ferromq.toml:2: `transport.connectors`: expected a list of connector URIs, e.g. \
         [\"stomp://127.0.0.1:61613\"], not a string"
    );
}

#[test]
fn connectors_must_exist_and_not_share_an_address() {
    assert_eq!(
        error_of("[transport]\nconnectors = []\n"),
        "ferromq.toml:2: `transport.connectors`: at least one connector is needed, or no client could \
         connect (e.g. [\"stomp://127.0.0.1:61613\"])"
    );
    let text = "[transport]\nconnectors = [\n  \"stomp://LocalHost:61613\",\n  \"stomp://[::1]:61613\",\n  \
                \"stomp+nio://localhost:61613\",\n]\n";
    assert_eq!(
        error_of(text),
        "ferromq.toml:5: `transport.connectors[2]`: localhost:61613 listens on the same address as \
         transport.connectors[0]"
    );
}

#[test]
fn a_connector_frame_size_below_the_header_length_is_refused() {
    assert_eq!(
        error_of("[transport]\nconnectors = [\"stomp://h:1?wireFormat.maxFrameSize=100\"]\n"),
        "ferromq.toml:2: `transport.connectors[0]`: wireFormat.maxFrameSize (100) is smaller than \
         transport.max_header_length (10240)"
    );
}

#[test]
fn a_syntax_error_names_the_line() {
    assert_eq!(
        error_of("[broker]\nname = \"b\"\n[transport\n"),
        "ferromq.toml:3: invalid table header; expected `.`, `]`"
    );
    assert_eq!(
        error_of("[broker]\nname = \"a\"\nname = \"b\"\n"),
        "ferromq.toml:3: duplicate key `name` in table `broker`"
    );
}

#[test]
fn validate_checks_values_set_in_code() {
    let mut config = Config::default();
    config.transport.connectors.push("stomp://127.0.0.1:61613".parse().expect("a valid URI"));
    let error = config.validate().expect_err("two connectors on one address");
    assert_eq!(
        error.to_string(),
        "configuration: `transport.connectors[2]`: 127.0.0.1:61613 listens on the same address as \
         transport.connectors[1]"
    );
    assert_eq!(
        error.with_origin("--connector").to_string(),
        "--connector: `transport.connectors[2]`: 127.0.0.1:61613 listens on the same address as \
         transport.connectors[1]"
    );

    let mut config = Config::default();
    config.transport.max_connections = 0;
    assert_eq!(
        config.validate().map_err(|e| e.to_string()),
        Err("configuration: `transport.max_connections`: must be at least 1".to_owned())
    );
}

#[test]
fn errors_are_built_with_or_without_a_line() {
    assert_eq!(
        ConfigError::new("a.toml", Some(3), "store.kind", "bad").to_string(),
        "a.toml:3: `store.kind`: bad"
    );
    assert_eq!(
        ConfigError::new("--connector", None, "transport.connectors[0]", "bad").to_string(),
        "--connector: `transport.connectors[0]`: bad"
    );
}

#[test]
fn seed_002_virtual_topic_configuration_parses() -> Result<(), ConfigError> {
    let text = "[[virtual_topics]]\nname = \"MyTopic\"\nprefix = \"VirtualQueueConsumer.*.\"\n";
    let config = Config::parse(text, "ferromq.toml")?;
    assert_eq!(
        config.virtual_topics,
        [VirtualTopicConfig {
            name: "MyTopic".to_owned(),
            prefix: "VirtualQueueConsumer.*.".to_owned(),
        }]
    );
    Ok(())
}

#[test]
fn virtual_topics_replace_the_default_or_turn_it_off() -> Result<(), ConfigError> {
    // Written entries replace ActiveMQ's default entry rather than add to it.
    let config = Config::parse("[[virtual_topics]]\nname = \"A.>\"\n", "ferromq.toml")?;
    assert_eq!(
        config.virtual_topics,
        [VirtualTopicConfig { name: "A.>".to_owned(), prefix: "Consumer.*.".to_owned() }]
    );
    let config = Config::parse("virtual_topics = []\n[broker]\nname = \"b\"\n", "ferromq.toml")?;
    assert!(config.virtual_topics.is_empty());
    // The inline form is the same list.
    let inline =
        "virtual_topics = [\n  { name = \"A.>\" },\n  { name = \"B\", prefix = \"Q.*.\" },\n]\n";
    let config = Config::parse(inline, "ferromq.toml")?;
    assert_eq!(
        config.virtual_topics,
        [
            VirtualTopicConfig { name: "A.>".to_owned(), prefix: "Consumer.*.".to_owned() },
            VirtualTopicConfig { name: "B".to_owned(), prefix: "Q.*.".to_owned() },
        ]
    );
    // Wildcards anywhere but `>` at the end; a lone `>` makes every topic virtual.
    for name in [">", "*", "A.*.C", "A.*.>", "MyTopic"] {
        let text = format!("[[virtual_topics]]\nname = \"{name}\"\nprefix = \"Q.\"\n");
        assert_eq!(Config::parse(&text, "ferromq.toml")?.virtual_topics[0].name, name);
    }
    Ok(())
}

#[test]
fn a_virtual_topic_entry_must_be_a_table_with_a_name_and_known_keys() {
    assert_eq!(
        error_of("[[virtual_topics]]\nname = \"A.>\"\n\n[[virtual_topics]]\nprefix = \"Q.*.\"\n"),
        "ferromq.toml:4: `virtual_topics[1]`: missing key `name` (the topic name or pattern to make \
         virtual, e.g. name = \"VirtualTopic.>\")"
    );
    assert_eq!(
        error_of("virtual_topics = [\n  { name = \"A\" },\n  { prefix = \"Q.\" },\n]\n"),
        "ferromq.toml:3: `virtual_topics[1]`: missing key `name` (the topic name or pattern to make \
         virtual, e.g. name = \"VirtualTopic.>\")"
    );
    assert_eq!(
        error_of("[[virtual_topics]]\nname = \"A\"\npostfix = \"\"\n"),
        "ferromq.toml:3: `virtual_topics[0].postfix`: unknown key `postfix` in [[virtual_topics]] \
         (known keys: name, prefix)"
    );
    assert_eq!(
        error_of("[virtual_topics]\nname = \"A\"\n"),
        "ferromq.toml:1: `virtual_topics`: must be an array of tables ([[virtual_topics]]), not a table"
    );
    assert_eq!(
        error_of("virtual_topics = \"VirtualTopic.>\"\n"),
        "ferromq.toml:1: `virtual_topics`: must be an array of tables ([[virtual_topics]]), not a string"
    );
    assert_eq!(
        error_of("virtual_topics = [\n  \"VirtualTopic.>\",\n]\n"),
        "ferromq.toml:2: `virtual_topics[0]`: expected a table (e.g. { name = \"VirtualTopic.>\", \
         prefix = \"Consumer.*.\" }), not a string"
    );
    assert_eq!(
        error_of("[[virtual_topics]]\nname = \"A\"\n\n[[virtual_topics]]\nname = 5\n"),
        "ferromq.toml:5: `virtual_topics[1].name`: invalid type: integer `5`, expected a string"
    );
    assert_eq!(
        error_of("virtual_topics = [{ name = \"A\" }, { name = \"B\", prefix = [] }]\n"),
        "ferromq.toml:1: `virtual_topics[1].prefix`: invalid type: sequence, expected a string"
    );
}

#[test]
fn a_virtual_topic_name_must_be_a_topic_pattern() {
    assert_eq!(
        error_of("[[virtual_topics]]\nname = \"\"\n"),
        "ferromq.toml:2: `virtual_topics[0].name`: must not be empty (a topic name or pattern, e.g. \
         \"VirtualTopic.>\")"
    );
    for name in ["A..B", ".A", "A."] {
        let text =
            format!("[[virtual_topics]]\nname = \"X\"\n[[virtual_topics]]\n\nname = \"{name}\"\n");
        assert_eq!(
            error_of(&text),
            format!(
                "ferromq.toml:5: `virtual_topics[1].name`: `{name}` has an empty level: levels are \
                 separated by single dots, e.g. \"VirtualTopic.>\""
            )
        );
    }
    for name in ["A.>.B", ">.A", "A.B>", "A.>>"] {
        assert_eq!(
            error_of(&format!("[[virtual_topics]]\nname = \"{name}\"\n")),
            format!(
                "ferromq.toml:2: `virtual_topics[0].name`: `{name}`: `>` matches all the remaining \
                 levels, so it may only be the whole last level, e.g. \"VirtualTopic.>\""
            )
        );
    }
}

#[test]
fn a_virtual_topic_prefix_must_be_levels_ending_with_a_dot() {
    assert_eq!(
        error_of("[[virtual_topics]]\nname = \"A\"\nprefix = \"\"\n"),
        "ferromq.toml:3: `virtual_topics[0].prefix`: must not be empty (ActiveMQ's default is \
         \"Consumer.*.\")"
    );
    let text = "[[virtual_topics]]\nname = \"A\"\n[[virtual_topics]]\nname = \"B\"\nprefix = \"Consumer.*\"\n";
    assert_eq!(
        error_of(text),
        "ferromq.toml:5: `virtual_topics[1].prefix`: `Consumer.*` must end with `.`, which separates \
         it from the topic name, e.g. \"Consumer.*.\""
    );
    for prefix in ["Consumer..", "Consumer..*.", ".", ".Consumer."] {
        assert_eq!(
            error_of(&format!("[[virtual_topics]]\nprefix = \"{prefix}\"\nname = \"A\"\n")),
            format!(
                "ferromq.toml:2: `virtual_topics[0].prefix`: `{prefix}` has an empty level: levels \
                 are separated by single dots, e.g. \"Consumer.*.\""
            )
        );
    }
    for prefix in ["Consumer.>.", "Consumer.>", ">"] {
        assert_eq!(
            error_of(&format!("virtual_topics = [{{ name = \"A\", prefix = \"{prefix}\" }}]\n")),
            format!(
                "ferromq.toml:1: `virtual_topics[0].prefix`: `{prefix}` must not contain `>`: the \
                 topic name follows the prefix, so no level of it can match all the remaining ones"
            )
        );
    }
}

#[test]
fn validate_checks_virtual_topics_set_in_code() {
    let mut config = Config::default();
    config.virtual_topics.push(VirtualTopicConfig { name: "A".to_owned(), prefix: "Q".to_owned() });
    assert_eq!(
        config.validate().map_err(|e| e.to_string()),
        Err(
            "configuration: `virtual_topics[1].prefix`: `Q` must end with `.`, which separates it \
             from the topic name, e.g. \"Consumer.*.\""
                .to_owned()
        )
    );
}

#[test]
fn a_tls_connector_needs_a_certificate_and_a_key() {
    assert_eq!(
        error_of("[transport]\nconnectors = [\"ssl://0.0.0.0:61617\"]\n"),
        "ferromq.toml: `tls.certificate`: transport.connectors[0] (ssl://0.0.0.0:61617) uses TLS \
         and needs the broker's certificate chain: set [tls] certificate and private_key to PEM \
         files"
    );
    assert_eq!(
        error_of(
            "[transport]\nconnectors = [\"stomp+ssl://0.0.0.0:61612\"]\n[tls]\ncertificate = \"b.pem\"\n"
        ),
        "ferromq.toml: `tls.private_key`: transport.connectors[0] (stomp+ssl://0.0.0.0:61612) uses \
         TLS and needs the certificate's private key: set [tls] certificate and private_key to PEM \
         files"
    );
    assert_eq!(
        error_of(
            "[transport]\nconnectors = [\"amqp+ssl://0.0.0.0:5671?needClientAuth=true\"]\n[tls]\n\
             certificate = \"b.pem\"\nprivate_key = \"k.pem\"\n"
        ),
        "ferromq.toml: `tls.client_ca`: transport.connectors[0] \
         (amqp+ssl://0.0.0.0:5671?needClientAuth=true) asks for client certificates \
         (needClientAuth or wantClientAuth) and needs the authorities they chain to: set [tls] \
         client_ca to a PEM file"
    );
    assert_eq!(
        error_of("[tls]\nprotocols = [\"TLSv1\"]\n"),
        "ferromq.toml:2: `tls.protocols`: `TLSv1` is not offered: it is broken or deprecated (RFC \
         8996); use TLSv1.2 or TLSv1.3"
    );
}

#[test]
fn a_tls_connector_with_its_files_loads() -> Result<(), ConfigError> {
    let config = Config::parse(
        "[transport]\nconnectors = [\"ssl://0.0.0.0:61617?wantClientAuth=true\"]\n[tls]\n\
         certificate = \"b.pem\"\nprivate_key = \"k.pem\"\nclient_ca = \"ca.pem\"\n\
         protocols = [\"TLSv1.3\"]\n",
        "ferromq.toml",
    )?;
    assert_eq!(config.tls.protocols, vec![conf::TlsVersion::Tls13]);
    assert_eq!(config.transport.connectors[0].options.want_client_auth, Some(true));
    Ok(())
}

#[test]
fn users_need_hashed_passwords_and_someone_must_be_able_to_connect() {
    assert_eq!(
        error_of("[authentication]\nenabled = true\n"),
        "ferromq.toml:2: `authentication.enabled`: authentication is on, but there are no [[users]] \
         and anonymous_access is off: no client could connect"
    );
    assert_eq!(
        error_of("[[users]]\nname = \"a\"\npassword = \"secret\"\n"),
        "ferromq.toml:3: `users[0].password`: expected an Argon2 hash ($argon2id$...), never a \
         password in clear: make one with `ferromq passwd`"
    );
    assert_eq!(
        error_of(
            "[[users]]\nname = \"a\"\npassword = \"$argon2id$x\"\n[[users]]\nname = \"a\"\n\
             password = \"$argon2id$y\"\n"
        ),
        "ferromq.toml:5: `users[1].name`: user `a` is defined twice"
    );
    assert_eq!(
        error_of("[[users]]\nname = \"a\"\n"),
        "ferromq.toml:1: `users[0]`: missing key `password` (its Argon2 hash, made by `ferromq passwd`)"
    );
}

#[test]
fn an_empty_admin_groups_list_is_refused_when_logins_are_checked() -> Result<(), ConfigError> {
    let config = Config::parse("[admin]\ngroups = [\"ops\"]\n", "ferromq.toml")?;
    assert_eq!(config.admin.groups, ["ops"]);
    assert_eq!(Config::default().admin.groups, ["admins"]);
    // Without authentication nobody is asked for credentials, so the list does not matter.
    Config::parse("[admin]\ngroups = []\n", "ferromq.toml")?;
    let error = error_of(
        "[authentication]\nenabled = true\nanonymous_access = true\n\n[admin]\ngroups = []\n",
    );
    assert!(error.contains("`admin.groups`"), "{error}");
    assert!(error.contains("nobody could read the admin endpoint"), "{error}");
    Ok(())
}
