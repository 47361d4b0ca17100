//! `ferromq browse`: ActiveMQ's `activemq browse`, the messages of queues printed without
//! consuming them, through the admin endpoint (`GET /api/destinations/queue/{name}/messages`)
//! rather than a JMS connection. Each message is printed as ActiveMQ prints it, a line per
//! field with the field's group, then a blank line:
//!
//! ```text
//! JMS_HEADER_FIELD:JMSDestination = orders
//! JMS_HEADER_FIELD:JMSMessageID = ID:host-1234-1:1:1:1:1
//! JMS_HEADER_FIELD:JMSPriority = 4
//! JMS_CUSTOM_FIELD:region = EU
//! JMS_BODY_FIELD:JMSText = hello
//! ```
//!
//! `-Vheader`, `-Vcustom`, `-Vbody` (or `-Vheader,body`) choose the groups; `--view` names
//! fields (`header:JMSMessageID`, `custom:region`, or a bare name for either); with neither,
//! every field is printed. `--msgsel` filters as in ActiveMQ (see `admin::selector_of`).

use broker::admin::AdminClient;

use super::admin::{
    one_line, queue_name, queue_path, runtime, selector_of, EndpointArgs, MessagePage, MessageView,
};

/// The largest page the endpoint serves.
const PAGE: u64 = 400;

/// A group of fields, as `-V` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Group {
    Header,
    Custom,
    Body,
}

#[derive(Debug, clap::Args)]
pub struct BrowseArgs {
    #[command(flatten)]
    endpoint: EndpointArgs,
    /// Only the messages that match: a JMS selector (SQL 92), or ActiveMQ's comma-separated
    /// conditions, all of which must hold (`"JMSMessageID='*:10',JMSPriority>5"`: a quoted
    /// value with * or ? is a wildcard). Repeat it to add conditions.
    #[arg(long, value_name = "SELECTOR")]
    msgsel: Vec<String>,
    /// The groups of fields to print: header (the JMS headers), custom (the properties),
    /// body; comma-separated or repeated (`-Vheader,body`).
    #[arg(short = 'V', value_name = "GROUP", value_enum, value_delimiter = ',')]
    groups: Vec<Group>,
    /// Fields to print besides the groups: `header:JMSMessageID`, `custom:NAME`, or a bare
    /// name (a header or a property); comma-separated.
    #[arg(long, value_name = "FIELDS", value_delimiter = ',')]
    view: Vec<String>,
    /// The queues: NAME, queue:NAME or queue://NAME.
    #[arg(value_name = "QUEUE", required = true)]
    destinations: Vec<String>,
}

/// One printed line: its group, its field name, its value.
type Field = (Group, String, String);

pub fn run(args: BrowseArgs) -> anyhow::Result<()> {
    let client = args.endpoint.client()?;
    let selector = selector_of(&args.msgsel);
    let runtime = runtime()?;
    let shown = Shown::new(&args.groups, &args.view);
    let mut failures = Vec::new();
    for destination in &args.destinations {
        let result = queue_name(destination).and_then(|queue| {
            runtime.block_on(browse(&client, queue, selector.as_deref(), &shown))
        });
        if let Err(error) = result {
            eprintln!("ferromq: {destination}: {error:#}");
            failures.push(destination.as_str());
        }
    }
    match failures.is_empty() {
        true => Ok(()),
        false => anyhow::bail!("could not browse {}", failures.join(", ")),
    }
}

/// Prints every message of `queue` (matching `selector`) page by page, in delivery order.
async fn browse(
    client: &AdminClient,
    queue: &str,
    selector: Option<&str>,
    shown: &Shown,
) -> anyhow::Result<()> {
    let mut offset = 0u64;
    loop {
        let mut path = format!("{}/messages?offset={offset}&limit={PAGE}", queue_path(queue));
        if let Some(selector) = selector {
            path.push_str(&format!("&selector={}", super::admin::encode(selector)));
        }
        let page: MessagePage = client.get_json(&path).await.map_err(one_line)?;
        if page.messages.is_empty() {
            return Ok(());
        }
        offset += page.messages.len() as u64;
        for message in page.messages {
            // The page's previews are cut short; the message's own view has more of the body.
            let message = match message.body_truncated && shown.any(Group::Body) {
                true => {
                    let path = format!(
                        "{}/messages/{}",
                        queue_path(queue),
                        super::admin::encode(&message.id)
                    );
                    client.get_json(&path).await.unwrap_or(message)
                }
                false => message,
            };
            let mut text = String::new();
            for (group, name, value) in fields(&message) {
                if shown.shows(group, &name) {
                    text.push_str(&format!("{}:{name} = {value}\n", label(group)));
                }
            }
            println!("{text}");
        }
        if offset >= page.total {
            return Ok(());
        }
    }
}

fn label(group: Group) -> &'static str {
    match group {
        Group::Header => "JMS_HEADER_FIELD",
        Group::Custom => "JMS_CUSTOM_FIELD",
        Group::Body => "JMS_BODY_FIELD",
    }
}

/// Which fields are printed.
struct Shown {
    groups: Vec<Group>,
    /// `--view`'s fields: the group they name (`None`: a bare name) and the name.
    fields: Vec<(Option<Group>, String)>,
}

impl Shown {
    fn new(groups: &[Group], view: &[String]) -> Shown {
        let fields = view
            .iter()
            .map(|field| field.trim())
            .filter(|field| !field.is_empty())
            .map(|field| match field.split_once(':') {
                Some(("header", name)) => (Some(Group::Header), name.to_owned()),
                Some(("custom", name)) => (Some(Group::Custom), name.to_owned()),
                Some(("body", name)) => (Some(Group::Body), name.to_owned()),
                _ => (None, field.to_owned()),
            })
            .collect();
        Shown { groups: groups.to_vec(), fields }
    }

    fn everything(&self) -> bool {
        self.groups.is_empty() && self.fields.is_empty()
    }

    fn any(&self, group: Group) -> bool {
        self.everything()
            || self.groups.contains(&group)
            || self.fields.iter().any(|(g, _)| g.is_none_or(|g| g == group))
    }

    fn shows(&self, group: Group, name: &str) -> bool {
        self.everything()
            || self.groups.contains(&group)
            || self.fields.iter().any(|(g, field)| g.is_none_or(|g| g == group) && field == name)
    }
}

/// A message's fields in ActiveMQ's names and order; absent headers are left out.
fn fields(message: &MessageView) -> Vec<Field> {
    let mut fields = Vec::new();
    let mut header = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            fields.push((Group::Header, name.to_owned(), value));
        }
    };
    header("JMSDestination", Some(message.destination.name.clone()));
    let mode = if message.persistent { "persistent" } else { "non-persistent" };
    header("JMSDeliveryMode", Some(mode.to_owned()));
    header("JMSExpiration", Some(message.expiration_ms.unwrap_or(0).to_string()));
    header("JMSPriority", Some(message.priority.to_string()));
    header("JMSMessageID", Some(message.id.clone()));
    header("JMSTimestamp", message.timestamp_ms.map(|ms| ms.to_string()));
    header("JMSCorrelationID", message.correlation_id.clone());
    header("JMSReplyTo", message.reply_to.clone());
    header("JMSType", message.message_type.clone());
    header("JMSRedelivered", Some(message.redelivered.to_string()));
    header("JMSXDeliveryCount", Some(message.delivery_count.to_string()));
    header("JMSXGroupID", message.group_id.clone());
    for (name, value) in &message.properties {
        fields.push((Group::Custom, name.clone(), plain(value)));
    }
    match (&message.body_preview, message.body_type.as_str()) {
        (None, _) | (_, "none") => {}
        (Some(preview), "text") => {
            fields.push((Group::Body, "JMSText".to_owned(), preview.clone()))
        }
        (Some(preview), "map") => match serde_json::from_str(preview) {
            // The map as a JSON object, unless it was cut short (then base64).
            Ok(serde_json::Value::Object(entries)) => {
                for (name, value) in entries {
                    fields.push((Group::Body, name, plain(&value)));
                }
            }
            _ => fields.push((Group::Body, "JMSMap".to_owned(), preview.clone())),
        },
        (Some(preview), kind) => {
            let name = match kind {
                "object" => "JMSObject",
                "stream" => "JMSStream",
                _ => "JMSBytes",
            };
            fields.push((Group::Body, format!("{name}:base64"), preview.clone()));
        }
    }
    if message.body_truncated {
        let size = format!("{} bytes, cut short", message.body_size);
        fields.push((Group::Body, "JMSBodySize".to_owned(), size));
    }
    fields
}

/// A JSON value as a person reads it: strings without quotes.
fn plain(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message() -> MessageView {
        serde_json::from_value(serde_json::json!({
            "id": "ID:a-1:1:1:1:1",
            "destination": {"kind": "queue", "name": "orders"},
            "timestamp_ms": 1000, "expiration_ms": null, "priority": 4, "persistent": true,
            "redelivered": false, "delivery_count": 0, "correlation_id": null,
            "reply_to": null, "type": "order", "group_id": null,
            "properties": {"region": "EU", "amount": 12},
            "body_type": "text", "body_size": 5, "body_preview": "hello", "body_truncated": false
        }))
        .expect("a message view")
    }

    fn printed(shown: &Shown) -> Vec<String> {
        fields(&message())
            .into_iter()
            .filter(|(group, name, _)| shown.shows(*group, name))
            .map(|(group, name, value)| format!("{}:{name} = {value}", label(group)))
            .collect()
    }

    #[test]
    fn every_field_prints_in_activemq_groups_by_default() {
        let lines = printed(&Shown::new(&[], &[]));
        assert!(lines.contains(&"JMS_HEADER_FIELD:JMSMessageID = ID:a-1:1:1:1:1".to_owned()));
        assert!(lines.contains(&"JMS_HEADER_FIELD:JMSDeliveryMode = persistent".to_owned()));
        assert!(lines.contains(&"JMS_HEADER_FIELD:JMSType = order".to_owned()));
        assert!(lines.contains(&"JMS_CUSTOM_FIELD:region = EU".to_owned()));
        assert!(lines.contains(&"JMS_CUSTOM_FIELD:amount = 12".to_owned()));
        assert_eq!(lines.last().map(String::as_str), Some("JMS_BODY_FIELD:JMSText = hello"));
        assert!(!lines.iter().any(|line| line.contains("JMSCorrelationID")), "absent: left out");
    }

    #[test]
    fn map_and_bytes_bodies_print_as_their_entries_and_base64() {
        let mut map = message();
        map.body_type = "map".to_owned();
        map.body_preview = Some("{\"sku\":\"A-1\",\"qty\":2}".to_owned());
        let lines: Vec<String> = fields(&map)
            .into_iter()
            .filter(|(group, _, _)| *group == Group::Body)
            .map(|(_, name, value)| format!("{name} = {value}"))
            .collect();
        assert_eq!(lines, ["qty = 2", "sku = A-1"]);
        let mut bytes = message();
        bytes.body_type = "bytes".to_owned();
        bytes.body_preview = Some("AAEC".to_owned());
        bytes.body_truncated = true;
        bytes.body_size = 70_000;
        let body: Vec<(String, String)> = fields(&bytes)
            .into_iter()
            .filter(|(group, _, _)| *group == Group::Body)
            .map(|(_, name, value)| (name, value))
            .collect();
        assert_eq!(body[0], ("JMSBytes:base64".to_owned(), "AAEC".to_owned()));
        assert_eq!(body[1].1, "70000 bytes, cut short");
        let mut empty = message();
        empty.body_type = "none".to_owned();
        empty.body_preview = None;
        assert!(fields(&empty).iter().all(|(group, _, _)| *group != Group::Body));
    }

    #[test]
    fn groups_and_views_choose_the_fields() {
        let body = printed(&Shown::new(&[Group::Body], &[]));
        assert_eq!(body, ["JMS_BODY_FIELD:JMSText = hello"]);
        let view = printed(&Shown::new(&[Group::Header], &["custom:region".to_owned()]));
        assert!(view.contains(&"JMS_CUSTOM_FIELD:region = EU".to_owned()));
        assert!(!view.iter().any(|line| line.contains("amount") || line.contains("JMSText")));
        let bare = printed(&Shown::new(&[], &["JMSPriority".to_owned(), "amount".to_owned()]));
        assert_eq!(bare, ["JMS_HEADER_FIELD:JMSPriority = 4", "JMS_CUSTOM_FIELD:amount = 12"]);
    }
}
