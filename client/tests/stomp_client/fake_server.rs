//! A scripted STOMP server: one connection, one script written in the test.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use bytes::BytesMut;
use client::{Command, ConnectOptions, Frame, Limits, StompClient, Version};
use protocol::stomp::{Codec, Decoded};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The server's end of one connection.
pub struct Peer<S = TcpStream> {
    stream: S,
    codec: Codec,
    buf: BytesMut,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Peer<S> {
    pub fn new(stream: S) -> Peer<S> {
        Peer { stream, codec: Codec::new(Limits::default()), buf: BytesMut::new() }
    }

    /// The next frame or heart-beat; `None` when the client closed the connection.
    pub async fn next(&mut self) -> Result<Option<Decoded>> {
        loop {
            if let Some(decoded) = self.codec.decode(&mut self.buf)? {
                return Ok(Some(decoded));
            }
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                ensure!(self.buf.is_empty(), "client closed mid-frame: {:?}", self.buf);
                return Ok(None);
            }
        }
    }

    /// The next frame, skipping heart-beats; `None` when the client closed.
    pub async fn read(&mut self) -> Result<Option<Frame>> {
        loop {
            match self.next().await? {
                Some(Decoded::Frame(frame)) => return Ok(Some(frame)),
                Some(Decoded::HeartBeat) => continue,
                None => return Ok(None),
            }
        }
    }

    /// The next frame, which must be a `command`.
    pub async fn expect(&mut self, command: Command) -> Result<Frame> {
        let frame = self.read().await?.with_context(|| format!("closed; expected {command}"))?;
        ensure!(frame.command == command, "expected {command}, got {frame:?}");
        Ok(frame)
    }

    /// The next frame, which must be a `command`, answered with a RECEIPT.
    pub async fn expect_and_receipt(&mut self, command: Command) -> Result<Frame> {
        let frame = self.expect(command).await?;
        self.receipt(&frame).await?;
        Ok(frame)
    }

    /// Answers `frame`'s `receipt` header with a RECEIPT.
    pub async fn receipt(&mut self, frame: &Frame) -> Result<()> {
        let id = frame.get("receipt").with_context(|| format!("no receipt header: {frame:?}"))?;
        self.write(&Frame::new(Command::Receipt).header("receipt-id", id)).await
    }

    pub async fn write(&mut self, frame: &Frame) -> Result<()> {
        let mut wire = BytesMut::new();
        self.codec.encode(frame, &mut wire);
        self.write_raw(&wire).await
    }

    pub async fn write_raw(&mut self, bytes: &[u8]) -> Result<()> {
        self.stream.write_all(bytes).await?;
        Ok(())
    }

    /// Reads CONNECT, answers CONNECTED at `version` with `headers`; returns the CONNECT.
    pub async fn accept_connect(
        &mut self,
        version: Version,
        headers: &[(&str, &str)],
    ) -> Result<Frame> {
        let connect = self.expect(Command::Connect).await?;
        let mut connected = Frame::new(Command::Connected).header("version", version.as_str());
        for (name, value) in headers {
            connected.push_header(*name, *value);
        }
        self.write(&connected).await?;
        self.codec.set_version(version);
        Ok(connect)
    }

    /// Reads (and answers nothing) until the client closes; returns what it sent.
    pub async fn read_until_close(&mut self) -> Result<Vec<Frame>> {
        let mut frames = Vec::new();
        while let Some(frame) = self.read().await? {
            frames.push(frame);
        }
        Ok(frames)
    }

    /// The client must close the connection next, sending nothing more.
    pub async fn expect_close(&mut self) -> Result<()> {
        match self.read().await? {
            None => Ok(()),
            Some(frame) => bail!("expected the client to close, got {frame:?}"),
        }
    }
}

/// A TCP server on 127.0.0.1 that runs a script on its first connection.
pub struct FakeServer {
    pub addr: SocketAddr,
    script: JoinHandle<Result<()>>,
}

impl FakeServer {
    pub async fn start<F, Fut>(script: F) -> Result<FakeServer>
    where
        F: FnOnce(Peer) -> Fut + Send + 'static,
        Fut: Future<Output = Result<()>> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let script = tokio::spawn(async move {
            let (stream, _) = listener.accept().await?;
            script(Peer::new(stream)).await
        });
        Ok(FakeServer { addr, script })
    }

    /// Waits for the script to end and returns its outcome (so its assertions count).
    pub async fn finish(self) -> Result<()> {
        tokio::time::timeout(Duration::from_secs(10), self.script)
            .await
            .context("the fake server's script did not finish")??
    }
}

/// Options for tests: defaults with a short timeout.
pub fn options() -> ConnectOptions {
    ConnectOptions { timeout: Duration::from_secs(5), ..ConnectOptions::default() }
}

/// A server that accepts CONNECT at `version` and then runs `script`, and a client
/// connected to it.
pub async fn session<F, Fut>(version: Version, script: F) -> Result<(StompClient, FakeServer)>
where
    F: FnOnce(Peer) -> Fut + Send + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let server = FakeServer::start(move |mut peer| async move {
        peer.accept_connect(version, &[]).await?;
        script(peer).await
    })
    .await?;
    let client = StompClient::connect(server.addr, options()).await?;
    Ok((client, server))
}

/// An in-process connection: the client's end and the server's.
pub fn pipe() -> (DuplexStream, Peer<DuplexStream>) {
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    (client_end, Peer::new(server_end))
}
