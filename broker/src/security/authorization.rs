//! Authorization against `[[authorization]]` (ActiveMQ's `authorizationMap`): what a
//! subject may read, write and create, asked by the session before each consumer, send and
//! creation; a composite destination is checked part by part.

use std::sync::Arc;

use store::{Destination, DestinationKind};

use super::Subject;
use crate::core::composite_parts;
use crate::core::wildcard::DestinationFilter;

/// What a client wants to do with a destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Consume or browse.
    Read,
    /// Send.
    Write,
    /// Create (a destination is created by its first use).
    Admin,
}

/// An operation `[[authorization]]` does not allow, in ActiveMQ's words.
#[derive(Debug, Clone, thiserror::Error)]
#[error("User {user} is not authorized to {verb} {destination}")]
pub struct Denied {
    user: String,
    verb: &'static str,
    destination: String,
}

/// Which destinations an authorization entry covers.
enum Covers {
    Queues(DestinationFilter),
    Topics(DestinationFilter),
    Temporary,
}

struct Rights {
    covers: Covers,
    read: Vec<Arc<str>>,
    write: Vec<Arc<str>>,
    admin: Vec<Arc<str>>,
}

/// Checks operations against `[[authorization]]`; one per broker. Without entries it allows
/// everything and costs nothing.
pub struct Authorizer {
    entries: Vec<Rights>,
}

impl Authorizer {
    /// The authorizer `[[authorization]]` describes.
    pub fn new(config: &conf::Config) -> Authorizer {
        let groups = |names: &[String]| names.iter().map(|name| Arc::from(name.as_str())).collect();
        let entries = config
            .authorization
            .iter()
            .map(|entry| Rights {
                covers: match (&entry.queue, &entry.topic) {
                    (Some(queue), _) => Covers::Queues(DestinationFilter::new(queue)),
                    (None, Some(topic)) => Covers::Topics(DestinationFilter::new(topic)),
                    (None, None) => Covers::Temporary,
                },
                read: groups(&entry.read),
                write: groups(&entry.write),
                admin: groups(&entry.admin),
            })
            .collect();
        Authorizer { entries }
    }

    /// Whether any operation is checked.
    pub fn enabled(&self) -> bool {
        !self.entries.is_empty()
    }

    /// Allows `action` on `destination` to `subject` when a group of it has the right in an
    /// entry that covers the destination. A composite destination (`A,B`, parts possibly
    /// `queue://`/`topic://`) is allowed only when every part is: matched whole, `PUBLIC.>`
    /// would match `PUBLIC.A,SECRET.B` and open every destination to whoever may use one. A
    /// configured composite (`[[composite_destinations]]`) has a plain name and is checked by
    /// it, as ActiveMQ checks a virtual destination.
    pub fn check(
        &self,
        subject: Option<&Subject>,
        action: Action,
        destination: &Destination,
    ) -> Result<(), Denied> {
        if self.entries.is_empty() {
            return Ok(());
        }
        for part in parts_of(destination) {
            self.check_one(subject, action, &part)?;
        }
        Ok(())
    }

    /// [`check`](Self::check) of one destination that is not a composite.
    fn check_one(
        &self,
        subject: Option<&Subject>,
        action: Action,
        destination: &Destination,
    ) -> Result<(), Denied> {
        let allowed = subject.is_some_and(|subject| {
            self.entries.iter().filter(|entry| entry.covers(destination)).any(|entry| {
                let groups = match action {
                    Action::Read => &entry.read,
                    Action::Write => &entry.write,
                    Action::Admin => &entry.admin,
                };
                groups.iter().any(|group| subject.groups.contains(group))
            })
        });
        if allowed {
            return Ok(());
        }
        let denied = Denied {
            user: subject.map_or_else(|| "(not logged in)".to_owned(), |s| s.user.to_string()),
            verb: match action {
                Action::Read => "read from:",
                Action::Write => "write to:",
                Action::Admin => "create:",
            },
            destination: destination.to_string(),
        };
        tracing::warn!(%denied, "operation refused");
        Err(denied)
    }

    /// [`check`](Self::check) for using `destination` with `action`, and for creating it too
    /// when `exists` says it does not exist yet; each part of a composite on its own (one
    /// part may exist and another be created by this use).
    pub fn check_use(
        &self,
        subject: Option<&Subject>,
        action: Action,
        destination: &Destination,
        exists: impl Fn(&Destination) -> bool,
    ) -> Result<(), Denied> {
        if self.entries.is_empty() {
            return Ok(());
        }
        let parts = parts_of(destination);
        for part in &parts {
            self.check_one(subject, action, part)?;
        }
        for part in &parts {
            // A wildcard subscription creates nothing.
            let pattern = DestinationFilter::is_pattern(&part.name);
            if !pattern && !exists(part) {
                self.check_one(subject, Action::Admin, part)?;
            }
        }
        Ok(())
    }
}

/// The destinations to authorize for `destination`: its composite parts, or itself when it
/// names none (`,` alone must not pass as a composite of nothing).
fn parts_of(destination: &Destination) -> Vec<Destination> {
    let parts = composite_parts(destination);
    if parts.is_empty() {
        vec![destination.clone()]
    } else {
        parts
    }
}

impl Rights {
    fn covers(&self, destination: &Destination) -> bool {
        match (&self.covers, destination.kind) {
            (Covers::Queues(filter), DestinationKind::Queue) => filter.matches(&destination.name),
            (Covers::Topics(filter), DestinationKind::Topic) => filter.matches(&destination.name),
            (Covers::Temporary, DestinationKind::TempQueue | DestinationKind::TempTopic) => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod authorization_tests {
    use super::*;

    fn subject(group: &str) -> Subject {
        Subject { user: Arc::from(group), groups: Arc::from([Arc::from(group)]) }
    }

    /// Admins everything, guests read, write and create `PUBLIC.>` queues and topics.
    fn authorizer() -> Authorizer {
        let mut config = conf::Config::default();
        let entry = |queue: Option<&str>, topic: Option<&str>, groups: &[&str]| {
            let groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
            conf::AuthorizationEntry {
                queue: queue.map(str::to_owned),
                topic: topic.map(str::to_owned),
                read: groups.clone(),
                write: groups.clone(),
                admin: groups,
                ..Default::default()
            }
        };
        config.authorization = vec![
            entry(Some(">"), None, &["admins"]),
            entry(None, Some(">"), &["admins"]),
            entry(Some("PUBLIC.>"), None, &["guests"]),
            entry(None, Some("PUBLIC.>"), &["guests"]),
        ];
        Authorizer::new(&config)
    }

    #[test]
    fn every_part_of_a_composite_is_authorized_on_its_own() {
        let authorizer = authorizer();
        let guest = subject("guests");
        let admin = subject("admins");
        let refused = [
            Destination::queue("PUBLIC.A,SECRET.PAYROLL"),
            Destination::queue("SECRET.PAYROLL,PUBLIC.A"),
            Destination::topic("PUBLIC.X,SECRET.T"),
            Destination::queue("PUBLIC.A,topic://SECRET.T"),
            Destination::topic("PUBLIC.X,queue://SECRET.Q"),
            Destination::queue("PUBLIC.A, SECRET.PAYROLL"),
        ];
        for destination in &refused {
            for action in [Action::Read, Action::Write, Action::Admin] {
                let result = authorizer.check(Some(&guest), action, destination);
                assert!(result.is_err(), "{action:?} {destination} allowed to a guest");
                let result = authorizer.check_use(Some(&guest), action, destination, |_| true);
                assert!(result.is_err(), "{action:?} use of {destination} allowed to a guest");
                assert!(authorizer.check(Some(&admin), action, destination).is_ok());
            }
        }
        let allowed = [
            Destination::queue("PUBLIC.A,PUBLIC.B"),
            Destination::queue("PUBLIC.A,topic://PUBLIC.T"),
            Destination::topic("PUBLIC.X,PUBLIC.Y"),
        ];
        for destination in &allowed {
            for action in [Action::Read, Action::Write, Action::Admin] {
                assert!(authorizer.check(Some(&guest), action, destination).is_ok());
            }
        }
        assert!(authorizer.check(Some(&guest), Action::Read, &Destination::queue(",")).is_err());
    }

    #[test]
    fn using_a_composite_creates_only_the_parts_that_do_not_exist() {
        let config = conf::Config {
            authorization: vec![conf::AuthorizationEntry {
                queue: Some(">".to_owned()),
                read: vec!["users".to_owned()],
                write: vec!["users".to_owned()],
                ..Default::default()
            }],
            ..Default::default()
        };
        let authorizer = Authorizer::new(&config);
        let user = subject("users");
        let composite = Destination::queue("OLD,NEW");
        let exists = |d: &Destination| &*d.name == "OLD";
        let denied = authorizer.check_use(Some(&user), Action::Write, &composite, exists);
        let message = denied.err().map(|denied| denied.to_string()).unwrap_or_default();
        assert!(message.contains("create: queue://NEW"), "{message}");
        let both = |d: &Destination| matches!(&*d.name, "OLD" | "NEW");
        assert!(authorizer.check_use(Some(&user), Action::Write, &composite, both).is_ok());
    }
}
