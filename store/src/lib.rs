//! # store: ferromq's persistence contract
//!
//! This crate owns what every store engine shares and nothing engine-specific:
//!
//! - [`message`]: the protocol-neutral message model (`Arc<Message>`), which stores persist;
//! - [`contract`]: the [`MessageStore`] trait, completion-based and object-safe, with its
//!   unit-of-work operations and streamed transactions;
//! - [`error`]: the one [`StoreError`] type;
//! - [`failpoint`]: the failpoint registry each store consults before every I/O;
//! - [`memory`]: [`MemoryStore`], the in-memory engine;
//! - [`kit`]: the conformance kit, tests generic over the contract that every store runs.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod contract;
pub mod error;
pub mod failpoint;
pub mod message;

pub use contract::{
    Completer, Completion, MessageStore, Operation, PageKey, QueueKey, Recovered, StoredMessage,
    SubscriptionInfo, SubscriptionKey, SyncPolicy, TxnId, UnitOfWork,
};
pub use error::StoreError;
pub use failpoint::{FailAction, Failpoints};
pub use message::{
    BodyKind, DeliveryMode, Destination, DestinationKind, JmsHeaders, Message, MessageId,
    PropertyValue, DEFAULT_PRIORITY,
};
