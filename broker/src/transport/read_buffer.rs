//! A connection's read buffer, sized by what the connection reads.
//!
//! Thousands of connections mostly sit idle, each waiting in a read with its buffer ready:
//! a fixed 8 KiB buffer per connection is 80 MB for 10,000 of them. So the buffer adapts: a
//! read that fills it doubles the next one (a busy producer reads up to [`MAX_READ`] at a
//! time), a short read shrinks it, and once everything read was decoded a buffer much larger
//! than the next read is given back, so an idle connection holds [`MIN_READ`] bytes.

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};

/// The smallest read, and what an idle connection keeps.
pub(crate) const MIN_READ: usize = 512;
/// The largest single read (a frame larger than this still accumulates across reads).
pub(crate) const MAX_READ: usize = 64 * 1024;
/// The first read: a handshake or CONNECT frame fits.
const FIRST_READ: usize = 2 * 1024;

/// A `BytesMut` that the connection decodes from, with the size of its next read.
#[derive(Debug)]
pub(crate) struct ReadBuffer {
    bytes: BytesMut,
    /// How much room the next read gets.
    next_read: usize,
}

impl Default for ReadBuffer {
    fn default() -> Self {
        ReadBuffer { bytes: BytesMut::new(), next_read: FIRST_READ }
    }
}

impl ReadBuffer {
    /// Reads once from `reader` into the buffer: the byte count, 0 at the end of the stream.
    /// Cancel-safe, as `read_buf`: nothing read is lost if the future is dropped.
    pub(crate) async fn read_from<R: AsyncRead + Unpin>(
        &mut self,
        reader: &mut R,
    ) -> std::io::Result<usize> {
        if self.bytes.capacity() - self.bytes.len() < self.next_read / 2 {
            self.bytes.reserve(self.next_read);
        }
        let room = self.bytes.capacity() - self.bytes.len();
        let read = reader.read_buf(&mut self.bytes).await?;
        self.next_read = if read >= room {
            (self.next_read * 2).min(MAX_READ)
        } else {
            (read * 2).next_power_of_two().clamp(MIN_READ, MAX_READ)
        };
        Ok(read)
    }

    /// Whether `read` (the outcome of [`read_from`](Self::read_from)) means the client went
    /// away: the end of the stream, or an error. A frame left half read is logged.
    pub(crate) fn closed_by(&self, read: &std::io::Result<usize>, peer: &str) -> bool {
        let closed = matches!(read, Ok(0) | Err(_));
        if closed && !self.is_empty() {
            tracing::debug!(peer, bytes = self.len(), "connection closed mid-frame");
        }
        closed
    }

    /// The bytes read and not yet decoded.
    pub(crate) fn bytes(&mut self) -> &mut BytesMut {
        &mut self.bytes
    }

    /// Whether bytes wait to be decoded (a frame still arriving).
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Bytes waiting to be decoded.
    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Call after decoding: when nothing is left to decode, gives back a buffer much larger
    /// than the next read needs (after a large frame, or when a busy connection goes quiet).
    pub(crate) fn decoded(&mut self) {
        if self.bytes.is_empty() && self.bytes.capacity() > 2 * self.next_read {
            self.bytes = BytesMut::new();
        }
    }

    /// The allocated room, for tests.
    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.bytes.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn an_idle_connection_keeps_a_small_buffer() {
        let (mut client, mut server) = tokio::io::duplex(1 << 20);
        let mut buffer = ReadBuffer::default();
        client.write_all(&[b'x'; 100]).await.unwrap();
        assert_eq!(buffer.read_from(&mut server).await.unwrap(), 100);
        buffer.bytes().clear();
        buffer.decoded();
        assert!(buffer.capacity() <= MIN_READ * 4, "capacity {}", buffer.capacity());
        client.write_all(&[b'y'; 10]).await.unwrap();
        assert_eq!(buffer.read_from(&mut server).await.unwrap(), 10);
        assert!(buffer.capacity() <= MIN_READ * 4, "capacity {}", buffer.capacity());
    }

    #[tokio::test]
    async fn a_large_frame_grows_the_buffer_and_gives_it_back() {
        let (mut client, mut server) = tokio::io::duplex(1 << 20);
        let mut buffer = ReadBuffer::default();
        let frame = vec![b'z'; 300 * 1024];
        client.write_all(&frame).await.unwrap();
        let mut total = 0;
        while total < frame.len() {
            total += buffer.read_from(&mut server).await.unwrap();
        }
        assert_eq!(buffer.len(), frame.len());
        assert_eq!(&buffer.bytes()[..], &frame[..]);
        buffer.bytes().clear();
        // A short read after the frame: the next read is small, the big buffer goes back.
        client.write_all(b"ping").await.unwrap();
        buffer.read_from(&mut server).await.unwrap();
        buffer.bytes().clear();
        buffer.decoded();
        assert!(buffer.capacity() <= MIN_READ * 4, "capacity {}", buffer.capacity());
        assert!(buffer.is_empty());
    }
}
