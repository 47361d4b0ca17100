//! The handshake (SASL, open, begin) and the handles.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use protocol::amqp::sasl::{mechanism, plain_response};
use protocol::amqp::{
    AmqpFrame, Begin, Codec, Decoded, Frame, Limits, Message, Open, Performative, ProtocolHeader,
    ProtocolId, SaslCode, SaslFrame, SaslInit, Symbol,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use super::connection::{self, Request, Session};
use crate::client::within;
use crate::ClientError;

/// How to connect.
#[derive(Debug, Clone)]
pub struct AmqpOptions {
    /// The container id the broker sees (durable subscriptions are keyed by it); a unique
    /// one is made up when `None`.
    pub container_id: Option<String>,
    /// SASL PLAIN with this user (and [`AmqpOptions::password`]); ANONYMOUS when `None`.
    pub user: Option<String>,
    /// The password for SASL PLAIN.
    pub password: Option<String>,
    /// How long the handshake, an attach, a send's disposition or a close may take.
    pub timeout: Duration,
    /// The largest frame we accept (announced in `open`).
    pub max_frame_size: u32,
}

impl Default for AmqpOptions {
    fn default() -> AmqpOptions {
        AmqpOptions {
            container_id: None,
            user: None,
            password: None,
            timeout: Duration::from_secs(30),
            max_frame_size: 1 << 20,
        }
    }
}

/// A connection with one session. Cheap to share by reference; [`AmqpClient::close`] ends
/// it (dropping it ends the task too, without the close handshake).
#[derive(Debug)]
pub struct AmqpClient {
    requests: mpsc::Sender<Request>,
    timeout: Duration,
}

/// A sender link.
#[derive(Debug)]
pub struct Sender {
    handle: u32,
    requests: mpsc::Sender<Request>,
    timeout: Duration,
}

/// A receiver link that keeps `credit` messages granted to the broker.
#[derive(Debug)]
pub struct Receiver {
    handle: u32,
    deliveries: mpsc::UnboundedReceiver<Delivery>,
    requests: mpsc::Sender<Request>,
    timeout: Duration,
}

/// A received message, to [`Receiver::accept`] unless the broker sent it settled.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The session's delivery id.
    pub delivery_id: u32,
    /// Whether the broker settled it already (nothing to accept).
    pub settled: bool,
    /// The message.
    pub message: Message,
}

impl AmqpClient {
    /// Connects over TCP to `host:port` (every address the name resolves to is tried).
    pub async fn connect(
        host: &str,
        port: u16,
        options: AmqpOptions,
    ) -> Result<AmqpClient, ClientError> {
        let stream = crate::net::connect_tcp(host, port, options.timeout).await?;
        AmqpClient::connect_stream(stream, options).await
    }

    /// Connects over an already open byte stream.
    pub async fn connect_stream<S>(
        stream: S,
        options: AmqpOptions,
    ) -> Result<AmqpClient, ClientError>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let timeout = options.timeout;
        let (mut reader, mut writer) = tokio::io::split(stream);
        let limits = Limits { max_frame_size: options.max_frame_size, ..Limits::default() };
        let mut codec = Codec::new(limits);
        let mut buffer = BytesMut::with_capacity(8 * 1024);
        let session = within(timeout, "the AMQP handshake", async {
            handshake(&options, &mut codec, &mut reader, &mut writer, &mut buffer).await
        })
        .await??;
        let (requests, inbox) = mpsc::channel(64);
        tokio::spawn(connection::run(codec, reader, writer, buffer, session, inbox));
        Ok(AmqpClient { requests, timeout })
    }

    /// Attaches a sender link to `address` (`queue://X`, `topic://X` or a plain queue name).
    pub async fn sender(&self, address: &str) -> Result<Sender, ClientError> {
        let (reply, answer) = oneshot::channel();
        let request = Request::AttachSender { address: address.to_owned(), reply };
        let handle = self.ask(request, answer, "the sender's attach").await?;
        Ok(Sender { handle, requests: self.requests.clone(), timeout: self.timeout })
    }

    /// Attaches a receiver link from `address`, granting the broker `credit` messages (at
    /// least 1) and topping it up as messages are accepted.
    pub async fn receiver(&self, address: &str, credit: u32) -> Result<Receiver, ClientError> {
        let (deliveries_tx, deliveries) = mpsc::unbounded_channel();
        let (reply, answer) = oneshot::channel();
        let request = Request::AttachReceiver {
            address: address.to_owned(),
            credit: credit.max(1),
            deliveries: deliveries_tx,
            reply,
        };
        let handle = self.ask(request, answer, "the receiver's attach").await?;
        Ok(Receiver { handle, deliveries, requests: self.requests.clone(), timeout: self.timeout })
    }

    /// Closes the connection (close, and the broker's close in answer).
    pub async fn close(self) -> Result<(), ClientError> {
        let (reply, answer) = oneshot::channel();
        self.ask(Request::Close { reply }, answer, "the broker's close").await
    }

    async fn ask<T>(
        &self,
        request: Request,
        answer: oneshot::Receiver<Result<T, ClientError>>,
        what: &str,
    ) -> Result<T, ClientError> {
        ask(&self.requests, self.timeout, request, answer, what).await
    }
}

async fn ask<T>(
    requests: &mpsc::Sender<Request>,
    timeout: Duration,
    request: Request,
    answer: oneshot::Receiver<Result<T, ClientError>>,
    what: &str,
) -> Result<T, ClientError> {
    requests.send(request).await.map_err(|_| ClientError::Closed)?;
    within(timeout, what, answer).await?.map_err(|_| ClientError::Closed)?
}

impl Sender {
    /// Sends `message` unsettled and waits for the broker's outcome: `Ok` once accepted
    /// (for a durable message on ferromq: once it is on disk), [`ClientError::Refused`] if
    /// rejected, released or modified.
    pub async fn send(&self, message: &Message) -> Result<(), ClientError> {
        self.send_bytes(message.to_bytes()?).await
    }

    /// Sends an already encoded message (its sections' bytes), as [`Sender::send`].
    pub async fn send_bytes(&self, payload: Bytes) -> Result<(), ClientError> {
        let (reply, answer) = oneshot::channel();
        let request = Request::Send { handle: self.handle, payload, reply };
        ask(&self.requests, self.timeout, request, answer, "the send's disposition").await
    }
}

impl Receiver {
    /// The next message, or `None` when none arrives within `timeout`.
    pub async fn receive(&mut self, timeout: Duration) -> Result<Option<Delivery>, ClientError> {
        match tokio::time::timeout(timeout, self.deliveries.recv()).await {
            Ok(Some(delivery)) => Ok(Some(delivery)),
            Ok(None) => Err(ClientError::Closed),
            Err(_) => Ok(None),
        }
    }

    /// Accepts (and settles) `delivery`, and tops the link's credit up.
    pub async fn accept(&self, delivery: &Delivery) -> Result<(), ClientError> {
        let request = Request::Accept { handle: self.handle, delivery_id: delivery.delivery_id };
        self.requests.send(request).await.map_err(|_| ClientError::Closed)
    }

    /// How long requests on this link wait.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// The SASL exchange, `open` and `begin`, up to the broker's `begin`.
async fn handshake<R, W>(
    options: &AmqpOptions,
    codec: &mut Codec,
    reader: &mut R,
    writer: &mut W,
    buffer: &mut BytesMut,
) -> Result<Session, ClientError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut out = BytesMut::new();
    Codec::encode_header(ProtocolHeader::SASL, &mut out);
    writer.write_all(&out).await?;
    expect_header(codec, reader, buffer, ProtocolId::Sasl).await?;
    let mechanisms = match next_frame(codec, reader, buffer).await? {
        Frame::Sasl(SaslFrame::Mechanisms(m)) => m.mechanisms,
        other => return Err(unexpected("sasl-mechanisms", &other)),
    };
    let offered = |name: &str| mechanisms.iter().any(|m| m.as_str() == name);
    let init = match &options.user {
        Some(user) if offered(mechanism::PLAIN) => SaslInit {
            mechanism: Symbol::from(mechanism::PLAIN),
            initial_response: Some(plain_response(user, options.password.as_deref().unwrap_or(""))),
            hostname: None,
        },
        _ if offered(mechanism::ANONYMOUS) => SaslInit {
            mechanism: Symbol::from(mechanism::ANONYMOUS),
            initial_response: None,
            hostname: None,
        },
        _ => {
            return Err(ClientError::protocol(format!(
                "the broker offers no SASL mechanism we speak: {mechanisms:?}"
            )))
        }
    };
    out.clear();
    codec.encode(&SaslFrame::Init(init).into(), &mut out)?;
    writer.write_all(&out).await?;
    match next_frame(codec, reader, buffer).await? {
        Frame::Sasl(SaslFrame::Outcome(outcome)) if outcome.code == SaslCode::Ok => {}
        Frame::Sasl(SaslFrame::Outcome(outcome)) => {
            return Err(ClientError::Refused {
                condition: format!("sasl {:?}", outcome.code),
                description: "authentication failed".to_owned(),
            })
        }
        other => return Err(unexpected("sasl-outcome", &other)),
    }

    let container_id = options.container_id.clone().unwrap_or_else(|| {
        // Brokers let one live connection hold a container id (it is the JMS client id): a
        // count makes the ids of one process distinct even when two connections read the
        // same clock, the time those of processes that reuse a pid.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let sequence = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("ferromq-client-{}-{nanos:x}-{sequence}", std::process::id())
    });
    let open = Open {
        container_id,
        max_frame_size: Some(options.max_frame_size),
        channel_max: Some(0),
        ..Open::default()
    };
    let begin = Begin {
        remote_channel: None,
        next_outgoing_id: 0,
        incoming_window: connection::INCOMING_WINDOW,
        outgoing_window: u32::MAX,
        handle_max: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    };
    out.clear();
    Codec::encode_header(ProtocolHeader::AMQP, &mut out);
    codec.encode(&AmqpFrame::new(0, open).into(), &mut out)?;
    codec.encode(&AmqpFrame::new(0, begin).into(), &mut out)?;
    writer.write_all(&out).await?;
    expect_header(codec, reader, buffer, ProtocolId::Amqp).await?;
    let open = match next_frame(codec, reader, buffer).await? {
        Frame::Amqp(AmqpFrame { performative: Performative::Open(open), .. }) => open,
        other => return Err(unexpected("open", &other)),
    };
    codec.set_peer_max_frame_size(open.max_frame_size.unwrap_or(u32::MAX));
    let begin = loop {
        match next_frame(codec, reader, buffer).await? {
            Frame::Heartbeat => continue,
            Frame::Amqp(AmqpFrame { performative: Performative::Begin(begin), .. }) => break begin,
            other => return Err(unexpected("begin", &other)),
        }
    };
    Ok(Session {
        peer_max_frame_size: open.max_frame_size.unwrap_or(u32::MAX),
        peer_idle_timeout: open.idle_time_out.filter(|t| *t > 0).map(u64::from),
        remote_incoming_window: begin.incoming_window,
        next_incoming_id: begin.next_outgoing_id,
    })
}

fn unexpected(wanted: &str, frame: &Frame) -> ClientError {
    if let Frame::Amqp(AmqpFrame { performative: Performative::Close(close), .. }) = frame {
        if let Some(error) = &close.error {
            return connection::refused(error);
        }
    }
    ClientError::protocol(format!("expected {wanted} from the broker, got {frame:?}"))
}

async fn expect_header<R: AsyncRead + Unpin>(
    codec: &mut Codec,
    reader: &mut R,
    buffer: &mut BytesMut,
    id: ProtocolId,
) -> Result<(), ClientError> {
    match next(codec, reader, buffer).await? {
        Decoded::Header(header) if header.id == id => Ok(()),
        Decoded::Header(header) => {
            Err(ClientError::protocol(format!("the broker answered with header {header:?}")))
        }
        Decoded::Frame(frame) => Err(unexpected("a protocol header", &frame)),
    }
}

async fn next_frame<R: AsyncRead + Unpin>(
    codec: &mut Codec,
    reader: &mut R,
    buffer: &mut BytesMut,
) -> Result<Frame, ClientError> {
    match next(codec, reader, buffer).await? {
        Decoded::Frame(frame) => Ok(frame),
        Decoded::Header(header) => {
            Err(ClientError::protocol(format!("unexpected protocol header {header:?}")))
        }
    }
}

async fn next<R: AsyncRead + Unpin>(
    codec: &mut Codec,
    reader: &mut R,
    buffer: &mut BytesMut,
) -> Result<Decoded, ClientError> {
    loop {
        if let Some(decoded) = codec.decode(buffer)? {
            return Ok(decoded);
        }
        if reader.read_buf(buffer).await? == 0 {
            return Err(ClientError::Closed);
        }
    }
}
