use std::sync::Arc;

use store::{DeliveryMode, Destination, Message, MessageId, PropertyValue};

use super::{Selector, SelectorError};

/// The message every table case is evaluated on.
fn message() -> Message {
    let mut message = Message::new(MessageId(7), "ID:test-1:1:1:7", Destination::queue("ORDERS"));
    message.headers.priority = 6;
    message.headers.message_type = Some("car".into());
    message.headers.correlation_id = Some("corr-42".into());
    message.headers.timestamp = 1_700_000_000_000;
    message.headers.group_id = Some("group-a".into());
    message.headers.group_seq = 3;
    let properties: [(&str, PropertyValue); 14] = [
        ("color", PropertyValue::String("red".into())),
        ("name", PropertyValue::String("it's".into())),
        ("path", PropertyValue::String("50%_off\\now".into())),
        ("weight", PropertyValue::Int(10)),
        ("big", PropertyValue::Long(5_000_000_000)),
        ("small", PropertyValue::Byte(-2)),
        ("short", PropertyValue::Short(300)),
        ("price", PropertyValue::Double(2.5)),
        ("ratio", PropertyValue::Float(0.5)),
        ("flag", PropertyValue::Bool(true)),
        ("off", PropertyValue::Bool(false)),
        ("text_number", PropertyValue::String("5".into())),
        ("nothing", PropertyValue::Null),
        ("Case", PropertyValue::String("upper".into())),
    ];
    for (name, value) in properties {
        message.properties.insert(Arc::from(name), value);
    }
    message
}

#[track_caller]
fn check(selector: &str, expected: bool) {
    let parsed =
        Selector::parse(selector).unwrap_or_else(|e| panic!("`{selector}` should parse, but: {e}"));
    assert_eq!(parsed.matches(&message()), expected, "selector `{selector}`");
}

#[test]
fn conformance_table() {
    let cases: &[(&str, bool)] = &[
        // Comparisons and numeric promotion.
        ("weight = 10", true),
        ("weight <> 10", false),
        ("weight > 9", true),
        ("weight >= 10", true),
        ("weight < 10", false),
        ("weight <= 10.0", true),
        ("weight = 10.0", true),
        ("price = 2.5", true),
        ("price > 2", true),
        ("ratio = 0.5", true),
        ("big > 4000000000", true),
        ("big = 5000000000L", true),
        ("small = -2", true),
        ("short BETWEEN 299 AND 301", true),
        ("weight = 0xA", true),
        ("weight = 012", true),
        ("price = 25E-1", true),
        ("price < .3e1", true),
        ("weight = 1e1", true),
        // Arithmetic and precedence.
        ("weight + 2 * 3 = 16", true),
        ("(weight + 2) * 3 = 36", true),
        ("weight - -5 = 15", true),
        ("-weight = -10", true),
        ("+weight = 10", true),
        ("weight / 4 = 2.5", true),
        ("weight / 0 > 1000", true),
        ("price * 2 = weight / 2", true),
        ("big - 1 = 4999999999", true),
        // Strings.
        ("color = 'red'", true),
        ("color = 'RED'", false),
        ("color <> 'blue'", true),
        ("name = 'it''s'", true),
        ("Case = 'upper'", true),
        // Booleans.
        ("flag", true),
        ("off", false),
        ("flag = TRUE", true),
        ("off = false", true),
        ("flag AND NOT off", true),
        ("TRUE", true),
        ("FALSE OR flag", true),
        // Unlike types are false, not errors.
        ("text_number = 5", false),
        ("text_number <> 5", false),
        ("NOT (text_number = 5)", true),
        ("color = 1", false),
        ("flag = 1", false),
        ("color > weight", false),
        // BETWEEN with mixed exact and approximate bounds.
        ("weight BETWEEN 9.5 AND 10", true),
        ("weight BETWEEN 10 AND 10", true),
        ("price BETWEEN 2 AND 3", true),
        ("price NOT BETWEEN 2 AND 3", false),
        ("weight NOT BETWEEN 11 AND 20", true),
        ("weight BETWEEN 11 AND 9", false),
        ("missing BETWEEN 1 AND 2", false),
        ("missing NOT BETWEEN 1 AND 2", false),
        // IN.
        ("color IN ('red', 'green')", true),
        ("color IN ('green')", false),
        ("color NOT IN ('green', 'blue')", true),
        ("missing IN ('a')", false),
        ("missing NOT IN ('a')", false),
        ("weight IN ('10')", false),
        // LIKE with _, % and ESCAPE.
        ("color LIKE 'r%'", true),
        ("color LIKE '%e%'", true),
        ("color LIKE 'r_d'", true),
        ("color LIKE 'r_'", false),
        ("color LIKE '___'", true),
        ("color LIKE '%'", true),
        ("color NOT LIKE 'b%'", true),
        ("color LIKE 'R%'", false),
        ("path LIKE '50\\%%' ESCAPE '\\'", true),
        ("path LIKE '50!%!_off%' ESCAPE '!'", true),
        ("path LIKE '5!%%' ESCAPE '!'", false),
        ("path LIKE '%\\\\now' ESCAPE '\\'", true),
        ("name LIKE 'it''_'", true),
        ("missing LIKE '%'", false),
        ("missing NOT LIKE '%'", false),
        ("weight LIKE '1%'", false),
        // IS [NOT] NULL.
        ("missing IS NULL", true),
        ("nothing IS NULL", true),
        ("color IS NULL", false),
        ("color IS NOT NULL", true),
        ("JMSType IS NOT NULL", true),
        // NULL handling.
        ("missing = 1", false),
        ("missing <> 1", false),
        ("NOT (missing = 1)", false),
        ("missing + 1 = 1", false),
        ("missing = 1 OR color = 'red'", true),
        ("missing = 1 AND color = 'red'", false),
        ("NOT (missing = 1 AND color = 'blue')", true),
        // Headers.
        ("JMSPriority = 6", true),
        ("JMSPriority > 4", true),
        ("JMSType = 'car'", true),
        ("JMSCorrelationID = 'corr-42'", true),
        ("JMSMessageID = 'ID:test-1:1:1:7'", true),
        ("JMSTimestamp > 1600000000000", true),
        ("JMSDeliveryMode = 'PERSISTENT'", true),
        ("JMSDeliveryMode = 'NON_PERSISTENT'", false),
        ("JMSDeliveryMode = 2", true),
        ("JMSExpiration = 0", true),
        ("JMSXGroupID = 'group-a' AND JMSXGroupSeq = 3", true),
        ("JMSDestination = 'queue://ORDERS'", true),
        ("JMSReplyTo IS NULL", true),
        // Keywords are case-insensitive, identifiers are not.
        ("color = 'red' and weight between 1 and 20", true),
        ("COLOR = 'red'", false),
        ("color is not null", true),
        ("not color in ('blue')", true),
        // Precedence: NOT binds tighter than AND, AND tighter than OR.
        ("FALSE AND FALSE OR TRUE", true),
        ("TRUE OR TRUE AND FALSE", true),
        ("NOT FALSE AND FALSE", false),
        ("NOT (FALSE AND FALSE)", true),
        ("(TRUE OR TRUE) AND FALSE", false),
    ];
    assert!(cases.len() >= 60);
    for (selector, expected) in cases {
        check(selector, *expected);
    }
}

#[test]
fn three_valued_logic_truth_tables() {
    // `missing = 1` is unknown; TRUE and FALSE are literals.
    let values = [("TRUE", Some(true)), ("FALSE", Some(false)), ("(missing = 1)", None)];
    let message = message();
    let truth = |selector: &str| -> Option<bool> {
        let matches = |s: &str| Selector::parse(s).expect("parses").matches(&message);
        // A condition is unknown when neither it nor its negation matches.
        match (matches(selector), matches(&format!("NOT ({selector})"))) {
            (true, false) => Some(true),
            (false, true) => Some(false),
            (false, false) => None,
            (true, true) => panic!("`{selector}` and its negation both match"),
        }
    };
    for (a, av) in values {
        assert_eq!(truth(&format!("NOT {a}")), av.map(|v| !v), "NOT {a}");
        for (b, bv) in values {
            let and = match (av, bv) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            };
            let or = match (av, bv) {
                (Some(true), _) | (_, Some(true)) => Some(true),
                (Some(false), Some(false)) => Some(false),
                _ => None,
            };
            assert_eq!(truth(&format!("{a} AND {b}")), and, "{a} AND {b}");
            assert_eq!(truth(&format!("{a} OR {b}")), or, "{a} OR {b}");
        }
    }
}

#[test]
fn delivery_mode_reads_as_jms_names_and_activemq_numbers() {
    let mut message = message();
    message.headers.delivery_mode = DeliveryMode::NonPersistent;
    for (selector, expected) in [
        ("JMSDeliveryMode = 'NON_PERSISTENT'", true),
        ("JMSDeliveryMode = 1", true),
        ("JMSDeliveryMode IN ('NON_PERSISTENT')", true),
        ("JMSDeliveryMode = 'PERSISTENT'", false),
    ] {
        assert_eq!(Selector::parse(selector).expect("parses").matches(&message), expected);
    }
}

#[test]
fn string_conversion_compares_text_properties_as_numbers() {
    let message = message();
    let converting = |s: &str| Selector::parse(s).expect("parses").converting_strings();
    assert!(converting("text_number = 5").matches(&message));
    assert!(converting("text_number > 4 AND text_number < 5.5").matches(&message));
    let mut decimal = message.clone();
    decimal.properties.insert("p".into(), PropertyValue::String("7.5".into()));
    assert!(converting("p < 10 AND p > 7").matches(&decimal));
    assert!(converting("text_number + 1 = 6").matches(&message));
    assert!(!converting("color > 4").matches(&message), "unparsable text is unknown");
    assert!(!converting("NOT (color > 4)").matches(&message));
    assert!(converting("color = 'red'").matches(&message));
    // The prefix survives in the text (a stored durable subscription keeps the mode), and
    // parsing that text again converts too.
    let text = converting("text_number = 5").text().to_owned();
    assert_eq!(text, "convert_string_expressions:text_number = 5");
    assert!(Selector::parse(&text).expect("parses").matches(&message));
    assert!(!Selector::parse("text_number = 5").expect("parses").matches(&message));
}

#[test]
fn blank_selectors_match_everything_and_are_no_selector() {
    assert!(Selector::parse("").expect("parses").matches(&message()));
    assert!(Selector::parse("   ").expect("parses").matches(&message()));
    assert!(Selector::parse_optional(Some("  \t")).expect("parses").is_none());
    assert!(Selector::parse_optional(None).expect("parses").is_none());
    assert!(Selector::parse_optional(Some("a = 1")).expect("parses").is_some());
}

#[track_caller]
fn refused(selector: &str) -> SelectorError {
    match Selector::parse(selector) {
        Ok(parsed) => panic!("`{selector}` should be refused, parsed as {parsed:?}"),
        Err(error) => error,
    }
}

#[test]
fn invalid_selectors_say_where_and_why() {
    let error = refused("color = ");
    assert_eq!(
        error.to_string(),
        "invalid selector at column 9: expected an identifier, a literal or `(`, found the \
         end of the selector"
    );
    let error = refused("color == 'red'");
    assert!(matches!(error, SelectorError::Syntax { column: 8, .. }), "{error}");
    let error = refused("color = 'red");
    assert!(error.to_string().contains("unterminated string literal"), "{error}");
    assert!(matches!(error, SelectorError::Lexical { column: 9, .. }));
    let error = refused("a = 1 b");
    assert!(error.to_string().contains("found identifier `b`"), "{error}");
    assert!(refused("a # 1").to_string().contains("unexpected character `#`"));
    assert!(refused("(a = 1").to_string().contains("expected `)`"));
    assert!(refused("a IN ()").to_string().contains("a string literal in the IN list"));
    assert!(refused("a IN ('x' 'y')").to_string().contains("`,` or `)`"));
    assert!(refused("a IN (1, 2)").to_string().contains("string literal"));
    assert!(refused("a LIKE 5").to_string().contains("pattern after LIKE"));
    assert!(refused("a LIKE 'x' ESCAPE 'ab'").to_string().contains("exactly one character"));
    assert!(refused("a LIKE 'x!' ESCAPE '!'").to_string().contains("ends with its escape"));
    assert!(refused("a BETWEEN 1").to_string().contains("AND between the bounds"));
    assert!(refused("a IS 5").to_string().contains("NULL after IS"));
    assert!(refused("a = NULL").to_string().contains("IS NULL"));
    assert!(refused("a NOT 5").to_string().contains("found `NOT`"));
    assert!(refused("AND").to_string().contains("found `AND`"));
    assert!(refused("99999999999999999999 = a").to_string().contains("out of range"));
    assert!(refused("a = 09").to_string().contains("octal"));
    // ActiveMQ's static checks.
    assert!(refused("5").to_string().contains("not a condition"));
    assert!(refused("'red'").to_string().contains("not a condition"));
    assert!(refused("a + 1").to_string().contains("not a condition"));
    assert!(refused("a = 1 AND 5").to_string().contains("not a condition"));
    assert!(refused("'abc' < a").to_string().contains("only numbers can be compared with `<`"));
    assert!(refused("a >= TRUE").to_string().contains("only numbers"));
    assert!(refused("a + 'x' = 1").to_string().contains("needs numbers"));
    assert!(refused("'x' BETWEEN 1 AND 2").to_string().contains("BETWEEN needs numbers"));
    assert!(refused("NOT 5").to_string().contains("not a condition"));
}

#[test]
fn deep_nesting_is_refused_not_a_stack_overflow() {
    for depth in [65, 1_000, 100_000] {
        let parens = format!("{}a = 1{}", "(".repeat(depth), ")".repeat(depth));
        assert!(matches!(refused(&parens), SelectorError::TooDeep { .. }));
        let nots = format!("{}a", "NOT ".repeat(depth));
        assert!(matches!(refused(&nots), SelectorError::TooDeep { .. }));
        let minus = format!("{}a = 1", "- ".repeat(depth));
        assert!(matches!(refused(&minus), SelectorError::TooDeep { .. }));
        let sum = format!("a{} = 1", " + a".repeat(depth));
        assert!(matches!(refused(&sum), SelectorError::TooDeep { .. }));
    }
    // Nesting within the limit is fine, and long AND/OR chains stay flat.
    let parens = format!("{}color = 'red'{}", "(".repeat(30), ")".repeat(30));
    check(&parens, true);
    let chain = vec!["weight = 1"; 10_000].join(" OR ") + " OR color = 'red'";
    check(&chain, true);
    let chain = vec!["weight = 10"; 10_000].join(" AND ");
    check(&chain, true);
}

#[test]
fn like_handles_backtracking_and_unicode() {
    let mut message = message();
    message.properties.insert("s".into(), PropertyValue::String("ab€cab€cabd".into()));
    for (pattern, expected) in [
        ("%ab_", true),
        ("%ab€c", false),
        ("a%b%d", true),
        ("%€%€%", true),
        ("ab€c%", true),
        ("_b€%d", true),
        ("%%%", true),
        ("", false),
    ] {
        let selector = Selector::parse(&format!("s LIKE '{pattern}'")).expect("parses");
        assert_eq!(selector.matches(&message), expected, "LIKE '{pattern}'");
    }
    message.properties.insert("e".into(), PropertyValue::String(String::new().into()));
    assert!(Selector::parse("e LIKE ''").expect("parses").matches(&message));
    assert!(Selector::parse("e LIKE '%'").expect("parses").matches(&message));
    assert!(!Selector::parse("e LIKE '_'").expect("parses").matches(&message));
}
