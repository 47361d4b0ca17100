//! [`RawConnection`]: a TCP connection to the broker that writes exactly the bytes a test gives
//! it and decodes what comes back with `protocol::stomp::Codec`, so tests see the wire itself
//! (heart-beat bytes, ERROR frames, the close that follows them).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context as _};
use bytes::BytesMut;
use protocol::stomp::{Codec, Command, Decoded, Frame, Limits, Version};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::ARRIVES;

/// What [`RawConnection::next_event`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawEvent {
    Frame(Frame),
    /// A lone end-of-line between frames.
    HeartBeat,
    /// The broker closed the connection (end of stream, or a reset after it closed).
    Closed,
    /// Nothing arrived in the time allowed.
    Silent,
}

/// A TCP connection speaking STOMP by hand.
#[derive(Debug)]
pub struct RawConnection {
    stream: TcpStream,
    codec: Codec,
    buffer: BytesMut,
}

impl RawConnection {
    /// Opens a TCP connection and sends nothing.
    pub async fn open(addr: SocketAddr) -> anyhow::Result<RawConnection> {
        let stream = tokio::time::timeout(ARRIVES, TcpStream::connect(addr))
            .await
            .with_context(|| format!("timed out connecting to {addr}"))?
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        Ok(RawConnection { stream, codec: Codec::new(Limits::default()), buffer: BytesMut::new() })
    }

    /// Opens a connection and completes a STOMP 1.2 CONNECT with `headers` added; returns the
    /// CONNECTED frame.
    pub async fn connect(
        addr: SocketAddr,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<(RawConnection, Frame)> {
        let mut connection = RawConnection::open(addr).await?;
        let mut connect = Frame::new(Command::Connect).header("accept-version", "1.2");
        for (name, value) in headers {
            connect.push_header(*name, *value);
        }
        connection.write_frame(&connect).await?;
        let connected = connection.read_frame().await.context("waiting for CONNECTED")?;
        if connected.command != Command::Connected {
            bail!("expected CONNECTED, got {connected:?}");
        }
        connection.codec.set_version(Version::V1_2);
        Ok((connection, connected))
    }

    /// Drops the connection abruptly: a TCP reset, no DISCONNECT, no orderly close.
    pub fn reset(self) -> anyhow::Result<()> {
        self.stream.set_zero_linger().context("setting SO_LINGER to zero")?;
        drop(self.stream);
        Ok(())
    }

    /// Writes `bytes` as they are.
    pub async fn write_bytes(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.stream.write_all(bytes).await.context("writing to the broker")?;
        Ok(())
    }

    /// Writes `bytes`, ignoring a failure: the broker may close while a large bad frame is
    /// still being written, and what matters is what it answered.
    pub async fn write_bytes_lenient(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes).await;
    }

    /// Encodes `frame` at the connection's version (headers escaped for 1.2 once connected)
    /// and writes it.
    pub async fn write_frame(&mut self, frame: &Frame) -> anyhow::Result<()> {
        let mut bytes = BytesMut::new();
        self.codec.encode(frame, &mut bytes);
        self.write_bytes(&bytes).await
    }

    /// The next frame, heart-beat or close, waiting at most `limit`.
    pub async fn next_event(&mut self, limit: Duration) -> anyhow::Result<RawEvent> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(decoded) =
                self.codec.decode(&mut self.buffer).context("decoding what the broker sent")?
            {
                return Ok(match decoded {
                    Decoded::Frame(frame) => RawEvent::Frame(frame),
                    Decoded::HeartBeat => RawEvent::HeartBeat,
                });
            }
            let read = tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.buffer));
            match read.await {
                Err(_) => return Ok(RawEvent::Silent),
                Ok(Ok(0)) => {
                    if !self.buffer.is_empty() {
                        bail!("the broker closed in the middle of a frame: {:?}", self.buffer);
                    }
                    return Ok(RawEvent::Closed);
                }
                Ok(Ok(_)) => {}
                Ok(Err(error)) if is_reset(&error) => return Ok(RawEvent::Closed),
                Ok(Err(error)) => return Err(error).context("reading from the broker"),
            }
        }
    }

    /// The next frame (heart-beats skipped), waiting at most [`ARRIVES`].
    pub async fn read_frame(&mut self) -> anyhow::Result<Frame> {
        let deadline = tokio::time::Instant::now() + ARRIVES;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_event(left).await? {
                RawEvent::Frame(frame) => return Ok(frame),
                RawEvent::HeartBeat => continue,
                RawEvent::Closed => {
                    bail!("the broker closed the connection instead of sending a frame")
                }
                RawEvent::Silent => bail!("no frame from the broker within {ARRIVES:?}"),
            }
        }
    }

    /// Fails if a frame arrives within `limit` (heart-beats are ignored; a close is a failure
    /// too, since the connection should still be usable).
    pub async fn expect_no_frame(&mut self, limit: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_event(left).await? {
                RawEvent::Silent => return Ok(()),
                RawEvent::HeartBeat => continue,
                RawEvent::Frame(frame) => bail!("expected no frame yet, got {frame:?}"),
                RawEvent::Closed => bail!("expected no frame yet, but the broker closed"),
            }
        }
    }

    /// Waits (at most [`ARRIVES`]) for the broker to close the connection; fails on any frame.
    pub async fn expect_closed(&mut self) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + ARRIVES;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_event(left).await? {
                RawEvent::Closed => return Ok(()),
                RawEvent::HeartBeat => continue,
                RawEvent::Frame(frame) => bail!("expected the broker to close, got {frame:?}"),
                RawEvent::Silent => {
                    bail!("the broker did not close the connection within {ARRIVES:?}")
                }
            }
        }
    }

    /// Writes `send(0)`, `send(1)`, ... (SENDs with receipts) one at a time, each waiting for
    /// its RECEIPT, until one gets no answer within [`QUIET`](crate::QUIET): producer flow
    /// control holds it. Returns that send's index, or `None` when all `count` went through.
    pub async fn send_until_held(
        &mut self,
        count: usize,
        send: impl Fn(usize) -> Frame,
    ) -> anyhow::Result<Option<usize>> {
        for index in 0..count {
            self.write_frame(&send(index)).await?;
            match self.next_event(crate::QUIET).await? {
                RawEvent::Silent => return Ok(Some(index)),
                RawEvent::Frame(frame) if frame.command == Command::Receipt => {}
                other => bail!("send {index} got {other:?}"),
            }
        }
        Ok(None)
    }

    /// Writes `send(0)`, `send(1)`, ... one at a time, each waiting for the broker's answer,
    /// until one is answered with an ERROR (the send refused). Returns that send's index and
    /// the ERROR, or `None` when all `count` were accepted.
    pub async fn send_until_refused(
        &mut self,
        count: usize,
        send: impl Fn(usize) -> Frame,
    ) -> anyhow::Result<Option<(usize, Frame)>> {
        for index in 0..count {
            self.write_frame(&send(index)).await?;
            let frame = self.read_frame().await?;
            if frame.command == Command::Error {
                return Ok(Some((index, frame)));
            }
        }
        Ok(None)
    }

    /// Expects an ERROR frame and then the close; returns the ERROR.
    pub async fn expect_error_then_close(&mut self) -> anyhow::Result<Frame> {
        let frame = self.read_frame().await.context("waiting for an ERROR frame")?;
        if frame.command != Command::Error {
            bail!("expected an ERROR frame, got {frame:?}");
        }
        self.expect_closed().await.with_context(|| format!("after the ERROR {frame:?}"))?;
        Ok(frame)
    }
}

fn is_reset(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe
    )
}
