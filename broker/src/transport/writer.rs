//! The writing half of every connection, whatever its protocol: its own task, so that a
//! client that does not read can never stop the connection's reader (and with it the acks
//! that would free the client). It coalesces what is queued into one write, writes the
//! protocol's heart-beat when idle, and acknowledges auto-ack deliveries once they are
//! written (so that an auto consumer's credit also bounds memory).

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use store::MessageId;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::{Outbound, IDLE_WRITE_BUFFER};
use crate::core::{ConsumerId, Core, QueueHandle};

/// Frames written together at most, so that one burst cannot hold a huge buffer.
const MAX_BATCH_BYTES: usize = 256 * 1024;

/// How long a closing connection's last frames may take to be written.
pub(crate) const WRITER_DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// What a connection hands its writer.
pub(crate) enum WriteItem {
    /// Encoded frame bytes.
    Bytes(Bytes),
    /// An encoded delivery for an auto-ack consumer: acknowledged once written. Boxed: an
    /// unbounded channel allocates its slots in blocks of 32 at once, so every item's size
    /// is paid 32 times by each idle connection (a queue handle inline made the block 4 KiB).
    AutoAck(Box<AutoAck>),
    /// From now on, write the protocol's heart-beat whenever nothing was written for this
    /// long.
    HeartBeat(Duration),
    /// Flush what came before, then close the socket.
    Close,
    /// Write what came before and perform its auto-acks, then signal (STOMP's DISCONNECT waits
    /// for this before it releases the connection's consumers).
    Barrier(oneshot::Sender<()>),
}

/// A delivery to acknowledge once written.
pub(crate) struct AutoAck {
    pub bytes: Bytes,
    pub queue: QueueHandle,
    pub consumer: ConsumerId,
    pub id: MessageId,
}

/// Starts the writer of `socket`. `heart_beat` is what the protocol writes when idle (a STOMP
/// newline, an empty AMQP frame; OpenWire sends its KeepAliveInfo itself). Every byte queued
/// must be counted in `outbound` by the connection; the writer counts it written.
pub(crate) fn spawn<W: AsyncWrite + Unpin + Send + 'static>(
    socket: W,
    core: Arc<Core>,
    outbound: Outbound,
    heart_beat: &'static [u8],
) -> (mpsc::UnboundedSender<WriteItem>, JoinHandle<()>) {
    let (out, items) = mpsc::unbounded_channel();
    (out, tokio::spawn(run(socket, items, core, outbound, heart_beat)))
}

/// Closes the writer once it has written what was queued: within [`WRITER_DRAIN_LIMIT`], or
/// it is cut (a client that stops reading cannot hold the connection, and a shutdown, for
/// ever). `out` is left closed.
pub(crate) async fn finish(
    out: &mut mpsc::UnboundedSender<WriteItem>,
    writer: JoinHandle<()>,
    peer: &str,
) {
    let _ = out.send(WriteItem::Close);
    // Swapping in a sender whose receiver is gone closes the writer's channel.
    drop(std::mem::replace(out, mpsc::unbounded_channel().0));
    let abort = writer.abort_handle();
    if tokio::time::timeout(WRITER_DRAIN_LIMIT, writer).await.is_err() {
        tracing::info!(peer, "client did not read its last frames; connection cut");
        abort.abort();
    }
}

/// Writes items in order until the channel closes or a `Close` arrives; writes heart-beats
/// when idle. Returns when the socket is closed.
async fn run<W: AsyncWrite + Unpin>(
    mut socket: W,
    mut items: mpsc::UnboundedReceiver<WriteItem>,
    core: Arc<Core>,
    outbound: Outbound,
    heart_beat_bytes: &'static [u8],
) {
    let mut heart_beat: Option<Duration> = None;
    // Grown by what is queued and given back when the queue is empty, so an idle connection
    // holds no write buffer.
    let mut buffer = BytesMut::new();
    let mut acks: Vec<(QueueHandle, ConsumerId, Vec<MessageId>)> = Vec::new();
    loop {
        let first = match heart_beat {
            Some(interval) => match tokio::time::timeout(interval, items.recv()).await {
                Ok(item) => item,
                Err(_) => {
                    if socket.write_all(heart_beat_bytes).await.is_err() {
                        return;
                    }
                    continue;
                }
            },
            None => items.recv().await,
        };
        let Some(first) = first else { break };
        let mut close = false;
        let mut barrier = None;
        let mut next = Some(first);
        // Coalesce whatever is already queued into one write.
        while let Some(item) = next.take() {
            match item {
                WriteItem::Bytes(bytes) => buffer.extend_from_slice(&bytes),
                WriteItem::AutoAck(auto) => {
                    let AutoAck { bytes, queue, consumer, id } = *auto;
                    buffer.extend_from_slice(&bytes);
                    // A wildcard consumer receives from several queues, and each ack must go
                    // to the queue the message came from (grouping by consumer alone sent
                    // them all to the first one, stalling the others).
                    match acks.iter_mut().find(|(q, c, _)| *c == consumer && q.same_queue(&queue)) {
                        Some((_, _, ids)) => ids.push(id),
                        None => acks.push((queue, consumer, vec![id])),
                    }
                }
                WriteItem::HeartBeat(interval) => heart_beat = Some(interval),
                WriteItem::Close => {
                    close = true;
                    break;
                }
                WriteItem::Barrier(done) => {
                    barrier = Some(done);
                    break;
                }
            }
            if buffer.len() < MAX_BATCH_BYTES {
                next = items.try_recv().ok();
            }
        }
        if !buffer.is_empty() {
            if socket.write_all(&buffer).await.is_err() {
                // The peer is gone; unacknowledged auto-ack messages go back when the
                // connection releases its consumers.
                return;
            }
            // Every frame and message the connection queues is counted there.
            outbound.written(buffer.len());
            buffer.clear();
            if items.is_empty() && buffer.capacity() > IDLE_WRITE_BUFFER {
                buffer = BytesMut::new();
            }
        }
        for (queue, consumer, ids) in acks.drain(..) {
            core.ack_now(&queue, consumer, ids);
        }
        if let Some(done) = barrier {
            let _ = done.send(());
        }
        if close {
            break;
        }
    }
    let _ = socket.flush().await;
    let _ = socket.shutdown().await;
}
