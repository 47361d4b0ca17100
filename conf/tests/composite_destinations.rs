//! `[[composite_destinations]]`: the entry forms, defaults, and the errors for bad entries.

use conf::{CompositeDestinationConfig, Config, DestinationName, DestinationType, ForwardTarget};

fn error_of(text: &str) -> String {
    match Config::parse(text, "ferromq.toml") {
        Ok(config) => panic!("expected an error, parsed {config:?}"),
        Err(error) => error.to_string(),
    }
}

fn queue(name: &str) -> DestinationName {
    DestinationName { kind: DestinationType::Queue, name: name.to_owned() }
}

fn topic(name: &str) -> DestinationName {
    DestinationName { kind: DestinationType::Topic, name: name.to_owned() }
}

#[test]
fn there_are_no_composites_by_default() {
    assert!(Config::default().composite_destinations.is_empty());
}

#[test]
fn composite_entries_are_read_in_both_list_forms() -> Result<(), conf::ConfigError> {
    let tables = Config::parse(
        r#"
[[composite_destinations]]
name = "queue://ORDERS.ALL"
forward_to = ["queue://ORDERS.EU", "topic://AUDIT", { destination = "BIG", selector = "amount > 100" }]

[[composite_destinations]]
name = "topic://PRICES"
forward_only = false
forward_to = ["PRICES.COPY"]
"#,
        "ferromq.toml",
    )?;
    let expected = vec![
        CompositeDestinationConfig {
            name: queue("ORDERS.ALL"),
            forward_only: true,
            forward_to: vec![
                ForwardTarget { destination: queue("ORDERS.EU"), selector: None },
                ForwardTarget { destination: topic("AUDIT"), selector: None },
                ForwardTarget {
                    destination: queue("BIG"),
                    selector: Some("amount > 100".to_owned()),
                },
            ],
        },
        CompositeDestinationConfig {
            name: topic("PRICES"),
            forward_only: false,
            forward_to: vec![ForwardTarget { destination: queue("PRICES.COPY"), selector: None }],
        },
    ];
    assert_eq!(tables.composite_destinations, expected);

    let inline = Config::parse(
        "composite_destinations = [\n  { name = \"ORDERS.ALL\", forward_to = [\"queue://ORDERS.EU\", \"topic://AUDIT\", \
         { destination = \"queue://BIG\", selector = \"amount > 100\" }] },\n  \
         { name = \"topic://PRICES\", forward_only = false, forward_to = [\"PRICES.COPY\"] },\n]\n",
        "ferromq.toml",
    )?;
    assert_eq!(inline.composite_destinations, expected);
    assert_eq!(expected[0].name.to_string(), "queue://ORDERS.ALL");
    assert_eq!(expected[1].name.to_string(), "topic://PRICES");
    Ok(())
}

#[test]
fn composites_written_as_toml_read_back_equal() -> Result<(), Box<dyn std::error::Error>> {
    let config = Config {
        composite_destinations: vec![CompositeDestinationConfig {
            name: topic("T"),
            forward_only: false,
            forward_to: vec![
                ForwardTarget { destination: queue("A"), selector: None },
                ForwardTarget { destination: topic("B"), selector: Some("x = 'y'".to_owned()) },
            ],
        }],
        ..Config::default()
    };
    let text = toml::to_string(&config)?;
    assert_eq!(Config::parse(&text, "written.toml")?, config, "{text}");
    Ok(())
}

#[test]
fn bad_destinations_are_refused_with_their_key_and_line() {
    assert_eq!(
        error_of(
            "[[composite_destinations]]\nname = \"A\"\nforward_to = [\n  \"queue://B\",\n  \"temp-queue://X\",\n]\n"
        ),
        "ferromq.toml:5: `composite_destinations[0].forward_to[1]`: `temp-queue://X` is a \
         temporary destination, which lives only as long as its connection: use a queue:// or \
         topic://"
    );
    assert_eq!(
        error_of("[[composite_destinations]]\nname = \"jms://A\"\nforward_to = [\"B\"]\n"),
        "ferromq.toml:2: `composite_destinations[0].name`: `jms://A`: unknown kind `jms://` \
         (write queue://NAME or topic://NAME; a bare name is a queue)"
    );
    assert_eq!(
        error_of("[[composite_destinations]]\nname = \"ORDERS.*\"\nforward_to = [\"B\"]\n"),
        "ferromq.toml:2: `composite_destinations[0].name`: `queue://ORDERS.*` contains `*`: a \
         composite and its targets need plain names, without wildcards or `,`"
    );
    assert_eq!(
        error_of(
            "[[composite_destinations]]\nname = \"A\"\nforward_to = [\"B\", { destination = \"topic://>\" }]\n"
        ),
        "ferromq.toml:3: `composite_destinations[0].forward_to[1]`: `topic://>` contains `>`: a \
         composite and its targets need plain names, without wildcards or `,`"
    );
    assert_eq!(
        error_of("[[composite_destinations]]\nname = \"topic://\"\nforward_to = [\"B\"]\n"),
        "ferromq.toml:2: `composite_destinations[0].name`: `topic://` has an empty name"
    );
}

#[test]
fn bad_entries_are_refused_with_their_key_and_line() {
    assert_eq!(
        error_of("[[composite_destinations]]\nname = \"A\"\nforward_to = []\n"),
        "ferromq.toml:3: `composite_destinations[0].forward_to`: needs at least one target, e.g. \
         [\"queue://ORDERS.EU\"]"
    );
    assert_eq!(
        error_of("[[composite_destinations]]\nname = \"A\"\nforward_to = [\"B\", \"queue://A\"]\n"),
        "ferromq.toml:3: `composite_destinations[0].forward_to[1]`: `queue://A` forwards to \
         itself; set forward_only = false instead"
    );
    assert_eq!(
        error_of(
            "[[composite_destinations]]\nname = \"A\"\nforward_to = [\"B\"]\n\n\
             [[composite_destinations]]\nname = \"queue://A\"\nforward_to = [\"C\"]\n"
        ),
        "ferromq.toml:6: `composite_destinations[1].name`: `queue://A` is already configured by \
         composite_destinations[0]"
    );
    // A topic and a queue of one name are two destinations.
    let both = "[[composite_destinations]]\nname = \"A\"\nforward_to = [\"B\"]\n\n\
                [[composite_destinations]]\nname = \"topic://A\"\nforward_to = [\"C\"]\n";
    assert_eq!(
        Config::parse(both, "ferromq.toml").map(|c| c.composite_destinations.len()).ok(),
        Some(2)
    );
    assert_eq!(
        error_of(
            "[[composite_destinations]]\nname = \"A\"\nforward_to = [{ destination = \"B\", selector = \" \" }]\n"
        ),
        "ferromq.toml:3: `composite_destinations[0].forward_to[0].selector`: must not be empty \
         (leave `selector` out to forward every message)"
    );
}

#[test]
fn malformed_entries_name_what_is_missing_or_unknown() {
    assert_eq!(
        error_of("[[composite_destinations]]\nname = \"A\"\n"),
        "ferromq.toml:1: `composite_destinations[0]`: missing key `forward_to` (its targets, e.g. \
         forward_to = [\"queue://ORDERS.EU\"])"
    );
    assert_eq!(
        error_of(
            "[[composite_destinations]]\nname = \"A\"\nforward_to = [\"B\"]\nforwardOnly = false\n"
        ),
        "ferromq.toml:4: `composite_destinations[0].forwardOnly`: unknown key `forwardOnly` in \
         [[composite_destinations]] (known keys: name, forward_only, forward_to)"
    );
    let error = error_of(
        "[[composite_destinations]]\nname = \"A\"\nforward_to = [{ destination = \"B\", filter = \"x > 1\" }]\n",
    );
    assert!(
        error.starts_with("ferromq.toml:3: `composite_destinations[0].forward_to[0]")
            && error.contains("unknown field `filter`"),
        "{error}"
    );
    let error = error_of("[[composite_destinations]]\nname = \"A\"\nforward_to = [1]\n");
    assert!(
        error.starts_with("ferromq.toml:3: `composite_destinations[0].forward_to[0]`: ")
            && error.contains("a destination (\"queue://ORDERS.EU\") or a table"),
        "{error}"
    );
}

#[test]
fn validate_checks_composites_built_in_code() {
    let config = Config {
        composite_destinations: vec![CompositeDestinationConfig {
            name: queue("A"),
            forward_only: true,
            forward_to: vec![ForwardTarget { destination: queue("B,C"), selector: None }],
        }],
        ..Config::default()
    };
    assert_eq!(
        config.validate().map_err(|error| error.to_string()),
        Err("configuration: `composite_destinations[0].forward_to[0]`: `queue://B,C` contains `,`: \
             a composite and its targets need plain names, without wildcards or `,`"
            .to_owned())
    );
}
