//! The background task that owns the socket.
//!
//! One task per client runs a `select!` loop over: bytes from the server, room to write
//! queued bytes, requests from the handles ([`crate::StompClient`], [`crate::Subscription`]),
//! and the heart-beat timers. Reads and writes are cancel-safe single operations, so a
//! server that stops reading never stops us from reading its RECEIPTs and MESSAGEs, and a
//! large outgoing frame never blocks deliveries.
//!
//! Routing: MESSAGE frames go to the subscription named by their `subscription` header;
//! RECEIPT frames complete the waiter registered under their `receipt-id`; an ERROR frame
//! with a known `receipt-id` fails that waiter, any other ERROR fails every waiter and is
//! kept for [`crate::StompClient::next_error`]. When the connection ends, every waiter fails
//! with the reason, subscriptions see the end of their stream, and the reason is recorded
//! for later calls.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::BytesMut;
use protocol::stomp::{Codec, Command, Decoded, Frame};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{sleep_until, Instant};

use crate::{ClientError, ReceivedMessage};

/// Where a request's outcome goes: `Ok` on RECEIPT, `Err` on ERROR or a lost connection.
pub(crate) type Reply = oneshot::Sender<Result<(), ClientError>>;

/// Stop taking requests while this many bytes wait to be written (back-pressure: the
/// request channel is bounded, so senders then wait).
const WRITE_HIGH_WATER: usize = 256 * 1024;

/// Read at least this much at a time.
const READ_CHUNK: usize = 16 * 1024;

/// What the handles ask the task to do.
pub(crate) enum Request {
    /// Write `frame`; with `receipt`, first register the waiter for that receipt id.
    Frame { frame: Frame, receipt: Option<(String, Reply)> },
    /// Route MESSAGEs of subscription `id` to `messages`, then write the SUBSCRIBE `frame`
    /// and wait for its receipt.
    Subscribe {
        id: String,
        messages: mpsc::UnboundedSender<ReceivedMessage>,
        frame: Frame,
        receipt: (String, Reply),
    },
    /// Stop routing MESSAGEs of subscription `id`.
    Forget { id: String },
    /// Write what is queued, then close the connection.
    Close,
}

/// What one call of [`write_some`] achieved.
enum WriteProgress {
    /// Some queued bytes were written.
    Wrote,
    /// Nothing was queued, and the writer has been flushed.
    Flushed,
}

/// Writes some of `queued`, or flushes once nothing is queued. A single cancel-safe step:
/// if the select loop drops it, nothing was written (or the flush is simply retried).
async fn write_some<W: AsyncWrite>(
    writer: &mut WriteHalf<W>,
    queued: &mut BytesMut,
) -> std::io::Result<WriteProgress> {
    if queued.is_empty() {
        writer.flush().await?;
        return Ok(WriteProgress::Flushed);
    }
    if writer.write_buf(queued).await? == 0 {
        return Err(std::io::ErrorKind::WriteZero.into());
    }
    Ok(WriteProgress::Wrote)
}

/// Heart-beat intervals agreed at CONNECT.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HeartBeats {
    /// Send something at least this often.
    pub(crate) send_every: Option<Duration>,
    /// Give up if nothing arrives for this long.
    pub(crate) silence_limit: Option<Duration>,
}

/// The task's state. The socket halves, buffers and routing tables belong to it alone.
pub(crate) struct Connection<S> {
    pub(crate) reader: ReadHalf<S>,
    pub(crate) writer: WriteHalf<S>,
    pub(crate) codec: Codec,
    /// Bytes read and not yet decoded.
    pub(crate) read_buf: BytesMut,
    /// Encoded bytes not yet written.
    pub(crate) write_buf: BytesMut,
    pub(crate) requests: mpsc::Receiver<Request>,
    pub(crate) errors: mpsc::UnboundedSender<Frame>,
    pub(crate) closed: Arc<OnceLock<ClientError>>,
    pub(crate) heart_beats: HeartBeats,
    /// Waiters by receipt id.
    pub(crate) receipts: HashMap<String, Reply>,
    /// Subscriptions by id.
    pub(crate) subscriptions: HashMap<String, mpsc::UnboundedSender<ReceivedMessage>>,
    /// The last ERROR frame not tied to a receipt: why the server is about to close.
    pub(crate) server_error: Option<ClientError>,
}

impl<S: AsyncRead + AsyncWrite + Send + 'static> Connection<S> {
    /// Runs until the connection ends, then fails whatever still waits.
    pub(crate) async fn run(mut self) {
        let reason = match self.serve().await {
            Ok(()) => ClientError::Closed,
            Err(error) => {
                tracing::debug!(%error, "STOMP client connection ended");
                error
            }
        };
        // Record the reason before anything can observe the task's end.
        let _ = self.closed.set(reason.clone());
        for (_, reply) in self.receipts.drain() {
            let _ = reply.send(Err(reason.clone()));
        }
        self.requests.close();
        while let Ok(request) = self.requests.try_recv() {
            match request {
                Request::Frame { receipt: Some((_, reply)), .. }
                | Request::Subscribe { receipt: (_, reply), .. } => {
                    let _ = reply.send(Err(reason.clone()));
                }
                Request::Frame { receipt: None, .. } | Request::Forget { .. } | Request::Close => {}
            }
        }
        // Dropping the subscription senders ends every `Subscription::recv`.
    }

    /// The select loop. `Ok` when we closed the connection on purpose (a `Close` request,
    /// every handle dropped, or EOF after our DISCONNECT).
    async fn serve(&mut self) -> Result<(), ClientError> {
        let mut taking_requests = true;
        let mut disconnecting = false;
        let mut needs_flush = false;
        let mut last_read = Instant::now();
        let mut last_write = Instant::now();
        let far_future = Instant::now() + Duration::from_secs(86_400 * 365);

        loop {
            if !taking_requests && self.write_buf.is_empty() {
                // Closing on purpose: a peer that is already gone is no failure.
                let _ = self.writer.flush().await;
                let _ = self.writer.shutdown().await;
                return Ok(());
            }
            let send_deadline =
                self.heart_beats.send_every.map_or(far_future, |every| last_write + every);
            let silence_deadline =
                self.heart_beats.silence_limit.map_or(far_future, |limit| last_read + limit);
            self.read_buf.reserve(READ_CHUNK);

            tokio::select! {
                read = self.reader.read_buf(&mut self.read_buf) => {
                    let read = match read {
                        Ok(read) => read,
                        // A reset right after an ERROR frame: the ERROR says more.
                        Err(error) => return Err(self.server_error.take().unwrap_or(error.into())),
                    };
                    if read == 0 {
                        return if disconnecting {
                            Ok(())
                        } else {
                            Err(self.server_error.take().unwrap_or(ClientError::Closed))
                        };
                    }
                    last_read = Instant::now();
                    self.route_frames()?;
                }
                progress = write_some(&mut self.writer, &mut self.write_buf),
                    if needs_flush || !self.write_buf.is_empty() =>
                {
                    match progress? {
                        WriteProgress::Wrote => {
                            last_write = Instant::now();
                            needs_flush = true;
                        }
                        WriteProgress::Flushed => needs_flush = false,
                    }
                }
                request = self.requests.recv(),
                    if taking_requests && self.write_buf.len() < WRITE_HIGH_WATER =>
                {
                    match request {
                        Some(Request::Close) | None => taking_requests = false,
                        Some(request) => disconnecting |= self.accept(request),
                    }
                }
                () = sleep_until(send_deadline),
                    if self.heart_beats.send_every.is_some() && self.write_buf.is_empty() =>
                {
                    Codec::encode_heartbeat(&mut self.write_buf);
                }
                () = sleep_until(silence_deadline), if self.heart_beats.silence_limit.is_some() => {
                    return Err(ClientError::Timeout {
                        waiting_for: "the server's heart-beats".to_owned(),
                        after: self.heart_beats.silence_limit.unwrap_or_default(),
                    });
                }
            }
        }
    }

    /// Registers what `request` waits for and queues its frame. True if it is DISCONNECT.
    fn accept(&mut self, request: Request) -> bool {
        match request {
            Request::Frame { frame, receipt } => {
                if let Some((id, reply)) = receipt {
                    self.receipts.insert(id, reply);
                }
                self.codec.encode(&frame, &mut self.write_buf);
                frame.command == Command::Disconnect
            }
            Request::Subscribe { id, messages, frame, receipt: (receipt_id, reply) } => {
                self.subscriptions.insert(id, messages);
                self.receipts.insert(receipt_id, reply);
                self.codec.encode(&frame, &mut self.write_buf);
                false
            }
            Request::Forget { id } => {
                self.subscriptions.remove(&id);
                false
            }
            Request::Close => false,
        }
    }

    /// Decodes every complete frame read so far and routes it.
    fn route_frames(&mut self) -> Result<(), ClientError> {
        while let Some(decoded) = self.codec.decode(&mut self.read_buf)? {
            let Decoded::Frame(frame) = decoded else {
                continue; // A heart-beat: reading it already reset the silence timer.
            };
            match frame.command {
                Command::Message => self.deliver(frame),
                Command::Receipt => self.complete_receipt(&frame),
                Command::Error => self.fail_on_error(frame),
                other => tracing::warn!(command = %other, "ignoring unexpected frame from server"),
            }
        }
        Ok(())
    }

    fn deliver(&mut self, frame: Frame) {
        let id = match frame.get("subscription") {
            Some(id) => id.to_owned(),
            // A server that omits the header (some 1.0 servers) can only mean our only one.
            None if self.subscriptions.len() == 1 => {
                self.subscriptions.keys().next().cloned().unwrap_or_default()
            }
            None => {
                tracing::warn!("dropping a MESSAGE without a subscription header");
                return;
            }
        };
        let Some(messages) = self.subscriptions.get(&id) else {
            tracing::debug!(subscription = %id, "dropping a MESSAGE for an unknown subscription");
            return;
        };
        if messages.send(ReceivedMessage { frame }).is_err() {
            // The Subscription was dropped without unsubscribing.
            self.subscriptions.remove(&id);
        }
    }

    fn complete_receipt(&mut self, frame: &Frame) {
        let waiter = frame.get("receipt-id").and_then(|id| self.receipts.remove(id));
        match waiter {
            Some(reply) => {
                let _ = reply.send(Ok(()));
            }
            None => tracing::debug!(receipt = ?frame.get("receipt-id"), "unexpected RECEIPT"),
        }
    }

    fn fail_on_error(&mut self, frame: Frame) {
        let error = ClientError::ServerError {
            message: frame.get("message").unwrap_or_default().to_owned(),
            body: String::from_utf8_lossy(&frame.body).into_owned(),
        };
        if let Some(reply) = frame.get("receipt-id").and_then(|id| self.receipts.remove(id)) {
            let _ = reply.send(Err(error));
            return;
        }
        tracing::debug!(%error, "ERROR frame not tied to a request");
        if frame.get("receipt-id").is_none() {
            for (_, reply) in self.receipts.drain() {
                let _ = reply.send(Err(error.clone()));
            }
        }
        self.server_error = Some(error);
        let _ = self.errors.send(frame);
    }
}
