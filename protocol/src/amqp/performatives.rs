//! The nine performatives (the spec, part 2.7): the bodies of AMQP frames.
//!
//! Fields the spec marks mandatory are plain types; every other field is an `Option` that
//! keeps whether the peer sent it (so a frame re-encodes as it came), with a method that
//! applies the spec's default where a default matters to the caller.

use bytes::Bytes;

use super::composite::{describe_descriptor, Composite, FieldReader, FieldWriter, Fields};
use super::definitions::{AmqpError, ReceiverSettleMode, Role, SenderSettleMode};
use super::delivery_state::{read_state, DeliveryState};
use super::error::WireError;
use super::terminus::{AttachTarget, Source};
use super::types::{Symbol, Value};

/// Any performative: the body of an AMQP frame.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)] // The variants are the performatives they hold.
pub enum Performative {
    Open(Open),
    Begin(Begin),
    Attach(Box<Attach>),
    Flow(Flow),
    Transfer(Transfer),
    Disposition(Disposition),
    Detach(Detach),
    End(End),
    Close(Close),
}

impl Performative {
    /// The performative's name in the spec.
    pub fn name(&self) -> &'static str {
        match self {
            Performative::Open(_) => Open::NAME,
            Performative::Begin(_) => Begin::NAME,
            Performative::Attach(_) => Attach::NAME,
            Performative::Flow(_) => Flow::NAME,
            Performative::Transfer(_) => Transfer::NAME,
            Performative::Disposition(_) => Disposition::NAME,
            Performative::Detach(_) => Detach::NAME,
            Performative::End(_) => End::NAME,
            Performative::Close(_) => Close::NAME,
        }
    }

    /// Reads a performative from its described list.
    pub fn from_value(value: Value) -> Result<Performative, WireError> {
        let Value::Described(described) = &value else {
            return Err(WireError::UnexpectedValue {
                expected: "a performative",
                found: value.type_name().to_owned(),
            });
        };
        let d = &described.descriptor;
        Ok(if Transfer::is_described_by(d) {
            Performative::Transfer(Transfer::from_value(value)?)
        } else if Flow::is_described_by(d) {
            Performative::Flow(Flow::from_value(value)?)
        } else if Disposition::is_described_by(d) {
            Performative::Disposition(Disposition::from_value(value)?)
        } else if Open::is_described_by(d) {
            Performative::Open(Open::from_value(value)?)
        } else if Begin::is_described_by(d) {
            Performative::Begin(Begin::from_value(value)?)
        } else if Attach::is_described_by(d) {
            Performative::Attach(Box::new(Attach::from_value(value)?))
        } else if Detach::is_described_by(d) {
            Performative::Detach(Detach::from_value(value)?)
        } else if End::is_described_by(d) {
            Performative::End(End::from_value(value)?)
        } else if Close::is_described_by(d) {
            Performative::Close(Close::from_value(value)?)
        } else {
            return Err(WireError::UnexpectedValue {
                expected: "a performative",
                found: describe_descriptor(d),
            });
        })
    }

    /// The described list for this performative.
    pub fn to_value(&self) -> Value {
        match self {
            Performative::Open(p) => p.to_value(),
            Performative::Begin(p) => p.to_value(),
            Performative::Attach(p) => p.to_value(),
            Performative::Flow(p) => p.to_value(),
            Performative::Transfer(p) => p.to_value(),
            Performative::Disposition(p) => p.to_value(),
            Performative::Detach(p) => p.to_value(),
            Performative::End(p) => p.to_value(),
            Performative::Close(p) => p.to_value(),
        }
    }
}

macro_rules! into_performative {
    ($($ty:ident),*) => {$(
        impl From<$ty> for Performative {
            fn from(p: $ty) -> Performative {
                Performative::$ty(p)
            }
        }
    )*};
}

into_performative!(Open, Begin, Flow, Transfer, Disposition, Detach, End, Close);

impl From<Attach> for Performative {
    fn from(p: Attach) -> Performative {
        Performative::Attach(Box::new(p))
    }
}

/// `open`: the first frame of a connection, with its limits.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Open {
    /// The container's id (mandatory).
    pub container_id: String,
    /// The virtual host the client wants.
    pub hostname: Option<String>,
    /// The largest frame this peer accepts (default 4294967295).
    pub max_frame_size: Option<u32>,
    /// The highest channel number this peer accepts (default 65535).
    pub channel_max: Option<u16>,
    /// Milliseconds of silence after which this peer closes the connection.
    pub idle_time_out: Option<u32>,
    /// Locales this peer writes.
    pub outgoing_locales: Option<Vec<Symbol>>,
    /// Locales this peer reads.
    pub incoming_locales: Option<Vec<Symbol>>,
    /// Extensions this peer supports.
    pub offered_capabilities: Option<Vec<Symbol>>,
    /// Extensions this peer can use.
    pub desired_capabilities: Option<Vec<Symbol>>,
    /// Connection properties (product, version, ...).
    pub properties: Option<Fields>,
}

impl Open {
    /// `max-frame-size` with its default.
    pub fn max_frame_size(&self) -> u32 {
        self.max_frame_size.unwrap_or(u32::MAX)
    }

    /// `channel-max` with its default.
    pub fn channel_max(&self) -> u16 {
        self.channel_max.unwrap_or(u16::MAX)
    }
}

impl Composite for Open {
    const NAME: &'static str = "open";
    const CODE: u64 = 0x10;
    const SYMBOL: &'static str = "amqp:open:list";

    fn read_fields(f: &mut FieldReader) -> Result<Self, WireError> {
        Ok(Open {
            container_id: f.required("container-id")?,
            hostname: f.optional("hostname")?,
            max_frame_size: f.optional("max-frame-size")?,
            channel_max: f.optional("channel-max")?,
            idle_time_out: f.optional("idle-time-out")?,
            outgoing_locales: f.optional("outgoing-locales")?,
            incoming_locales: f.optional("incoming-locales")?,
            offered_capabilities: f.optional("offered-capabilities")?,
            desired_capabilities: f.optional("desired-capabilities")?,
            properties: f.optional("properties")?,
        })
    }

    fn write_fields(&self, f: &mut FieldWriter) {
        f.field(self.container_id.clone())
            .optional(&self.hostname)
            .optional(&self.max_frame_size)
            .optional(&self.channel_max)
            .optional(&self.idle_time_out)
            .optional(&self.outgoing_locales)
            .optional(&self.incoming_locales)
            .optional(&self.offered_capabilities)
            .optional(&self.desired_capabilities)
            .optional(&self.properties);
    }
}

/// `begin`: starts a session on a channel.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Begin {
    /// The channel of the peer's begin this one answers.
    pub remote_channel: Option<u16>,
    /// The transfer id of the next outgoing transfer (mandatory).
    pub next_outgoing_id: u32,
    /// Incoming transfers this peer takes (mandatory).
    pub incoming_window: u32,
    /// Outgoing transfers this peer may send (mandatory).
    pub outgoing_window: u32,
    /// The highest link handle this peer accepts (default 4294967295).
    pub handle_max: Option<u32>,
    /// Extensions this peer supports.
    pub offered_capabilities: Option<Vec<Symbol>>,
    /// Extensions this peer can use.
    pub desired_capabilities: Option<Vec<Symbol>>,
    /// Session properties.
    pub properties: Option<Fields>,
}

impl Composite for Begin {
    const NAME: &'static str = "begin";
    const CODE: u64 = 0x11;
    const SYMBOL: &'static str = "amqp:begin:list";

    fn read_fields(f: &mut FieldReader) -> Result<Self, WireError> {
        Ok(Begin {
            remote_channel: f.optional("remote-channel")?,
            next_outgoing_id: f.required("next-outgoing-id")?,
            incoming_window: f.required("incoming-window")?,
            outgoing_window: f.required("outgoing-window")?,
            handle_max: f.optional("handle-max")?,
            offered_capabilities: f.optional("offered-capabilities")?,
            desired_capabilities: f.optional("desired-capabilities")?,
            properties: f.optional("properties")?,
        })
    }

    fn write_fields(&self, f: &mut FieldWriter) {
        f.optional(&self.remote_channel)
            .field(self.next_outgoing_id)
            .field(self.incoming_window)
            .field(self.outgoing_window)
            .optional(&self.handle_max)
            .optional(&self.offered_capabilities)
            .optional(&self.desired_capabilities)
            .optional(&self.properties);
    }
}

/// `attach`: attaches a link (one direction of message flow) to a session.
#[derive(Debug, Clone, PartialEq)]
pub struct Attach {
    /// The link's name, unique per pair of containers (mandatory).
    pub name: String,
    /// This peer's number for the link (mandatory).
    pub handle: u32,
    /// This peer's end of the link (mandatory).
    pub role: Role,
    /// How the sender settles (default mixed).
    pub snd_settle_mode: Option<SenderSettleMode>,
    /// When the receiver settles (default first).
    pub rcv_settle_mode: Option<ReceiverSettleMode>,
    /// Where messages come from.
    pub source: Option<Source>,
    /// Where messages go (a node, or the transaction coordinator).
    pub target: Option<AttachTarget>,
    /// Unsettled deliveries by tag, for resuming a link.
    pub unsettled: Option<Value>,
    /// Whether `unsettled` is incomplete (default false).
    pub incomplete_unsettled: Option<bool>,
    /// The sender's delivery count (mandatory for senders).
    pub initial_delivery_count: Option<u32>,
    /// The largest message this peer takes (default: no limit).
    pub max_message_size: Option<u64>,
    /// Extensions this peer supports.
    pub offered_capabilities: Option<Vec<Symbol>>,
    /// Extensions this peer can use.
    pub desired_capabilities: Option<Vec<Symbol>>,
    /// Link properties.
    pub properties: Option<Fields>,
}

impl Attach {
    /// An attach with the mandatory fields, everything else absent.
    pub fn new(name: impl Into<String>, handle: u32, role: Role) -> Attach {
        Attach {
            name: name.into(),
            handle,
            role,
            snd_settle_mode: None,
            rcv_settle_mode: None,
            source: None,
            target: None,
            unsettled: None,
            incomplete_unsettled: None,
            initial_delivery_count: None,
            max_message_size: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        }
    }

    /// `snd-settle-mode` with its default.
    pub fn snd_settle_mode(&self) -> SenderSettleMode {
        self.snd_settle_mode.unwrap_or(SenderSettleMode::Mixed)
    }

    /// `rcv-settle-mode` with its default.
    pub fn rcv_settle_mode(&self) -> ReceiverSettleMode {
        self.rcv_settle_mode.unwrap_or(ReceiverSettleMode::First)
    }
}

impl Composite for Attach {
    const NAME: &'static str = "attach";
    const CODE: u64 = 0x12;
    const SYMBOL: &'static str = "amqp:attach:list";

    fn read_fields(f: &mut FieldReader) -> Result<Self, WireError> {
        Ok(Attach {
            name: f.required("name")?,
            handle: f.required("handle")?,
            role: Role::from_bool(f.required("role")?),
            snd_settle_mode: f.optional_with("snd-settle-mode", SenderSettleMode::from_field)?,
            rcv_settle_mode: f.optional_with("rcv-settle-mode", ReceiverSettleMode::from_field)?,
            source: f.optional_with("source", Source::from_value)?,
            target: f.optional_with("target", AttachTarget::from_value)?,
            unsettled: f.optional("unsettled")?,
            incomplete_unsettled: f.optional("incomplete-unsettled")?,
            initial_delivery_count: f.optional("initial-delivery-count")?,
            max_message_size: f.optional("max-message-size")?,
            offered_capabilities: f.optional("offered-capabilities")?,
            desired_capabilities: f.optional("desired-capabilities")?,
            properties: f.optional("properties")?,
        })
    }

    fn write_fields(&self, f: &mut FieldWriter) {
        f.field(self.name.clone())
            .field(self.handle)
            .field(self.role)
            .optional(&self.snd_settle_mode)
            .optional(&self.rcv_settle_mode)
            .composite(&self.source)
            .optional(&self.target)
            .optional(&self.unsettled)
            .optional(&self.incomplete_unsettled)
            .optional(&self.initial_delivery_count)
            .optional(&self.max_message_size)
            .optional(&self.offered_capabilities)
            .optional(&self.desired_capabilities)
            .optional(&self.properties);
    }
}

/// `flow`: session windows and, with a handle, a link's credit.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Flow {
    /// The next incoming transfer id expected (absent before the first begin is answered).
    pub next_incoming_id: Option<u32>,
    /// Incoming transfers this peer takes (mandatory).
    pub incoming_window: u32,
    /// The transfer id of the next outgoing transfer (mandatory).
    pub next_outgoing_id: u32,
    /// Outgoing transfers this peer may send (mandatory).
    pub outgoing_window: u32,
    /// The link this flow is about; absent for a session-only flow.
    pub handle: Option<u32>,
    /// The sender's delivery count.
    pub delivery_count: Option<u32>,
    /// Deliveries the receiver takes.
    pub link_credit: Option<u32>,
    /// Deliveries the sender has ready.
    pub available: Option<u32>,
    /// Use up the credit, then report (default false).
    pub drain: Option<bool>,
    /// Ask the peer to answer with its own flow (default false).
    pub echo: Option<bool>,
    /// Link state properties.
    pub properties: Option<Fields>,
}

impl Flow {
    /// `drain` with its default.
    pub fn drain(&self) -> bool {
        self.drain.unwrap_or(false)
    }

    /// `echo` with its default.
    pub fn echo(&self) -> bool {
        self.echo.unwrap_or(false)
    }
}

impl Composite for Flow {
    const NAME: &'static str = "flow";
    const CODE: u64 = 0x13;
    const SYMBOL: &'static str = "amqp:flow:list";

    fn read_fields(f: &mut FieldReader) -> Result<Self, WireError> {
        Ok(Flow {
            next_incoming_id: f.optional("next-incoming-id")?,
            incoming_window: f.required("incoming-window")?,
            next_outgoing_id: f.required("next-outgoing-id")?,
            outgoing_window: f.required("outgoing-window")?,
            handle: f.optional("handle")?,
            delivery_count: f.optional("delivery-count")?,
            link_credit: f.optional("link-credit")?,
            available: f.optional("available")?,
            drain: f.optional("drain")?,
            echo: f.optional("echo")?,
            properties: f.optional("properties")?,
        })
    }

    fn write_fields(&self, f: &mut FieldWriter) {
        f.optional(&self.next_incoming_id)
            .field(self.incoming_window)
            .field(self.next_outgoing_id)
            .field(self.outgoing_window)
            .optional(&self.handle)
            .optional(&self.delivery_count)
            .optional(&self.link_credit)
            .optional(&self.available)
            .optional(&self.drain)
            .optional(&self.echo)
            .optional(&self.properties);
    }
}

/// `transfer`: (part of) a message on a link. The message bytes follow the performative in
/// the frame; a delivery larger than a frame spans transfers with `more` set on all but
/// the last (see [`super::DeliveryAssembler`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Transfer {
    /// The link (mandatory).
    pub handle: u32,
    /// The delivery's number in the session (mandatory on the first transfer).
    pub delivery_id: Option<u32>,
    /// The delivery's tag on the link (mandatory on the first transfer).
    pub delivery_tag: Option<Bytes>,
    /// The message format; 0 is the standard AMQP message.
    pub message_format: Option<u32>,
    /// Whether the sender has settled the delivery.
    pub settled: Option<bool>,
    /// More transfers of this delivery follow (default false).
    pub more: Option<bool>,
    /// The receiver settle mode for this delivery.
    pub rcv_settle_mode: Option<ReceiverSettleMode>,
    /// The delivery's state at the sender.
    pub state: Option<DeliveryState>,
    /// A resumed delivery (default false).
    pub resume: Option<bool>,
    /// The delivery was aborted; discard what arrived (default false).
    pub aborted: Option<bool>,
    /// The receiver may delay its disposition (default false).
    pub batchable: Option<bool>,
}

impl Transfer {
    /// `more` with its default.
    pub fn more(&self) -> bool {
        self.more.unwrap_or(false)
    }

    /// `settled` with its default (false).
    pub fn settled(&self) -> bool {
        self.settled.unwrap_or(false)
    }

    /// `aborted` with its default.
    pub fn aborted(&self) -> bool {
        self.aborted.unwrap_or(false)
    }
}

impl Composite for Transfer {
    const NAME: &'static str = "transfer";
    const CODE: u64 = 0x14;
    const SYMBOL: &'static str = "amqp:transfer:list";

    fn read_fields(f: &mut FieldReader) -> Result<Self, WireError> {
        Ok(Transfer {
            handle: f.required("handle")?,
            delivery_id: f.optional("delivery-id")?,
            delivery_tag: f.optional("delivery-tag")?,
            message_format: f.optional("message-format")?,
            settled: f.optional("settled")?,
            more: f.optional("more")?,
            rcv_settle_mode: f.optional_with("rcv-settle-mode", ReceiverSettleMode::from_field)?,
            state: read_state(f, "state")?,
            resume: f.optional("resume")?,
            aborted: f.optional("aborted")?,
            batchable: f.optional("batchable")?,
        })
    }

    fn write_fields(&self, f: &mut FieldWriter) {
        f.field(self.handle)
            .optional(&self.delivery_id)
            .optional(&self.delivery_tag)
            .optional(&self.message_format)
            .optional(&self.settled)
            .optional(&self.more)
            .optional(&self.rcv_settle_mode)
            .optional(&self.state)
            .optional(&self.resume)
            .optional(&self.aborted)
            .optional(&self.batchable);
    }
}

/// `disposition`: the state or settlement of a range of deliveries.
#[derive(Debug, Clone, PartialEq)]
pub struct Disposition {
    /// Which end sends this: the receiver acknowledges, the sender settles (mandatory).
    pub role: Role,
    /// The first delivery id of the range (mandatory).
    pub first: u32,
    /// The last delivery id of the range (default: `first`).
    pub last: Option<u32>,
    /// Whether the deliveries are settled (default false).
    pub settled: Option<bool>,
    /// Their new state (an outcome such as accepted or released).
    pub state: Option<DeliveryState>,
    /// The peer may delay its answer (default false).
    pub batchable: Option<bool>,
}

impl Disposition {
    /// The last delivery id of the range, with its default.
    pub fn last(&self) -> u32 {
        self.last.unwrap_or(self.first)
    }

    /// `settled` with its default.
    pub fn settled(&self) -> bool {
        self.settled.unwrap_or(false)
    }
}

impl Composite for Disposition {
    const NAME: &'static str = "disposition";
    const CODE: u64 = 0x15;
    const SYMBOL: &'static str = "amqp:disposition:list";

    fn read_fields(f: &mut FieldReader) -> Result<Self, WireError> {
        Ok(Disposition {
            role: Role::from_bool(f.required("role")?),
            first: f.required("first")?,
            last: f.optional("last")?,
            settled: f.optional("settled")?,
            state: read_state(f, "state")?,
            batchable: f.optional("batchable")?,
        })
    }

    fn write_fields(&self, f: &mut FieldWriter) {
        f.field(self.role)
            .field(self.first)
            .optional(&self.last)
            .optional(&self.settled)
            .optional(&self.state)
            .optional(&self.batchable);
    }
}

/// `detach`: detaches (and with `closed`, closes) a link.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Detach {
    /// The link (mandatory).
    pub handle: u32,
    /// Close the link rather than only detaching it (default false).
    pub closed: Option<bool>,
    /// Why, if it is an error.
    pub error: Option<AmqpError>,
}

impl Detach {
    /// `closed` with its default.
    pub fn closed(&self) -> bool {
        self.closed.unwrap_or(false)
    }
}

impl Composite for Detach {
    const NAME: &'static str = "detach";
    const CODE: u64 = 0x16;
    const SYMBOL: &'static str = "amqp:detach:list";

    fn read_fields(f: &mut FieldReader) -> Result<Self, WireError> {
        Ok(Detach {
            handle: f.required("handle")?,
            closed: f.optional("closed")?,
            error: f.optional_with("error", AmqpError::from_value)?,
        })
    }

    fn write_fields(&self, f: &mut FieldWriter) {
        f.field(self.handle).optional(&self.closed).composite(&self.error);
    }
}

/// `end`: ends a session.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct End {
    /// Why, if it is an error.
    pub error: Option<AmqpError>,
}

impl Composite for End {
    const NAME: &'static str = "end";
    const CODE: u64 = 0x17;
    const SYMBOL: &'static str = "amqp:end:list";

    fn read_fields(f: &mut FieldReader) -> Result<Self, WireError> {
        Ok(End { error: f.optional_with("error", AmqpError::from_value)? })
    }

    fn write_fields(&self, f: &mut FieldWriter) {
        f.composite(&self.error);
    }
}

/// `close`: closes the connection.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Close {
    /// Why, if it is an error.
    pub error: Option<AmqpError>,
}

impl Composite for Close {
    const NAME: &'static str = "close";
    const CODE: u64 = 0x18;
    const SYMBOL: &'static str = "amqp:close:list";

    fn read_fields(f: &mut FieldReader) -> Result<Self, WireError> {
        Ok(Close { error: f.optional_with("error", AmqpError::from_value)? })
    }

    fn write_fields(&self, f: &mut FieldWriter) {
        f.composite(&self.error);
    }
}
