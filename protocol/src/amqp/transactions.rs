//! Transactions (the spec, part 4): a client attaches a link whose target is the broker's
//! [`Coordinator`], sends [`Declare`] and [`Discharge`] messages on it (as `amqp-value`
//! bodies), and learns the transaction id from the [`Declared`] outcome. Transfers and
//! dispositions inside a transaction carry a [`TransactionalState`].

use bytes::Bytes;

use super::composite::{Composite, FieldReader, FieldWriter};
use super::delivery_state::{read_state, DeliveryState};
use super::error::WireError;
use super::types::{Symbol, Value};

/// Capabilities a coordinator may offer or a client desire (`txn-capability`).
pub mod capability {
    /// Local transactions.
    pub const LOCAL: &str = "amqp:local-transactions";
    /// Distributed transactions.
    pub const DISTRIBUTED: &str = "amqp:distributed-transactions";
    /// Transactions promotable from local to distributed.
    pub const PROMOTABLE: &str = "amqp:promotable-transactions";
    /// More than one active transaction per session.
    pub const MULTI_TXNS_PER_SSN: &str = "amqp:multi-txns-per-ssn";
    /// Transactions spanning sessions.
    pub const MULTI_SSNS_PER_TXN: &str = "amqp:multi-ssns-per-txn";
}

/// Transaction errors (`transaction-error`).
pub mod condition {
    /// The transaction id is unknown.
    pub const UNKNOWN_ID: &str = "amqp:transaction:unknown-id";
    /// The transaction was rolled back for a reason other than a discharge with `fail`.
    pub const ROLLBACK: &str = "amqp:transaction:rollback";
    /// The transaction timed out.
    pub const TIMEOUT: &str = "amqp:transaction:timeout";
}

/// The target of a link to the transaction coordinator.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Coordinator {
    /// The transaction capabilities the client needs.
    pub capabilities: Option<Vec<Symbol>>,
}

impl Composite for Coordinator {
    const NAME: &'static str = "coordinator";
    const CODE: u64 = 0x30;
    const SYMBOL: &'static str = "amqp:coordinator:list";

    fn read_fields(fields: &mut FieldReader) -> Result<Self, WireError> {
        Ok(Coordinator { capabilities: fields.optional("capabilities")? })
    }

    fn write_fields(&self, fields: &mut FieldWriter) {
        fields.optional(&self.capabilities);
    }
}

/// The body of a message asking the coordinator to start a transaction.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Declare {
    /// For distributed transactions, which the spec leaves unspecified; null otherwise.
    pub global_id: Option<Value>,
}

impl Composite for Declare {
    const NAME: &'static str = "declare";
    const CODE: u64 = 0x31;
    const SYMBOL: &'static str = "amqp:declare:list";

    fn read_fields(fields: &mut FieldReader) -> Result<Self, WireError> {
        Ok(Declare { global_id: fields.optional("global-id")? })
    }

    fn write_fields(&self, fields: &mut FieldWriter) {
        fields.optional(&self.global_id);
    }
}

/// The body of a message asking the coordinator to commit (or, with `fail`, roll back).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Discharge {
    /// The transaction (mandatory).
    pub txn_id: Bytes,
    /// Roll back instead of committing (default false).
    pub fail: Option<bool>,
}

impl Discharge {
    /// `fail` with its default: true means roll back.
    pub fn fail(&self) -> bool {
        self.fail.unwrap_or(false)
    }
}

impl Composite for Discharge {
    const NAME: &'static str = "discharge";
    const CODE: u64 = 0x32;
    const SYMBOL: &'static str = "amqp:discharge:list";

    fn read_fields(fields: &mut FieldReader) -> Result<Self, WireError> {
        Ok(Discharge { txn_id: fields.required("txn-id")?, fail: fields.optional("fail")? })
    }

    fn write_fields(&self, fields: &mut FieldWriter) {
        fields.field(self.txn_id.clone()).optional(&self.fail);
    }
}

/// The coordinator's outcome for a declare: the new transaction's id.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Declared {
    /// The transaction (mandatory).
    pub txn_id: Bytes,
}

impl Composite for Declared {
    const NAME: &'static str = "declared";
    const CODE: u64 = 0x33;
    const SYMBOL: &'static str = "amqp:declared:list";

    fn read_fields(fields: &mut FieldReader) -> Result<Self, WireError> {
        Ok(Declared { txn_id: fields.required("txn-id")? })
    }

    fn write_fields(&self, fields: &mut FieldWriter) {
        fields.field(self.txn_id.clone());
    }
}

/// The state of a delivery that is part of a transaction, with its provisional outcome.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TransactionalState {
    /// The transaction (mandatory).
    pub txn_id: Bytes,
    /// The outcome once the transaction commits.
    pub outcome: Option<Box<DeliveryState>>,
}

impl Composite for TransactionalState {
    const NAME: &'static str = "transactional-state";
    const CODE: u64 = 0x34;
    const SYMBOL: &'static str = "amqp:transactional-state:list";

    fn read_fields(fields: &mut FieldReader) -> Result<Self, WireError> {
        Ok(TransactionalState {
            txn_id: fields.required("txn-id")?,
            outcome: read_state(fields, "outcome")?.map(Box::new),
        })
    }

    fn write_fields(&self, fields: &mut FieldWriter) {
        fields.field(self.txn_id.clone());
        fields.field(self.outcome.as_deref().map_or(Value::Null, DeliveryState::to_value));
    }
}
