//! The STOMP client against a scripted fake server (TCP, or an in-process pipe where time
//! is paused). Each test plays the server's side of one conversation.

mod connect;
mod fake_server;
mod heart_beats;
mod receipts;
mod subscriptions;
