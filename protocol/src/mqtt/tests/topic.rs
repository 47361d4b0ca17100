//! The topic helpers: name and filter syntax, matching (spec 4.7), shared subscriptions.

use crate::mqtt::topic::{
    matches, parse_shared_subscription, validate_topic_filter, validate_topic_name,
    SharedSubscription,
};
use crate::mqtt::TopicError;

#[test]
fn matching_table() {
    // (filter, name, matches), from the spec's examples in 4.7.1 and 4.7.2 and their edges.
    let table = [
        ("sport/tennis/player1/#", "sport/tennis/player1", true),
        ("sport/tennis/player1/#", "sport/tennis/player1/ranking", true),
        ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", true),
        ("sport/#", "sport", true),
        ("sport/#", "sports", false),
        ("#", "sport/tennis", true),
        ("#", "/", true),
        ("sport/tennis/+", "sport/tennis/player1", true),
        ("sport/tennis/+", "sport/tennis/player1/ranking", false),
        ("sport/tennis/+", "sport/tennis", false),
        ("sport/+", "sport", false),
        ("sport/+", "sport/", true),
        ("+", "sport", true),
        ("+", "/finance", false),
        ("+/+", "/finance", true),
        ("/+", "/finance", true),
        ("+/#", "/finance", true),
        ("/finance", "/finance", true),
        ("/finance", "finance", false),
        ("finance", "/finance", false),
        ("a/b", "a/b", true),
        ("a/b", "a/b/c", false),
        ("a/b/c", "a/b", false),
        ("A/b", "a/b", false),
        ("+/+/+", "a/b/c", true),
        ("a/+/c", "a//c", true),
        // Names starting with $ are not matched by a wildcard first level.
        ("#", "$SYS/broker/uptime", false),
        ("+/monitor/Clients", "$SYS/monitor/Clients", false),
        ("$SYS/#", "$SYS/broker/uptime", true),
        ("$SYS/monitor/+", "$SYS/monitor/Clients", true),
        ("$SYS", "$SYS", true),
        ("a/#", "a/$b", true),
    ];
    for (filter, name, expected) in table {
        assert_eq!(validate_topic_filter(filter), Ok(()), "{filter}");
        assert_eq!(validate_topic_name(name), Ok(()), "{name}");
        assert_eq!(matches(filter, name), expected, "{filter} against {name}");
    }
}

#[test]
fn topic_names_have_no_wildcards_and_are_not_empty() {
    for name in ["a", "/", "//", "a/b", "$SYS/x", "ü/€", " "] {
        assert_eq!(validate_topic_name(name), Ok(()), "{name}");
    }
    assert_eq!(validate_topic_name(""), Err(TopicError::Empty));
    assert_eq!(validate_topic_name("a/+"), Err(TopicError::WildcardInName));
    assert_eq!(validate_topic_name("a/#"), Err(TopicError::WildcardInName));
    assert_eq!(validate_topic_name("a+b"), Err(TopicError::WildcardInName));
    assert_eq!(validate_topic_name("a\0b"), Err(TopicError::NullCharacter));
    assert_eq!(validate_topic_name(&"a".repeat(65_536)), Err(TopicError::TooLong(65_536)));
    assert_eq!(validate_topic_name(&"a".repeat(65_535)), Ok(()));
}

#[test]
fn filter_wildcards_must_fill_their_level() {
    for filter in ["#", "+", "+/+", "/#", "a/#", "+/a/#", "a//+", "/", "$share/g/a"] {
        assert_eq!(validate_topic_filter(filter), Ok(()), "{filter}");
    }
    for filter in ["a#", "a/#/b", "#/a", "a/b#", "##"] {
        assert_eq!(
            validate_topic_filter(filter),
            Err(TopicError::MisplacedMultiLevelWildcard),
            "{filter}"
        );
    }
    for filter in ["a+", "a/+b", "+a/b", "++"] {
        assert_eq!(
            validate_topic_filter(filter),
            Err(TopicError::MisplacedSingleLevelWildcard),
            "{filter}"
        );
    }
    assert_eq!(validate_topic_filter(""), Err(TopicError::Empty));
    assert_eq!(validate_topic_filter("\0"), Err(TopicError::NullCharacter));
}

#[test]
fn shared_subscriptions_are_taken_apart() {
    assert_eq!(
        parse_shared_subscription("$share/consumer1/sport/tennis/+"),
        Ok(Some(SharedSubscription { group: "consumer1", filter: "sport/tennis/+" }))
    );
    assert_eq!(
        parse_shared_subscription("$share/g//finance"),
        Ok(Some(SharedSubscription { group: "g", filter: "/finance" }))
    );
    assert_eq!(
        parse_shared_subscription("$share/g/#"),
        Ok(Some(SharedSubscription { group: "g", filter: "#" }))
    );
    assert_eq!(parse_shared_subscription("sport/#"), Ok(None));
    assert_eq!(parse_shared_subscription("$share"), Ok(None));
    assert_eq!(parse_shared_subscription("$SYS/x"), Ok(None));
    assert_eq!(parse_shared_subscription("$share/"), Err(TopicError::InvalidShareName));
    assert_eq!(parse_shared_subscription("$share//a"), Err(TopicError::InvalidShareName));
    assert_eq!(parse_shared_subscription("$share/+/a"), Err(TopicError::InvalidShareName));
    assert_eq!(parse_shared_subscription("$share/g#/a"), Err(TopicError::InvalidShareName));
    assert_eq!(parse_shared_subscription("$share/g"), Err(TopicError::MissingSharedFilter));
    assert_eq!(parse_shared_subscription("$share/g/"), Err(TopicError::MissingSharedFilter));
    assert_eq!(
        parse_shared_subscription("$share/g/a#"),
        Err(TopicError::MisplacedMultiLevelWildcard)
    );
}
