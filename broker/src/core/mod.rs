//! The protocol-neutral core: destinations, subscriptions, routing, transactions and ids.
//!
//! Protocol adapters turn frames into calls on [`Core`] and receive [`Delivery`]s back on a
//! channel per connection; nothing in here knows about any wire protocol.
//!
//! The modules form layers, and data flows one way through them (`broker/tests/core_layers.rs`
//! checks that no module uses one that uses it back):
//! - `engine` composes the core: [`Core`] and its operations (send and route, subscribe,
//!   transactions, temporary destinations, flow control waits, the scheduler, the inactive
//!   destination sweep, statistics), and the observer task that turns queue events into
//!   advisories, dead-letter moves, consumer aborts and removals;
//! - `registry` is the routing table the engine locks, with its indexes: `subscriptions` (the
//!   topic subscriptions by pattern, over `trie`) and `virtual_topics` (virtual topics'
//!   consumer queues);
//! - `queue` is the task that owns one queue of messages (a queue destination, a durable
//!   subscription, or a topic subscriber); it reports what happens to it as `events`;
//! - leaves that any of them use: `types` (ids, errors, composite names), `advisory` (how
//!   advisories are named and built), `dead_letter` (its settings and verdicts), `flow` (the
//!   gates), `policy`, `slow`, `statistics` (the counters' types), `recovery` (each topic's
//!   recent messages for retroactive subscribers), `retained` (each topic's retained message,
//!   stored in a reserved store queue), `audit`, `temp_store`, `selector`,
//!   `wildcard` and `trie` (an index of wildcard patterns, also for `policy`).

mod advisory;
mod audit;
pub mod dead_letter;
mod engine;
mod events;
pub mod exactly_once;
pub mod flow;
pub mod policy;
pub mod queue;
mod recovery;
mod registry;
pub mod retained;
pub mod selector;
pub mod sessions;
pub mod slow;
pub mod statistics;
mod subscriptions;
pub mod temp_store;
mod trie;
mod types;
mod virtual_topics;
pub mod wildcard;

pub use advisory::{
    consumer_topic, ADVISORY_CLIENT_ID, ADVISORY_KIND, ADVISORY_SUBJECT, CONSUMER_COUNT,
};
pub use audit::is_producer_message_id;
pub use dead_letter::{DeadLetterSettings, DeadLetterStrategy};
pub use engine::{
    held_sends_refusal, scheduler, ClientIdHeld, CompositeRule, CompositeTarget, Composites,
    ConsumerListing, Core, CoreSettings, DurableListing, HeldSends, OperationError,
    ProducerListing, ProducerRegistration, Retried, RoomFuture, SendAdmission, SubscribeRequest,
    Transaction,
};
pub use flow::FlowSettings;
pub use queue::{
    ConsumerSpec, Delivery, InspectedMessage, Inspection, MemoryLimits, QueueHandle, QueueStats,
};
pub use slow::{ConsumerNotice, NoticeReceiver};
pub use statistics::{DestinationStats, StatsKind, SubscriptionStats};
pub use temp_store::{TempStore, TempStoreOpener};
pub(crate) use types::ClientKeyed;
pub use types::{
    composite_parts, AckMode, ConnectionId, ConsumerId, CoreError, VirtualTopicRule,
    ADVISORY_DESTINATION, ADVISORY_OPERATION, ADVISORY_TEMP_QUEUE, ADVISORY_TEMP_TOPIC,
};
