//! The configuration file as written: keys and values with their positions, used to give every
//! error a line and a key.
//!
//! serde reports a byte span but no key; validation reports a key but no span. This module
//! answers both questions from a `toml_edit` document: which key is at a byte offset, and on
//! which line a key is. It also runs the checks that need the file's shape rather than its
//! values: unknown sections and keys (named with the keys that are known), connector URIs
//! (named by their position in the list, which serde cannot tell), and the shape of the
//! `[[virtual_topics]]` list.

use std::ops::Range;

use serde::de::{self, Deserialize, Deserializer, Visitor};
use toml_edit::{ImDocument, Item, Key, TableLike, Value};

use crate::sections::{
    BrokerConfig, DestinationDefaults, StoreConfig, TransportConfig, VirtualTopicConfig,
};
use crate::uri::ConnectorUri;
use crate::validate::Invalid;
use crate::{Config, ConfigError};

/// A parsed configuration file and its name.
pub(crate) struct Document<'a> {
    origin: &'a str,
    text: &'a str,
    document: ImDocument<&'a str>,
}

/// One step of a key path: a table key or an array index.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

impl<'a> Document<'a> {
    /// Parses the TOML syntax of `text`; errors are syntax errors, with a line but no key.
    pub(crate) fn parse(text: &'a str, origin: &'a str) -> Result<Self, ConfigError> {
        match ImDocument::parse(text) {
            Ok(document) => Ok(Document { origin, text, document }),
            Err(error) => {
                let line = error.span().map(|span| line_at(text, span.start));
                Err(ConfigError::new(origin, line, "", one_line(error.message())))
            }
        }
    }

    /// Refuses unknown sections and keys, sections that are not tables, lists that are not
    /// lists of tables or lack a required key, and connector URIs that do not parse: keys first,
    /// then connectors, each in file order.
    pub(crate) fn check_shape(&self) -> Result<(), ConfigError> {
        let root = self.document.as_item();
        for (name, key, section) in entries(root) {
            if let Some(list) = list_keys(name) {
                self.check_list(name, key, section, &list)?;
                continue;
            }
            let Some(known) = section_keys(name) else {
                let reason = match section {
                    Item::Table(_) => format!(
                        "unknown section [{name}] (known sections: {})",
                        known_list(root_keys())
                    ),
                    _ => format!(
                        "unknown key `{name}` at the top level (known sections: {})",
                        known_list(root_keys())
                    ),
                };
                return Err(self.error_at_key(
                    key,
                    path_text(&[Step::Key(name.to_owned())]),
                    reason,
                ));
            };
            if !is_table(section) {
                let reason = format!("must be a table ([{name}]), not {}", describe(section));
                return Err(self.error_at_key(key, name.to_owned(), reason));
            }
            for (field, field_key, _) in entries(section) {
                if !known.contains(&field) {
                    let path =
                        path_text(&[Step::Key(name.to_owned()), Step::Key(field.to_owned())]);
                    let reason = format!(
                        "unknown key `{field}` in [{name}] (known keys: {})",
                        known_list(known)
                    );
                    return Err(self.error_at_key(field_key, path, reason));
                }
            }
        }
        self.check_connectors()
    }

    /// Checks a top-level list of tables such as `[[virtual_topics]]`: written as `[[name]]`
    /// tables or as `name = [{ .. }, ..]`, each entry a table with only known keys and every
    /// required one.
    fn check_list(
        &self,
        name: &str,
        key: &Key,
        item: &Item,
        list: &ListKeys,
    ) -> Result<(), ConfigError> {
        let elements: Vec<ListElement> = match item {
            Item::ArrayOfTables(tables) => {
                tables.iter().map(|table| (table.span(), Ok(table as &dyn TableLike))).collect()
            }
            Item::Value(Value::Array(array)) => array
                .iter()
                .map(|element| {
                    let table = match element {
                        Value::InlineTable(table) => Ok(table as &dyn TableLike),
                        other => Err(with_article(other.type_name())),
                    };
                    (element.span(), table)
                })
                .collect(),
            other => {
                let reason =
                    format!("must be an array of tables ([[{name}]]), not {}", describe(other));
                return Err(self.error_at_key(
                    key,
                    path_text(&[Step::Key(name.to_owned())]),
                    reason,
                ));
            }
        };
        for (index, (span, table)) in elements.into_iter().enumerate() {
            let entry = [Step::Key(name.to_owned()), Step::Index(index)];
            let line = span.map(|span| line_at(self.text, span.start));
            let table = table.map_err(|found| {
                let reason = format!("expected a table ({}), not {found}", list.example);
                ConfigError::new(self.origin, line, path_text(&entry), reason)
            })?;
            for (field, field_key, _) in table_entries(table) {
                if !list.known.contains(&field) {
                    let mut path = entry.to_vec();
                    path.push(Step::Key(field.to_owned()));
                    let reason = format!(
                        "unknown key `{field}` in [[{name}]] (known keys: {})",
                        known_list(list.known)
                    );
                    return Err(self.error_at_key(field_key, path_text(&path), reason));
                }
            }
            for (required, meaning) in list.required {
                if !table.contains_key(required) {
                    let reason = format!("missing key `{required}` ({meaning})");
                    return Err(ConfigError::new(self.origin, line, path_text(&entry), reason));
                }
            }
        }
        Ok(())
    }

    /// Parses each `transport.connectors` element here, where its index and line are known.
    fn check_connectors(&self) -> Result<(), ConfigError> {
        let Some((key, item)) =
            entry(self.document.as_item(), "transport").and_then(|(_, t)| entry(t, "connectors"))
        else {
            return Ok(());
        };
        let Some(Value::Array(array)) = item.as_value() else {
            let reason = format!(
                "expected a list of connector URIs, e.g. [\"stomp://127.0.0.1:61613\"], not {}",
                describe(item)
            );
            return Err(self.error_at_key(key, "transport.connectors".to_owned(), reason));
        };
        for (index, element) in array.iter().enumerate() {
            let path = format!("transport.connectors[{index}]");
            let line = element.span().map(|span| line_at(self.text, span.start));
            let reason = match element {
                Value::String(text) => match text.value().parse::<ConnectorUri>() {
                    Ok(_) => continue,
                    Err(error) => error.to_string(),
                },
                other => format!(
                    "expected a connector URI string, e.g. \"stomp://127.0.0.1:61613\", not {}",
                    with_article(other.type_name())
                ),
            };
            return Err(ConfigError::new(self.origin, line, path, reason));
        }
        Ok(())
    }

    /// Turns a serde error (which knows a byte span) into one that names a line and a key.
    pub(crate) fn serde_error(&self, error: &toml::de::Error) -> ConfigError {
        let offset = error.span().map(|span| span.start);
        let line = offset.map(|offset| line_at(self.text, offset));
        let key = offset.and_then(|offset| self.path_at(offset)).unwrap_or_default();
        ConfigError::new(self.origin, line, key, one_line(error.message()))
    }

    /// Turns a broken validation rule into an error on the line of the key it blames.
    pub(crate) fn invalid(&self, invalid: Invalid) -> ConfigError {
        let candidates = std::iter::once(&invalid.key).chain(invalid.or_else.as_ref());
        for key in candidates {
            if let Some(line) = self.line_of(key) {
                return ConfigError::new(self.origin, Some(line), key.as_str(), invalid.reason);
            }
        }
        ConfigError::new(self.origin, None, invalid.key, invalid.reason)
    }

    fn error_at_key(&self, key: &Key, path: String, reason: String) -> ConfigError {
        let line = key.span().map(|span| line_at(self.text, span.start));
        ConfigError::new(self.origin, line, path, reason)
    }

    /// The line of the key at `path` (`transport.max_frame_size`), of the element at an
    /// indexed path (`transport.connectors[1]`, `virtual_topics[0]`: the entry's `[[..]]`
    /// header), or of a key in such an element (`virtual_topics[0].name`); `None` when the file
    /// does not have it.
    pub(crate) fn line_of(&self, path: &str) -> Option<usize> {
        // The table the next key is looked up in, and the item the last key led to.
        let mut table = self.document.as_item().as_table_like();
        let mut item = None;
        let mut span = None;
        for step in parse_path(path) {
            match step {
                Step::Key(name) => {
                    let (key, value) = table?.get_key_value(&name)?;
                    span = key.span();
                    table = value.as_table_like();
                    item = Some(value);
                }
                Step::Index(index) => {
                    if let Item::ArrayOfTables(tables) = item? {
                        let element = tables.get(index)?;
                        span = element.span();
                        table = Some(element as &dyn TableLike);
                    } else {
                        let element = item?.as_array()?.get(index)?;
                        span = element.span();
                        table = element.as_inline_table().map(|inline| inline as &dyn TableLike);
                    }
                    item = None;
                }
            }
        }
        span.map(|span| line_at(self.text, span.start))
    }

    /// The dotted path of the innermost key or value whose text contains byte `offset`.
    pub(crate) fn path_at(&self, offset: usize) -> Option<String> {
        let root = self.document.as_item().as_table_like()?;
        let mut path = Vec::new();
        find_in_table(root, offset, &mut path).then(|| path_text(&path))
    }
}

/// Descends into `table`, appending to `path` the steps that lead to `offset`.
fn find_in_table(table: &dyn TableLike, offset: usize, path: &mut Vec<Step>) -> bool {
    for (name, key, value) in table_entries(table) {
        path.push(Step::Key(name.to_owned()));
        if contains(key.span(), offset) || find_in_item(value, offset, path) {
            return true;
        }
        path.pop();
    }
    false
}

fn find_in_item(item: &Item, offset: usize, path: &mut Vec<Step>) -> bool {
    match item {
        Item::Value(Value::Array(array)) => {
            for (index, element) in array.iter().enumerate() {
                path.push(Step::Index(index));
                let inside = element
                    .as_inline_table()
                    .is_some_and(|inline| find_in_table(inline, offset, path));
                if inside || contains(element.span(), offset) {
                    return true;
                }
                path.pop();
            }
            contains(array.span(), offset)
        }
        Item::Value(value) => {
            let inside =
                value.as_inline_table().is_some_and(|inline| find_in_table(inline, offset, path));
            inside || contains(value.span(), offset)
        }
        Item::Table(table) => find_in_table(table, offset, path) || contains(table.span(), offset),
        Item::ArrayOfTables(tables) => {
            for (index, table) in tables.iter().enumerate() {
                path.push(Step::Index(index));
                if find_in_table(table, offset, path) || contains(table.span(), offset) {
                    return true;
                }
                path.pop();
            }
            contains(tables.span(), offset)
        }
        Item::None => false,
    }
}

fn contains(span: Option<Range<usize>>, offset: usize) -> bool {
    span.is_some_and(|span| span.contains(&offset) || span.start == offset)
}

/// The entries of a table or inline table, in file order, with their keys (which carry spans);
/// nothing for any other item.
fn entries(item: &Item) -> Vec<(&str, &Key, &Item)> {
    item.as_table_like().map(table_entries).unwrap_or_default()
}

fn table_entries(table: &dyn TableLike) -> Vec<(&str, &Key, &Item)> {
    table
        .iter()
        .filter_map(|(name, _)| table.get_key_value(name).map(|(key, value)| (name, key, value)))
        .collect()
}

fn entry<'i>(item: &'i Item, name: &str) -> Option<(&'i Key, &'i Item)> {
    item.as_table_like()?.get_key_value(name)
}

fn is_table(item: &Item) -> bool {
    item.is_table_like()
}

/// "an integer", "a string"...: what was found where something else was expected.
fn describe(item: &Item) -> String {
    match item {
        Item::Value(value) => with_article(value.type_name()),
        Item::ArrayOfTables(_) => "an array of tables".to_owned(),
        Item::Table(_) => "a table".to_owned(),
        Item::None => "nothing".to_owned(),
    }
}

fn with_article(type_name: &str) -> String {
    let article = if type_name.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
    format!("{article} {type_name}")
}

/// `transport.connectors[1]`; keys that are not bare TOML keys are quoted.
fn path_text(path: &[Step]) -> String {
    let mut text = String::new();
    for step in path {
        match step {
            Step::Key(name) => {
                if !text.is_empty() {
                    text.push('.');
                }
                let bare = !name.is_empty()
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                if bare {
                    text.push_str(name);
                } else {
                    text.push_str(&format!("{name:?}"));
                }
            }
            Step::Index(index) => text.push_str(&format!("[{index}]")),
        }
    }
    text
}

/// The inverse of [`path_text`] for the paths this crate builds (bare keys only).
fn parse_path(path: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    for part in path.split('.') {
        let (name, indexes) = part.split_once('[').map_or((part, ""), |(name, rest)| (name, rest));
        steps.push(Step::Key(name.to_owned()));
        for index in indexes.split('[') {
            if let Ok(index) = index.trim_end_matches(']').parse() {
                steps.push(Step::Index(index));
            }
        }
    }
    steps
}

/// 1-based line of byte `offset` in `text`.
pub(crate) fn line_at(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end].iter().filter(|&&byte| byte == b'\n').count() + 1
}

/// toml's messages can span lines ("invalid table header\nexpected `.`, `]`").
fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message.lines().map(str::trim).filter(|line| !line.is_empty()).collect();
    lines.join("; ")
}

fn known_list(keys: &[&str]) -> String {
    keys.join(", ")
}

fn root_keys() -> &'static [&'static str] {
    keys_of::<Config>()
}

/// The keys allowed in a top-level section, or `None` for an unknown section.
fn section_keys(section: &str) -> Option<&'static [&'static str]> {
    match section {
        "broker" => Some(keys_of::<BrokerConfig>()),
        "transport" => Some(keys_of::<TransportConfig>()),
        "store" => Some(keys_of::<StoreConfig>()),
        "destinations" => Some(keys_of::<DestinationDefaults>()),
        "dead_letter" => Some(keys_of::<crate::DeadLetterConfig>()),
        "admin" => Some(keys_of::<crate::AdminConfig>()),
        "tls" => Some(keys_of::<crate::TlsConfig>()),
        "authentication" => Some(keys_of::<crate::AuthenticationConfig>()),
        _ => None,
    }
}

/// One entry of a top-level list: its span, and the entry as a table or, when it is not one,
/// what it is instead ("a string").
type ListElement<'a> = (Option<Range<usize>>, Result<&'a dyn TableLike, String>);

/// The keys of the entries of a top-level list of tables.
struct ListKeys {
    /// Every key an entry may have.
    known: &'static [&'static str],
    /// The keys an entry must have, each with what it means (for the error when it is missing).
    required: &'static [(&'static str, &'static str)],
    /// An entry as an inline table, for the error when one is not a table.
    example: &'static str,
}

/// The keys of the entries of a top-level list, or `None` when `name` is not one.
fn list_keys(name: &str) -> Option<ListKeys> {
    match name {
        "virtual_topics" => Some(ListKeys {
            known: keys_of::<VirtualTopicConfig>(),
            required: &[(
                "name",
                "the topic name or pattern to make virtual, e.g. name = \"VirtualTopic.>\"",
            )],
            example: "e.g. { name = \"VirtualTopic.>\", prefix = \"Consumer.*.\" }",
        }),
        "composite_destinations" => Some(ListKeys {
            known: keys_of::<crate::CompositeDestinationConfig>(),
            required: &[
                ("name", "the composite queue or topic, e.g. name = \"queue://ORDERS.ALL\""),
                ("forward_to", "its targets, e.g. forward_to = [\"queue://ORDERS.EU\"]"),
            ],
            example: "e.g. { name = \"queue://ORDERS.ALL\", forward_to = [\"queue://ORDERS.EU\"] }",
        }),
        "users" => Some(ListKeys {
            known: keys_of::<crate::UserEntry>(),
            required: &[
                ("name", "the user name, e.g. name = \"orders-service\""),
                ("password", "its Argon2 hash, made by `ferromq passwd`"),
            ],
            example: "e.g. { name = \"orders-service\", password = \"$argon2id$...\", groups = [\"users\"] }",
        }),
        "authorization" => Some(ListKeys {
            known: keys_of::<crate::AuthorizationEntry>(),
            required: &[],
            example: "e.g. { queue = \">\", read = [\"users\"], write = [\"users\"], admin = [\"admins\"] }",
        }),
        "policies" => Some(ListKeys {
            known: keys_of::<crate::PolicyEntry>(),
            required: &[],
            example: "e.g. { queue = \">\", memory_limit = \"128 mb\" }",
        }),
        _ => None,
    }
}

/// The field names serde's derived `Deserialize` accepts for struct `T` (after renames), so
/// the lists in error messages can never drift from the structs.
fn keys_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    // The probe always fails once it has seen the field list; the error is of no interest.
    let _ = T::deserialize(FieldProbe(&mut fields));
    fields
}

/// A deserializer that records the field list of the struct asked of it and stops there.
struct FieldProbe<'f>(&'f mut &'static [&'static str]);

impl<'de> Deserializer<'de> for FieldProbe<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(de::Error::custom("probe"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn section_keys_come_from_the_structs() {
        assert_eq!(
            root_keys(),
            [
                "broker",
                "transport",
                "store",
                "destinations",
                "dead_letter",
                "admin",
                "tls",
                "authentication",
                "users",
                "authorization",
                "virtual_topics",
                "composite_destinations",
                "policies"
            ]
        );
        assert_eq!(
            section_keys("store"),
            Some(
                &[
                    "kind",
                    "sync",
                    "sync_interval_ms",
                    "max_size",
                    "segment_size",
                    "checkpoint_bytes",
                    "checkpoint_interval_ms",
                    "compaction_threshold",
                    "refuse_on_corruption",
                    "engine",
                    "url",
                    "lease_ms",
                    "lease_renew_ms"
                ][..]
            )
        );
        assert_eq!(section_keys("cluster"), None);
        assert_eq!(section_keys("virtual_topics"), None);
        assert_eq!(
            list_keys("virtual_topics").map(|list| list.known),
            Some(&["name", "prefix"][..])
        );
        assert_eq!(
            list_keys("composite_destinations").map(|list| list.known),
            Some(&["name", "forward_only", "forward_to"][..])
        );
        assert!(list_keys("broker").is_none());
    }

    #[test]
    fn paths_print_and_parse_back() {
        let steps =
            vec![Step::Key("transport".into()), Step::Key("connectors".into()), Step::Index(1)];
        assert_eq!(path_text(&steps), "transport.connectors[1]");
        assert_eq!(parse_path("transport.connectors[1]"), steps);
        assert_eq!(path_text(&[Step::Key("a b".into())]), "\"a b\"");
    }

    #[test]
    fn lines_count_from_one() {
        assert_eq!(line_at("a\nb\nc", 0), 1);
        assert_eq!(line_at("a\nb\nc", 2), 2);
        assert_eq!(line_at("a\nb\nc", 99), 3);
    }

    #[test]
    fn keys_and_values_are_found_by_offset_and_path() -> Result<(), ConfigError> {
        let text = "[transport]\nmax_connections = 5\nconnectors = [\n  \"stomp://a:1\",\n  \"stomp://b:2\",\n]\n";
        let document = Document::parse(text, "t.toml")?;
        let offset = text.find("\"stomp://b").unwrap_or_default() + 3;
        assert_eq!(document.path_at(offset).as_deref(), Some("transport.connectors[1]"));
        assert_eq!(
            document.path_at(text.find("= 5").unwrap_or_default() + 2).as_deref(),
            Some("transport.max_connections")
        );
        assert_eq!(document.line_of("transport.connectors[1]"), Some(5));
        assert_eq!(document.line_of("transport.max_connections"), Some(2));
        assert_eq!(document.line_of("transport.max_frame_size"), None);
        Ok(())
    }

    #[test]
    fn list_entries_are_found_by_offset_and_path() -> Result<(), ConfigError> {
        let text = "[[virtual_topics]]\nname = \"A\"\n\n[[virtual_topics]]\nname = \"B\"\nprefix = \"Q.\"\n";
        let document = Document::parse(text, "t.toml")?;
        let offset = text.find("\"Q.").unwrap_or_default() + 1;
        assert_eq!(document.path_at(offset).as_deref(), Some("virtual_topics[1].prefix"));
        assert_eq!(
            document.path_at(text.find("[[").unwrap_or_default()).as_deref(),
            Some("virtual_topics[0]")
        );
        assert_eq!(document.line_of("virtual_topics[1]"), Some(4));
        assert_eq!(document.line_of("virtual_topics[1].prefix"), Some(6));
        assert_eq!(document.line_of("virtual_topics[0].prefix"), None);
        assert_eq!(document.line_of("virtual_topics[2]"), None);

        let text =
            "virtual_topics = [\n  { name = \"A\" },\n  { name = \"B\", prefix = \"Q.\" },\n]\n";
        let document = Document::parse(text, "t.toml")?;
        let offset = text.find("\"Q.").unwrap_or_default() + 1;
        assert_eq!(document.path_at(offset).as_deref(), Some("virtual_topics[1].prefix"));
        assert_eq!(document.line_of("virtual_topics[1].prefix"), Some(3));
        assert_eq!(document.line_of("virtual_topics[0]"), Some(2));
        Ok(())
    }

    #[test]
    fn the_example_file_has_every_key() -> Result<(), ConfigError> {
        let text = include_str!("../ferromq.example.toml");
        let document = Document::parse(text, "ferromq.example.toml")?;
        for section in root_keys() {
            let (keys, entry) = match (section_keys(section), list_keys(section)) {
                (Some(keys), _) => (keys, section.to_string()),
                // A list that is empty by default shows a commented-out entry.
                (None, Some(list)) if document.line_of(section).is_none() => {
                    for key in list.known {
                        let shown = text.contains(&format!("\n# {key} = "));
                        assert!(shown, "ferromq.example.toml lacks {section}.{key}");
                    }
                    continue;
                }
                // A list shows its default entries; the first has every key.
                (None, Some(list)) => (list.known, format!("{section}[0]")),
                (None, None) => panic!("no keys for [{section}]"),
            };
            for key in keys {
                let path = format!("{entry}.{key}");
                assert!(document.line_of(&path).is_some(), "ferromq.example.toml lacks {path}");
            }
        }
        Ok(())
    }
}
