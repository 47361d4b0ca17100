//! Behaviour tests of the AMQP 1.0 codec through its public API.
