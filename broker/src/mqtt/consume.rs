//! SUBSCRIBE, UNSUBSCRIBE, the PUBLISH packets of deliveries and their acknowledgements
//! (PUBACK; PUBREC, PUBREL out, PUBCOMP), and a persistent session's durable subscriptions.

use std::sync::Arc;

use protocol::mqtt::{
    Packet, Properties, Property, PubAck, QoS, ReasonCode, RetainHandling, Suback, Subscribe,
    Unsuback, Unsubscribe, Version,
};
use store::{Destination, Message, SubscriptionKey};

use super::{mapping, Connection, Fatal, Outcome};
use crate::core::{AckMode, ConsumerId, ConsumerSpec, Delivery, QueueHandle, SubscribeRequest};
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
}

impl Subscription {
    pub(super) fn consumer(&self) -> ConsumerId {
        self.consumer
    }
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
            let reason = self.subscribe_filter(
                &subscription.filter,
                options.qos,
                options.no_local,
                identifier,
                None,
            );
            let wanted = match options.retain_handling {
                RetainHandling::SendAtSubscribe => true,
                RetainHandling::SendAtNewSubscribe => new,
                RetainHandling::DoNotSend => false,
            };
            if let Some(made) = self.subscriptions.get_mut(&subscription.filter) {
                made.retain_as_published = version == Version::V5_0 && options.retain_as_published;
                if wanted && !reason.is_error() {
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
        let Some(version) = self.version else { return };
        let (consumer, granted, identifier) =
            (subscription.consumer, subscription.qos, subscription.identifier);
        let leading_wildcard = subscription.leading_wildcard;
        let destination = Destination::topic(mapping::to_activemq(filter));
        for message in self.context.core.retained_messages(&destination) {
            if leading_wildcard && message.destination.name.starts_with('$') {
                // MQTT-4.7.2-1: `#` and `+/...` do not match `$SYS/...`.
                continue;
            }
            let qos = mapping::delivery_qos(&message, granted);
            let mut publish = mapping::publish_for(&message, qos, version, false);
            publish.retain = true;
            if let Some(identifier) = identifier.filter(|_| version == Version::V5_0) {
                publish.properties.push(Property::SubscriptionIdentifier(identifier));
            }
            if qos == QoS::AtMostOnce {
                self.write(&Packet::Publish(publish));
                continue;
            }
            let Some(packet_id) = self.free_packet_id() else {
                tracing::info!(peer = %self.peer, filter, "retained message not sent: every packet id is in flight");
                continue;
            };
            publish.packet_id = Some(packet_id);
            if self.write(&Packet::Publish(publish)) {
                let stage = if qos == QoS::ExactlyOnce { Stage::Pubrec } else { Stage::Puback };
                self.in_flight
                    .insert(packet_id, InFlight { consumer, queue: None, message, stage });
            }
        }
    }

    /// Subscribes to one filter (replacing a subscription to the same filter); the SUBACK's
    /// reason code for it. `durable` names the durable subscription being resumed.
    fn subscribe_filter(
        &mut self,
        filter: &str,
        qos: QoS,
        no_local: bool,
        identifier: Option<u32>,
        durable: Option<SubscriptionKey>,
    ) -> ReasonCode {
        if protocol::mqtt::topic::parse_shared_subscription(filter).ok().flatten().is_some() {
            return ReasonCode::SharedSubscriptionsNotSupported;
        }
        let destination = Destination::topic(mapping::to_activemq(filter));
        if let Err(denied) = self.session.authorize(Action::Read, &destination) {
            tracing::info!(peer = %self.peer, filter, %denied, "MQTT subscription refused");
            return ReasonCode::NotAuthorized;
        }
        let durable = durable.or_else(|| {
            let client_id = self.session.client_id()?.clone();
            (self.persistent && qos != QoS::AtMostOnce).then(|| SubscriptionKey {
                client_id,
                name: mapping::durable_name(qos, filter).into(),
            })
        });
        if let Some(old) = self.subscriptions.remove(filter) {
            self.end_consumer(old.consumer);
            // Subscribing again at another QoS replaces the durable subscription too (its
            // name holds the QoS), or the old one would collect messages for ever.
            if let Some(key) = old.durable.filter(|key| Some(key) != durable.as_ref()) {
                if let Err(error) = self.context.core.remove_durable(&key) {
                    tracing::info!(peer = %self.peer, %error, "durable subscription not removed");
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
        if let Err(error) = self.session.subscribe(request) {
            tracing::info!(peer = %self.peer, filter, %error, "MQTT subscription failed");
            return ReasonCode::UnspecifiedError;
        }
        let leading_wildcard = filter.starts_with('+') || filter.starts_with('#');
        self.by_consumer.insert(consumer, filter.to_owned());
        self.subscriptions.insert(
            filter.to_owned(),
            Subscription {
                consumer,
                qos,
                leading_wildcard,
                durable,
                identifier,
                retain_as_published: false,
            },
        );
        match qos {
            QoS::AtMostOnce => ReasonCode::Success,
            QoS::AtLeastOnce => ReasonCode::GrantedQos1,
            QoS::ExactlyOnce => ReasonCode::GrantedQos2,
        }
    }

    /// Closes a consumer: what it has in flight goes back to its queues.
    fn end_consumer(&mut self, consumer: ConsumerId) {
        self.by_consumer.remove(&consumer);
        self.in_flight.retain(|_, flight| flight.consumer != consumer);
        self.session.unsubscribe(consumer);
    }

    pub(super) fn unsubscribe(&mut self, unsubscribe: Unsubscribe) {
        let mut reasons = Vec::with_capacity(unsubscribe.filters.len());
        let mut removals = Vec::new();
        for filter in &unsubscribe.filters {
            let Some(subscription) = self.subscriptions.remove(filter) else {
                reasons.push(ReasonCode::NoSubscriptionExisted);
                continue;
            };
            self.end_consumer(subscription.consumer);
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

    /// At CONNECT: a clean session discards the client's durable subscriptions (as ActiveMQ
    /// does); a resumed one keeps them. Whether a session was present.
    pub(super) fn resume_session(&mut self, clean: bool, client_id: &str) -> bool {
        let core = self.context.core.clone();
        let kept = core.durable_subscriptions_of(client_id);
        if clean {
            for (key, _) in kept {
                if mapping::parse_durable_name(&key.name).is_some() {
                    if let Err(error) = core.remove_durable(&key) {
                        tracing::info!(peer = %self.peer, %error, "durable subscription not removed");
                    }
                }
            }
            return false;
        }
        let present = kept.iter().any(|(key, _)| mapping::parse_durable_name(&key.name).is_some());
        self.resumed = kept;
        present
    }

    /// After the CONNACK of a resumed session: its durable subscriptions get their consumers
    /// again, and what they kept meanwhile is delivered.
    pub(super) fn restore_subscriptions(&mut self) {
        for (key, _) in std::mem::take(&mut self.resumed) {
            let Some((qos, filter)) = mapping::parse_durable_name(&key.name) else { continue };
            let filter = filter.to_owned();
            // The identifier is not part of the durable subscription's name: a resumed
            // subscription has none.
            let reason = self.subscribe_filter(&filter, qos, false, None, Some(key));
            if reason.is_error() {
                tracing::info!(peer = %self.peer, filter, %reason, "durable subscription not resumed");
            }
        }
    }

    pub(super) fn deliver(&mut self, delivery: Delivery) {
        let Some(filter) = self.by_consumer.get(&delivery.consumer) else {
            // Unsubscribed meanwhile: the queue took the message back with the consumer.
            return;
        };
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
            if !self.in_flight.contains_key(&self.next_packet_id) {
                return Some(self.next_packet_id);
            }
        }
        None
    }

    /// Acknowledges an in-flight delivery to its queue.
    fn settle_in_flight(&mut self, packet_id: u16) {
        let Some(flight) = self.in_flight.remove(&packet_id) else { return };
        // A retained message's copy has nothing to acknowledge.
        let Some(queue) = flight.queue else { return };
        let settled = Settled::of([(queue, flight.message)]);
        self.session.settle(flight.consumer, settled, Settle::Ack);
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
        let reason = match stage {
            Some(Stage::Pubrec) | Some(Stage::Pubcomp) => {
                if let Some(flight) = self.in_flight.get_mut(&packet_id) {
                    flight.stage = Stage::Pubcomp;
                }
                ReasonCode::Success
            }
            _ => ReasonCode::PacketIdentifierNotFound,
        };
        let reason = if self.version == Some(Version::V5_0) { reason } else { ReasonCode::Success };
        let pubrel = PubAck { packet_id, reason, properties: Properties::new() };
        self.write(&Packet::Pubrel(pubrel));
    }

    pub(super) fn pubcomp(&mut self, packet_id: u16) {
        match self.in_flight.get(&packet_id).map(|flight| flight.stage) {
            Some(Stage::Pubcomp) => self.settle_in_flight(packet_id),
            _ => tracing::debug!(peer = %self.peer, packet_id, "PUBCOMP for no QoS 2 delivery"),
        }
    }
}
