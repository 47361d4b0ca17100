//! The writing half of a STOMP connection: its own task, so that a client that does not read
//! can never stop the connection's reader (and with it the acks that would free the client).

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use store::MessageId;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use crate::core::{ConsumerId, Core, QueueHandle};
use crate::transport::Outbound;

/// Frames written together at most, so that one burst cannot hold a huge buffer.
const MAX_BATCH_BYTES: usize = 256 * 1024;

/// What the connection hands its writer.
pub(crate) enum WriteItem {
    /// Encoded frame bytes.
    Frame(Bytes),
    /// An encoded MESSAGE frame for an auto-ack consumer: acknowledged once written.
    AutoAck { bytes: Bytes, queue: QueueHandle, consumer: ConsumerId, id: MessageId },
    /// From now on, write a heart-beat whenever nothing was written for this long.
    HeartBeat(Duration),
    /// Flush what came before, then close the socket.
    Close,
    /// Write what came before and perform its auto-acks, then signal (DISCONNECT waits for
    /// this before it releases the connection's consumers).
    Barrier(oneshot::Sender<()>),
}

/// Writes items in order until the channel closes or a `Close` arrives; writes heart-beats
/// when idle. Returns when the socket is closed.
pub(crate) async fn run<W: AsyncWrite + Unpin>(
    mut socket: W,
    mut items: mpsc::UnboundedReceiver<WriteItem>,
    core: std::sync::Arc<Core>,
    outbound: Outbound,
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
                    if socket.write_all(b"\n").await.is_err() {
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
                WriteItem::Frame(bytes) => buffer.extend_from_slice(&bytes),
                WriteItem::AutoAck { bytes, queue, consumer, id } => {
                    buffer.extend_from_slice(&bytes);
                    // A wildcard consumer receives from several queues, and each
                    // ack must go to the queue the message came from (grouping by consumer
                    // alone sent them all to the first one, stalling the others).
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
            if items.is_empty() && buffer.capacity() > crate::transport::IDLE_WRITE_BUFFER {
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
