//! The writing half of every connection, whatever its protocol: its own task, so that a
//! client that does not read can never stop the connection's reader (and with it the acks
//! that would free the client). It coalesces what is queued into one write, writes the
//! protocol's heart-beat when idle, and acknowledges auto-ack deliveries once they are
//! written (so that an auto consumer's credit also bounds memory). The connection hands it
//! everything through an [`Output`], which counts what waits unwritten.

use std::io::IoSlice;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use store::MessageId;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::{Outbound, IDLE_WRITE_BUFFER};
use crate::core::{ConsumerId, Core, QueueHandle};

/// Frames written together at most, so that one burst cannot hold a huge buffer.
const MAX_BATCH_BYTES: usize = 256 * 1024;

/// Frames written together at most (below the kernel's 1024 buffers per `writev`).
const MAX_BATCH_FRAMES: usize = 512;

/// Frames whose list an idle connection keeps.
const IDLE_FRAMES: usize = 64;

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
    /// From now on, write these bytes (the protocol's heart-beat) whenever nothing was
    /// written for this long. Boxed, as rare: it keeps the channel's slots small.
    HeartBeat(Box<(Duration, Bytes)>),
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

/// Starts the writer of `socket`: the connection's [`Output`], and the writer's task.
pub(crate) fn spawn<W: AsyncWrite + Unpin + Send + 'static>(
    socket: W,
    core: Arc<Core>,
) -> (Output, JoinHandle<()>) {
    let (items, receiver) = mpsc::unbounded_channel();
    let outbound = Outbound::default();
    let writer = tokio::spawn(run(socket, receiver, core, outbound.clone()));
    (Output { items, outbound }, writer)
}

/// What a connection writes, handed to its writer task in order. Every byte is counted in
/// the [`Outbound`] it shares with the writer, so that the connection takes deliveries only
/// while the writer keeps up.
pub(crate) struct Output {
    items: mpsc::UnboundedSender<WriteItem>,
    outbound: Outbound,
}

impl Output {
    /// Queues encoded frames.
    pub fn write(&self, bytes: Bytes) {
        self.outbound.queued(bytes.len());
        let _ = self.items.send(WriteItem::Bytes(bytes));
    }

    /// Queues an encoded auto-ack delivery, acknowledged once written.
    pub fn write_auto_ack(&self, delivery: AutoAck) {
        self.outbound.queued(delivery.bytes.len());
        let _ = self.items.send(WriteItem::AutoAck(Box::new(delivery)));
    }

    /// From now on, `bytes` go out whenever nothing was written for `every`.
    pub fn heart_beat(&self, every: Duration, bytes: Bytes) {
        let _ = self.items.send(WriteItem::HeartBeat(Box::new((every, bytes))));
    }

    /// Resolves once everything queued before it is written and its auto-acks performed;
    /// an error if the writer is gone first.
    pub fn barrier(&self) -> oneshot::Receiver<()> {
        let (done, flushed) = oneshot::channel();
        let _ = self.items.send(WriteItem::Barrier(done));
        flushed
    }

    /// True while the connection may queue another delivery.
    pub fn has_room(&self) -> bool {
        self.outbound.has_room()
    }

    /// Resolves once the writer has caught up enough to take deliveries again.
    pub async fn room(&self) {
        self.outbound.room().await
    }
}

/// Closes the writer once it has written what was queued: within [`WRITER_DRAIN_LIMIT`], or
/// it is cut (a client that stops reading cannot hold the connection, and a shutdown, for
/// ever). `output` is left closed: what is written to it later goes nowhere.
pub(crate) async fn finish(output: &mut Output, writer: JoinHandle<()>, peer: &str) {
    let _ = output.items.send(WriteItem::Close);
    // Swapping in a sender whose receiver is gone closes the writer's channel.
    drop(std::mem::replace(&mut output.items, mpsc::unbounded_channel().0));
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
) {
    let mut heart_beat: Option<(Duration, Bytes)> = None;
    // The frames of one write, each as it was encoded: written with one vectored write, so
    // that no frame is copied again (into a coalescing buffer, which also grew by copying
    // itself after every idle moment; the profile of S1 put 4% of the broker's instructions
    // there). A socket without vectored writes gets them copied into `buffer`.
    let vectored = socket.is_write_vectored();
    let mut frames = Frames::default();
    let mut buffer = BytesMut::new();
    let mut acks: Vec<(QueueHandle, ConsumerId, Vec<MessageId>)> = Vec::new();
    loop {
        let first = match &heart_beat {
            Some((interval, bytes)) => match tokio::time::timeout(*interval, items.recv()).await {
                Ok(item) => item,
                Err(_) => {
                    if socket.write_all(bytes).await.is_err() {
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
                WriteItem::Bytes(bytes) => frames.push(bytes),
                WriteItem::AutoAck(auto) => {
                    let AutoAck { bytes, queue, consumer, id } = *auto;
                    frames.push(bytes);
                    // A wildcard consumer receives from several queues, and each ack must go
                    // to the queue the message came from (grouping by consumer alone sent
                    // them all to the first one, stalling the others).
                    match acks.iter_mut().find(|(q, c, _)| *c == consumer && q.same_queue(&queue)) {
                        Some((_, _, ids)) => ids.push(id),
                        None => acks.push((queue, consumer, vec![id])),
                    }
                }
                WriteItem::HeartBeat(beat) => heart_beat = Some(*beat),
                WriteItem::Close => {
                    close = true;
                    break;
                }
                WriteItem::Barrier(done) => {
                    barrier = Some(done);
                    break;
                }
            }
            if frames.bytes < MAX_BATCH_BYTES && frames.chunks.len() < MAX_BATCH_FRAMES {
                next = items.try_recv().ok();
            }
        }
        if frames.bytes > 0 {
            let bytes = frames.bytes;
            let written = match vectored {
                true => frames.write_to(&mut socket).await,
                false => frames.write_copied(&mut socket, &mut buffer).await,
            };
            if items.is_empty() && buffer.capacity() > IDLE_WRITE_BUFFER {
                buffer = BytesMut::new();
            }
            if written.is_err() {
                // The peer is gone; unacknowledged auto-ack messages go back when the
                // connection releases its consumers.
                return;
            }
            // Every frame and message the connection queues is counted there.
            outbound.written(bytes);
            // An idle connection keeps no list of frames (16 bytes a frame of a burst).
            if items.is_empty() && frames.chunks.capacity() > IDLE_FRAMES {
                frames.chunks = Vec::new();
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

/// The frames of one write.
#[derive(Default)]
struct Frames {
    chunks: Vec<Bytes>,
    /// Their bytes.
    bytes: usize,
}

impl Frames {
    fn push(&mut self, frame: Bytes) {
        if !frame.is_empty() {
            self.bytes += frame.len();
            self.chunks.push(frame);
        }
    }

    /// Writes every frame with vectored writes, however the socket splits them, and leaves
    /// `self` empty.
    async fn write_to<W: AsyncWrite + Unpin>(&mut self, socket: &mut W) -> std::io::Result<()> {
        let mut first = 0;
        while first < self.chunks.len() {
            let slices: Vec<IoSlice<'_>> =
                self.chunks[first..].iter().map(|chunk| IoSlice::new(chunk)).collect();
            let mut written = socket.write_vectored(&slices).await?;
            drop(slices);
            if written == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            while written > 0 {
                let chunk = &mut self.chunks[first];
                if written >= chunk.len() {
                    written -= chunk.len();
                    first += 1;
                } else {
                    chunk.advance(written);
                    written = 0;
                }
            }
        }
        self.chunks.clear();
        self.bytes = 0;
        Ok(())
    }

    /// Writes every frame copied into `buffer` (for a socket without vectored writes), and
    /// leaves `self` and `buffer` empty.
    async fn write_copied<W: AsyncWrite + Unpin>(
        &mut self,
        socket: &mut W,
        buffer: &mut BytesMut,
    ) -> std::io::Result<()> {
        for chunk in self.chunks.drain(..) {
            buffer.extend_from_slice(&chunk);
        }
        self.bytes = 0;
        let written = socket.write_all(buffer).await;
        buffer.clear();
        written
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use super::*;

    /// A socket that takes at most `step` bytes a write, across buffers as `writev` does.
    struct Trickle {
        written: Vec<u8>,
        step: usize,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            let n = buf.len().min(self.step);
            self.written.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<std::io::Result<usize>> {
            let mut left = self.step;
            for buf in bufs {
                let n = buf.len().min(left);
                self.written.extend_from_slice(&buf[..n]);
                left -= n;
                if left == 0 {
                    break;
                }
            }
            Poll::Ready(Ok(self.step - left))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// Frames split anywhere by short vectored writes (inside a frame, at a frame's end)
    /// arrive whole and in order.
    #[tokio::test]
    async fn frames_survive_short_vectored_writes() {
        let frames: Vec<Bytes> =
            (0..40u8).map(|i| Bytes::from(vec![i; 1 + usize::from(i) % 13])).collect();
        let expected: Vec<u8> = frames.iter().flat_map(|f| f.iter().copied()).collect();
        for step in [1, 5, 13, 64, 10_000] {
            let mut socket = Trickle { written: Vec::new(), step };
            let mut batch = Frames::default();
            for frame in &frames {
                batch.push(frame.clone());
            }
            batch.push(Bytes::new());
            assert_eq!(batch.bytes, expected.len());
            batch.write_to(&mut socket).await.expect("written");
            assert_eq!(socket.written, expected, "step {step}");
            assert_eq!((batch.bytes, batch.chunks.len()), (0, 0));
        }
    }
}
