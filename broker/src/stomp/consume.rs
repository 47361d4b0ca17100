//! SUBSCRIBE, UNSUBSCRIBE, ACK, NACK and the MESSAGE frames of deliveries.

use std::sync::Arc;

use bytes::BytesMut;
use protocol::stomp::{Command, Frame, Version};
use store::{DestinationKind, Message, SubscriptionKey};

use super::{mapping, Connection, Fatal, Outcome, Subscription};
use crate::core::selector::Selector;
use crate::core::{AckMode, ConsumerSpec, Delivery, SubscribeRequest};
use crate::session::{Delivered, Settle};
use crate::transport::writer::AutoAck;

/// ActiveMQ's subscription headers that ferromq honours.
const SUPPORTED_ACTIVEMQ_HEADERS: &[&str] = &[
    "activemq.prefetchSize",
    "activemq.subscriptionName",
    "activemq.exclusive",
    "activemq.retroactive",
    "activemq.noLocal",
    "activemq.priority",
    // Every dispatch is asynchronous here; the header changes nothing.
    "activemq.dispatchAsync",
];

fn flag(frame: &Frame, name: &str) -> Result<bool, Fatal> {
    match frame.get(name) {
        None => Ok(false),
        Some(value) if value.eq_ignore_ascii_case("true") => Ok(true),
        Some(value) if value.eq_ignore_ascii_case("false") => Ok(false),
        Some(value) => Err(Fatal::new(
            Some(frame),
            &format!("invalid {name} header"),
            &format!("`{value}`: expected true or false"),
        )),
    }
}

impl Connection {
    pub(super) fn subscribe(&mut self, frame: &Frame) -> Result<(), Fatal> {
        let destination = frame.get("destination").ok_or_else(|| {
            Fatal::new(Some(frame), "SUBSCRIBE frame has no destination header", "")
        })?;
        let destination = self.resolve_destination(frame, destination)?;
        self.session
            .authorize(crate::security::Action::Read, &destination)
            .map_err(|denied| Fatal::new(Some(frame), &denied.to_string(), ""))?;
        let id = match (frame.get("id"), self.codec.version()) {
            (Some(id), _) => id.to_owned(),
            // STOMP 1.0 makes the id optional; ActiveMQ then names it after the destination.
            (None, Version::V1_0) => frame.get("destination").unwrap_or_default().to_owned(),
            (None, _) => {
                return Err(Fatal::new(
                    Some(frame),
                    "SUBSCRIBE frame has no id header",
                    "STOMP 1.1 and later require it",
                ))
            }
        };
        if self.subscriptions.contains_key(&id) {
            return Err(Fatal::new(
                Some(frame),
                "duplicate subscription id",
                &format!("subscription {id} already exists on this connection"),
            ));
        }
        let ack_mode = match frame.get("ack").unwrap_or("auto") {
            "auto" => AckMode::Auto,
            "client" => AckMode::Client,
            "client-individual" => AckMode::ClientIndividual,
            other => {
                return Err(Fatal::new(
                    Some(frame),
                    "invalid ack header",
                    &format!("`{other}`: expected auto, client or client-individual"),
                ))
            }
        };
        for (name, _) in &frame.headers {
            let unsupported = name.starts_with("activemq.")
                && !SUPPORTED_ACTIVEMQ_HEADERS.contains(&name.as_str());
            if unsupported {
                return Err(Fatal::new(
                    Some(frame),
                    &format!("subscription header {name} is not supported yet"),
                    "this ferromq version does not implement it; remove the header",
                ));
            }
        }
        let requested_prefetch = match frame.get("activemq.prefetchSize") {
            Some(value) => {
                Some(value.trim().parse::<u32>().ok().filter(|p| *p > 0).ok_or_else(|| {
                    Fatal::new(
                        Some(frame),
                        "invalid activemq.prefetchSize header",
                        &format!("`{value}`: expected a positive integer"),
                    )
                })?)
            }
            None => None,
        };
        // STOMP properties are all strings; like ActiveMQ's STOMP adapter, the selector
        // converts them when they meet a number (`count > 5` matches the header `count:7`).
        let selector = Selector::parse_optional(frame.get("selector"))
            .map_err(|e| {
                let selector = frame.get("selector").unwrap_or_default();
                Fatal::new(Some(frame), &e.to_string(), &format!("selector: {selector}"))
            })?
            .map(|selector| Arc::new(selector.converting_strings()));
        let priority = match frame.get("activemq.priority") {
            Some(value) => {
                value.trim().parse::<i8>().ok().filter(|p| *p >= 0).ok_or_else(|| {
                    Fatal::new(
                        Some(frame),
                        "invalid activemq.priority header",
                        &format!("`{value}`: expected a consumer priority from 0 to 127"),
                    )
                })?
            }
            None => 0,
        };
        if flag(frame, "browser")? {
            if destination.kind != DestinationKind::Queue {
                return Err(Fatal::new(Some(frame), "only queues can be browsed", ""));
            }
            if self.browsers.contains(&id) {
                return Err(Fatal::new(
                    Some(frame),
                    "duplicate subscription id",
                    &format!("subscription {id} already exists on this connection"),
                ));
            }
            let snapshot = self.context.core.browse(&destination.name, selector);
            let header = frame.get("destination").unwrap_or_default().to_owned();
            self.browsers.insert(id.clone());
            self.browses.push(Box::pin(async move { (id, header, snapshot.await) }));
            self.receipt(frame);
            return Ok(());
        }
        let durable = match frame.get("activemq.subscriptionName") {
            None => None,
            Some(name) => Some(self.subscription_key(frame, name, destination.kind)?),
        };
        let core = self.context.core.clone();
        let consumer = core.next_consumer_id();
        let prefetch = core.prefetch_for(&destination, durable.is_some(), requested_prefetch);
        let request = SubscribeRequest {
            destination,
            spec: ConsumerSpec {
                id: consumer,
                prefetch,
                ack_mode,
                exclusive: flag(frame, "activemq.exclusive")?,
                priority,
                sink: self.session.delivery_sink(),
                selector,
                // STOMP clients do not count: the broker does, and dead-letters past its limit.
                counts_redeliveries: true,
            },
            durable,
            retroactive: flag(frame, "activemq.retroactive")?,
            no_local: flag(frame, "activemq.noLocal")?,
            connection: self.session.connection(),
        };
        self.session.subscribe(request).map_err(|e| Fatal::new(Some(frame), &e.to_string(), ""))?;
        self.by_consumer.insert(consumer, id.clone());
        self.subscriptions
            .insert(id, Subscription { consumer, ack_mode, delivered: Delivered::default() });
        self.receipt(frame);
        Ok(())
    }

    /// The durable subscription identity for `name`: it needs a topic and the connection's
    /// client id.
    fn subscription_key(
        &self,
        frame: &Frame,
        name: &str,
        kind: DestinationKind,
    ) -> Result<SubscriptionKey, Fatal> {
        if kind != DestinationKind::Topic {
            return Err(Fatal::new(
                Some(frame),
                "durable subscriptions are for topics",
                "activemq.subscriptionName needs a /topic/ destination",
            ));
        }
        let Some(client_id) = self.session.client_id() else {
            return Err(Fatal::new(
                Some(frame),
                "a durable subscription needs a client id",
                "send a client-id header on CONNECT",
            ));
        };
        Ok(SubscriptionKey { client_id: client_id.clone(), name: name.into() })
    }

    pub(super) fn unsubscribe(&mut self, frame: &Frame) -> Result<(), Fatal> {
        let durable_name = frame.get("activemq.subscriptionName");
        let id = match (frame.get("id"), frame.get("destination")) {
            (Some(id), _) => Some(id.to_owned()),
            (None, Some(destination)) if self.codec.version() == Version::V1_0 => {
                Some(destination.to_owned())
            }
            _ if durable_name.is_some() => None,
            _ => return Err(Fatal::new(Some(frame), "UNSUBSCRIBE frame has no id header", "")),
        };
        let core = self.context.core.clone();
        if let Some(id) = id.filter(|id| !self.browsers.remove(id)) {
            let Some(subscription) = self.subscriptions.remove(&id) else {
                return Err(Fatal::new(
                    Some(frame),
                    "no such subscription",
                    &format!("there is no subscription {id} on this connection"),
                ));
            };
            self.by_consumer.remove(&subscription.consumer);
            self.session.unsubscribe(subscription.consumer);
        }
        if let Some(name) = durable_name {
            // ActiveMQ's way to end a durable subscription for good.
            let key = self.subscription_key(frame, name, DestinationKind::Topic)?;
            let removed = core
                .remove_durable(&key)
                .map_err(|e| Fatal::new(Some(frame), &e.to_string(), ""))?;
            let receipt = frame.get("receipt").map(str::to_owned);
            self.pending.push_back(Box::pin(async move {
                let frame = match removed.await {
                    Ok(()) => receipt.map(|r| Frame::new(Command::Receipt).header("receipt-id", r)),
                    Err(error) => {
                        let mut e = Frame::error(&format!("subscription not removed: {error}"), "");
                        if let Some(r) = receipt {
                            e.push_header("receipt-id", r);
                        }
                        Some(e)
                    }
                };
                Outcome { frame, close: false }
            }));
            return Ok(());
        }
        self.receipt(frame);
        Ok(())
    }

    /// ACK (`positive`) or NACK.
    pub(super) fn ack(&mut self, frame: &Frame, positive: bool) -> Result<(), Fatal> {
        let version = self.codec.version();
        if !positive && version == Version::V1_0 {
            return Err(Fatal::new(
                Some(frame),
                "NACK is not part of STOMP 1.0",
                "negotiate STOMP 1.1 or later",
            ));
        }
        let transaction = frame.get("transaction");
        if let Some(name) = transaction {
            if !self.session.has_transaction(name) {
                return Err(Fatal::new(
                    Some(frame),
                    &format!("transaction {name} has not begun"),
                    "",
                ));
            }
        }
        let message_id = match version {
            Version::V1_2 => frame.get("id"),
            _ => frame.get("message-id"),
        };
        let Some(message_id) = message_id else {
            let header = if version == Version::V1_2 { "id" } else { "message-id" };
            return Err(Fatal::new(
                Some(frame),
                &format!("{} frame has no {header} header", frame.command.as_str()),
                "",
            ));
        };
        let subscription_hint = frame.get("subscription");
        let found = self.subscriptions.iter_mut().find_map(|(id, subscription)| {
            if subscription_hint.is_some_and(|hint| hint != id) {
                return None;
            }
            let position = subscription.delivered.position(|message| match version {
                Version::V1_2 => is_ack_id(message_id, id, message),
                _ => &*message.message_id == message_id,
            })?;
            Some((subscription, position))
        });
        let Some((subscription, position)) = found else {
            return Err(Fatal::new(
                Some(frame),
                "unexpected acknowledgement",
                &format!(
                    "message {message_id} is not awaiting an acknowledgement on this connection"
                ),
            ));
        };
        let settled = match subscription.ack_mode {
            AckMode::Client => subscription.delivered.take_up_to(position),
            _ => subscription.delivered.take_only(position),
        };
        let consumer = subscription.consumer;
        if !positive {
            self.session.settle(consumer, settled, Settle::Nack);
            self.receipt(frame);
            return Ok(());
        }
        if let Some(name) = transaction {
            self.session
                .ack_in_transaction(name, consumer, &settled)
                .map_err(|e| Fatal::new(Some(frame), &e.to_string(), ""))?;
            self.receipt(frame);
            return Ok(());
        }
        let receipt = frame.get("receipt").map(str::to_owned);
        let Some(receipt) = receipt else {
            self.session.settle(consumer, settled, Settle::Ack);
            return Ok(());
        };
        let acked = self.session.ack_durably(consumer, settled);
        self.pending.push_back(Box::pin(async move {
            match acked.await {
                Ok(()) => Outcome {
                    frame: Some(Frame::new(Command::Receipt).header("receipt-id", receipt)),
                    close: false,
                },
                Err(error) => {
                    let mut frame =
                        Frame::error(&format!("acknowledgement not stored: {error}"), "");
                    frame.push_header("receipt-id", receipt);
                    Outcome { frame: Some(frame), close: true }
                }
            }
        }));
        Ok(())
    }

    /// Sends a browsing subscription its snapshot, then the MESSAGE with `browser:end` that
    /// ends it, as ActiveMQ does.
    pub(super) fn browsed(&mut self, id: &str, destination: &str, messages: Vec<Arc<Message>>) {
        if !self.browsers.contains(id) {
            return; // Unsubscribed before the snapshot came.
        }
        for message in &messages {
            let frame = mapping::message_frame(message, &self.temp_names, id, None, false);
            self.write_frame(&frame);
        }
        let end = Frame::new(Command::Message)
            .header("subscription", id)
            .header("destination", destination)
            .header("message-id", "browse-end")
            .header("browser", "end");
        self.write_frame(&end);
    }

    pub(super) fn deliver(&mut self, delivery: Delivery) {
        let Some(subscription_id) = self.by_consumer.get(&delivery.consumer) else {
            // Unsubscribed meanwhile: the queue took the message back with the consumer.
            return;
        };
        let Some(subscription) = self.subscriptions.get_mut(subscription_id) else { return };
        let message = &delivery.message;
        let ack = match (subscription.ack_mode, self.codec.version()) {
            (AckMode::Auto, _) | (_, Version::V1_0 | Version::V1_1) => None,
            _ => Some(ack_id(subscription_id, message)),
        };
        let mut frame = mapping::message_frame(
            message,
            &self.temp_names,
            subscription_id,
            ack.as_deref(),
            delivery.redelivered,
        );
        // A copy routed elsewhere than where it was sent (a composite's target, a part of
        // `A,B`, a virtual topic's consumer queue) shows where it was routed as `destination`
        // and the sent-to destination as `original-destination` (ActiveMQ's copyMessage and
        // setOriginalDestination).
        if let Some(shown) = self.context.core.shown_destination(delivery.queue.key(), message) {
            let shown = self.temp_names.format(&shown);
            let headers = &mut frame.headers;
            if let Some((_, value)) = headers.iter_mut().find(|(n, _)| n == "destination") {
                let sent_to = std::mem::replace(value, shown);
                match headers.iter_mut().find(|(n, _)| n == "original-destination") {
                    Some((_, original)) => *original = sent_to,
                    None => frame.push_header("original-destination", sent_to),
                }
            }
        }
        let mut bytes = BytesMut::new();
        self.codec.encode(&frame, &mut bytes);
        if subscription.ack_mode == AckMode::Auto {
            self.output.write_auto_ack(AutoAck {
                bytes: bytes.freeze(),
                queue: delivery.queue,
                consumer: delivery.consumer,
                id: message.id,
            });
        } else {
            subscription.delivered.push(delivery.queue, delivery.message);
            self.output.write(bytes.freeze());
        }
    }
}

/// The STOMP 1.2 `ack` header of a delivery: unique per delivery on the connection.
///
/// The message-id alone is not enough: a topic message delivered to two
/// subscriptions of one connection has one message-id and two deliveries, and the ACK then
/// acknowledged whichever subscription was found first (ActiveMQ gives each delivery an ack
/// id of its own too). A message is outstanding at most once per subscription, so the
/// subscription id and the message-id together name the delivery.
fn ack_id(subscription: &str, message: &Message) -> String {
    format!("{subscription}:{}", message.message_id)
}

/// True if `ack` (an ACK or NACK frame's `id`) is [`ack_id`] of `message` in `subscription`.
fn is_ack_id(ack: &str, subscription: &str, message: &Message) -> bool {
    ack.strip_prefix(subscription).and_then(|rest| rest.strip_prefix(':'))
        == Some(&*message.message_id)
}
