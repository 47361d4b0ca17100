//! # store: ferromq's persistence contract
//!
//! This crate owns what every store engine shares and nothing engine-specific:
//!
//! - [`message`]: the protocol-neutral message model (`Arc<Message>`), which stores persist;
//! - [`contract`]: the [`MessageStore`] trait, completion-based and object-safe, with its
//!   unit-of-work operations and streamed transactions;
//! - [`error`]: the one [`StoreError`] type;
//! - [`failpoint`]: the failpoint registry each store consults before every I/O;
//! - [`record`]: the prost record types every engine encodes messages, destinations, queue
//!   keys and subscriptions with;
//! - [`memory`]: [`MemoryStore`], the in-memory engine (and [`MemoryHarness`], its harness
//!   for the kit);
//! - [`kit`]: the conformance kit, tests generic over the contract that every store runs
//!   through [`conformance_tests!`];
//! - [`powercut`]: the power-cut harness for engines that do their own file I/O (a C library
//!   loaded with `LD_PRELOAD` that keeps the durable image of a data directory).
//!
//! ```
//! use std::sync::Arc;
//! use store::kit::block_on;
//! use store::{Destination, MemoryStore, Message, MessageId, MessageStore, Operation, QueueKey, UnitOfWork};
//!
//! let store: Arc<dyn MessageStore> = Arc::new(MemoryStore::new());
//! let queue = QueueKey::destination(Destination::queue("ORDERS"));
//! let message = Arc::new(Message::new(MessageId(1), "ID:p:1:1:1", queue.destination.clone()));
//! let add = Operation::AddMessage { message, queues: vec![queue.clone()], txn: None };
//! block_on(store.submit(UnitOfWork::with(add))).expect("durable");
//! assert_eq!(store.count(&queue).expect("count"), 1);
//! ```
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod backlog;
pub mod contract;
pub mod error;
pub mod failpoint;
pub mod kit;
pub mod memory;
pub mod message;
pub mod powercut;
pub mod record;

pub use backlog::Backlog;
pub use contract::{
    validate_unit, Completer, Completion, MessageStore, Operation, PageKey, QueueKey, Recovered,
    StoreUsage, StoredMessage, SubscriptionInfo, SubscriptionKey, SyncPolicy, TxnId, TxnState,
    UnitOfWork, LAZY_SYNC_WITHIN,
};
pub use error::StoreError;
pub use failpoint::{FailAction, Failpoints};
pub use kit::StoreHarness;
pub use memory::{MemoryHarness, MemoryStore};
pub use message::{
    BodyKind, DeliveryMode, Destination, DestinationKind, JmsHeaders, Message, MessageId,
    PropertyValue, DEFAULT_PRIORITY,
};
