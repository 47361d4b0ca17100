//! The task that owns an MQTT connection: the QoS 1 and 2 flows both ways, the SUBACK and
//! UNSUBACK waiters, and the keep alive.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bytes::BytesMut;
use protocol::mqtt::{
    Codec, Disconnect, Packet, PubAck, Publish, QoS, ReasonCode, Subscribe, Subscription,
    SubscriptionOptions, Unsubscribe,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};
use tokio::time::Instant;

use super::client::Message;
use crate::ClientError;

/// How many encoded bytes queued requests may add to one write before it goes out.
const WRITE_BATCH: usize = 64 * 1024;

/// What a handle asks of the task.
#[derive(Debug)]
pub(crate) enum Request {
    Publish {
        publish: Publish,
        /// The window slot of a QoS 1/2 publish, released with its last acknowledgement.
        permit: Option<OwnedSemaphorePermit>,
        done: oneshot::Sender<Result<(), ClientError>>,
    },
    Subscribe {
        filter: String,
        qos: QoS,
        done: oneshot::Sender<Result<QoS, ClientError>>,
    },
    Unsubscribe {
        filter: String,
        done: oneshot::Sender<Result<(), ClientError>>,
    },
    Disconnect {
        done: oneshot::Sender<Result<(), ClientError>>,
    },
}

/// A QoS 1/2 publish of ours that the broker has not finished acknowledging.
struct Outgoing {
    topic: String,
    done: oneshot::Sender<Result<(), ClientError>>,
    _permit: Option<OwnedSemaphorePermit>,
}

/// A SUBSCRIBE or UNSUBSCRIBE waiting for its answer.
enum Waiter {
    Subscribe(String, oneshot::Sender<Result<QoS, ClientError>>),
    Unsubscribe(String, oneshot::Sender<Result<(), ClientError>>),
}

struct State {
    codec: Codec,
    out: BytesMut,
    next_id: u16,
    outgoing: HashMap<u16, Outgoing>,
    waiters: HashMap<u16, Waiter>,
    /// QoS 2 messages received and handed out, whose PUBREL has not come yet.
    awaiting_release: HashSet<u16>,
    messages: mpsc::Sender<Message>,
}

/// Runs the connection until it ends; then every waiting request fails with the reason.
pub(crate) async fn run<S>(
    stream: S,
    codec: Codec,
    buffer: BytesMut,
    requests: mpsc::Receiver<Request>,
    messages: mpsc::Sender<Message>,
    keep_alive: Duration,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut state = State {
        codec,
        out: BytesMut::new(),
        next_id: 0,
        outgoing: HashMap::new(),
        waiters: HashMap::new(),
        awaiting_release: HashSet::new(),
        messages,
    };
    let reason = state.drive(stream, buffer, requests, keep_alive).await;
    if let Err(reason) = reason {
        tracing::debug!(%reason, "MQTT connection ended");
        for (_, outgoing) in state.outgoing.drain() {
            let _ = outgoing.done.send(Err(reason.clone()));
        }
        for (_, waiter) in state.waiters.drain() {
            match waiter {
                Waiter::Subscribe(_, done) => drop(done.send(Err(reason.clone()))),
                Waiter::Unsubscribe(_, done) => drop(done.send(Err(reason.clone()))),
            }
        }
    }
}

impl State {
    async fn drive<S>(
        &mut self,
        stream: S,
        mut buffer: BytesMut,
        mut requests: mpsc::Receiver<Request>,
        keep_alive: Duration,
    ) -> Result<(), ClientError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (mut reader, mut writer) = tokio::io::split(stream);
        let mut last_sent = Instant::now();
        let mut ping_sent: Option<Instant> = None;
        // Packets that arrived with the CONNACK.
        self.decode_all(&mut buffer).await?;
        loop {
            if !self.out.is_empty() {
                writer.write_all(&self.out).await?;
                writer.flush().await?;
                self.out.clear();
                last_sent = Instant::now();
            }
            let deadline = match ping_sent {
                Some(at) => at + keep_alive,
                None => last_sent + keep_alive,
            };
            tokio::select! {
                read = reader.read_buf(&mut buffer) => {
                    if read? == 0 {
                        return Err(ClientError::Closed);
                    }
                    if self.decode_all(&mut buffer).await? {
                        ping_sent = None;
                    }
                }
                request = requests.recv() => {
                    let mut request = request;
                    loop {
                        match request {
                            Some(Request::Disconnect { done }) => {
                                self.encode(&Packet::Disconnect(Disconnect::default()))?;
                                writer.write_all(&self.out).await?;
                                writer.flush().await?;
                                let _ = writer.shutdown().await;
                                let _ = done.send(Ok(()));
                                return Err(ClientError::Closed);
                            }
                            Some(request) => self.handle(request)?,
                            // Every handle is gone: leave as a disconnect would.
                            None => {
                                self.encode(&Packet::Disconnect(Disconnect::default()))?;
                                writer.write_all(&self.out).await?;
                                let _ = writer.shutdown().await;
                                return Ok(());
                            }
                        }
                        // Requests already queued go out in the same write: a burst of
                        // publishes costs one system call, not one each.
                        if self.out.len() >= WRITE_BATCH {
                            break;
                        }
                        request = match requests.try_recv() {
                            Ok(next) => Some(next),
                            Err(mpsc::error::TryRecvError::Empty) => break,
                            Err(mpsc::error::TryRecvError::Disconnected) => None,
                        };
                    }
                }
                _ = tokio::time::sleep_until(deadline), if !keep_alive.is_zero() => {
                    if ping_sent.is_some() {
                        return Err(ClientError::Timeout {
                            waiting_for: "the broker's PINGRESP".into(),
                            after: keep_alive,
                        });
                    }
                    self.encode(&Packet::Pingreq)?;
                    ping_sent = Some(Instant::now());
                }
            }
        }
    }

    fn encode(&mut self, packet: &Packet) -> Result<(), ClientError> {
        self.codec.encode(packet, &mut self.out).map_err(ClientError::from)
    }

    /// A packet id in use by nothing else.
    fn packet_id(&mut self) -> u16 {
        loop {
            self.next_id = self.next_id.checked_add(1).unwrap_or(1);
            let id = self.next_id;
            if !self.outgoing.contains_key(&id) && !self.waiters.contains_key(&id) {
                return id;
            }
        }
    }

    fn handle(&mut self, request: Request) -> Result<(), ClientError> {
        match request {
            Request::Publish { mut publish, permit, done } => {
                if publish.qos == QoS::AtMostOnce {
                    publish.packet_id = None;
                    let outcome = self.encode(&Packet::Publish(publish));
                    let _ = done.send(outcome);
                    return Ok(());
                }
                let id = self.packet_id();
                publish.packet_id = Some(id);
                let topic = publish.topic.clone();
                let packet = Packet::Publish(publish);
                // A publish that cannot be encoded (too large, bad topic) fails alone.
                if let Err(error) = self.codec.encode(&packet, &mut self.out) {
                    let _ = done.send(Err(error.into()));
                    return Ok(());
                }
                self.outgoing.insert(id, Outgoing { topic, done, _permit: permit });
            }
            Request::Subscribe { filter, qos, done } => {
                let id = self.packet_id();
                let subscribe = Subscribe {
                    packet_id: id,
                    filters: vec![Subscription {
                        filter: filter.clone(),
                        options: SubscriptionOptions::qos(qos),
                    }],
                    properties: Default::default(),
                };
                if let Err(error) = self.codec.encode(&subscribe.into(), &mut self.out) {
                    let _ = done.send(Err(error.into()));
                    return Ok(());
                }
                self.waiters.insert(id, Waiter::Subscribe(filter, done));
            }
            Request::Unsubscribe { filter, done } => {
                let id = self.packet_id();
                let unsubscribe = Unsubscribe {
                    packet_id: id,
                    filters: vec![filter.clone()],
                    properties: Default::default(),
                };
                if let Err(error) = self.codec.encode(&unsubscribe.into(), &mut self.out) {
                    let _ = done.send(Err(error.into()));
                    return Ok(());
                }
                self.waiters.insert(id, Waiter::Unsubscribe(filter, done));
            }
            Request::Disconnect { .. } => {}
        }
        Ok(())
    }

    /// Handles every complete packet in `buffer`; whether any came (the broker is alive).
    async fn decode_all(&mut self, buffer: &mut BytesMut) -> Result<bool, ClientError> {
        let mut any = false;
        while let Some(packet) = self.codec.decode(buffer)? {
            any = true;
            self.receive(packet).await?;
        }
        Ok(any)
    }

    async fn receive(&mut self, packet: Packet) -> Result<(), ClientError> {
        match packet {
            Packet::Publish(publish) => {
                let id = publish.packet_id;
                let deliver = match (publish.qos, id) {
                    (QoS::ExactlyOnce, Some(id)) => self.awaiting_release.insert(id),
                    _ => true,
                };
                match (publish.qos, id) {
                    (QoS::AtLeastOnce, Some(id)) => {
                        self.encode(&Packet::Puback(PubAck::new(id)))?
                    }
                    (QoS::ExactlyOnce, Some(id)) => {
                        self.encode(&Packet::Pubrec(PubAck::new(id)))?
                    }
                    _ => {}
                }
                if deliver {
                    let message = Message {
                        topic: publish.topic,
                        payload: publish.payload,
                        qos: publish.qos,
                        retain: publish.retain,
                        dup: publish.dup,
                    };
                    // Nobody reading is no reason to stop acknowledging.
                    let _ = self.messages.send(message).await;
                }
            }
            Packet::Pubrel(ack) => {
                self.awaiting_release.remove(&ack.packet_id);
                self.encode(&Packet::Pubcomp(PubAck::new(ack.packet_id)))?;
            }
            Packet::Puback(ack) | Packet::Pubcomp(ack) => self.finish(ack),
            Packet::Pubrec(ack) => {
                if ack.reason.is_error() {
                    self.finish(ack);
                } else if self.outgoing.contains_key(&ack.packet_id) {
                    self.encode(&Packet::Pubrel(PubAck::new(ack.packet_id)))?;
                }
            }
            Packet::Suback(suback) => {
                if let Some(Waiter::Subscribe(filter, done)) =
                    self.waiters.remove(&suback.packet_id)
                {
                    let reason =
                        suback.reasons.first().copied().unwrap_or(ReasonCode::ProtocolError);
                    let outcome = match QoS::from_u8(reason.as_u8()) {
                        Some(qos) if !reason.is_error() => Ok(qos),
                        _ => Err(ClientError::MqttRefused {
                            request: format!("SUBSCRIBE to {filter}"),
                            reason,
                        }),
                    };
                    let _ = done.send(outcome);
                }
            }
            Packet::Unsuback(unsuback) => {
                if let Some(Waiter::Unsubscribe(filter, done)) =
                    self.waiters.remove(&unsuback.packet_id)
                {
                    let outcome = match unsuback.reasons.first() {
                        Some(reason) if reason.is_error() => Err(ClientError::MqttRefused {
                            request: format!("UNSUBSCRIBE from {filter}"),
                            reason: *reason,
                        }),
                        _ => Ok(()),
                    };
                    let _ = done.send(outcome);
                }
            }
            Packet::Pingresp => {}
            Packet::Disconnect(disconnect) => {
                return Err(ClientError::MqttRefused {
                    request: "connection (the broker sent DISCONNECT)".into(),
                    reason: disconnect.reason,
                })
            }
            other => {
                return Err(ClientError::protocol(format!(
                    "the MQTT broker sent an unexpected {}",
                    other.packet_type()
                )))
            }
        }
        Ok(())
    }

    /// The last acknowledgement of one of our publishes (PUBACK, PUBCOMP, a failed PUBREC).
    fn finish(&mut self, ack: PubAck) {
        if let Some(outgoing) = self.outgoing.remove(&ack.packet_id) {
            let outcome = match ack.reason.is_error() {
                true => Err(ClientError::MqttRefused {
                    request: format!("PUBLISH to {}", outgoing.topic),
                    reason: ack.reason,
                }),
                false => Ok(()),
            };
            let _ = outgoing.done.send(outcome);
        }
    }
}
