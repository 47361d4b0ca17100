//! What `ferromq browse`, `ferromq purge` and `ferromq query` share: the admin endpoint they
//! go through (`--url`, `--user`, `--password`, `--trustStore`, as `ferromq dstat`), ActiveMQ's
//! `--msgsel` lists turned into one SQL 92 selector, its `*`/`?` name wildcards, and the
//! admin API's JSON types they read (the endpoint's own, `broker::admin`).

use anyhow::Context;
use broker::admin::{AdminClient, AdminClientError};

/// The admin endpoint of the running broker and how to log in to it.
#[derive(Debug, clap::Args)]
pub struct EndpointArgs {
    /// The running broker's admin endpoint (its `[admin] bind`).
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8161")]
    url: String,
    /// For an https:// URL (`[admin] tls`): a PEM file of the authorities the endpoint's
    /// certificate must chain to (default: the system's).
    #[arg(long = "trustStore", value_name = "PEM")]
    trust_store: Option<std::path::PathBuf>,
    /// A user of `[admin] groups`, when the broker has `[authentication]` enabled (HTTP
    /// Basic: use an https:// endpoint beyond this host). `--jmxuser` is read as this too.
    #[arg(long, alias = "jmxuser")]
    user: Option<String>,
    /// The user's password (`--jmxpassword` too).
    #[arg(long, alias = "jmxpassword")]
    password: Option<String>,
}

impl EndpointArgs {
    /// The client of the endpoint, logged in when `--user` is given.
    pub fn client(&self) -> anyhow::Result<AdminClient> {
        let credentials =
            self.user.clone().map(|user| (user, self.password.clone().unwrap_or_default()));
        Ok(AdminClient::new(&self.url)
            .map_err(one_line)?
            .with_trust_store(self.trust_store.clone())
            .with_credentials(credentials))
    }
}

/// An [`AdminClientError`] as one message: its text already ends with its cause, so it is
/// printed once, not once more as the `{:#}` chain's next link.
pub fn one_line(error: AdminClientError) -> anyhow::Error {
    anyhow::anyhow!("{error}")
}

/// The runtime a command's requests run on.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// `segment` percent-encoded for a path: everything but RFC 3986's unreserved characters.
pub fn encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(byte as char)
            }
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

/// `/api/destinations/queue/NAME`.
pub fn queue_path(name: &str) -> String {
    format!("/api/destinations/queue/{}", encode(name))
}

/// A queue named as ActiveMQ's tools accept it: `NAME`, `queue:NAME` or `queue://NAME`. A
/// topic is refused: browse and purge work on queues.
pub fn queue_name(argument: &str) -> anyhow::Result<&str> {
    let lower = argument.to_ascii_lowercase();
    for prefix in ["queue://", "queue:"] {
        if lower.starts_with(prefix) {
            return non_empty(&argument[prefix.len()..], argument);
        }
    }
    if lower.starts_with("topic:") {
        anyhow::bail!("{argument} is a topic: a topic keeps no messages of its own, name a queue");
    }
    non_empty(argument, argument)
}

fn non_empty<'a>(name: &'a str, argument: &str) -> anyhow::Result<&'a str> {
    anyhow::ensure!(!name.is_empty(), "`{argument}` names no queue");
    Ok(name)
}

/// True if `text` matches `pattern`, where `*` stands for any run of characters and `?` for
/// one (the JMX-style wildcards of ActiveMQ's `purge FOO.*` and `query -QQueue=FOO*`).
pub fn wildcard_match(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    // Iterative matching with one backtrack point: linear in practice, never exponential.
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, t));
                p += 1;
            }
            Some('?') => {
                p += 1;
                t += 1;
            }
            Some(c) if *c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((star_p, star_t)) => {
                    p = star_p + 1;
                    t = star_t + 1;
                    star = Some((star_p, star_t + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

/// True if `pattern` has a wildcard.
pub fn has_wildcard(pattern: &str) -> bool {
    pattern.contains(['*', '?'])
}

/// ActiveMQ's `--msgsel` values as one SQL 92 selector. Each value is a comma-separated list
/// of conditions (commas inside quotes or parentheses belong to a condition), and every
/// condition must hold. As in ActiveMQ, `field='text'` with `*` or `?` in the text is a
/// wildcard query: it becomes `field LIKE 'text'` with `%` and `_`.
pub fn selector_of(msgsel: &[String]) -> Option<String> {
    let conditions: Vec<String> = msgsel
        .iter()
        .flat_map(|value| split_conditions(value))
        .map(|condition| wildcard_condition(&condition).unwrap_or(condition))
        .collect();
    match conditions.len() {
        0 => None,
        1 => conditions.into_iter().next(),
        _ => Some(conditions.iter().map(|c| format!("({c})")).collect::<Vec<_>>().join(" AND ")),
    }
}

fn split_conditions(value: &str) -> Vec<String> {
    let mut conditions = Vec::new();
    let mut current = String::new();
    let (mut depth, mut quoted) = (0usize, false);
    for c in value.chars() {
        match c {
            '\'' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth = depth.saturating_sub(1),
            ',' if !quoted && depth == 0 => {
                conditions.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    conditions.push(current);
    conditions.into_iter().map(|c| c.trim().to_owned()).filter(|c| !c.is_empty()).collect()
}

/// `field='te*xt'` as `field LIKE 'te%xt'`; `None` if the condition is not of that form.
fn wildcard_condition(condition: &str) -> Option<String> {
    let (field, value) = condition.split_once('=')?;
    let field = field.trim();
    let value = value.trim().strip_prefix('\'')?.strip_suffix('\'')?;
    let is_identifier = !field.is_empty()
        && field.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == '.');
    if !is_identifier || value.contains('\'') || !has_wildcard(value) {
        return None;
    }
    Some(format!("{field} LIKE '{}'", value.replace('*', "%").replace('?', "_")))
}

// The JSON read from the endpoint: the endpoint's own types (`admin::model`), which
// deserialize too.
pub use broker::admin::{
    ConnectionView, ConsumerView, DurableSubscriptionView, MessagePage, MessageView, ProducerView,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_as_activemq_tools_match_names() {
        assert!(wildcard_match("FOO.*", "FOO.BAR"));
        assert!(wildcard_match("FOO.*", "FOO.BAR.BAZ"));
        assert!(!wildcard_match("FOO.*", "FOO"));
        assert!(wildcard_match("*", ""));
        assert!(wildcard_match("????", "ABCD") && !wildcard_match("????", "ABC"));
        assert!(wildcard_match("a*b*c", "aXXbYYc") && !wildcard_match("a*b*c", "aXXbYY"));
        assert!(wildcard_match("ActiveMQ.Advisory.*", "ActiveMQ.Advisory.Queue"));
        assert!(!wildcard_match("orders", "orders2"));
    }

    #[test]
    fn msgsel_lists_become_one_selector() {
        assert_eq!(selector_of(&[]), None);
        assert_eq!(
            selector_of(&["JMSPriority > 5".to_owned()]).as_deref(),
            Some("JMSPriority > 5")
        );
        assert_eq!(
            selector_of(&["JMSMessageID='*:10',JMSPriority>5".to_owned()]).as_deref(),
            Some("(JMSMessageID LIKE '%:10') AND (JMSPriority>5)")
        );
        // Commas inside quotes and parentheses are the condition's own.
        assert_eq!(
            selector_of(&["color IN ('red', 'blue')".to_owned(), "note = 'a,b'".to_owned()])
                .as_deref(),
            Some("(color IN ('red', 'blue')) AND (note = 'a,b')")
        );
        assert_eq!(selector_of(&["kind='a?c'".to_owned()]).as_deref(), Some("kind LIKE 'a_c'"));
    }

    #[test]
    fn queue_arguments_take_activemq_prefixes_and_refuse_topics() {
        assert_eq!(queue_name("orders").ok(), Some("orders"));
        assert_eq!(queue_name("queue:orders").ok(), Some("orders"));
        assert_eq!(queue_name("queue://a.b").ok(), Some("a.b"));
        assert!(queue_name("topic:prices").is_err());
        assert!(queue_name("queue:").is_err());
    }

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(encode("orders EU/1"), "orders%20EU%2F1");
        assert_eq!(encode("ID:host-1:2:3"), "ID%3Ahost-1%3A2%3A3");
        assert_eq!(encode("é"), "%C3%A9");
        assert_eq!(queue_path("a.b"), "/api/destinations/queue/a.b");
    }
}
