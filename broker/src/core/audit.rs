//! The producer audit: duplicate detection for resent messages.
//!
//! A client's `failover:` transport resends the messages it had in flight when its connection
//! dropped, because it cannot know whether the broker got them. The broker may have: the
//! connection can die after the message was stored but before the response went out. The
//! audit remembers, per destination and producer, the highest producer sequence number it has
//! accepted; a message whose sequence is not above it is a resend and is confirmed without
//! being enqueued again.
//!
//! Producer and sequence come from the message id in ActiveMQ's form
//! `ID:<connection>:<session>:<producer>:<sequence>`; messages whose ids have another form
//! (STOMP, AMQP) are not audited. A producer sends to one destination in order, so one number
//! per producer is enough (ActiveMQ keeps a window of bits because its cursors can see
//! messages out of order; ferromq's core sees each destination's sends in order under one
//! lock).
//!
//! Memory is bounded: at most [`MAX_PRODUCERS_PER_DESTINATION`] producers per destination,
//! the least recently seen forgotten first (as ActiveMQ's `maxProducersToAudit`). After a
//! restart the audit is rebuilt from the messages the store still holds, so a resend of a
//! message stored just before a crash is recognised too.

use std::sync::Arc;

use store::{Destination, Message};

use super::types::ClientKeyed;

/// Producers remembered per destination (ActiveMQ's `maxProducersToAudit` default is 1024).
pub const MAX_PRODUCERS_PER_DESTINATION: usize = 1024;

/// Highest accepted sequence per producer, per destination. Owned by the routing table and
/// used under its lock.
#[derive(Default)]
pub struct ProducerAudit {
    destinations: ClientKeyed<Destination, ClientKeyed<Arc<str>, Seen>>,
    /// Bumped on every record; orders producers by last use for eviction.
    clock: u64,
}

#[derive(Clone, Copy)]
struct Seen {
    sequence: i64,
    last_used: u64,
}

/// The producer part and the sequence of an ActiveMQ-style message id.
fn producer_and_sequence(message_id: &str) -> Option<(&str, i64)> {
    if !message_id.starts_with("ID:") {
        return None;
    }
    let (producer, sequence) = message_id.rsplit_once(':')?;
    let sequence = sequence.parse().ok()?;
    // `producer` is `<connection>:<session>:<producer>`: two numeric parts after the
    // connection id, or this is not ActiveMQ's form.
    let (rest, producer_value) = producer.rsplit_once(':')?;
    let (_, session) = rest.rsplit_once(':')?;
    producer_value.parse::<u64>().ok()?;
    session.parse::<u64>().ok()?;
    Some((producer, sequence))
}

/// Whether `message_id` has ActiveMQ's form `ID:<connection>:<session>:<producer>:<sequence>`,
/// the form the audit judges (a STOMP producer may name its sends so, see
/// `stomp::mapping::MESSAGE_ID_HEADER`).
pub fn is_producer_message_id(message_id: &str) -> bool {
    producer_and_sequence(message_id).is_some()
}

impl ProducerAudit {
    /// True when `message` repeats one this audit accepted before (same destination,
    /// producer and a sequence not above the highest seen). Otherwise records it and returns
    /// false.
    pub fn is_duplicate(&mut self, message: &Message) -> bool {
        let Some((producer, sequence)) = producer_and_sequence(&message.message_id) else {
            return false;
        };
        self.clock += 1;
        let now = self.clock;
        // Looked up before it is entered: the destination is cloned only for a new one.
        let producers = match self.destinations.get_mut(&message.destination) {
            Some(producers) => producers,
            None => self.destinations.entry(message.destination.clone()).or_default(),
        };
        if let Some(seen) = producers.get_mut(producer) {
            seen.last_used = now;
            if sequence <= seen.sequence {
                return true;
            }
            seen.sequence = sequence;
            return false;
        }
        if producers.len() >= MAX_PRODUCERS_PER_DESTINATION {
            let oldest =
                producers.iter().min_by_key(|(_, seen)| seen.last_used).map(|(p, _)| p.clone());
            if let Some(oldest) = oldest {
                producers.remove(&oldest);
            }
        }
        producers.insert(Arc::from(producer), Seen { sequence, last_used: now });
        false
    }

    /// Records a message that was accepted before a restart (read back from the store), so
    /// that its resend is recognised.
    pub fn record_recovered(&mut self, message: &Message) {
        // A recovered message's own sequence may be below one already recorded (several
        // queues share a destination's producers): recording keeps the highest.
        let _ = self.is_duplicate(message);
    }

    /// Forgets the sends of a rolled-back transaction, so that the producer may send them
    /// again with the same ids (a client replaying a transaction its lost connection rolled
    /// back; ActiveMQ's audit rolls back too). A producer's transacted sends are its latest
    /// (its session has one transaction open at a time), so its highest sequence goes back
    /// to just below the first of them.
    pub fn roll_back<'a>(&mut self, messages: impl IntoIterator<Item = &'a Message>) {
        for message in messages {
            let Some((producer, sequence)) = producer_and_sequence(&message.message_id) else {
                continue;
            };
            let seen = self
                .destinations
                .get_mut(&message.destination)
                .and_then(|producers| producers.get_mut(producer));
            if let Some(seen) = seen {
                seen.sequence = seen.sequence.min(sequence - 1);
            }
        }
    }

    /// Forgets a destination's producers when the destination is deleted (temporary
    /// destinations come and go by the thousand with request/reply).
    pub fn forget(&mut self, destination: &Destination) {
        self.destinations.remove(destination);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::MessageId;

    fn message(destination: &str, id: &str) -> Message {
        Message::new(MessageId(1), id, Destination::queue(destination))
    }

    #[test]
    fn a_resend_is_a_duplicate_and_new_sequences_are_not() {
        let mut audit = ProducerAudit::default();
        assert!(!audit.is_duplicate(&message("q", "ID:host-1-2-3:1:1:1:1")));
        assert!(!audit.is_duplicate(&message("q", "ID:host-1-2-3:1:1:1:2")));
        assert!(audit.is_duplicate(&message("q", "ID:host-1-2-3:1:1:1:2")));
        assert!(audit.is_duplicate(&message("q", "ID:host-1-2-3:1:1:1:1")));
        assert!(!audit.is_duplicate(&message("q", "ID:host-1-2-3:1:1:1:3")));
    }

    #[test]
    fn a_rolled_back_transaction_may_be_sent_again_with_its_ids() {
        let mut audit = ProducerAudit::default();
        let sends: Vec<Message> =
            (1..=5).map(|n| message("q", &format!("ID:host-1-2-3:1:1:1:{n}"))).collect();
        // 1 and 2 committed before; 3 to 5 in the transaction that is rolled back.
        for sent in &sends {
            assert!(!audit.is_duplicate(sent));
        }
        audit.roll_back(&sends[2..]);
        assert!(audit.is_duplicate(&sends[1]), "a committed send stays a duplicate");
        for replayed in &sends[2..] {
            assert!(!audit.is_duplicate(replayed), "{}", replayed.message_id);
        }
        // Unknown producers and other id forms are ignored.
        audit.roll_back([&message("q", "ID:other-9:1:1:1:1"), &message("q", "stomp-1")]);
    }

    #[test]
    fn producers_and_destinations_are_audited_apart() {
        let mut audit = ProducerAudit::default();
        assert!(!audit.is_duplicate(&message("q", "ID:host-1-2-3:1:1:1:5")));
        assert!(!audit.is_duplicate(&message("q", "ID:host-1-2-3:1:1:2:5")));
        assert!(!audit.is_duplicate(&message("other", "ID:host-1-2-3:1:1:1:5")));
        assert!(!audit.is_duplicate(&message("q", "ID:host-9-9-9:1:1:1:5")));
    }

    #[test]
    fn ids_of_other_forms_are_never_duplicates() {
        let mut audit = ProducerAudit::default();
        for id in ["stomp-1", "ID:nonsense", "ID:a:b:c", "ID:host:1:x:1", "ID:host:1:1:x"] {
            assert!(!audit.is_duplicate(&message("q", id)));
            assert!(!audit.is_duplicate(&message("q", id)), "{id}");
        }
    }

    #[test]
    fn the_least_recently_seen_producer_is_forgotten_first() {
        let mut audit = ProducerAudit::default();
        for producer in 0..MAX_PRODUCERS_PER_DESTINATION {
            assert!(!audit.is_duplicate(&message("q", &format!("ID:c:1:{producer}:1"))));
        }
        // Producer 0 is used again, so producer 1 is now the oldest.
        assert!(audit.is_duplicate(&message("q", "ID:c:1:0:1")));
        assert!(!audit.is_duplicate(&message("q", "ID:c:1:99999:1")));
        assert!(audit.is_duplicate(&message("q", "ID:c:1:0:1")), "recently used is kept");
        assert!(!audit.is_duplicate(&message("q", "ID:c:1:1:1")), "the oldest was forgotten");
    }
}
