//! The connection layer: protocol headers, SASL, open/close with their negotiation, and the
//! sessions (begin/end).

use bytes::{Bytes, BytesMut};
use protocol::amqp::sasl::{self, mechanism};
use protocol::amqp::{
    condition, AmqpError, AmqpFrame, Begin, Close, Codec, Decoded, End, Fields, Frame, Open,
    Performative, ProtocolHeader, ProtocolId, SaslCode, SaslFrame, SaslMechanisms, SaslOutcome,
    Symbol, Value, MIN_MAX_FRAME_SIZE,
};

use super::{
    Connection, Fatal, Session, State, CHANNEL_MAX, HEARTBEAT, IDLE_TIMEOUT, INCOMING_WINDOW,
};

impl Connection {
    /// Handles one decoded header or frame; `Ok(false)` once the client closed.
    pub(super) fn handle(&mut self, decoded: Decoded) -> Result<bool, Fatal> {
        match decoded {
            Decoded::Header(header) => self.header(header),
            Decoded::Frame(Frame::Sasl(frame)) => self.sasl(frame),
            Decoded::Frame(Frame::Heartbeat) => Ok(true),
            Decoded::Frame(Frame::Amqp(frame)) => self.frame(frame),
        }
    }

    fn header(&mut self, header: ProtocolHeader) -> Result<bool, Fatal> {
        let mut bytes = BytesMut::new();
        match (self.state, header.id) {
            (State::Start, ProtocolId::Sasl) => {
                Codec::encode_header(ProtocolHeader::SASL, &mut bytes);
                self.output.write(bytes.freeze());
                let mechanisms = SaslMechanisms {
                    mechanisms: vec![
                        Symbol::from(mechanism::PLAIN),
                        Symbol::from(mechanism::ANONYMOUS),
                    ],
                };
                self.write(&Frame::Sasl(SaslFrame::Mechanisms(mechanisms)));
                self.state = State::Sasl;
            }
            // Without a login, when logins are required: say that SASL is (the spec's answer
            // with the header we want), then close.
            (State::Start, ProtocolId::Amqp) if !self.context.security.admits_anonymous() => {
                Codec::encode_header(ProtocolHeader::SASL, &mut bytes);
                self.output.write(bytes.freeze());
                return Err(Fatal::Cut("a login is required: connect with SASL".to_owned()));
            }
            // A client may skip SASL, as ActiveMQ allows when no authentication is configured.
            (State::Start | State::SaslDone, ProtocolId::Amqp) => {
                Codec::encode_header(ProtocolHeader::AMQP, &mut bytes);
                self.output.write(bytes.freeze());
                self.state = State::AwaitingOpen;
            }
            (state, id) => {
                return Err(Fatal::Cut(format!(
                    "unexpected protocol header (id {}) in state {state:?}",
                    id.code()
                )))
            }
        }
        Ok(true)
    }

    fn sasl(&mut self, frame: SaslFrame) -> Result<bool, Fatal> {
        let SaslFrame::Init(init) = frame else {
            return Err(Fatal::Cut("expected sasl-init".to_owned()));
        };
        if self.state != State::Sasl {
            return Err(Fatal::Cut("sasl-init after the SASL outcome".to_owned()));
        }
        // The outcome goes out once the login is checked (`authenticated`); reading stops
        // until then.
        let security = self.context.security.clone();
        let login = match init.mechanism.as_str() {
            mechanism::PLAIN => {
                match sasl::parse_plain(init.initial_response.as_deref().unwrap_or(&[])) {
                    Ok(credentials) => security.authenticate(
                        &self.peer,
                        Some(&credentials.authcid),
                        Some(&credentials.password),
                    ),
                    Err(error) => {
                        tracing::info!(peer = %self.peer, %error, "SASL PLAIN response refused");
                        return self.sasl_refused();
                    }
                }
            }
            mechanism::ANONYMOUS => {
                let trace = sasl::parse_anonymous(init.initial_response.as_deref());
                tracing::debug!(peer = %self.peer, trace = trace.as_deref().unwrap_or(""), "SASL ANONYMOUS");
                security.authenticate(&self.peer, None, None)
            }
            other => {
                tracing::info!(peer = %self.peer, mechanism = other, "SASL mechanism not offered");
                return self.sasl_refused();
            }
        };
        self.authenticating.start((), login);
        Ok(true)
    }

    /// Answers the sasl-init once its login is checked.
    pub(super) fn authenticated(
        &mut self,
        outcome: Result<crate::security::Subject, crate::security::AuthError>,
    ) -> Result<bool, Fatal> {
        match outcome {
            Ok(subject) => {
                self.client.logged_in(subject);
                let outcome = SaslOutcome { code: SaslCode::Ok, additional_data: None };
                self.write(&Frame::Sasl(SaslFrame::Outcome(outcome)));
                self.state = State::SaslDone;
                Ok(true)
            }
            Err(_) => self.sasl_refused(),
        }
    }

    fn sasl_refused(&mut self) -> Result<bool, Fatal> {
        let outcome = SaslOutcome { code: SaslCode::Auth, additional_data: None };
        self.write(&Frame::Sasl(SaslFrame::Outcome(outcome)));
        Err(Fatal::Cut("SASL authentication failed".to_owned()))
    }

    fn frame(&mut self, frame: AmqpFrame) -> Result<bool, Fatal> {
        let channel = frame.channel;
        if self.state != State::Open {
            return match frame.performative {
                Performative::Open(open) if self.state == State::AwaitingOpen => {
                    self.open(open)?;
                    Ok(true)
                }
                other => Err(Fatal::close(
                    condition::ILLEGAL_STATE,
                    format!("expected open, received {}", other.name()),
                )),
            };
        }
        if channel > self.channel_max {
            return Err(Fatal::close(
                condition::CONNECTION_FRAMING_ERROR,
                format!(
                    "channel {channel} is above the negotiated channel-max {}",
                    self.channel_max
                ),
            ));
        }
        match frame.performative {
            Performative::Open(_) => {
                return Err(Fatal::close(condition::ILLEGAL_STATE, "open received twice"))
            }
            Performative::Close(close) => {
                if let Some(error) = &close.error {
                    tracing::info!(peer = %self.peer, condition = %error.condition, "client closed with an error");
                }
                // As ActiveMQ does, the connection is gone from the broker before the close is
                // answered: a client that reconnects at once with the same container id (a JMS
                // client id) is not refused, and finds its durable subscriptions free.
                self.release();
                self.send_frame(AmqpFrame::new(0, Close::default()));
                return Ok(false);
            }
            Performative::Begin(begin) => self.begin(channel, begin)?,
            Performative::End(_) => self.end(channel)?,
            Performative::Attach(attach) => self.attach(channel, *attach)?,
            Performative::Flow(flow) => self.flow(channel, flow)?,
            Performative::Transfer(transfer) => self.transfer(channel, transfer, frame.payload)?,
            Performative::Disposition(disposition) => self.disposition(channel, disposition)?,
            Performative::Detach(detach) => self.detach(channel, detach)?,
        }
        Ok(true)
    }

    fn open(&mut self, open: Open) -> Result<(), Fatal> {
        let peer_frame = open.max_frame_size();
        if peer_frame < MIN_MAX_FRAME_SIZE {
            return Err(Fatal::close(
                condition::INVALID_FIELD,
                format!("max-frame-size {peer_frame} is below the minimum of {MIN_MAX_FRAME_SIZE}"),
            ));
        }
        self.codec.set_peer_max_frame_size(peer_frame);
        self.channel_max = open.channel_max().min(CHANNEL_MAX);
        if let Some(idle) = open.idle_time_out.filter(|t| *t > 0) {
            // Half the peer's timeout, as the spec recommends, so one late frame is no loss.
            let interval = std::time::Duration::from_millis(u64::from(idle / 2).max(1));
            self.output.heart_beat(interval, Bytes::from_static(&HEARTBEAT));
        }
        // The container id is the JMS client id, which ActiveMQ lets one live connection hold:
        // its AmqpConnection refuses another with `amqp:invalid-field` naming the field in the
        // info map (what Qpid JMS turns into an InvalidClientIDException).
        if let Err(refused) = self.client.open(Some(open.container_id.as_str()), None) {
            let mut error = AmqpError::new(condition::INVALID_FIELD, refused.to_string());
            error.info = Some(Fields(vec![(
                Symbol::from("invalid-field"),
                Value::Symbol(Symbol::from("container-id")),
            )]));
            return Err(Fatal::Close(error));
        }
        let ours = Open {
            container_id: self.context.id_prefix.clone(),
            max_frame_size: Some(self.codec.limits().max_frame_size),
            channel_max: Some(self.channel_max),
            idle_time_out: Some(u32::try_from(IDLE_TIMEOUT.as_millis()).unwrap_or(u32::MAX)),
            offered_capabilities: Some(vec![
                Symbol::from("ANONYMOUS-RELAY"),
                Symbol::from("DELAYED_DELIVERY"),
            ]),
            ..Open::default()
        };
        self.send_frame(AmqpFrame::new(0, ours));
        self.state = State::Open;
        tracing::debug!(peer = %self.peer, container = %open.container_id, "AMQP connection open");
        Ok(())
    }

    fn begin(&mut self, channel: u16, begin: Begin) -> Result<(), Fatal> {
        if begin.remote_channel.is_some() {
            return Err(Fatal::close(
                condition::NOT_ALLOWED,
                "the broker does not begin sessions: a begin with remote-channel is unexpected",
            ));
        }
        if self.sessions.contains_key(&channel) {
            return Err(Fatal::close(
                condition::CONNECTION_FRAMING_ERROR,
                format!("channel {channel} already has a session"),
            ));
        }
        let session = Session::new(&begin);
        let ours = Begin {
            remote_channel: Some(channel),
            next_outgoing_id: session.next_outgoing_id,
            incoming_window: INCOMING_WINDOW,
            outgoing_window: u32::MAX,
            handle_max: Some(u32::MAX),
            ..Begin::default()
        };
        self.sessions.insert(channel, session);
        self.send_frame(AmqpFrame::new(channel, ours));
        Ok(())
    }

    fn end(&mut self, channel: u16) -> Result<(), Fatal> {
        let Some(mut session) = self.sessions.remove(&channel) else {
            return Err(Fatal::close(
                condition::ILLEGAL_STATE,
                format!("end on channel {channel}, which has no session"),
            ));
        };
        for (handle, link) in std::mem::take(&mut session.links) {
            self.close_link(handle, link, &mut session.unsettled, false);
        }
        self.send_frame(AmqpFrame::new(channel, End::default()));
        Ok(())
    }

    /// The session on `channel`, or the connection error for a frame on a channel without one.
    pub(super) fn session(&mut self, channel: u16) -> Result<&mut Session, Fatal> {
        self.sessions.get_mut(&channel).ok_or_else(|| {
            Fatal::close(condition::ILLEGAL_STATE, format!("channel {channel} has no session"))
        })
    }
}
