//! Open connections per protocol, for the statistics: one atomic counter per protocol, raised
//! when a connection's task starts and lowered by a guard when it ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The protocol a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Stomp,
    OpenWire,
    Amqp,
    Mqtt,
}

/// Counters shared by every listener of a broker (and its in-process connections).
#[derive(Debug, Default)]
pub struct ConnectionCounts {
    stomp: AtomicU64,
    openwire: AtomicU64,
    amqp: AtomicU64,
    mqtt: AtomicU64,
    accepted: AtomicU64,
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
        self.accepted.fetch_add(1, Ordering::Relaxed);
        ConnectionGuard { counts: self.clone(), protocol }
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

/// Keeps one connection counted while it lives.
#[derive(Debug)]
pub struct ConnectionGuard {
    counts: Arc<ConnectionCounts>,
    protocol: Protocol,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.counts.counter(self.protocol).fetch_sub(1, Ordering::Relaxed);
    }
}
