//! Delivery states and outcomes (the spec, part 3.4): what a transfer or disposition says
//! about a delivery. Outcomes are terminal (accepted, rejected, released, modified, and the
//! transactions section's declared); `received` and `transactional-state` are not.

use super::composite::{describe_descriptor, Annotations, Composite, FieldReader, FieldWriter};
use super::definitions::AmqpError;
use super::error::WireError;
use super::transactions::{Declared, TransactionalState};
use super::types::{Descriptor, Value};

/// Any delivery state, in a transfer's `state`, a disposition's `state`, a source's
/// `default-outcome` or a transactional state's `outcome`.
#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryState {
    /// How much of the message the receiver has (for resuming a link).
    Received(Received),
    /// The message was processed.
    Accepted,
    /// The message is invalid and cannot be processed.
    Rejected(Rejected),
    /// The message was not and will not be processed; redeliver it.
    Released,
    /// Like released, with changes to make before redelivering.
    Modified(Modified),
    /// A coordinator's answer to `declare`: the transaction id.
    Declared(Declared),
    /// The delivery's state inside a transaction.
    Transactional(TransactionalState),
}

impl DeliveryState {
    /// Whether this state is an outcome (a terminal state).
    pub fn is_outcome(&self) -> bool {
        !matches!(self, DeliveryState::Received(_) | DeliveryState::Transactional(_))
    }

    /// Reads any delivery state from its described list.
    pub fn from_value(value: Value) -> Result<DeliveryState, WireError> {
        let Value::Described(described) = value else {
            return Err(WireError::UnexpectedValue {
                expected: "a delivery state",
                found: value.type_name().to_owned(),
            });
        };
        let descriptor = &described.descriptor;
        let list = described.value;
        let is = |code: u64, symbol: &str| match descriptor {
            Descriptor::Code(c) => *c == code,
            Descriptor::Symbol(s) => s.as_str() == symbol,
        };
        Ok(if Received::is_described_by(descriptor) {
            DeliveryState::Received(Received::from_described_list(list)?)
        } else if is(ACCEPTED, "amqp:accepted:list") {
            DeliveryState::Accepted
        } else if Rejected::is_described_by(descriptor) {
            DeliveryState::Rejected(Rejected::from_described_list(list)?)
        } else if is(RELEASED, "amqp:released:list") {
            DeliveryState::Released
        } else if Modified::is_described_by(descriptor) {
            DeliveryState::Modified(Modified::from_described_list(list)?)
        } else if Declared::is_described_by(descriptor) {
            DeliveryState::Declared(Declared::from_described_list(list)?)
        } else if TransactionalState::is_described_by(descriptor) {
            DeliveryState::Transactional(TransactionalState::from_described_list(list)?)
        } else {
            return Err(WireError::UnexpectedValue {
                expected: "a delivery state",
                found: describe_descriptor(descriptor),
            });
        })
    }

    /// The described list for this state.
    pub fn to_value(&self) -> Value {
        let empty = |code| Value::described(Descriptor::Code(code), Value::List(Vec::new()));
        match self {
            DeliveryState::Received(received) => received.to_value(),
            DeliveryState::Accepted => empty(ACCEPTED),
            DeliveryState::Rejected(rejected) => rejected.to_value(),
            DeliveryState::Released => empty(RELEASED),
            DeliveryState::Modified(modified) => modified.to_value(),
            DeliveryState::Declared(declared) => declared.to_value(),
            DeliveryState::Transactional(state) => state.to_value(),
        }
    }
}

impl From<DeliveryState> for Value {
    fn from(state: DeliveryState) -> Value {
        state.to_value()
    }
}

const ACCEPTED: u64 = 0x24;
const RELEASED: u64 = 0x26;

/// The `received` state: the receiver has the message up to a section and offset.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Received {
    /// The section up to which the message has arrived (mandatory).
    pub section_number: u32,
    /// The offset in that section (mandatory).
    pub section_offset: u64,
}

impl Composite for Received {
    const NAME: &'static str = "received";
    const CODE: u64 = 0x23;
    const SYMBOL: &'static str = "amqp:received:list";

    fn read_fields(fields: &mut FieldReader) -> Result<Self, WireError> {
        Ok(Received {
            section_number: fields.required("section-number")?,
            section_offset: fields.required("section-offset")?,
        })
    }

    fn write_fields(&self, fields: &mut FieldWriter) {
        fields.field(self.section_number).field(self.section_offset);
    }
}

/// The `rejected` outcome, with the reason.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Rejected {
    /// Why the message was rejected.
    pub error: Option<AmqpError>,
}

impl Composite for Rejected {
    const NAME: &'static str = "rejected";
    const CODE: u64 = 0x25;
    const SYMBOL: &'static str = "amqp:rejected:list";

    fn read_fields(fields: &mut FieldReader) -> Result<Self, WireError> {
        Ok(Rejected { error: fields.optional_with("error", AmqpError::from_value)? })
    }

    fn write_fields(&self, fields: &mut FieldWriter) {
        fields.composite(&self.error);
    }
}

/// The `modified` outcome: release the message, counting a failed delivery or not, and
/// with annotations to merge into its message annotations.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Modified {
    /// Count the delivery as failed (default false).
    pub delivery_failed: Option<bool>,
    /// Do not redeliver to this link (default false).
    pub undeliverable_here: Option<bool>,
    /// Annotations to merge into the message's message annotations.
    pub message_annotations: Option<Annotations>,
}

impl Modified {
    /// `delivery-failed` with its default.
    pub fn delivery_failed(&self) -> bool {
        self.delivery_failed.unwrap_or(false)
    }

    /// `undeliverable-here` with its default.
    pub fn undeliverable_here(&self) -> bool {
        self.undeliverable_here.unwrap_or(false)
    }
}

impl Composite for Modified {
    const NAME: &'static str = "modified";
    const CODE: u64 = 0x27;
    const SYMBOL: &'static str = "amqp:modified:list";

    fn read_fields(fields: &mut FieldReader) -> Result<Self, WireError> {
        Ok(Modified {
            delivery_failed: fields.optional("delivery-failed")?,
            undeliverable_here: fields.optional("undeliverable-here")?,
            message_annotations: fields.optional("message-annotations")?,
        })
    }

    fn write_fields(&self, fields: &mut FieldWriter) {
        fields
            .optional(&self.delivery_failed)
            .optional(&self.undeliverable_here)
            .optional(&self.message_annotations);
    }
}

/// Reads an optional field holding a delivery state.
pub(crate) fn read_state(
    fields: &mut FieldReader,
    field: &'static str,
) -> Result<Option<DeliveryState>, WireError> {
    fields.optional_with(field, DeliveryState::from_value)
}
