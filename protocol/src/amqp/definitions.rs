//! Definitions shared by the performatives (the spec, part 2.8): roles, settlement modes,
//! the `error` composite and the error conditions the spec names.

use super::composite::{number_enum, Composite, FieldReader, FieldWriter, Fields};
use super::error::WireError;
use super::types::{Symbol, Value};

/// Which end of a link a peer is: on the wire a boolean, false for the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// false: the end that sends messages.
    Sender,
    /// true: the end that receives messages.
    Receiver,
}

impl Role {
    /// The role from its wire boolean.
    pub fn from_bool(is_receiver: bool) -> Role {
        if is_receiver {
            Role::Receiver
        } else {
            Role::Sender
        }
    }

    /// The wire boolean.
    pub fn is_receiver(self) -> bool {
        self == Role::Receiver
    }
}

impl From<Role> for Value {
    fn from(role: Role) -> Value {
        Value::Boolean(role.is_receiver())
    }
}

/// How the sender settles deliveries (ubyte on the wire; default `Mixed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SenderSettleMode {
    /// 0: the sender sends every delivery unsettled.
    Unsettled,
    /// 1: the sender sends every delivery settled (at most once).
    Settled,
    /// 2: the sender chooses per delivery.
    Mixed,
}

impl SenderSettleMode {
    pub(crate) fn from_field(value: Value) -> Result<Self, WireError> {
        number_enum(value, "sender-settle-mode 0, 1 or 2", |code: u8| match code {
            0 => Some(SenderSettleMode::Unsettled),
            1 => Some(SenderSettleMode::Settled),
            2 => Some(SenderSettleMode::Mixed),
            _ => None,
        })
    }
}

impl From<SenderSettleMode> for Value {
    fn from(mode: SenderSettleMode) -> Value {
        Value::Ubyte(mode as u8)
    }
}

/// When the receiver settles deliveries (ubyte on the wire; default `First`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReceiverSettleMode {
    /// 0: the receiver settles as soon as it has an outcome.
    First,
    /// 1: the receiver settles only after the sender has settled.
    Second,
}

impl ReceiverSettleMode {
    pub(crate) fn from_field(value: Value) -> Result<Self, WireError> {
        number_enum(value, "receiver-settle-mode 0 or 1", |code: u8| match code {
            0 => Some(ReceiverSettleMode::First),
            1 => Some(ReceiverSettleMode::Second),
            _ => None,
        })
    }
}

impl From<ReceiverSettleMode> for Value {
    fn from(mode: ReceiverSettleMode) -> Value {
        Value::Ubyte(mode as u8)
    }
}

/// The `error` composite: why a link, session or connection ended, or a message was
/// rejected.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AmqpError {
    /// A symbolic condition such as [`condition::NOT_FOUND`] (mandatory).
    pub condition: Symbol,
    /// Text for a person.
    pub description: Option<String>,
    /// More about the error.
    pub info: Option<Fields>,
}

impl AmqpError {
    /// An error with a condition and a description.
    pub fn new(condition: &str, description: impl Into<String>) -> AmqpError {
        AmqpError {
            condition: Symbol::from(condition),
            description: Some(description.into()),
            info: None,
        }
    }
}

impl Composite for AmqpError {
    const NAME: &'static str = "error";
    const CODE: u64 = 0x1d;
    const SYMBOL: &'static str = "amqp:error:list";

    fn read_fields(fields: &mut FieldReader) -> Result<Self, WireError> {
        Ok(AmqpError {
            condition: fields.required("condition")?,
            description: fields.optional("description")?,
            info: fields.optional("info")?,
        })
    }

    fn write_fields(&self, fields: &mut FieldWriter) {
        fields.field(self.condition.clone()).optional(&self.description).optional(&self.info);
    }
}

/// The error conditions the spec defines (part 2.8.15 to 2.8.18), as symbols.
pub mod condition {
    /// An internal error occurred.
    pub const INTERNAL_ERROR: &str = "amqp:internal-error";
    /// A peer tried to use a node that does not exist.
    pub const NOT_FOUND: &str = "amqp:not-found";
    /// The peer is not authorized to do this.
    pub const UNAUTHORIZED_ACCESS: &str = "amqp:unauthorized-access";
    /// Data could not be decoded.
    pub const DECODE_ERROR: &str = "amqp:decode-error";
    /// A peer exceeded its resource allocation.
    pub const RESOURCE_LIMIT_EXCEEDED: &str = "amqp:resource-limit-exceeded";
    /// The peer tried something the partner does not allow.
    pub const NOT_ALLOWED: &str = "amqp:not-allowed";
    /// An invalid field was passed in a frame body.
    pub const INVALID_FIELD: &str = "amqp:invalid-field";
    /// The peer tried to use something not implemented.
    pub const NOT_IMPLEMENTED: &str = "amqp:not-implemented";
    /// The resource is locked by another peer.
    pub const RESOURCE_LOCKED: &str = "amqp:resource-locked";
    /// A precondition failed.
    pub const PRECONDITION_FAILED: &str = "amqp:precondition-failed";
    /// The resource has been deleted.
    pub const RESOURCE_DELETED: &str = "amqp:resource-deleted";
    /// The peer sent a frame that is not permitted now.
    pub const ILLEGAL_STATE: &str = "amqp:illegal-state";
    /// The frame is larger than the peer can take.
    pub const FRAME_SIZE_TOO_SMALL: &str = "amqp:frame-size-too-small";
    /// Connection: an operator forced the close.
    pub const CONNECTION_FORCED: &str = "amqp:connection:forced";
    /// Connection: a framing error.
    pub const CONNECTION_FRAMING_ERROR: &str = "amqp:connection:framing-error";
    /// Connection: redirect to another host.
    pub const CONNECTION_REDIRECT: &str = "amqp:connection:redirect";
    /// Session: the peer's window was violated.
    pub const SESSION_WINDOW_VIOLATION: &str = "amqp:session:window-violation";
    /// Session: an unattached handle was used.
    pub const SESSION_UNATTACHED_HANDLE: &str = "amqp:session:unattached-handle";
    /// Link: an operator forced the detach.
    pub const LINK_DETACH_FORCED: &str = "amqp:link:detach-forced";
    /// Link: the peer sent more than its credit allowed.
    pub const LINK_TRANSFER_LIMIT_EXCEEDED: &str = "amqp:link:transfer-limit-exceeded";
    /// Link: a message exceeds the link's max-message-size.
    pub const LINK_MESSAGE_SIZE_EXCEEDED: &str = "amqp:link:message-size-exceeded";
    /// Link: the address moved.
    pub const LINK_REDIRECT: &str = "amqp:link:redirect";
    /// Link: the link was stolen by another attach of the same name.
    pub const LINK_STOLEN: &str = "amqp:link:stolen";
}
