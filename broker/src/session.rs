//! A client connection's session with the broker, the same for every protocol (in the spirit
//! of Artemis's `ServerSession`): who the client is, the client id it holds, its consumers,
//! its open transactions, its temporary destinations, and the channels on which the core
//! reaches it (deliveries, and notices such as a broker-side consumer close). Adapters keep
//! their codec, their maps from protocol ids to these, the mapping of messages and the
//! protocol's pacing; what every protocol must do alike is done here once, so the protocols
//! cannot drift apart (a client id is claimed by every protocol; every consumer and every
//! transaction goes when the connection goes).
//!
//! It sits above the core and security because it joins them: the core knows no subjects and
//! no authorization, and neither knows connections' protocols.
//!
//! Releasing a session (on drop, or earlier where a protocol must answer only once the
//! connection is gone, such as STOMP's DISCONNECT receipt) gives up, in this order: the client
//! id (so that once anything sees the consumers gone, a reconnect with the id is accepted),
//! open transactions (rolled back), consumers (their unacknowledged messages back in their
//! queues), temporary destinations, and the connection's announcement.
//!
//! A connector's connection is listed for the admin endpoint (`transport::ConnectionEntry`):
//! the session records there what it learns (its id in the core, the client id, the user, how
//! many consumers it has), so that every protocol's connections show alike.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

use store::{Destination, Message, MessageId};
use tokio::sync::mpsc;

use crate::core::ConnectionId;
use crate::core::ProducerRegistration;
use crate::core::{
    ConsumerId, CoreError, Delivery, NoticeReceiver, QueueHandle, SubscribeRequest, Transaction,
};
use crate::security::{Action, Denied, Subject};
use crate::transport::{ConnectionContext, ConnectionEntry};

/// A session refused what was asked of it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionError {
    /// Another live connection holds the client id (ActiveMQ's `InvalidClientIDException`).
    #[error("client id {0} is already in use by another connection")]
    ClientIdInUse(Arc<str>),
    #[error(transparent)]
    Denied(#[from] Denied),
    #[error(transparent)]
    Core(#[from] CoreError),
}

/// What a consumer was delivered and has not settled yet, in delivery order, each with the
/// queue it came from (a wildcard or composite consumer has several): the ledger that
/// cumulative ("up to") and individual ("only this") acknowledgements are resolved against.
#[derive(Default)]
pub(crate) struct Delivered(VecDeque<(QueueHandle, Arc<Message>)>);

impl Delivered {
    pub fn push(&mut self, queue: QueueHandle, message: Arc<Message>) {
        self.0.push_back((queue, message));
    }

    /// Puts a message back in front (a rolled-back transaction's, in reverse order).
    pub fn push_front(&mut self, queue: QueueHandle, message: Arc<Message>) {
        self.0.push_front((queue, message));
    }

    /// Where the first message `matches` accepts is.
    pub fn position(&self, matches: impl Fn(&Message) -> bool) -> Option<usize> {
        self.0.iter().position(|(_, message)| matches(message))
    }

    pub fn messages(&self) -> impl Iterator<Item = &Arc<Message>> {
        self.0.iter().map(|(_, message)| message)
    }

    /// Takes the messages up to and including `position` (a cumulative acknowledgement).
    pub fn take_up_to(&mut self, position: usize) -> Settled {
        Settled::of(self.0.drain(..=position.min(self.0.len().saturating_sub(1))))
    }

    /// Takes the message at `position` alone (an individual acknowledgement).
    pub fn take_only(&mut self, position: usize) -> Settled {
        Settled::of(self.0.remove(position))
    }

    /// The messages up to and including `position`, left in the ledger.
    pub fn up_to(&self, position: usize) -> Settled {
        Settled::of(self.0.iter().take(position + 1).cloned())
    }
}

/// Messages being settled, grouped by the queue each came from (its settlement goes there).
pub(crate) struct Settled(Vec<(QueueHandle, Vec<Arc<Message>>)>);

impl Settled {
    pub fn of(messages: impl IntoIterator<Item = (QueueHandle, Arc<Message>)>) -> Settled {
        let mut groups: Vec<(QueueHandle, Vec<Arc<Message>>)> = Vec::new();
        for (queue, message) in messages {
            match groups.iter_mut().find(|(q, _)| q.same_queue(&queue)) {
                Some((_, messages)) => messages.push(message),
                None => groups.push((queue, vec![message])),
            }
        }
        Settled(groups)
    }

    pub fn groups(&self) -> impl Iterator<Item = (&QueueHandle, &[Arc<Message>])> {
        self.0.iter().map(|(queue, messages)| (queue, messages.as_slice()))
    }

    pub fn into_groups(self) -> impl Iterator<Item = (QueueHandle, Vec<Arc<Message>>)> {
        self.0.into_iter()
    }

    fn ids(messages: &[Arc<Message>]) -> Vec<MessageId> {
        messages.iter().map(|message| message.id).collect()
    }
}

/// How messages are settled outside a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Settle {
    /// Done with: they leave their queues.
    Ack,
    /// Given back for redelivery, counted as delivered.
    Nack,
    /// Given back unprocessed (AMQP's `released`): not counted as a redelivery.
    Release,
    /// The client gave up on them, for this reason: to the dead-letter queue.
    Poison(Option<String>),
    /// Handed to the application, to be acknowledged later: they stop counting against the
    /// consumer's prefetch.
    Consumed,
}

/// One connection's session; `T` is how its protocol names transactions.
pub(crate) struct Session<T: Eq + Hash> {
    context: Arc<ConnectionContext>,
    connection: ConnectionId,
    client_id: Option<Arc<str>>,
    subject: Option<Subject>,
    /// Temporary destinations this session named.
    temporaries: u64,
    /// Messages this session gave ids to.
    messages: u64,
    consumers: HashSet<ConsumerId>,
    transactions: HashMap<T, Transaction>,
    deliveries_tx: mpsc::UnboundedSender<Delivery>,
    /// Messages for this connection's consumers.
    deliveries: mpsc::UnboundedReceiver<Delivery>,
    /// What the broker tells the connection about its consumers (a slow consumer abort).
    notices: NoticeReceiver,
    /// The connection's entry in the admin endpoint's list, if it is listed (a connector's
    /// connection is; an in-process one is not).
    entry: Option<Arc<ConnectionEntry>>,
    /// The one producer of a protocol without producers of its own (STOMP, MQTT: every send
    /// of the connection is its), from the first send.
    producer: Option<ProducerRegistration>,
    released: bool,
}

impl<T: Eq + Hash> Session<T> {
    /// A session for a new connection: a connection id, and the channels the core reaches it
    /// on.
    pub fn new(context: Arc<ConnectionContext>) -> Session<T> {
        let connection = context.core.next_connection_id();
        let notices = context.core.consumer_notices(connection);
        let (deliveries_tx, deliveries) = mpsc::unbounded_channel();
        let entry = crate::transport::current_connection();
        if let Some(entry) = &entry {
            entry.set_connection(connection);
        }
        Session {
            context,
            connection,
            client_id: None,
            subject: None,
            temporaries: 0,
            messages: 0,
            consumers: HashSet::new(),
            transactions: HashMap::new(),
            deliveries_tx,
            deliveries,
            notices,
            entry,
            producer: None,
            released: false,
        }
    }

    /// The connection's id in the core.
    pub fn connection(&self) -> ConnectionId {
        self.connection
    }

    /// The channels the core reaches the connection on, and its entry in the admin
    /// endpoint's list (through which it may be closed), to wait on all at once.
    pub fn channels(
        &mut self,
    ) -> (&mut mpsc::UnboundedReceiver<Delivery>, &mut NoticeReceiver, Option<&ConnectionEntry>)
    {
        (&mut self.deliveries, &mut self.notices, self.entry.as_deref())
    }

    /// Where the core sends deliveries for this connection's consumers.
    pub fn delivery_sink(&self) -> mpsc::UnboundedSender<Delivery> {
        self.deliveries_tx.clone()
    }

    /// The client logged in (or security is off and nobody needs to).
    pub fn logged_in(&mut self, subject: Subject) {
        if let Some(entry) = &self.entry {
            // With authentication off every client is the anonymous user: no user to show.
            if self.context.security.enabled() {
                entry.set_user(subject.user.clone());
            }
        }
        self.subject = Some(subject);
    }

    pub fn subject(&self) -> Option<&Subject> {
        self.subject.as_ref()
    }

    /// The JMS client id the connection holds, if it gave one.
    pub fn client_id(&self) -> Option<&Arc<str>> {
        self.client_id.as_ref()
    }

    /// Opens the session: [claims](Self::claim_client_id) `client_id`, then
    /// [announces](Self::announce) the connection.
    pub fn open(
        &mut self,
        client_id: Option<&str>,
        announced_as: Option<&str>,
    ) -> Result<(), SessionError> {
        self.claim_client_id(client_id)?;
        self.announce(announced_as);
        Ok(())
    }

    /// Claims `client_id` (an empty one is none) for this connection: refused while another
    /// live connection holds it, whatever its protocol, as ActiveMQ refuses it.
    pub fn claim_client_id(&mut self, client_id: Option<&str>) -> Result<(), SessionError> {
        let client_id: Option<Arc<str>> = client_id.filter(|id| !id.is_empty()).map(Arc::from);
        if let Some(id) = &client_id {
            if !self.context.core.claim_client_id(id, self.connection) {
                return Err(SessionError::ClientIdInUse(id.clone()));
            }
        }
        self.client_id = client_id;
        self.record_client_id();
        Ok(())
    }

    fn record_client_id(&self) {
        if let Some(entry) = &self.entry {
            entry.set_client_id(self.client_id.clone());
        }
    }

    /// Claims `client_id` as [`claim_client_id`](Self::claim_client_id) does, for a connection
    /// that gives it up to a newcomer (MQTT's session take-over): `close` is cancelled when
    /// another connection [takes it over](crate::core::Core::take_over_client_id). The
    /// connection then closes and releases the session, which frees the id.
    pub fn claim_client_id_yielding(
        &mut self,
        client_id: &str,
        close: tokio_util::sync::CancellationToken,
    ) -> Result<(), SessionError> {
        if !client_id.is_empty() {
            if !self.context.core.claim_client_id_yielding(client_id, self.connection, close) {
                return Err(SessionError::ClientIdInUse(client_id.into()));
            }
            self.client_id = Some(client_id.into());
            self.record_client_id();
        }
        Ok(())
    }

    /// Announces the connection on `ActiveMQ.Advisory.Connection` (`announced_as`: the
    /// protocol's own id for it, if any), once it is established.
    pub fn announce(&self, announced_as: Option<&str>) {
        let client_id = self.client_id.as_deref();
        self.context.core.connection_opened(self.connection, client_id, announced_as);
    }

    /// Counts a message sent by the connection's one anonymous producer (STOMP's and MQTT's,
    /// which have no producers of their own; ActiveMQ gives each of their connections one):
    /// opened at the first send, so that a connection that never sends pays nothing for it,
    /// and listed until the session is released.
    pub fn sent(&mut self) {
        if self.producer.is_none() {
            let id = format!("{}:1:1", self.connection_name());
            self.producer = Some(self.context.core.register_producer(self.connection, None, &id));
        }
        if let Some(producer) = &self.producer {
            producer.sent();
        }
    }

    fn count_consumers(&self) {
        if let Some(entry) = &self.entry {
            entry.set_consumers(self.consumers.len());
        }
    }

    /// Whether `[[authorization]]` lets the client `action` `destination`, and create it when
    /// it does not exist yet (every part of a composite).
    pub fn authorize(&self, action: Action, destination: &Destination) -> Result<(), Denied> {
        let core = &self.context.core;
        self.context
            .authorizer
            .check_use(self.subject.as_ref(), action, destination, |d| core.destination_exists(d))
    }

    /// Whether the client may create `destination` (it takes the admin right).
    pub fn authorize_creation(&self, destination: &Destination) -> Result<(), Denied> {
        self.context.authorizer.check(self.subject.as_ref(), Action::Admin, destination)
    }

    /// What the broker calls this connection in the names and ids it makes for it (temporary
    /// destinations, message ids): unique to the broker start and the connection
    /// (`ID:<broker>-<connection>`, as ActiveMQ's connection ids look).
    pub fn connection_name(&self) -> String {
        format!("ID:{}-{}", self.context.id_prefix, self.connection)
    }

    /// A new name for a temporary destination of this connection.
    pub fn next_temporary_name(&mut self) -> Arc<str> {
        self.temporaries += 1;
        format!("{}:{}", self.connection_name(), self.temporaries).into()
    }

    /// A JMS message id for a message the client sent without one, in ActiveMQ's form
    /// (`ID:<connection>:<session>:<producer>:<sequence>`, the connection being its
    /// [`connection_name`](Self::connection_name)), so that the id reads the same over every
    /// protocol.
    pub fn next_message_id(&mut self) -> String {
        self.messages += 1;
        format!("{}:1:1:{}", self.connection_name(), self.messages)
    }

    /// Creates a temporary destination owned by this connection, if the client may; it goes
    /// with the connection.
    pub fn create_temporary(&self, destination: Destination) -> Result<(), SessionError> {
        self.authorize_creation(&destination)?;
        self.context.core.create_temporary(destination, self.connection)?;
        Ok(())
    }

    /// Starts a consumer (`request.connection` is this connection's); it is closed when the
    /// session is released, if not before.
    pub fn subscribe(&mut self, mut request: SubscribeRequest) -> Result<(), CoreError> {
        request.connection = self.connection;
        let consumer = request.spec.id;
        self.context.core.subscribe(request)?;
        self.consumers.insert(consumer);
        self.count_consumers();
        Ok(())
    }

    /// Attaches a consumer to the shared subscription group `request.durable` names (MQTT's
    /// `$share/...`, see `Core::subscribe_shared`).
    pub fn subscribe_shared(&mut self, mut request: SubscribeRequest) -> Result<(), CoreError> {
        request.connection = self.connection;
        let consumer = request.spec.id;
        self.context.core.subscribe_shared(request)?;
        self.consumers.insert(consumer);
        self.count_consumers();
        Ok(())
    }

    /// Closes a consumer: its unacknowledged messages go back to their queues.
    pub fn unsubscribe(&mut self, consumer: ConsumerId) {
        if self.consumers.remove(&consumer) {
            self.context.core.unsubscribe(consumer);
            self.count_consumers();
        }
    }

    /// Closes a consumer whose client saw only `seen` of its in-flight messages: the others
    /// go back not marked redelivered (see [`Core::unsubscribe_seen_only`]).
    pub fn unsubscribe_seen_only(&mut self, consumer: ConsumerId, seen: Vec<store::MessageId>) {
        if self.consumers.remove(&consumer) {
            self.context.core.unsubscribe_seen_only(consumer, seen);
            self.count_consumers();
        }
    }

    /// Settles `settled`, delivered to `consumer`, outside any transaction, without waiting
    /// for the store.
    pub fn settle(&self, consumer: ConsumerId, settled: Settled, how: Settle) {
        let core = &self.context.core;
        for (queue, messages) in settled.into_groups() {
            let ids = Settled::ids(&messages);
            match &how {
                Settle::Ack => core.ack_now(&queue, consumer, ids),
                Settle::Nack => core.nack(&queue, consumer, ids),
                Settle::Release => core.release(&queue, consumer, ids),
                Settle::Poison(cause) => core.poison(&queue, consumer, ids, cause.clone()),
                Settle::Consumed => core.consumed(&queue, consumer, ids),
            }
        }
    }

    /// Acknowledges `settled` outside any transaction; resolves once every removal is
    /// durable (for a protocol that confirms an acknowledgement).
    pub fn ack_durably(
        &self,
        consumer: ConsumerId,
        settled: Settled,
    ) -> impl Future<Output = Result<(), CoreError>> + Send + 'static {
        let core = self.context.core.clone();
        async move {
            let mut result = Ok(());
            for (queue, messages) in settled.into_groups() {
                if let Err(error) = core.ack(&queue, consumer, Settled::ids(&messages)).await {
                    result = Err(error);
                }
            }
            result
        }
    }

    /// Acknowledges `settled` inside the open transaction `name`: the acks are streamed to the
    /// store with it and become final at its commit. False if no such transaction is open.
    pub fn ack_in_transaction<Q>(
        &mut self,
        name: &Q,
        consumer: ConsumerId,
        settled: &Settled,
    ) -> Result<bool, CoreError>
    where
        T: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        let Some(transaction) = self.transactions.get_mut(name) else { return Ok(false) };
        for (queue, messages) in settled.groups() {
            self.context.core.ack_in_transaction(transaction, queue, consumer, messages)?;
        }
        Ok(true)
    }

    /// Begins a local transaction named `name`, and returns it; `None` if one by that name is
    /// open already.
    pub fn begin(&mut self, name: T) -> Option<&mut Transaction> {
        match self.transactions.entry(name) {
            std::collections::hash_map::Entry::Occupied(_) => None,
            std::collections::hash_map::Entry::Vacant(entry) => {
                Some(entry.insert(self.context.core.begin()))
            }
        }
    }

    pub fn transaction<Q>(&mut self, name: &Q) -> Option<&mut Transaction>
    where
        T: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.transactions.get_mut(name)
    }

    /// Takes a transaction out of the session, to commit or roll it back.
    pub fn end_transaction<Q>(&mut self, name: &Q) -> Option<Transaction>
    where
        T: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.transactions.remove(name)
    }

    pub fn has_transaction<Q>(&self, name: &Q) -> bool
    where
        T: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.transactions.contains_key(name)
    }

    /// Gives up everything the connection holds (see the module documentation). Once only:
    /// later calls, and the drop, do nothing.
    pub fn release(&mut self) {
        if std::mem::replace(&mut self.released, true) {
            return;
        }
        let core = self.context.core.clone();
        core.release_client_id(self.connection);
        for (_, transaction) in self.transactions.drain() {
            drop(core.rollback(transaction));
        }
        for consumer in self.consumers.drain() {
            core.unsubscribe(consumer);
        }
        self.count_consumers();
        self.producer = None;
        core.release_connection(self.connection);
    }
}

impl<T: Eq + Hash> Drop for Session<T> {
    fn drop(&mut self) {
        self.release();
    }
}
