//! Broker.
