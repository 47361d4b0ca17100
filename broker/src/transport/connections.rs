//! Open connections per protocol, for the statistics: one atomic counter per protocol, raised
//! when a connection's task starts and lowered by a guard when it ends; and the list of open
//! connections the admin endpoint shows and closes, one small [`ConnectionEntry`] each.
//!
//! A connector's connection is listed from the moment its protocol starts (after the TLS and
//! WebSocket handshakes) until its task ends. Its entry travels with its task
//! ([`serving`]): the session the protocol opens finds it there ([`current`]) and records in
//! it what becomes known later (the core's id for the connection, the client id, the user,
//! the consumers), and the connection driver waits on it for an administrator's close. So no
//! protocol's entry point has to carry it, and a connection costs one allocation more, no task
//! and no channel.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::core::ConnectionId;

/// The protocol a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Stomp,
    OpenWire,
    Amqp,
    Mqtt,
}

impl Protocol {
    /// Its name in the admin endpoint's answers.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Stomp => "stomp",
            Protocol::OpenWire => "openwire",
            Protocol::Amqp => "amqp",
            Protocol::Mqtt => "mqtt",
        }
    }
}

/// Counters shared by every listener of a broker (and its in-process connections).
#[derive(Debug, Default)]
pub struct ConnectionCounts {
    stomp: AtomicU64,
    openwire: AtomicU64,
    amqp: AtomicU64,
    mqtt: AtomicU64,
    accepted: AtomicU64,
    /// The listed connections, by [`ConnectionEntry::key`].
    listed: Mutex<HashMap<u64, Arc<ConnectionEntry>>>,
}

/// A snapshot of [`ConnectionCounts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ConnectionStats {
    /// Open STOMP connections (TCP and in-process `vm://`).
    pub stomp: u64,
    /// Open OpenWire connections.
    pub openwire: u64,
    /// Open AMQP 1.0 connections. Absent from the stats of older brokers, hence the default.
    #[serde(default)]
    pub amqp: u64,
    /// Open MQTT connections. Absent from the stats of older brokers, hence the default.
    #[serde(default)]
    pub mqtt: u64,
    /// Every connection accepted since the broker started.
    pub accepted: u64,
}

impl ConnectionStats {
    /// Open connections of every protocol.
    pub fn open(&self) -> u64 {
        self.stomp + self.openwire + self.amqp + self.mqtt
    }
}

impl ConnectionCounts {
    /// Counts a connection open until the returned guard is dropped.
    pub fn opened(self: &Arc<Self>, protocol: Protocol) -> ConnectionGuard {
        self.counter(protocol).fetch_add(1, Ordering::Relaxed);
        let key = self.accepted.fetch_add(1, Ordering::Relaxed) + 1;
        ConnectionGuard { counts: self.clone(), protocol, entry: None, key }
    }

    /// Counts a connection from `remote` open, and lists it, until the returned guard is
    /// dropped; and its entry.
    pub(crate) fn opened_from(
        self: &Arc<Self>,
        protocol: Protocol,
        remote: SocketAddr,
    ) -> (ConnectionGuard, Arc<ConnectionEntry>) {
        let mut guard = self.opened(protocol);
        let entry = Arc::new(ConnectionEntry {
            protocol,
            remote,
            since_ms: u64::try_from(crate::core::queue::now_millis()).unwrap_or(0),
            details: Mutex::new(Details::default()),
            consumers: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            close: Notify::new(),
            ended: Notify::new(),
        });
        self.listed.lock().insert(guard.key, entry.clone());
        guard.entry = Some(entry.clone());
        (guard, entry)
    }

    /// The listed connections, oldest first.
    pub(crate) fn listed(&self) -> Vec<Arc<ConnectionEntry>> {
        let mut listed: Vec<(u64, Arc<ConnectionEntry>)> =
            self.listed.lock().iter().map(|(key, entry)| (*key, entry.clone())).collect();
        listed.sort_by_key(|(key, _)| *key);
        listed.into_iter().map(|(_, entry)| entry).collect()
    }

    /// Asks the listed connection the core knows as `connection` to close, and waits (up to
    /// `patience`) until it has. False if no such connection is listed.
    pub(crate) async fn close(
        &self,
        connection: ConnectionId,
        patience: std::time::Duration,
    ) -> bool {
        let found = self.listed.lock().iter().find_map(|(key, entry)| {
            (entry.connection() == Some(connection)).then(|| (*key, entry.clone()))
        });
        let Some((key, entry)) = found else { return false };
        let ended = entry.ended.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        entry.closing.store(true, Ordering::Release);
        entry.close.notify_waiters();
        if self.listed.lock().contains_key(&key) {
            let _ = tokio::time::timeout(patience, ended).await;
        }
        true
    }

    pub fn snapshot(&self) -> ConnectionStats {
        ConnectionStats {
            stomp: self.stomp.load(Ordering::Relaxed),
            openwire: self.openwire.load(Ordering::Relaxed),
            amqp: self.amqp.load(Ordering::Relaxed),
            mqtt: self.mqtt.load(Ordering::Relaxed),
            accepted: self.accepted.load(Ordering::Relaxed),
        }
    }

    fn counter(&self, protocol: Protocol) -> &AtomicU64 {
        match protocol {
            Protocol::Stomp => &self.stomp,
            Protocol::OpenWire => &self.openwire,
            Protocol::Amqp => &self.amqp,
            Protocol::Mqtt => &self.mqtt,
        }
    }
}

/// Keeps one connection counted (and listed, if it is) while it lives.
#[derive(Debug)]
pub struct ConnectionGuard {
    counts: Arc<ConnectionCounts>,
    protocol: Protocol,
    entry: Option<Arc<ConnectionEntry>>,
    key: u64,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.counts.counter(self.protocol).fetch_sub(1, Ordering::Relaxed);
        if let Some(entry) = self.entry.take() {
            self.counts.listed.lock().remove(&self.key);
            entry.ended.notify_waiters();
        }
    }
}

/// One listed connection: what the admin endpoint shows of it, and its close.
#[derive(Debug)]
pub(crate) struct ConnectionEntry {
    protocol: Protocol,
    /// The client's address.
    remote: SocketAddr,
    /// When its protocol started, in milliseconds since the Unix epoch.
    since_ms: u64,
    /// What its session learns.
    details: Mutex<Details>,
    /// Its consumers, as its session counts them.
    consumers: AtomicU64,
    /// An administrator asked it to close; `close` wakes its driver.
    closing: AtomicBool,
    close: Notify,
    /// Woken once it left the list.
    ended: Notify,
}

/// What a connection's session records in its entry.
#[derive(Debug, Default, Clone)]
pub(crate) struct Details {
    /// The core's id for the connection, once its session opened.
    pub connection: Option<ConnectionId>,
    pub client_id: Option<Arc<str>>,
    /// The user it logged in as.
    pub user: Option<Arc<str>>,
}

impl ConnectionEntry {
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    pub fn remote(&self) -> SocketAddr {
        self.remote
    }

    pub fn since_ms(&self) -> u64 {
        self.since_ms
    }

    pub fn details(&self) -> Details {
        self.details.lock().clone()
    }

    pub fn connection(&self) -> Option<ConnectionId> {
        self.details.lock().connection
    }

    pub fn consumers(&self) -> u64 {
        self.consumers.load(Ordering::Relaxed)
    }

    pub fn set_connection(&self, connection: ConnectionId) {
        self.details.lock().connection = Some(connection);
    }

    pub fn set_client_id(&self, client_id: Option<Arc<str>>) {
        self.details.lock().client_id = client_id;
    }

    pub fn set_user(&self, user: Arc<str>) {
        self.details.lock().user = Some(user);
    }

    pub fn set_consumers(&self, consumers: usize) {
        self.consumers.store(consumers as u64, Ordering::Relaxed);
    }

    /// Resolves once an administrator asked the connection to close.
    pub async fn close_requested(&self) {
        loop {
            let notified = self.close.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.closing.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }
}

tokio::task_local! {
    /// The entry of the connection whose task this is (see the module documentation).
    static CURRENT: Arc<ConnectionEntry>;
}

/// Runs `connection` (a connection's whole task) with `entry` as its [`current`] entry.
pub(crate) async fn serving<F: Future>(entry: Arc<ConnectionEntry>, connection: F) -> F::Output {
    CURRENT.scope(entry, connection).await
}

/// The entry of the connection whose task calls this, if it is listed.
pub(crate) fn current() -> Option<Arc<ConnectionEntry>> {
    CURRENT.try_with(Arc::clone).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every connection holds one entry: it must stay small (an idle connection costs some
    /// 11 KiB in all).
    #[test]
    fn an_entry_is_small() {
        let size = std::mem::size_of::<ConnectionEntry>();
        assert!(size <= 192, "a connection's entry is {size} bytes");
    }

    #[tokio::test]
    async fn a_close_wakes_the_connection_and_waits_until_it_is_gone() {
        let counts = Arc::new(ConnectionCounts::default());
        let (guard, entry) =
            counts.opened_from(Protocol::Stomp, SocketAddr::from(([127, 0, 0, 1], 1)));
        entry.set_connection(ConnectionId(7));
        assert_eq!(counts.listed().len(), 1);
        let connection = tokio::spawn(async move {
            entry.close_requested().await;
            drop(guard);
        });
        let patience = std::time::Duration::from_secs(5);
        assert!(!counts.close(ConnectionId(8), patience).await, "no such connection");
        assert!(counts.close(ConnectionId(7), patience).await);
        assert!(counts.listed().is_empty(), "gone once the close answers");
        connection.await.expect("the connection's task ends");
        assert_eq!(counts.snapshot().stomp, 0);
    }
}
