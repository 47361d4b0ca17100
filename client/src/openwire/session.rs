//! [`Session`]: a JMS session, the unit of acknowledgement mode and local transactions.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use protocol::openwire::{self as ow, transaction_type, Command, DataStructure};
use tokio::sync::OnceCell;

use super::client::Inner;
use super::consumer::{Consumer, ConsumerShared};
use super::producer::{Producer, ProducerSettings};
use super::{Destination, SessionMode, SubscribeOptions};
use crate::ClientError;

/// A session of an [`super::OpenWireClient`]: producers and consumers belong to one, and its
/// [`SessionMode`] says how their messages are acknowledged and whether they are
/// transacted.
///
/// In a transacted session the transaction begins with the first send or receive (a
/// TransactionInfo BEGIN ahead of it); [`Session::commit`] first sends the acknowledgements
/// of what was received, then commits and waits; [`Session::rollback`] rolls back and hands
/// the messages received in the transaction to their consumers again, marked redelivered (the
/// broker keeps them assigned to the consumer, as ActiveMQ's client expects).
///
/// Cheap to clone: clones are the same session.
#[derive(Debug, Clone)]
pub struct Session {
    shared: Arc<SessionShared>,
}

#[derive(Debug)]
pub(crate) struct SessionShared {
    pub(crate) client: Arc<Inner>,
    pub(crate) id: ow::SessionId,
    pub(crate) mode: SessionMode,
    next_producer: AtomicI64,
    next_consumer: AtomicI64,
    /// The open local transaction, begun on first use.
    transaction: tokio::sync::Mutex<Option<ow::LocalTransactionId>>,
    consumers: Mutex<Vec<Weak<ConsumerShared>>>,
    anonymous: OnceCell<Producer>,
    closed: AtomicBool,
}

impl Session {
    pub(crate) async fn open(
        client: Arc<Inner>,
        mode: SessionMode,
    ) -> Result<Session, ClientError> {
        let id = client.next_session_id();
        let info = ow::SessionInfo { session_id: Some(id.clone()), ..Default::default() };
        client.request(Command::SessionInfo(info), None).await?;
        let shared = Arc::new(SessionShared {
            client,
            id,
            mode,
            next_producer: AtomicI64::new(1),
            next_consumer: AtomicI64::new(1),
            transaction: tokio::sync::Mutex::new(None),
            consumers: Mutex::new(Vec::new()),
            anonymous: OnceCell::new(),
            closed: AtomicBool::new(false),
        });
        shared.client.register_session(&shared);
        Ok(Session { shared })
    }

    /// The acknowledgement mode.
    pub fn mode(&self) -> SessionMode {
        self.shared.mode
    }

    /// A producer for `destination`, or an anonymous one (each send names its destination)
    /// with `None`; it sends as JMS does (synchronously when persistent and not transacted).
    pub async fn producer(
        &self,
        destination: Option<Destination>,
    ) -> Result<Producer, ClientError> {
        self.producer_with(ProducerSettings { destination, ..ProducerSettings::default() }).await
    }

    /// A producer with explicit settings (send mode, flow-control window).
    pub async fn producer_with(&self, settings: ProducerSettings) -> Result<Producer, ClientError> {
        let value = self.shared.next_producer.fetch_add(1, Ordering::Relaxed);
        Producer::open(self.shared.clone(), value, settings).await
    }

    /// The session's anonymous producer, created on first use.
    pub(crate) async fn anonymous_producer(&self) -> Result<&Producer, ClientError> {
        self.shared.anonymous.get_or_try_init(|| self.producer(None)).await
    }

    /// A consumer (ConsumerInfo, waited for: once this returns, messages sent reach it).
    pub async fn consumer(&self, options: SubscribeOptions) -> Result<Consumer, ClientError> {
        let value = self.shared.next_consumer.fetch_add(1, Ordering::Relaxed);
        let consumer = Consumer::open(self.shared.clone(), value, options).await?;
        let mut consumers = self.shared.consumers.lock().unwrap_or_else(|e| e.into_inner());
        consumers.retain(|c| c.strong_count() > 0);
        consumers.push(Arc::downgrade(consumer.shared()));
        Ok(consumer)
    }

    /// Deletes durable subscription `name` of the connection's client id (its consumer must
    /// be closed first).
    pub async fn unsubscribe(&self, name: &str) -> Result<(), ClientError> {
        let client = &self.shared.client;
        let info = ow::RemoveSubscriptionInfo {
            connection_id: Some(client.connection_id.clone()),
            subscription_name: Some(name.to_owned()),
            client_id: client.client_id.clone(),
            ..Default::default()
        };
        client.request(Command::RemoveSubscriptionInfo(Box::new(info)), None).await
    }

    /// Commits the open transaction: the acknowledgements of what was received, then
    /// COMMIT, waited for. Nothing happens if no transaction is open. If the broker refuses,
    /// the received messages are handed out again as after a rollback.
    pub async fn commit(&self) -> Result<(), ClientError> {
        self.shared.require_transacted("commit")?;
        let mut transaction = self.shared.transaction.lock().await;
        let Some(id) = transaction.take() else { return Ok(()) };
        let client = &self.shared.client;
        let tx = ow::TransactionId::Local(id.clone());
        let consumers = self.shared.consumers();
        let mut result = Ok(());
        for consumer in &consumers {
            result = result.and(consumer.flush_acks(client, Some(tx.clone())).await);
        }
        if result.is_ok() {
            result = client
                .request(transaction_info(&id, transaction_type::COMMIT_ONE_PHASE), None)
                .await;
        }
        for consumer in &consumers {
            consumer.end_transaction(result.is_ok());
        }
        result
    }

    /// Rolls the open transaction back: its sends are dropped, and the messages received in
    /// it come again (marked redelivered) from their consumers.
    pub async fn rollback(&self) -> Result<(), ClientError> {
        self.shared.require_transacted("roll back")?;
        let mut transaction = self.shared.transaction.lock().await;
        let result = match transaction.take() {
            Some(id) => {
                self.shared
                    .client
                    .request(transaction_info(&id, transaction_type::ROLLBACK), None)
                    .await
            }
            None => Ok(()),
        };
        for consumer in self.shared.consumers() {
            consumer.end_transaction(false);
        }
        result
    }

    /// Closes the session: its open consumers (as [`Consumer::close`]), a transaction still
    /// open (rolled back), then the session itself (RemoveInfo).
    pub async fn close(self) -> Result<(), ClientError> {
        self.shared.close().await
    }
}

impl SessionShared {
    fn require_transacted(&self, what: &str) -> Result<(), ClientError> {
        if self.mode.is_transacted() {
            Ok(())
        } else {
            Err(ClientError::protocol(format!(
                "cannot {what}: the session is not transacted ({:?})",
                self.mode
            )))
        }
    }

    /// The open consumers.
    pub(crate) fn consumers(&self) -> Vec<Arc<ConsumerShared>> {
        let consumers = self.consumers.lock().unwrap_or_else(|e| e.into_inner());
        consumers.iter().filter_map(Weak::upgrade).filter(|c| !c.is_closed()).collect()
    }

    /// The transaction to send or acknowledge in: none outside transacted sessions; in a
    /// transacted one the open transaction, begun (BEGIN queued) if there is none.
    pub(crate) async fn transaction(&self) -> Result<Option<ow::TransactionId>, ClientError> {
        if !self.mode.is_transacted() {
            return Ok(None);
        }
        let mut transaction = self.transaction.lock().await;
        if let Some(id) = &*transaction {
            return Ok(Some(ow::TransactionId::Local(id.clone())));
        }
        let id = self.client.next_transaction_id();
        self.client.post(transaction_info(&id, transaction_type::BEGIN), None).await?;
        *transaction = Some(id.clone());
        Ok(Some(ow::TransactionId::Local(id)))
    }

    pub(crate) async fn close(&self) -> Result<(), ClientError> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let mut result = Ok(());
        let consumers = self.consumers();
        let mut last_delivered = -1;
        for consumer in &consumers {
            last_delivered = last_delivered.max(consumer.last_delivered());
            result = result.and(consumer.close(&self.client).await);
        }
        let open = self.transaction.lock().await.take();
        if let Some(id) = open {
            let rollback = transaction_info(&id, transaction_type::ROLLBACK);
            result = result.and(self.client.request(rollback, None).await);
        }
        if let Some(producer) = self.anonymous.get() {
            producer.forget();
        }
        let remove = ow::RemoveInfo {
            object_id: Some(Box::new(DataStructure::SessionId(self.id.clone()))),
            last_delivered_sequence_id: last_delivered,
            ..Default::default()
        };
        result = result.and(self.client.request(Command::RemoveInfo(Box::new(remove)), None).await);
        self.client.forget_session(self);
        result
    }
}

fn transaction_info(id: &ow::LocalTransactionId, kind: i8) -> Command {
    Command::TransactionInfo(Box::new(ow::TransactionInfo {
        connection_id: id.connection_id.clone(),
        transaction_id: Some(ow::TransactionId::Local(id.clone())),
        transaction_type: kind,
        ..Default::default()
    }))
}
