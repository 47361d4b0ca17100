//! PUBLISH from the client: authorization, producer flow control, the store, and the answers
//! of QoS 1 (PUBACK once the message is durable) and QoS 2 (PUBREC once durable; PUBREL,
//! PUBCOMP).

use std::sync::Arc;

use protocol::mqtt::{
    Disconnect, Packet, Properties, Property, PubAck, Publish, QoS, ReasonCode, Version,
};
use store::Message;

use super::{mapping, Connection, Fatal, Outcome, Pending, TOPIC_ALIAS_MAXIMUM};
use crate::core::{CoreError, SendAdmission};
use crate::security::Action;

/// A PUBLISH held by producer flow control until its topic has room: what to answer then.
pub(super) struct HeldPublish {
    qos: QoS,
    packet_id: Option<u16>,
}

impl Connection {
    pub(super) fn publish(&mut self, publish: Publish) -> Result<(), Fatal> {
        let version = self.version.unwrap_or(Version::V3_1_1);
        let mut publish = publish;
        self.resolve_topic_alias(&mut publish)?;
        let packet_id = publish.packet_id;
        if version == Version::V5_0 && publish.qos != QoS::AtMostOnce {
            let resend = publish.qos == QoS::ExactlyOnce
                && self.received_qos2.contains(&packet_id.unwrap_or_default());
            let unacknowledged = self.unanswered_qos1 + self.received_qos2.len();
            if !resend && unacknowledged >= usize::from(super::BROKER_RECEIVE_MAXIMUM) {
                return Err(Fatal::new(
                    ReasonCode::ReceiveMaximumExceeded,
                    format!(
                        "more than {} QoS 1 and 2 PUBLISHes unacknowledged",
                        super::BROKER_RECEIVE_MAXIMUM
                    ),
                ));
            }
        }
        if publish.qos == QoS::AtLeastOnce {
            // Until its PUBACK is written (`Connection::write`), whatever it is answered.
            self.unanswered_qos1 += 1;
        }
        if publish.qos == QoS::ExactlyOnce {
            let id = packet_id.unwrap_or_default();
            if !self.received_qos2.insert(id) {
                // A resend of a QoS 2 message not yet released: it is published once, and
                // answered again (spec 4.3.3).
                self.answer(Packet::Pubrec(PubAck::new(id)));
                return Ok(());
            }
        }
        let core = self.context.core.clone();
        let message = mapping::message_from_publish(
            &publish,
            version,
            core.next_message_id(),
            self.session.next_message_id(),
        );
        if let Err(denied) = self.session.authorize(Action::Write, &message.destination) {
            tracing::info!(peer = %self.peer, topic = %publish.topic, %denied, "MQTT publish refused");
            if version != Version::V5_0 {
                // 3.x has no way to refuse one message.
                return Err(Fatal::new(ReasonCode::NotAuthorized, denied.to_string()));
            }
            let reason = ReasonCode::NotAuthorized;
            let properties = self.reason_string(denied.to_string());
            match (publish.qos, packet_id) {
                (QoS::AtLeastOnce, Some(id)) => {
                    self.answer(Packet::Puback(PubAck { packet_id: id, reason, properties }))
                }
                (QoS::ExactlyOnce, Some(id)) => {
                    // A refused PUBREC ends the handshake: no PUBREL follows.
                    self.received_qos2.remove(&id);
                    self.answer(Packet::Pubrec(PubAck { packet_id: id, reason, properties }))
                }
                _ => return Err(Fatal::new(reason, denied.to_string())),
            }
            return Ok(());
        }
        let message = Arc::new(message);
        let connection = self.session.connection();
        let held = HeldPublish { qos: publish.qos, packet_id };
        let message = match self.held.admit(&core, connection, (), held, message) {
            SendAdmission::Now(_, message) => message,
            SendAdmission::Held { forced } => {
                if let Some(oldest) = forced {
                    self.admitted(oldest, Ok(()));
                }
                return Ok(());
            }
            SendAdmission::Refused(held) => {
                let why = crate::core::held_sends_refusal();
                return self.refuse_for_room(held, &why);
            }
        };
        let outcome = self.submit(message, publish.qos, packet_id);
        if let Some(outcome) = outcome {
            self.pending.push_back(outcome);
        }
        Ok(())
    }

    /// Resolves a 5.0 PUBLISH's Topic Alias (spec 3.3.2.3.4): with a topic, the alias is set
    /// to it; with the empty topic, the topic is the alias's. An alias of 0 (refused by the
    /// codec already), above the Topic Alias Maximum of the CONNACK, or unknown with the empty
    /// topic is Topic Alias invalid. The alias property goes, so that the message does not
    /// carry it on.
    fn resolve_topic_alias(&mut self, publish: &mut Publish) -> Result<(), Fatal> {
        let Some(alias) = publish.properties.topic_alias() else { return Ok(()) };
        if alias == 0 || alias > TOPIC_ALIAS_MAXIMUM {
            return Err(Fatal::new(
                ReasonCode::TopicAliasInvalid,
                format!("topic alias {alias} is not between 1 and {TOPIC_ALIAS_MAXIMUM}"),
            ));
        }
        if publish.topic.is_empty() {
            let Some(topic) = self.topic_aliases.get(&alias) else {
                return Err(Fatal::new(
                    ReasonCode::TopicAliasInvalid,
                    format!("topic alias {alias} names no topic yet"),
                ));
            };
            publish.topic = topic.clone();
        } else {
            self.topic_aliases.insert(alias, publish.topic.clone());
        }
        publish.properties = publish
            .properties
            .iter()
            .filter(|property| !matches!(property, Property::TopicAlias(_)))
            .cloned()
            .fold(Properties::new(), Properties::with);
        Ok(())
    }

    /// A held PUBLISH's wait ended: it is published now, or refused (no room, per the
    /// settings).
    pub(super) fn admitted(
        &mut self,
        (held, message): (HeldPublish, Arc<Message>),
        room: Result<(), CoreError>,
    ) {
        match room {
            Ok(()) => {
                if let Some(outcome) = self.submit(message, held.qos, held.packet_id) {
                    self.pending.push_back(outcome);
                }
            }
            Err(error) => {
                tracing::info!(peer = %self.peer, %error, "MQTT publish refused: no room");
                if let Err(fatal) = self.refuse_for_room(held, &error.to_string()) {
                    self.pending.push_back(Box::pin(async move {
                        let packet = Packet::Disconnect(Disconnect {
                            reason: fatal.reason,
                            properties: Properties::new().with(Property::ReasonString(fatal.why)),
                        });
                        Outcome { packet: Some(packet), close: true }
                    }));
                }
            }
        }
    }

    /// A 5.0 PUBLISH refused for want of room gets Quota exceeded; a 3.x client, or a QoS 0
    /// one, is disconnected.
    fn refuse_for_room(&mut self, held: HeldPublish, why: &str) -> Result<(), Fatal> {
        let reason = ReasonCode::QuotaExceeded;
        if self.version != Some(Version::V5_0) {
            return Err(Fatal::new(reason, why));
        }
        let properties = self.reason_string(why.to_owned());
        match (held.qos, held.packet_id) {
            (QoS::AtLeastOnce, Some(id)) => {
                self.answer(Packet::Puback(PubAck { packet_id: id, reason, properties }));
                Ok(())
            }
            (QoS::ExactlyOnce, Some(id)) => {
                self.received_qos2.remove(&id);
                self.answer(Packet::Pubrec(PubAck { packet_id: id, reason, properties }));
                Ok(())
            }
            _ => Err(Fatal::new(reason, why)),
        }
    }

    /// Hands `message` to the core; the answer to wait for: the PUBACK or PUBREC, once the
    /// store has made the message durable. A store that fails closes the connection.
    fn submit(
        &mut self,
        message: Arc<Message>,
        qos: QoS,
        packet_id: Option<u16>,
    ) -> Option<Pending> {
        let core = self.context.core.clone();
        let connection = self.session.connection();
        // A persistent session's QoS 2 PUBLISH is stored with its received mark, so that a
        // resend after a restart is known and not published twice (`core::exactly_once`).
        let marked = match (qos, packet_id, self.session.client_id()) {
            (QoS::ExactlyOnce, Some(id), Some(client)) if self.persistent => Some((client, id)),
            _ => None,
        };
        let sent = match marked {
            Some((client, id)) => {
                let message = Arc::unwrap_or_clone(message);
                core.send_exactly_once(message, connection, client, id)
            }
            None => core.send(message, connection, None),
        };
        let completion = match sent {
            Ok(completion) => completion,
            Err(error) => {
                tracing::error!(peer = %self.peer, %error, "MQTT publish not accepted");
                return Some(Box::pin(async move {
                    Outcome { packet: store_failure(&error.to_string()), close: true }
                }));
            }
        };
        self.session.sent();
        let answer = match (qos, packet_id) {
            (QoS::AtLeastOnce, Some(id)) => Some(Packet::Puback(PubAck::new(id))),
            (QoS::ExactlyOnce, Some(id)) => Some(Packet::Pubrec(PubAck::new(id))),
            _ => None,
        };
        if answer.is_none() && completion.is_ready() {
            return None;
        }
        Some(Box::pin(async move {
            match completion.await {
                Ok(()) => Outcome { packet: answer, close: false },
                Err(error) => {
                    tracing::error!(%error, "store refused an MQTT message");
                    Outcome { packet: store_failure(&error.to_string()), close: true }
                }
            }
        }))
    }

    /// PUBREL: the QoS 2 message's id is free again; PUBCOMP goes behind what is pending,
    /// and, for a persistent session, once the received mark's removal is durable (a PUBREL
    /// resent after a crash before that finds the mark and is answered again).
    pub(super) fn pubrel(&mut self, packet_id: u16) {
        let known = self.received_qos2.remove(&packet_id);
        let reason = match (known, self.version) {
            (false, Some(Version::V5_0)) => ReasonCode::PacketIdentifierNotFound,
            _ => ReasonCode::Success,
        };
        let pubcomp = Packet::Pubcomp(PubAck { packet_id, reason, properties: Properties::new() });
        let released = match self.session.client_id() {
            Some(client) if known && self.persistent => {
                self.context.core.release_exactly_once(client, packet_id)
            }
            _ => return self.answer(pubcomp),
        };
        self.pending.push_back(Box::pin(released_outcome(released, pubcomp)));
    }

    /// The Reason String property of a PUBACK or PUBREC, unless the client asked for none.
    fn reason_string(&self, why: String) -> Properties {
        match self.problem_information {
            true => Properties::new().with(Property::ReasonString(why)),
            false => Properties::new(),
        }
    }

    /// Publishes the will of a connection that ended without a DISCONNECT (or with a 5.0
    /// DISCONNECT 0x04), if the client may write its topic. Nothing waits for it: the
    /// connection is gone. A 5.0 Will Delay Interval holds it until the delay has passed or
    /// the session ends, whichever is sooner, and drops it if a connection with the client id
    /// comes first (MQTT-3.1.3-9); a session that ends with the connection publishes it now.
    pub(super) fn publish_will(&mut self) {
        let Some(will) = self.will.take() else { return };
        let Some(version) = self.version else { return };
        let delay = will.properties.will_delay_interval().unwrap_or(0).min(self.session_expiry);
        // A retained will is retained when published, as any retained PUBLISH. The Will
        // Delay Interval is the will's, not the message's.
        let properties = will
            .properties
            .iter()
            .filter(|property| !matches!(property, Property::WillDelayInterval(_)))
            .cloned()
            .fold(Properties::new(), Properties::with);
        let publish = Publish {
            qos: will.qos,
            retain: will.retain,
            packet_id: (will.qos != QoS::AtMostOnce).then_some(1),
            properties,
            ..Publish::new(will.topic, will.payload)
        };
        let core = self.context.core.clone();
        let message = mapping::message_from_publish(
            &publish,
            version,
            core.next_message_id(),
            self.session.next_message_id(),
        );
        if let Err(denied) = self.session.authorize(Action::Write, &message.destination) {
            tracing::info!(peer = %self.peer, topic = %publish.topic, %denied, "MQTT will not published");
            return;
        }
        let message = Arc::new(message);
        match self.session.client_id().filter(|_| delay > 0) {
            Some(client_id) => {
                tracing::debug!(peer = %self.peer, topic = %publish.topic, delay, "MQTT will delayed");
                let delay = std::time::Duration::from_secs(u64::from(delay));
                core.publish_will_after(
                    client_id.clone(),
                    delay,
                    message,
                    self.session.connection(),
                );
            }
            None => {
                tracing::debug!(peer = %self.peer, topic = %publish.topic, "publishing the MQTT will");
                if let Err(error) = core.send(message, self.session.connection(), None) {
                    tracing::warn!(peer = %self.peer, %error, "MQTT will not published");
                }
            }
        }
    }

    /// Writes `packet` in order behind the answers still waiting for the store.
    pub(super) fn answer(&mut self, packet: Packet) {
        if self.pending.is_empty() {
            self.write(&packet);
        } else {
            self.pending.push_back(Box::pin(async move { Outcome::packet(packet) }));
        }
    }
}

/// PUBCOMP once `released` (the received mark's removal) is durable; a store failure closes.
async fn released_outcome(released: store::Completion, pubcomp: Packet) -> Outcome {
    match released.await {
        Ok(()) => Outcome::packet(pubcomp),
        Err(error) => {
            tracing::error!(%error, "store refused the release of a QoS 2 message");
            Outcome { packet: store_failure(&error.to_string()), close: true }
        }
    }
}

/// What a 5.0 client is told when the store fails (3.x clients are closed without a word;
/// the codec refuses a DISCONNECT with a reason in 3.x, and [`Connection::write`] drops it).
fn store_failure(why: &str) -> Option<Packet> {
    Some(Packet::Disconnect(Disconnect {
        reason: ReasonCode::UnspecifiedError,
        properties: Properties::new()
            .with(Property::ReasonString(format!("message not stored: {why}"))),
    }))
}
