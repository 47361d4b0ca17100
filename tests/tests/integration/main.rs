//! ferromq's integration tests: one binary, one module per area. Each test starts its own
//! embedded broker on an ephemeral port (see the `tests` library for the shared helpers).

mod activemq_tools;
mod admin;
mod advisories;
mod amqp;
mod amqp_client;
mod authentication;
mod bad_input;
mod composites;
mod connectors;
mod dead_letter;
mod delivery_order;
mod durable;
mod extensions;
mod flow_control;
mod gc;
mod jms;
mod model;
mod openwire;
mod openwire_client;
mod policies;
mod queues;
mod receipts;
mod retroactive;
mod scheduled;
mod selectors;
mod slow_consumers;
mod stomp_protocol;
mod stomp_py;
mod temp_store;
mod temporary;
mod tls;
mod topics;
mod transactions;
mod virtual_topics;
mod wildcards;
