//! SUBSCRIBE, UNSUBSCRIBE, the PUBLISH packets of deliveries and their acknowledgements
//! (PUBACK; PUBREC, PUBREL out, PUBCOMP), and a persistent session's durable subscriptions.

use std::sync::Arc;

use protocol::mqtt::{
    Packet, Properties, Property, PubAck, QoS, ReasonCode, RetainHandling, Suback, Subscribe,
    Unsuback, Unsubscribe, Version,
};
use store::{Destination, Message, SubscriptionKey};

use super::{mapping, Connection, Fatal, Outcome};
use crate::core::sessions::{SessionRecord, StoredSubscription};
use crate::core::{
    AckMode, ConsumerId, ConsumerSpec, Core, Delivery, QueueHandle, SubscribeRequest,
};
use crate::security::Action;
use crate::session::{Settle, Settled};
use crate::transport::writer::AutoAck;

/// One subscription of the connection.
pub(super) struct Subscription {
    consumer: ConsumerId,
    /// The highest QoS granted: deliveries go out at the lower of it and the message's.
    qos: QoS,
    /// The filter starts with a wildcard: it does not match `$` topics (MQTT-4.7.2-1).
    leading_wildcard: bool,
    /// The durable subscription of a persistent session's QoS 1 or 2 subscription.
    durable: Option<SubscriptionKey>,
    /// The 5.0 Subscription Identifier the SUBSCRIBE gave it: sent on the PUBLISH packets of
    /// its deliveries (spec 3.3.4).
    identifier: Option<u32>,
    /// 5.0's Retain As Published: ordinary deliveries keep the retain flag they were
    /// published with (else it is 0, MQTT-3.3.1-12).
    retain_as_published: bool,
    no_local: bool,
    /// The durable subscription of the shared group (`$share/{ShareName}/{filter}`) it is a
    /// member of.
    shared: Option<SubscriptionKey>,
}

impl Subscription {
    pub(super) fn consumer(&self) -> ConsumerId {
        self.consumer
    }

    pub(super) fn durable(&self) -> Option<&SubscriptionKey> {
        self.durable.as_ref()
    }

    pub(super) fn shared(&self) -> Option<&SubscriptionKey> {
        self.shared.as_ref()
    }

    /// What a session record keeps of it.
    pub(super) fn stored(&self, filter: &str) -> StoredSubscription {
        StoredSubscription {
            filter: filter.into(),
            qos: self.qos as u8,
            no_local: self.no_local,
            retain_as_published: self.retain_as_published,
            identifier: self.identifier,
            durable: self.shared.clone().or_else(|| self.durable.clone()),
            shared: self.shared.is_some(),
        }
    }
}

/// What waits for the client's Receive Maximum to leave room.
pub(super) enum Waiting {
    /// A delivery of a queue.
    Delivery(Delivery),
    /// A retained message handed to a new subscription (a copy, see `send_retained`).
    Retained { consumer: ConsumerId, message: Arc<Message> },
}

impl Waiting {
    fn consumer(&self) -> ConsumerId {
        match self {
            Waiting::Delivery(delivery) => delivery.consumer,
            Waiting::Retained { consumer, .. } => *consumer,
        }
    }
}

/// What a SUBSCRIBE asks of one subscription, besides its filter.
#[derive(Debug, Clone, Copy)]
pub(super) struct Options {
    pub(super) qos: QoS,
    pub(super) no_local: bool,
    pub(super) retain_as_published: bool,
    pub(super) identifier: Option<u32>,
}

/// Where an unacknowledged QoS 1 or 2 delivery is in its handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    /// QoS 1, waiting for PUBACK.
    Puback,
    /// QoS 2, waiting for PUBREC.
    Pubrec,
    /// QoS 2, PUBREL sent, waiting for PUBCOMP.
    Pubcomp,
}

/// A QoS 1 or 2 delivery the client has not acknowledged yet.
/// A persistent session's QoS 2 delivery released (PUBREL sent) and waiting for PUBCOMP.
pub(super) struct Release {
    /// The broker id of the delivered message.
    message: store::MessageId,
    /// Resolves once the delivered message's acknowledgement is durable: the mark goes only
    /// after that (a mark gone before it would let a crash redeliver a message the client
    /// has). `None` for a mark of an earlier connection whose message was acknowledged.
    acked: Option<tokio::task::JoinHandle<()>>,
}

impl Release {
    /// A mark an earlier connection (or broker) left, for `message`.
    pub(super) fn resumed(message: store::MessageId) -> Release {
        Release { message, acked: None }
    }
}

pub(super) struct InFlight {
    consumer: ConsumerId,
    /// The queue to acknowledge it to; `None` for a retained message handed out at a
    /// subscribe, a copy whose acknowledgement goes nowhere (the retained message stays).
    queue: Option<QueueHandle>,
    message: Arc<Message>,
    stage: Stage,
}

impl Connection {
    pub(super) fn subscribe(&mut self, subscribe: Subscribe) -> Result<(), Fatal> {
        let version = self.version.unwrap_or(Version::V3_1_1);
        // One at most (the codec refuses a second, and an identifier of 0): it names every
        // subscription of the packet (spec 3.8.2.1.2).
        let identifier = subscribe.properties.subscription_identifiers().next();
        let mut reasons = Vec::with_capacity(subscribe.filters.len());
        let mut retained = Vec::new();
        for subscription in subscribe.filters {
            let options = subscription.options;
            let new = !self.subscriptions.contains_key(&subscription.filter);
            let asked = Options {
                qos: options.qos,
                no_local: options.no_local,
                retain_as_published: version == Version::V5_0 && options.retain_as_published,
                identifier,
            };
            let reason = self.subscribe_filter(&subscription.filter, asked, None);
            let wanted = match options.retain_handling {
                RetainHandling::SendAtSubscribe => true,
                RetainHandling::SendAtNewSubscribe => new,
                RetainHandling::DoNotSend => false,
            };
            if let Some(made) = self.subscriptions.get(&subscription.filter) {
                // A shared subscription gets no retained messages when it is made (spec 4.8.2).
                if wanted && !reason.is_error() && made.shared.is_none() {
                    retained.push(subscription.filter.clone());
                }
            }
            // 3.x knows one failure code.
            let reason = match (reason, version) {
                (reason, Version::V5_0) => reason,
                (reason, _) if reason.is_error() => ReasonCode::UnspecifiedError,
                (reason, _) => reason,
            };
            reasons.push(reason);
        }
        let suback =
            Suback { packet_id: subscribe.packet_id, reasons, properties: Properties::new() };
        self.save_session_record();
        self.write(&Packet::Suback(suback));
        for filter in retained {
            self.send_retained(&filter);
        }
        Ok(())
    }

    /// Hands the new subscription to `filter` the retained messages it matches (after its
    /// SUBACK), each with the retain flag set, at the lower of its QoS and the subscription's.
    /// They are copies: a QoS 1 or 2 one goes through the usual packet ids and handshake, but
    /// its acknowledgement leaves the retained message where it is. A message published to
    /// the topic meanwhile may reach the subscription both ways, which MQTT allows.
    fn send_retained(&mut self, filter: &str) {
        let Some(subscription) = self.subscriptions.get(filter) else { return };
        let (consumer, leading_wildcard) = (subscription.consumer, subscription.leading_wildcard);
        let destination = Destination::topic(mapping::to_activemq(filter));
        for message in self.context.core.retained_messages(&destination) {
            if leading_wildcard && message.destination.name.starts_with('$') {
                // MQTT-4.7.2-1: `#` and `+/...` do not match `$SYS/...`.
                continue;
            }
            // Behind what already waits for the Receive Maximum, like any delivery.
            self.backlog.push_back(Waiting::Retained { consumer, message });
        }
        self.deliver_backlog();
    }

    /// Sends one retained copy to the subscription of `consumer`, if it is still there.
    fn send_retained_copy(&mut self, consumer: ConsumerId, message: Arc<Message>) {
        let Some(filter) = self.by_consumer.get(&consumer) else { return };
        let Some(subscription) = self.subscriptions.get(filter) else { return };
        let Some(version) = self.version else { return };
        let (granted, identifier) = (subscription.qos, subscription.identifier);
        let qos = mapping::delivery_qos(&message, granted);
        let mut publish = mapping::publish_for(&message, qos, version, false);
        publish.retain = true;
        if let Some(identifier) = identifier.filter(|_| version == Version::V5_0) {
            publish.properties.push(Property::SubscriptionIdentifier(identifier));
        }
        if qos == QoS::AtMostOnce {
            self.write(&Packet::Publish(publish));
            return;
        }
        let Some(packet_id) = self.free_packet_id() else {
            tracing::info!(peer = %self.peer, "retained message not sent: every packet id is in flight");
            return;
        };
        publish.packet_id = Some(packet_id);
        if self.write(&Packet::Publish(publish)) {
            let stage = if qos == QoS::ExactlyOnce { Stage::Pubrec } else { Stage::Puback };
            self.in_flight.insert(packet_id, InFlight { consumer, queue: None, message, stage });
        }
    }

    /// Subscribes to one filter (replacing a subscription to the same filter); the SUBACK's
    /// reason code for it. `durable` names the durable subscription being resumed. A shared
    /// filter (`$share/{ShareName}/{filter}`) joins its group (see `Core::subscribe_shared`).
    pub(super) fn subscribe_filter(
        &mut self,
        filter: &str,
        options: Options,
        durable: Option<SubscriptionKey>,
    ) -> ReasonCode {
        let Options { qos, no_local, retain_as_published, identifier } = options;
        let (topic_filter, shared) = match shared_form(filter) {
            Ok(Some((share_name, topic_filter))) => {
                (topic_filter, Some(Core::shared_group_key(share_name, topic_filter)))
            }
            Ok(None) => (filter, None),
            Err(why) => {
                tracing::info!(peer = %self.peer, filter, why, "MQTT shared subscription refused");
                return ReasonCode::TopicFilterInvalid;
            }
        };
        let destination = Destination::topic(mapping::to_activemq(topic_filter));
        if let Err(denied) = self.session.authorize(Action::Read, &destination) {
            tracing::info!(peer = %self.peer, filter, %denied, "MQTT subscription refused");
            return ReasonCode::NotAuthorized;
        }
        let durable = match &shared {
            Some(group) => Some(group.clone()),
            None => durable.or_else(|| {
                let client_id = self.session.client_id()?.clone();
                (self.persistent && qos != QoS::AtMostOnce).then(|| SubscriptionKey {
                    client_id,
                    name: mapping::durable_name(qos, filter).into(),
                })
            }),
        };
        if let Some(kept) = self.subscriptions.get_mut(filter) {
            if kept.qos == qos && kept.no_local == no_local && kept.durable == durable {
                // The same subscription again (a client that resumes its session and
                // subscribes as it always does): replaced without interrupting its flow
                // (MQTT-3.8.4-3), so what it has in flight is not sent a second time.
                kept.identifier = identifier;
                kept.retain_as_published = retain_as_published;
                return granted(qos);
            }
        }
        if let Some(old) = self.subscriptions.remove(filter) {
            self.end_consumer(old.consumer);
            // Subscribing again at another QoS replaces the durable subscription too (its
            // name holds the QoS), or the old one would collect messages for ever. A group's
            // stays: the member stays in it.
            if let Some(key) = old.durable.filter(|key| Some(key) != durable.as_ref()) {
                if old.shared.is_none() {
                    if let Err(error) = self.context.core.remove_durable(&key) {
                        tracing::info!(peer = %self.peer, %error, "durable subscription not removed");
                    }
                }
            }
        }
        let core = self.context.core.clone();
        let consumer = core.next_consumer_id();
        // ActiveMQ's MQTT subscriptions take the JMS client's topic prefetch (durable: 100),
        // which a destination policy overrides; a 5.0 client's Receive Maximum bounds it.
        let requested = if durable.is_some() { 100 } else { 32766 };
        let prefetch = core
            .prefetch_for(&destination, durable.is_some(), Some(requested))
            .min(u32::from(self.receive_maximum))
            .max(1);
        let ack_mode = match qos {
            QoS::AtMostOnce => AckMode::Auto,
            QoS::AtLeastOnce | QoS::ExactlyOnce => AckMode::ClientIndividual,
        };
        let request = SubscribeRequest {
            destination,
            spec: ConsumerSpec {
                id: consumer,
                prefetch,
                ack_mode,
                exclusive: false,
                priority: 0,
                sink: self.session.delivery_sink(),
                selector: None,
                counts_redeliveries: true,
            },
            durable: durable.clone(),
            // ActiveMQ makes MQTT subscriptions retroactive to replay retained messages; here
            // the adapter hands them out itself (`send_retained`), and a retroactive
            // subscription would replay recent messages too, which MQTT does not.
            retroactive: false,
            no_local,
            connection: self.session.connection(),
        };
        let subscribed = match shared {
            Some(_) => self.session.subscribe_shared(request),
            None => self.session.subscribe(request),
        };
        if let Err(error) = subscribed {
            tracing::info!(peer = %self.peer, filter, %error, "MQTT subscription failed");
            return ReasonCode::UnspecifiedError;
        }
        let leading_wildcard = topic_filter.starts_with('+') || topic_filter.starts_with('#');
        self.by_consumer.insert(consumer, filter.to_owned());
        let durable = if shared.is_some() { None } else { durable };
        self.subscriptions.insert(
            filter.to_owned(),
            Subscription {
                consumer,
                qos,
                leading_wildcard,
                durable,
                identifier,
                retain_as_published,
                no_local,
                shared,
            },
        );
        granted(qos)
    }

    /// Closes a consumer: what it has in flight goes back to its queues.
    fn end_consumer(&mut self, consumer: ConsumerId) {
        self.by_consumer.remove(&consumer);
        self.in_flight.retain(|_, flight| flight.consumer != consumer);
        // Deliveries waiting for room under the Receive Maximum go back with the consumer.
        self.backlog.retain(|waiting| waiting.consumer() != consumer);
        self.session.unsubscribe(consumer);
        // What it had in flight no longer counts against the Receive Maximum.
        self.deliver_backlog();
    }

    pub(super) fn unsubscribe(&mut self, unsubscribe: Unsubscribe) {
        let mut reasons = Vec::with_capacity(unsubscribe.filters.len());
        let mut removals = Vec::new();
        let mut groups_left = Vec::new();
        for filter in &unsubscribe.filters {
            let Some(subscription) = self.subscriptions.remove(filter) else {
                reasons.push(ReasonCode::NoSubscriptionExisted);
                continue;
            };
            self.end_consumer(subscription.consumer);
            groups_left.extend(subscription.shared);
            if let Some(key) = subscription.durable {
                // As ActiveMQ does: unsubscribing ends the durable subscription too.
                match self.context.core.remove_durable(&key) {
                    Ok(removed) => removals.push(removed),
                    Err(error) => {
                        tracing::info!(peer = %self.peer, %error, "durable subscription not removed")
                    }
                }
            }
            reasons.push(ReasonCode::Success);
        }
        // The record first, so that a group the session left is no longer kept for it.
        self.save_session_record();
        for group in groups_left {
            self.context.core.leave_shared(&group);
        }
        if self.version != Some(Version::V5_0) {
            reasons.clear();
        }
        let unsuback = Packet::Unsuback(Unsuback {
            packet_id: unsubscribe.packet_id,
            reasons,
            properties: Properties::new(),
        });
        if removals.is_empty() {
            self.write(&unsuback);
            return;
        }
        self.pending.push_back(Box::pin(async move {
            for removed in removals {
                if let Err(error) = removed.await {
                    tracing::warn!(%error, "durable subscription removal not stored");
                }
            }
            Outcome::packet(unsuback)
        }));
    }

    /// At CONNECT: a clean session discards the client's session (its record, durable
    /// subscriptions and places in shared groups, as ActiveMQ discards the durable
    /// subscriptions); a resumed one keeps them. Whether a session was present.
    pub(super) fn resume_session(&mut self, clean: bool, client_id: &str) -> bool {
        let core = self.context.core.clone();
        let kept = core.durable_subscriptions_of(client_id);
        if clean {
            core.discard_session(client_id);
            for (key, _) in kept {
                if mapping::parse_durable_name(&key.name).is_some() {
                    if let Err(error) = core.remove_durable(&key) {
                        tracing::info!(peer = %self.peer, %error, "durable subscription not removed");
                    }
                }
            }
            return false;
        }
        let record = core.resume_session_record(client_id);
        let mut resumed: Vec<StoredSubscription> =
            record.as_ref().map(|record| record.subscriptions.clone()).unwrap_or_default();
        // Durable subscriptions no record lists (made before records were kept) are resumed
        // from their name alone, without an identifier.
        for (key, _) in kept {
            let Some((qos, filter)) = mapping::parse_durable_name(&key.name) else { continue };
            if resumed.iter().any(|stored| stored.durable.as_ref() == Some(&key)) {
                continue;
            }
            resumed.push(StoredSubscription {
                filter: filter.into(),
                qos: qos as u8,
                no_local: false,
                retain_as_published: false,
                identifier: None,
                durable: Some(key),
                shared: false,
            });
        }
        let present = record.is_some() || !resumed.is_empty();
        self.resumed = resumed;
        present
    }

    /// After the CONNACK of a resumed session: its subscriptions get their consumers again,
    /// with the options and identifiers they were made with, and what they kept meanwhile is
    /// delivered.
    pub(super) fn restore_subscriptions(&mut self) {
        for stored in std::mem::take(&mut self.resumed) {
            let Some(qos) = QoS::from_u8(stored.qos) else { continue };
            let options = Options {
                qos,
                no_local: stored.no_local,
                retain_as_published: stored.retain_as_published,
                identifier: stored.identifier,
            };
            let durable = stored.durable.filter(|_| !stored.shared);
            let reason = self.subscribe_filter(&stored.filter, options, durable);
            if reason.is_error() {
                tracing::info!(peer = %self.peer, filter = %stored.filter, %reason, "subscription not resumed");
            }
        }
    }

    /// Stores what the session holds (its subscriptions and expiry) while it is connected,
    /// if it outlives the connection: to resume it, or end it after a restart.
    pub(super) fn save_session_record(&mut self) {
        if !self.persistent {
            return;
        }
        if let Some(record) = self.session_record() {
            self.context.core.save_session(record);
        }
    }

    /// The session's record as of now (connected).
    pub(super) fn session_record(&self) -> Option<SessionRecord> {
        let client_id = self.session.client_id()?.clone();
        let mut subscriptions: Vec<StoredSubscription> = self
            .subscriptions
            .iter()
            .map(|(filter, subscription)| subscription.stored(filter))
            .collect();
        subscriptions.sort_by(|a, b| a.filter.cmp(&b.filter));
        Some(SessionRecord {
            client_id,
            expiry_interval: self.session_expiry,
            ended_at: None,
            subscriptions,
        })
    }

    pub(super) fn deliver(&mut self, delivery: Delivery) {
        if !self.backlog.is_empty() || self.unacknowledged() >= usize::from(self.receive_maximum) {
            // The client's Receive Maximum bounds the QoS 1 and 2 deliveries of the whole
            // connection; a QoS 0 one could go now, but order within a subscription must hold:
            // everything waits behind the first that waits.
            self.backlog.push_back(Waiting::Delivery(delivery));
            return;
        }
        self.deliver_now(delivery);
    }

    /// Sends what waited under the Receive Maximum while there is room.
    fn deliver_backlog(&mut self) {
        while self.unacknowledged() < usize::from(self.receive_maximum) {
            match self.backlog.pop_front() {
                Some(Waiting::Delivery(delivery)) => self.deliver_now(delivery),
                Some(Waiting::Retained { consumer, message }) => {
                    self.send_retained_copy(consumer, message)
                }
                None => break,
            }
        }
    }

    /// QoS 1 and 2 deliveries the client has not completed: in flight, and released
    /// (PUBREL sent, PUBCOMP not come), which the Receive Maximum counts too.
    fn unacknowledged(&self) -> usize {
        self.in_flight.len() + self.released.len()
    }

    fn deliver_now(&mut self, delivery: Delivery) {
        let Some(filter) = self.by_consumer.get(&delivery.consumer) else {
            // Unsubscribed meanwhile: the queue took the message back with the consumer.
            return;
        };
        let message_id = delivery.message.id;
        if let Some(release) = self.released.values_mut().find(|r| r.message == message_id) {
            // Released before a crash that came before its acknowledgement was durable: the
            // client has it, and gets PUBREL again, not the message (`core::exactly_once`).
            let settled = Settled::of([(delivery.queue, delivery.message)]);
            let acked = self.session.ack_durably(delivery.consumer, settled);
            release.acked = Some(tokio::spawn(async move { drop(acked.await) }));
            return;
        }
        let Some(subscription) = self.subscriptions.get(filter) else { return };
        let Some(version) = self.version else { return };
        let message = delivery.message;
        let topic_is_system = message.destination.name.starts_with('$');
        if subscription.leading_wildcard && topic_is_system {
            // Not matched by a wildcard at the first level: done with, unseen.
            let settled = Settled::of([(delivery.queue, message)]);
            self.session.settle(delivery.consumer, settled, Settle::Ack);
            return;
        }
        let qos = mapping::delivery_qos(&message, subscription.qos);
        let mut publish = mapping::publish_for(&message, qos, version, delivery.redelivered);
        publish.retain = subscription.retain_as_published && mapping::published_retained(&message);
        if let Some(identifier) = subscription.identifier.filter(|_| version == Version::V5_0) {
            publish.properties.push(Property::SubscriptionIdentifier(identifier));
        }
        // A composite's topic shows the part the subscription matched (as over STOMP).
        if let Some(shown) = self.context.core.shown_destination(delivery.queue.key(), &message) {
            publish.topic = mapping::to_mqtt(&shown.name);
        }
        let consumer = delivery.consumer;
        if qos == QoS::AtMostOnce {
            let mut bytes = bytes::BytesMut::new();
            if let Err(error) = self.codec.encode(&Packet::Publish(publish), &mut bytes) {
                tracing::info!(peer = %self.peer, %error, "MQTT delivery dropped");
                let settled = Settled::of([(delivery.queue, message)]);
                self.session.settle(consumer, settled, Settle::Ack);
                return;
            }
            // Acknowledged once written, as STOMP's auto mode.
            self.output.write_auto_ack(AutoAck {
                bytes: bytes.freeze(),
                queue: delivery.queue,
                consumer,
                id: message.id,
            });
            return;
        }
        let Some(packet_id) = self.free_packet_id() else {
            // Every packet id is in flight: the message goes back for later.
            let settled = Settled::of([(delivery.queue, message)]);
            self.session.settle(consumer, settled, Settle::Release);
            return;
        };
        publish.packet_id = Some(packet_id);
        if !self.write(&Packet::Publish(publish)) {
            // Too large for the client: dropped, as the spec asks.
            let settled = Settled::of([(delivery.queue, message)]);
            self.session.settle(consumer, settled, Settle::Ack);
            return;
        }
        let stage = if qos == QoS::ExactlyOnce { Stage::Pubrec } else { Stage::Puback };
        let queue = Some(delivery.queue);
        self.in_flight.insert(packet_id, InFlight { consumer, queue, message, stage });
    }

    /// The next packet id no delivery holds.
    fn free_packet_id(&mut self) -> Option<u16> {
        for _ in 0..u16::MAX {
            self.next_packet_id = self.next_packet_id.checked_add(1).unwrap_or(1);
            let id = self.next_packet_id;
            if !self.in_flight.contains_key(&id) && !self.released.contains_key(&id) {
                return Some(id);
            }
        }
        None
    }

    /// Acknowledges an in-flight delivery to its queue.
    fn settle_in_flight(&mut self, packet_id: u16) {
        let Some(flight) = self.in_flight.remove(&packet_id) else { return };
        // A retained message's copy has nothing to acknowledge.
        if let Some(queue) = flight.queue {
            let settled = Settled::of([(queue, flight.message)]);
            self.session.settle(flight.consumer, settled, Settle::Ack);
        }
        self.deliver_backlog();
    }

    pub(super) fn puback(&mut self, packet_id: u16) {
        match self.in_flight.get(&packet_id).map(|flight| flight.stage) {
            Some(Stage::Puback) => self.settle_in_flight(packet_id),
            _ => tracing::debug!(peer = %self.peer, packet_id, "PUBACK for no QoS 1 delivery"),
        }
    }

    pub(super) fn pubrec(&mut self, packet_id: u16, reason: ReasonCode) {
        let stage = self.in_flight.get(&packet_id).map(|flight| flight.stage);
        if reason.is_error() {
            // The client refused the message (5.0): the handshake ends here.
            if stage == Some(Stage::Pubrec) {
                self.settle_in_flight(packet_id);
            }
            return;
        }
        let client = self.session.client_id().filter(|_| self.persistent).cloned();
        if let (Some(Stage::Pubrec), Some(client)) = (stage, client) {
            return self.release_persistently(packet_id, &client);
        }
        let reason = match stage {
            Some(Stage::Pubrec) | Some(Stage::Pubcomp) => {
                if let Some(flight) = self.in_flight.get_mut(&packet_id) {
                    flight.stage = Stage::Pubcomp;
                }
                ReasonCode::Success
            }
            // A resend of PUBREC for a delivery already released.
            _ if self.released.contains_key(&packet_id) => ReasonCode::Success,
            _ => ReasonCode::PacketIdentifierNotFound,
        };
        let reason = if self.version == Some(Version::V5_0) { reason } else { ReasonCode::Success };
        let pubrel = PubAck { packet_id, reason, properties: Properties::new() };
        self.write(&Packet::Pubrel(pubrel));
    }

    /// PUBREC of a persistent session's QoS 2 delivery: the released mark is stored, then the
    /// delivery acknowledged (the store applies units in the order they are submitted, so the
    /// acknowledgement is never durable without the mark), and PUBREL goes once the mark is
    /// durable: from then on a restart resends PUBREL, never the message, which the client
    /// may have handed to its application already.
    fn release_persistently(&mut self, packet_id: u16, client: &str) {
        let Some(flight) = self.in_flight.remove(&packet_id) else { return };
        let message = flight.message.id;
        let marked = self.context.core.mark_exactly_once_released(client, packet_id, message);
        // After the mark's submit: the store applies the acknowledgement after the mark.
        let acked = flight.queue.map(|queue| {
            let settled = Settled::of([(queue, flight.message)]);
            let acked = self.session.ack_durably(flight.consumer, settled);
            tokio::spawn(async move { drop(acked.await) })
        });
        self.released.insert(packet_id, Release { message, acked });
        self.deliver_backlog();
        let pubrel = Packet::Pubrel(PubAck::new(packet_id));
        self.pending.push_back(Box::pin(async move {
            match marked.await {
                Ok(()) => Outcome::packet(pubrel),
                Err(error) => {
                    tracing::error!(%error, "store refused a QoS 2 release mark");
                    Outcome { packet: None, close: true }
                }
            }
        }));
    }

    /// After the CONNACK of a resumed session: PUBREL again for each delivery released and
    /// not completed (spec 4.4: a PUBREL is resent, never the PUBLISH).
    pub(super) fn resend_releases(&mut self) {
        let mut ids: Vec<u16> = self.released.keys().copied().collect();
        ids.sort_unstable();
        for packet_id in ids {
            self.write(&Packet::Pubrel(PubAck::new(packet_id)));
        }
    }

    pub(super) fn pubcomp(&mut self, packet_id: u16) {
        if let Some(release) = self.released.remove(&packet_id) {
            if let Some(client) = self.session.client_id().cloned() {
                // Nothing waits for it: a PUBCOMP lost in a crash only makes the next
                // connection send one more PUBREL, which the client answers. The mark goes
                // once the message's acknowledgement is durable.
                let core = self.context.core.clone();
                tokio::spawn(async move {
                    if let Some(acked) = release.acked {
                        drop(acked.await);
                    }
                    drop(core.complete_exactly_once(&client, packet_id));
                });
            }
            return self.deliver_backlog();
        }
        match self.in_flight.get(&packet_id).map(|flight| flight.stage) {
            Some(Stage::Pubcomp) => self.settle_in_flight(packet_id),
            _ => tracing::debug!(peer = %self.peer, packet_id, "PUBCOMP for no QoS 2 delivery"),
        }
    }
}

/// The SUBACK reason code of a subscription granted at `qos`.
fn granted(qos: QoS) -> ReasonCode {
    match qos {
        QoS::AtMostOnce => ReasonCode::Success,
        QoS::AtLeastOnce => ReasonCode::GrantedQos1,
        QoS::ExactlyOnce => ReasonCode::GrantedQos2,
    }
}

/// The share name and topic filter of a shared subscription's filter, `None` for an ordinary
/// filter; why it is refused for a `$share/` filter that is not a valid one (a share name
/// that is empty or holds `+`, `#`; no filter after it; a filter that breaks the rules).
fn shared_form(filter: &str) -> Result<Option<(&str, &str)>, String> {
    match protocol::mqtt::topic::parse_shared_subscription(filter) {
        Ok(Some(shared)) => Ok(Some((shared.group, shared.filter))),
        Ok(None) => Ok(None),
        Err(error) => Err(error.to_string()),
    }
}
