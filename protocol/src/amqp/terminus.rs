//! Link termini (the spec, part 3.5): the [`Source`] and [`Target`] an attach names, and
//! [`AttachTarget`], which is a target node or the transaction coordinator.

use super::composite::{
    describe_descriptor, number_enum, symbol_enum, Composite, FieldReader, FieldWriter, Fields,
};
use super::delivery_state::{read_state, DeliveryState};
use super::error::WireError;
use super::transactions::Coordinator;
use super::types::{Symbol, Value};

/// What of a terminus survives (uint on the wire; default `None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TerminusDurability {
    /// 0: nothing is durable.
    None,
    /// 1: the configuration survives (a durable subscription).
    Configuration,
    /// 2: configuration and unsettled state survive.
    UnsettledState,
}

impl TerminusDurability {
    fn from_field(value: Value) -> Result<Self, WireError> {
        number_enum(value, "terminus-durability 0, 1 or 2", |code: u32| match code {
            0 => Some(TerminusDurability::None),
            1 => Some(TerminusDurability::Configuration),
            2 => Some(TerminusDurability::UnsettledState),
            _ => None,
        })
    }
}

impl From<TerminusDurability> for Value {
    fn from(durability: TerminusDurability) -> Value {
        Value::Uint(durability as u32)
    }
}

/// When the expiry timer of a terminus starts (symbol on the wire; default `SessionEnd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExpiryPolicy {
    /// `link-detach`.
    LinkDetach,
    /// `session-end`.
    SessionEnd,
    /// `connection-close`.
    ConnectionClose,
    /// `never`.
    Never,
}

impl ExpiryPolicy {
    /// The symbol on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ExpiryPolicy::LinkDetach => "link-detach",
            ExpiryPolicy::SessionEnd => "session-end",
            ExpiryPolicy::ConnectionClose => "connection-close",
            ExpiryPolicy::Never => "never",
        }
    }

    fn from_field(value: Value) -> Result<Self, WireError> {
        symbol_enum(value, "terminus-expiry-policy", |text| {
            [
                ExpiryPolicy::LinkDetach,
                ExpiryPolicy::SessionEnd,
                ExpiryPolicy::ConnectionClose,
                ExpiryPolicy::Never,
            ]
            .into_iter()
            .find(|policy| policy.as_str() == text)
        })
    }
}

impl From<ExpiryPolicy> for Value {
    fn from(policy: ExpiryPolicy) -> Value {
        Value::Symbol(Symbol::from(policy.as_str()))
    }
}

/// Where messages come from: the source of a receiving link (a queue or topic to consume).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Source {
    /// The node's address (absent for a dynamic node until the broker names it).
    pub address: Option<String>,
    /// What survives (default none).
    pub durable: Option<TerminusDurability>,
    /// When the expiry timer starts (default session-end).
    pub expiry_policy: Option<ExpiryPolicy>,
    /// Seconds until the terminus expires once the timer started (default 0).
    pub timeout: Option<u32>,
    /// Ask the broker to create a node (a temporary queue) (default false).
    pub dynamic: Option<bool>,
    /// Properties of the dynamic node to create (lifetime policy, ...).
    pub dynamic_node_properties: Option<Fields>,
    /// `move` (a queue consumer) or `copy` (a browser or a topic subscriber).
    pub distribution_mode: Option<Symbol>,
    /// Filters (selectors, no-local), keyed by name.
    pub filter: Option<Value>,
    /// The outcome of deliveries settled without one.
    pub default_outcome: Option<DeliveryState>,
    /// The outcomes the receiver supports.
    pub outcomes: Option<Vec<Symbol>>,
    /// Extension capabilities (`queue`, `topic`, `shared`, ...).
    pub capabilities: Option<Vec<Symbol>>,
}

impl Source {
    /// A source for `address`, everything else default.
    pub fn new(address: impl Into<String>) -> Source {
        Source { address: Some(address.into()), ..Source::default() }
    }

    /// `durable` with its default.
    pub fn durable(&self) -> TerminusDurability {
        self.durable.unwrap_or(TerminusDurability::None)
    }

    /// `expiry-policy` with its default.
    pub fn expiry_policy(&self) -> ExpiryPolicy {
        self.expiry_policy.unwrap_or(ExpiryPolicy::SessionEnd)
    }

    /// `dynamic` with its default.
    pub fn dynamic(&self) -> bool {
        self.dynamic.unwrap_or(false)
    }
}

impl Composite for Source {
    const NAME: &'static str = "source";
    const CODE: u64 = 0x28;
    const SYMBOL: &'static str = "amqp:source:list";

    fn read_fields(fields: &mut FieldReader) -> Result<Self, WireError> {
        Ok(Source {
            address: fields.optional("address")?,
            durable: fields.optional_with("durable", TerminusDurability::from_field)?,
            expiry_policy: fields.optional_with("expiry-policy", ExpiryPolicy::from_field)?,
            timeout: fields.optional("timeout")?,
            dynamic: fields.optional("dynamic")?,
            dynamic_node_properties: fields.optional("dynamic-node-properties")?,
            distribution_mode: fields.optional("distribution-mode")?,
            filter: fields.optional("filter")?,
            default_outcome: read_state(fields, "default-outcome")?,
            outcomes: fields.optional("outcomes")?,
            capabilities: fields.optional("capabilities")?,
        })
    }

    fn write_fields(&self, fields: &mut FieldWriter) {
        fields
            .optional(&self.address)
            .optional(&self.durable)
            .optional(&self.expiry_policy)
            .optional(&self.timeout)
            .optional(&self.dynamic)
            .optional(&self.dynamic_node_properties)
            .optional(&self.distribution_mode)
            .optional(&self.filter)
            .optional(&self.default_outcome)
            .optional(&self.outcomes)
            .optional(&self.capabilities);
    }
}

/// Where messages go: the target of a sending link (a queue or topic to send to).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Target {
    /// The node's address (absent for a dynamic node, or an anonymous relay link).
    pub address: Option<String>,
    /// What survives (default none).
    pub durable: Option<TerminusDurability>,
    /// When the expiry timer starts (default session-end).
    pub expiry_policy: Option<ExpiryPolicy>,
    /// Seconds until the terminus expires once the timer started (default 0).
    pub timeout: Option<u32>,
    /// Ask the broker to create a node (default false).
    pub dynamic: Option<bool>,
    /// Properties of the dynamic node to create.
    pub dynamic_node_properties: Option<Fields>,
    /// Extension capabilities.
    pub capabilities: Option<Vec<Symbol>>,
}

impl Target {
    /// A target for `address`, everything else default.
    pub fn new(address: impl Into<String>) -> Target {
        Target { address: Some(address.into()), ..Target::default() }
    }
}

impl Composite for Target {
    const NAME: &'static str = "target";
    const CODE: u64 = 0x29;
    const SYMBOL: &'static str = "amqp:target:list";

    fn read_fields(fields: &mut FieldReader) -> Result<Self, WireError> {
        Ok(Target {
            address: fields.optional("address")?,
            durable: fields.optional_with("durable", TerminusDurability::from_field)?,
            expiry_policy: fields.optional_with("expiry-policy", ExpiryPolicy::from_field)?,
            timeout: fields.optional("timeout")?,
            dynamic: fields.optional("dynamic")?,
            dynamic_node_properties: fields.optional("dynamic-node-properties")?,
            capabilities: fields.optional("capabilities")?,
        })
    }

    fn write_fields(&self, fields: &mut FieldWriter) {
        fields
            .optional(&self.address)
            .optional(&self.durable)
            .optional(&self.expiry_policy)
            .optional(&self.timeout)
            .optional(&self.dynamic)
            .optional(&self.dynamic_node_properties)
            .optional(&self.capabilities);
    }
}

/// The target of an attach: a node, or the transaction coordinator.
#[derive(Debug, Clone, PartialEq)]
pub enum AttachTarget {
    /// A queue, topic or dynamic node.
    Node(Target),
    /// The transaction coordinator.
    Coordinator(Coordinator),
}

impl AttachTarget {
    pub(crate) fn from_value(value: Value) -> Result<AttachTarget, WireError> {
        match &value {
            Value::Described(d) if Coordinator::is_described_by(&d.descriptor) => {
                Ok(AttachTarget::Coordinator(Coordinator::from_value(value)?))
            }
            Value::Described(d) if Target::is_described_by(&d.descriptor) => {
                Ok(AttachTarget::Node(Target::from_value(value)?))
            }
            Value::Described(d) => Err(WireError::UnexpectedValue {
                expected: "a target or coordinator",
                found: describe_descriptor(&d.descriptor),
            }),
            other => Err(WireError::UnexpectedValue {
                expected: "a target or coordinator",
                found: other.type_name().to_owned(),
            }),
        }
    }
}

impl From<AttachTarget> for Value {
    fn from(target: AttachTarget) -> Value {
        match target {
            AttachTarget::Node(target) => target.to_value(),
            AttachTarget::Coordinator(coordinator) => coordinator.to_value(),
        }
    }
}

impl From<Source> for Value {
    fn from(source: Source) -> Value {
        source.to_value()
    }
}
