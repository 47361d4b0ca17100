//! The admin endpoint's operations: what an administrator does to destinations and their
//! messages (browse, send, remove, purge, delete, move, retry), the lists of connections,
//! consumers, producers and durable subscriptions, a connection's close, the token that guards
//! them, and the OpenAPI description of every route (`openapi.json`).
//!
//! [`Operation::of`] names a request's operation; `mod.rs` hands such requests here (after
//! the same authentication as the statistics) and keeps the reads it had. The work is the
//! core's (`core/engine/operations.rs`); this file maps requests and answers to JSON
//! (`model.rs`) and refusals to statuses: 404 unknown destination or message, 409 consumers
//! attached, 400 bad input, 403 a state-changing request that fails the checks below.
//!
//! **Cross-site requests.** A state-changing request (POST, DELETE) is refused with 403
//! unless its `Origin`, when sent, has the request's own `Host` as its host and port (a page of
//! another site cannot send that), `Sec-Fetch-Site`, when sent, is `same-origin` or `none`,
//! and it carries `X-Ferromq-Token` with the broker's token (`GET /api/token`, random per
//! process, behind the same authentication): a form or a script of another site can make the
//! browser send the administrator's credentials, but can neither read the token nor set the
//! header without the endpoint's consent (it answers no CORS preflight). Nothing secret goes
//! in a URL. Every state-changing request is logged with its user and outcome.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, AUTHORIZATION, CONTENT_TYPE, HOST, ORIGIN};
use hyper::{Method, Request, Response, StatusCode};
use store::{BodyKind, DeliveryMode, Destination, Message, PropertyValue};

use super::model::{
    AdminToken, ConnectionClosed, ConnectionView, ConsumerView, Deleted, DestinationRef,
    DurableSubscriptionView, MessagePage, MessageView, MoveRequest, Moved, ProducerView, Removed,
    RetryOutcome, RetryRequest, SendRequest, Sent, SubscriptionRemoved,
};
use super::{error, json, percent_decode, ActiveBroker, AdminState};
use crate::core::{InspectedMessage, OperationError, StatsKind};

/// The OpenAPI 3.0 description of every route, served at `/api/openapi.json`.
pub(super) const OPENAPI: &str = include_str!("openapi.json");

/// The header a state-changing request carries the token in.
const TOKEN_HEADER: &str = "x-ferromq-token";
/// The largest request body read (a message to send is the largest).
const MAX_BODY: usize = 4 << 20;
/// The most messages a page of a browse holds, as ActiveMQ's `maxBrowsePageSize`.
const MAX_PAGE: usize = 400;
/// A browse's default page.
const DEFAULT_PAGE: usize = 50;
/// The body preview of a message in a page, and of one message asked for by its id.
const PAGE_PREVIEW: usize = 1024;
const SINGLE_PREVIEW: usize = 64 << 10;
/// How long a connection's close waits for the connection to be gone before it answers (its
/// protocol first writes what it owes the client, as at a shutdown).
const CLOSE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

/// What the operations need beside the core: the token, and the connection id and message
/// counter of the messages the endpoint sends.
pub(crate) struct Operations {
    token: String,
    sent: AtomicU64,
    /// Distinguishes this process's message ids from another's (with the same broker name).
    instance: u64,
    /// The connection the endpoint's sends count as (a core id, taken at the first send).
    connection: std::sync::OnceLock<crate::core::ConnectionId>,
}

impl Operations {
    pub(crate) fn new() -> Operations {
        let bytes: [u8; 24] = rand::random();
        Operations {
            token: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes),
            sent: AtomicU64::new(0),
            instance: rand::random::<u64>() & 0xffff_ffff,
            connection: std::sync::OnceLock::new(),
        }
    }
}

/// A request the operations answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Operation {
    Token,
    OpenApi,
    Browse { queue: String },
    Message { queue: String, id: String },
    Send { kind: StatsKind, name: String },
    Purge { queue: String },
    Move { queue: String },
    Retry { queue: String },
    Delete { kind: StatsKind, name: String },
    Consumers,
    Producers,
    Connections,
    CloseConnection { id: String },
    Subscriptions,
    RemoveSubscription { client_id: String, name: String },
}

/// What a path under `/api/destinations/{kind}/` names besides the destination itself.
enum Suffix<'a> {
    Messages,
    Message(&'a str),
    Purge,
    Move,
    Retry,
}

impl Operation {
    /// The operation `method path` asks for, if it is one; `Err` with the methods allowed for
    /// a known operation's path with another method. `None`: not an operation (the
    /// statistics' routes, or nothing).
    pub(super) fn of(method: &Method, path: &str) -> Option<Result<Operation, &'static str>> {
        let path = path.trim_end_matches('/');
        match path {
            "/api/token" => return Some(only(method, &Method::GET, Operation::Token)),
            "/api/openapi.json" => return Some(only(method, &Method::GET, Operation::OpenApi)),
            "/api/consumers" => return Some(only(method, &Method::GET, Operation::Consumers)),
            "/api/producers" => return Some(only(method, &Method::GET, Operation::Producers)),
            "/api/connections" => return Some(only(method, &Method::GET, Operation::Connections)),
            "/api/subscriptions" => {
                return Some(only(method, &Method::GET, Operation::Subscriptions))
            }
            _ => {}
        }
        if let Some(id) = path.strip_prefix("/api/connections/") {
            let id = percent_decode(id).filter(|id| !id.is_empty())?;
            return Some(match *method {
                Method::DELETE => Ok(Operation::CloseConnection { id }),
                _ => Err("DELETE"),
            });
        }
        if let Some(rest) = path.strip_prefix("/api/subscriptions/") {
            let (client_id, name) = rest.split_once('/')?;
            let client_id = percent_decode(client_id).filter(|id| !id.is_empty())?;
            let name = percent_decode(name).filter(|name| !name.is_empty())?;
            return Some(match *method {
                Method::DELETE => Ok(Operation::RemoveSubscription { client_id, name }),
                _ => Err("DELETE"),
            });
        }
        let rest = path.strip_prefix("/api/destinations/")?;
        let (kind, rest) = rest.split_once('/')?;
        let kind = StatsKind::parse(kind)?;
        let (name, suffix) = match rest.split_once('/') {
            Some((name, suffix)) => match suffix_of(suffix) {
                Some(suffix) => (name, Some(suffix)),
                // A name with raw slashes (`a/b`): the destination itself, as the reads take it.
                None => (rest, None),
            },
            None => (rest, None),
        };
        let name = percent_decode(name).filter(|name| !name.is_empty())?;
        let queue = kind == StatsKind::Queue;
        Some(match suffix {
            None if *method == Method::DELETE => Ok(Operation::Delete { kind, name }),
            // The destination's statistics, or another method on them: `mod.rs`'s.
            None => return None,
            Some(Suffix::Messages) if *method == Method::POST => Ok(Operation::Send { kind, name }),
            Some(Suffix::Messages) if *method == Method::GET && queue => {
                Ok(Operation::Browse { queue: name })
            }
            Some(Suffix::Messages) => Err(if queue { "GET, POST" } else { "POST" }),
            Some(_) if !queue => return None,
            Some(Suffix::Message(id)) => {
                let id = percent_decode(id).filter(|id| !id.is_empty())?;
                match *method {
                    Method::GET | Method::DELETE => Ok(Operation::Message { queue: name, id }),
                    _ => Err("GET, DELETE"),
                }
            }
            Some(Suffix::Purge) => only(method, &Method::POST, Operation::Purge { queue: name }),
            Some(Suffix::Move) => only(method, &Method::POST, Operation::Move { queue: name }),
            Some(Suffix::Retry) => only(method, &Method::POST, Operation::Retry { queue: name }),
        })
    }
}

fn suffix_of(suffix: &str) -> Option<Suffix<'_>> {
    match suffix {
        "messages" => Some(Suffix::Messages),
        "purge" => Some(Suffix::Purge),
        "move" => Some(Suffix::Move),
        "retry" => Some(Suffix::Retry),
        other => match other.strip_prefix("messages/") {
            Some(id) if !id.contains('/') => Some(Suffix::Message(id)),
            _ => None,
        },
    }
}

fn only(
    method: &Method,
    allowed: &Method,
    operation: Operation,
) -> Result<Operation, &'static str> {
    if method == allowed || (*allowed == Method::GET && *method == Method::HEAD) {
        return Ok(operation);
    }
    Err(if *allowed == Method::GET { "GET, HEAD" } else { "POST" })
}

/// Answers an operation's request (already authenticated by `mod.rs`).
pub(super) async fn answer(
    state: &AdminState,
    request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let operation = match Operation::of(&method, &path) {
        Some(Ok(operation)) => operation,
        Some(Err(allowed)) => {
            let mut response = error(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("{method} is not allowed on {path} (allowed: {allowed})"),
            );
            response.headers_mut().insert(ALLOW, HeaderValue::from_static(allowed));
            return response;
        }
        None => return error(StatusCode::NOT_FOUND, format!("no such resource: {path}")),
    };
    match operation {
        Operation::OpenApi => {
            let mut response = Response::new(Full::new(Bytes::from_static(OPENAPI.as_bytes())));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            return response;
        }
        Operation::Token => {
            return json(StatusCode::OK, &AdminToken { token: state.operations.token.clone() })
        }
        _ => {}
    }
    let Some(active) = state.active.get() else {
        let status = state.status();
        let message =
            format!("{} {} since {} (Unix ms)", status.name, status.doing(), status.since_unix_ms);
        return error(StatusCode::SERVICE_UNAVAILABLE, message);
    };
    let query = request.uri().query().unwrap_or_default().to_owned();
    let changes = method == Method::POST || method == Method::DELETE;
    if !changes {
        return read(active, operation, &query).await;
    }
    let user = user_of(state, &request);
    if let Err(refusal) = check_same_origin(state, &request) {
        tracing::warn!(%user, %method, %path, %refusal, "admin operation refused");
        return error(StatusCode::FORBIDDEN, refusal);
    }
    let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(failure) => {
            return error(StatusCode::BAD_REQUEST, format!("cannot read the request: {failure}"))
        }
    };
    let response = change(state, active, operation, &method, &query, &body).await;
    let outcome = response.status();
    tracing::info!(%user, %method, %path, status = outcome.as_u16(), "admin operation");
    response
}

/// The user a request authenticated as ("anonymous" with authentication off).
fn user_of(state: &AdminState, request: &Request<Incoming>) -> String {
    if state.access.is_none() {
        return "anonymous".to_owned();
    }
    request
        .headers()
        .get(AUTHORIZATION)
        .and_then(super::basic_credentials)
        .map_or_else(|| "anonymous".to_owned(), |(user, _)| user)
}

/// The cross-site checks of a state-changing request (see the module documentation).
fn check_same_origin(state: &AdminState, request: &Request<Incoming>) -> Result<(), String> {
    let headers = request.headers();
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or_default();
        if site != "same-origin" && site != "none" {
            return Err(format!("cross-site request refused (Sec-Fetch-Site: {site})"));
        }
    }
    if let Some(origin) = headers.get(ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        let host = headers.get(HOST).and_then(|host| host.to_str().ok()).unwrap_or_default();
        let authority = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
        if host.is_empty() || authority != Some(host) {
            return Err(format!("cross-origin request refused (Origin: {origin})"));
        }
    }
    let token = headers.get(TOKEN_HEADER).and_then(|token| token.to_str().ok());
    match token {
        Some(token) if constant_time_eq(token.as_bytes(), state.operations.token.as_bytes()) => {
            Ok(())
        }
        Some(_) => Err("the X-Ferromq-Token header is not the broker's token".to_owned()),
        None => Err("the X-Ferromq-Token header is missing (GET /api/token gives it)".to_owned()),
    }
}

/// Compares without an early return, so that timing tells nothing of the token.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// The value of `name` in a query string (`a=1&b=2`), percent-decoded (`+` as a space).
fn query_value(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == name).then(|| percent_decode(&value.replace('+', " ")).unwrap_or_default())
    })
}

async fn read(active: &ActiveBroker, operation: Operation, query: &str) -> Response<Full<Bytes>> {
    let core = &active.core;
    match operation {
        Operation::Browse { queue } => {
            let number = |name: &str, default: u64| -> Result<u64, String> {
                match query_value(query, name) {
                    None => Ok(default),
                    Some(text) => text
                        .parse::<u64>()
                        .map_err(|_| format!("`{name}` must be a whole number, not `{text}`")),
                }
            };
            let (offset, limit) = match (number("offset", 0), number("limit", DEFAULT_PAGE as u64))
            {
                (Ok(offset), Ok(limit)) => (offset, limit),
                (Err(message), _) | (_, Err(message)) => {
                    return error(StatusCode::BAD_REQUEST, message)
                }
            };
            if limit as usize > MAX_PAGE {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("`limit` is at most {MAX_PAGE}, not {limit}"),
                );
            }
            let selector = query_value(query, "selector");
            match core.inspect_queue(&queue, selector.as_deref(), offset, limit as usize).await {
                Ok(found) => {
                    let messages = found
                        .messages
                        .iter()
                        .map(|message| message_view(message, PAGE_PREVIEW))
                        .collect();
                    json(StatusCode::OK, &MessagePage { total: found.total, offset, messages })
                }
                Err(failure) => refusal(failure),
            }
        }
        Operation::Message { queue, id } => match core.find_message(&queue, &id).await {
            Ok(found) => json(StatusCode::OK, &message_view(&found, SINGLE_PREVIEW)),
            Err(failure) => refusal(failure),
        },
        Operation::Consumers => {
            let consumers: Vec<ConsumerView> = core
                .consumer_listing()
                .await
                .into_iter()
                .map(|listing| ConsumerView {
                    connection_id: listing.connection,
                    consumer_id: listing.consumer,
                    destination: destination_ref(&listing.destination),
                    selector: listing.selector,
                    prefetch: listing.prefetch,
                    in_flight: listing.in_flight,
                    durable_subscription: listing
                        .durable
                        .map(|key| format!("{}:{}", key.client_id, key.name)),
                })
                .collect();
            json(StatusCode::OK, &consumers)
        }
        Operation::Producers => {
            let producers: Vec<ProducerView> = core
                .producer_listing()
                .into_iter()
                .map(|listing| ProducerView {
                    connection_id: listing.connection_name,
                    producer_id: listing.producer,
                    destination: listing.destination.as_ref().map(destination_ref),
                    sent: listing.sent,
                })
                .collect();
            json(StatusCode::OK, &producers)
        }
        Operation::Connections => json(StatusCode::OK, &connection_views(active)),
        Operation::Subscriptions => {
            let subscriptions: Vec<DurableSubscriptionView> = core
                .durable_listing()
                .await
                .into_iter()
                .map(|listing| DurableSubscriptionView {
                    client_id: listing.key.client_id.to_string(),
                    subscription_name: listing.key.name.to_string(),
                    topic: listing.topic.name.to_string(),
                    selector: listing.selector,
                    active: listing.active,
                    pending: listing.pending,
                })
                .collect();
            json(StatusCode::OK, &subscriptions)
        }
        other => error(StatusCode::METHOD_NOT_ALLOWED, format!("{other:?} changes the broker")),
    }
}

async fn change(
    state: &AdminState,
    active: &ActiveBroker,
    operation: Operation,
    method: &Method,
    query: &str,
    body: &Bytes,
) -> Response<Full<Bytes>> {
    let core = &active.core;
    match operation {
        Operation::Purge { queue } => match core.purge_queue(&queue).await {
            Ok(removed) => json(StatusCode::OK, &Removed { removed }),
            Err(failure) => refusal(failure),
        },
        Operation::Delete { kind, name } => {
            let force = match query_value(query, "force").as_deref() {
                None | Some("false") => false,
                Some("true") => true,
                Some(other) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        format!("`force` is true or false, not `{other}`"),
                    )
                }
            };
            let destination = match kind {
                StatsKind::Queue => Destination::queue(name),
                StatsKind::Topic => Destination::topic(name),
            };
            match core.delete_destination(&destination, force).await {
                Ok(()) => json(StatusCode::OK, &Deleted { deleted: true }),
                Err(failure) => refusal(failure),
            }
        }
        Operation::Message { queue, id } if *method == Method::DELETE => {
            match core.remove_message(&queue, &id).await {
                Ok(removed) => json(StatusCode::OK, &Removed { removed }),
                Err(failure) => refusal(failure),
            }
        }
        Operation::Move { queue } => {
            let request: MoveRequest = match parse_body(body) {
                Ok(request) => request,
                Err(refused) => return *refused,
            };
            if request.to.is_empty() {
                return error(StatusCode::BAD_REQUEST, "`to` names no queue".to_owned());
            }
            let moved = core
                .move_messages(
                    &queue,
                    &request.to,
                    request.selector.as_deref(),
                    request.copy,
                    request.limit,
                )
                .await;
            match moved {
                Ok(moved) => json(StatusCode::OK, &Moved { moved }),
                Err(failure) => refusal(failure),
            }
        }
        Operation::Retry { queue } => {
            let request: RetryRequest = match body.is_empty() {
                true => RetryRequest::default(),
                false => match parse_body(body) {
                    Ok(request) => request,
                    Err(refused) => return *refused,
                },
            };
            match core.retry_messages(&queue, request.selector.as_deref(), request.limit).await {
                Ok(retried) => json(
                    StatusCode::OK,
                    &RetryOutcome { retried: retried.retried, skipped: retried.skipped },
                ),
                Err(failure) => refusal(failure),
            }
        }
        Operation::Send { kind, name } => {
            let request: SendRequest = match parse_body(body) {
                Ok(request) => request,
                Err(refused) => return *refused,
            };
            let destination = match kind {
                StatsKind::Queue => Destination::queue(name),
                StatsKind::Topic => Destination::topic(name),
            };
            let message = match message_of(state, active, destination, request) {
                Ok(message) => Arc::new(message),
                Err(refused) => return error(StatusCode::BAD_REQUEST, refused),
            };
            let id = message.message_id.to_string();
            let connection = *state.operations.connection.get_or_init(|| core.next_connection_id());
            let sent = match core.send(message, connection, None) {
                Ok(completion) => completion.await.map_err(OperationError::from),
                Err(failure) => Err(OperationError::from(failure)),
            };
            match sent {
                Ok(()) => json(StatusCode::OK, &Sent { id }),
                Err(failure) => refusal(failure),
            }
        }
        Operation::CloseConnection { id } => {
            let listed = active.connections.listed();
            let found = listed.iter().find_map(|entry| {
                let connection = entry.connection()?;
                (core.connection_name(connection) == id).then_some(connection)
            });
            match found {
                Some(connection) if active.connections.close(connection, CLOSE_PATIENCE).await => {
                    json(StatusCode::OK, &ConnectionClosed { closed: true })
                }
                _ => error(StatusCode::NOT_FOUND, format!("no such connection: {id}")),
            }
        }
        Operation::RemoveSubscription { client_id, name } => {
            let key = store::SubscriptionKey { client_id: client_id.into(), name: name.into() };
            let removed = match core.remove_durable(&key) {
                Ok(completion) => completion.await.map_err(OperationError::from),
                Err(failure) => Err(OperationError::from(failure)),
            };
            match removed {
                Ok(()) => json(StatusCode::OK, &SubscriptionRemoved { removed: true }),
                Err(failure) => refusal(failure),
            }
        }
        Operation::Browse { .. }
        | Operation::Message { .. }
        | Operation::Token
        | Operation::OpenApi
        | Operation::Consumers
        | Operation::Producers
        | Operation::Connections
        | Operation::Subscriptions => {
            error(StatusCode::METHOD_NOT_ALLOWED, format!("{method} does not change this resource"))
        }
    }
}

/// Every listed connection, oldest first, with its producers counted from the core's.
fn connection_views(active: &ActiveBroker) -> Vec<ConnectionView> {
    let core = &active.core;
    let producers = core.producer_listing();
    active
        .connections
        .listed()
        .into_iter()
        .filter_map(|entry| {
            let details = entry.details();
            // Not yet opened by its protocol (a moment after the accept): nothing to show.
            let connection = details.connection?;
            Some(ConnectionView {
                id: core.connection_name(connection),
                protocol: entry.protocol().as_str().to_owned(),
                remote: entry.remote().to_string(),
                client_id: details.client_id.as_deref().map(str::to_owned),
                user: details.user.as_deref().map(str::to_owned),
                connected_since_ms: entry.since_ms(),
                consumers: entry.consumers(),
                producers: producers.iter().filter(|p| p.connection == connection).count() as u64,
            })
        })
        .collect()
}

/// The request's JSON body, or the 400 that says why not (boxed: an answer is large).
fn parse_body<T: serde::de::DeserializeOwned>(
    body: &Bytes,
) -> Result<T, Box<Response<Full<Bytes>>>> {
    serde_json::from_slice(body).map_err(|failure| {
        let message = format!("the request body is not what it should be: {failure}");
        Box::new(error(StatusCode::BAD_REQUEST, message))
    })
}

/// The status and message of a refused or failed operation.
fn refusal(failure: OperationError) -> Response<Full<Bytes>> {
    let status = match &failure {
        OperationError::NoSuchDestination { .. } | OperationError::NoSuchMessage { .. } => {
            StatusCode::NOT_FOUND
        }
        OperationError::ConsumersAttached { consumers, .. } => {
            let mut response = error(
                StatusCode::CONFLICT,
                format!(
                    "{failure} ({consumers} consumer(s) attached; add ?force=true to close them)"
                ),
            );
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            return response;
        }
        OperationError::Advisory(_)
        | OperationError::Selector(_)
        | OperationError::SameQueue(_) => StatusCode::BAD_REQUEST,
        OperationError::Core(core) => match core {
            crate::core::CoreError::NoSpace(_)
            | crate::core::CoreError::TooManyDestinations { .. } => StatusCode::SERVICE_UNAVAILABLE,
            crate::core::CoreError::NoSuchDurable { .. } => StatusCode::NOT_FOUND,
            crate::core::CoreError::DurableInUse { .. } => StatusCode::CONFLICT,
            crate::core::CoreError::WildcardSend(_)
            | crate::core::CoreError::InvalidSchedule(_)
            | crate::core::CoreError::NotTemporary(_) => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        },
        OperationError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(status, failure.to_string())
}

/// The message a [`SendRequest`] describes, with a new id.
fn message_of(
    state: &AdminState,
    active: &ActiveBroker,
    destination: Destination,
    request: SendRequest,
) -> Result<Message, String> {
    let core = &active.core;
    let sequence = state.operations.sent.fetch_add(1, Ordering::Relaxed) + 1;
    // ActiveMQ's shape (`ID:<connection>:<session>:<producer>:<sequence>`), unique to this
    // process.
    let message_id =
        format!("ID:{}-admin-{:x}:1:1:1:{sequence}", state.name, state.operations.instance);
    let mut message = Message::new(core.next_message_id(), message_id, destination);
    let now = crate::core::queue::now_millis();
    message.headers.timestamp = now;
    if let Some(priority) = request.priority {
        if priority > 9 {
            return Err(format!("`priority` is 0 to 9, not {priority}"));
        }
        message.headers.priority = priority;
    }
    if let Some(ttl) = request.ttl_ms.filter(|ttl| *ttl > 0) {
        message.headers.expiration = now.saturating_add(i64::try_from(ttl).unwrap_or(i64::MAX));
    }
    message.headers.delivery_mode =
        if request.persistent { DeliveryMode::Persistent } else { DeliveryMode::NonPersistent };
    message.headers.correlation_id = request.correlation_id.map(Arc::from);
    message.headers.message_type = request.message_type.map(Arc::from);
    message.headers.reply_to =
        request.reply_to.filter(|reply_to| !reply_to.is_empty()).map(|reply_to| {
            Destination::parse_qualified(&reply_to).unwrap_or(Destination::queue(reply_to))
        });
    for (name, value) in request.properties {
        let value = match value {
            serde_json::Value::String(text) => PropertyValue::String(text.into()),
            serde_json::Value::Bool(flag) => PropertyValue::Bool(flag),
            serde_json::Value::Number(number) => match number.as_i64() {
                Some(long) => PropertyValue::Long(long),
                None => PropertyValue::Double(number.as_f64().unwrap_or(f64::NAN)),
            },
            other => {
                return Err(format!(
                    "property `{name}` is {other}: a property is a string, a number or a boolean"
                ))
            }
        };
        message.properties.insert(name.into(), value);
    }
    match request.body_type.as_str() {
        "text" => {
            message.body_kind = BodyKind::Text;
            message.body = Bytes::from(request.body.into_bytes());
        }
        "bytes" => {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(request.body.trim())
                .map_err(|failure| format!("`body` is not base64 ({failure})"))?;
            message.body_kind = BodyKind::Bytes;
            message.body = Bytes::from(decoded);
        }
        other => return Err(format!("`body_type` is text or bytes, not `{other}`")),
    }
    Ok(message)
}

/// A queue or topic as the answers name it (temporary ones by their kind too).
fn destination_ref(destination: &Destination) -> DestinationRef {
    let kind = if destination.kind.is_queue() { "queue" } else { "topic" };
    DestinationRef { kind: kind.to_owned(), name: destination.name.to_string() }
}

/// A message as the endpoint shows it, with a body preview of at most `preview` bytes.
pub(super) fn message_view(found: &InspectedMessage, preview: usize) -> MessageView {
    let message = &found.message;
    let headers = &message.headers;
    let positive = |value: i64| u64::try_from(value).ok().filter(|value| *value > 0);
    let kind = if message.destination.kind.is_queue() { "queue" } else { "topic" };
    let (body_type, body_preview, body_truncated) = body_preview(message, preview);
    MessageView {
        id: message.message_id.to_string(),
        destination: DestinationRef {
            kind: kind.to_owned(),
            name: message.destination.name.to_string(),
        },
        timestamp_ms: positive(headers.timestamp),
        expiration_ms: positive(headers.expiration),
        priority: message.priority(),
        persistent: message.is_persistent(),
        redelivered: found.delivery_count > 0,
        delivery_count: found.delivery_count,
        correlation_id: headers.correlation_id.as_deref().map(str::to_owned),
        reply_to: headers.reply_to.as_ref().map(Destination::to_string),
        message_type: headers.message_type.as_deref().map(str::to_owned),
        group_id: headers.group_id.as_deref().map(str::to_owned),
        properties: message
            .properties
            .iter()
            .map(|(name, value)| (name.to_string(), property_json(value)))
            .collect(),
        body_type: body_type.to_owned(),
        body_size: message.body.len() as u64,
        body_preview,
        body_truncated,
    }
}

fn property_json(value: &PropertyValue) -> serde_json::Value {
    use serde_json::Value;
    match value {
        PropertyValue::Bool(flag) => Value::Bool(*flag),
        PropertyValue::Byte(n) => Value::from(*n),
        PropertyValue::Short(n) => Value::from(*n),
        PropertyValue::Int(n) => Value::from(*n),
        PropertyValue::Long(n) => Value::from(*n),
        PropertyValue::Float(n) => Value::from(f64::from(*n)),
        PropertyValue::Double(n) => Value::from(*n),
        PropertyValue::String(text) => Value::String(text.to_string()),
        PropertyValue::Bytes(bytes) => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
        PropertyValue::Char(c) => Value::String(c.to_string()),
        PropertyValue::Null => Value::Null,
    }
}

/// The body's type, its preview and whether the preview is cut.
fn body_preview(message: &Message, preview: usize) -> (&'static str, Option<String>, bool) {
    let body = &message.body;
    let cut = body.len() > preview;
    let base64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    match message.body_kind {
        BodyKind::None => ("none", None, false),
        BodyKind::Text => {
            let text = String::from_utf8_lossy(body);
            let mut end = text.len().min(preview);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            ("text", Some(text[..end].to_owned()), end < text.len())
        }
        BodyKind::Bytes => ("bytes", Some(base64(&body[..body.len().min(preview)])), cut),
        BodyKind::Object => ("object", Some(base64(&body[..body.len().min(preview)])), cut),
        BodyKind::Stream => ("stream", Some(base64(&body[..body.len().min(preview)])), cut),
        BodyKind::Map => match map_json(message) {
            Some(map) => {
                let text = map.to_string();
                match text.len() > preview {
                    // A cut JSON object would not parse: the first bytes, as for bytes.
                    true => ("map", Some(base64(&body[..body.len().min(preview)])), true),
                    false => ("map", Some(text), false),
                }
            }
            None => ("map", Some(base64(&body[..body.len().min(preview)])), cut),
        },
    }
}

/// A map body as a JSON object, from its producer's encoding (OpenWire's or AMQP's).
fn map_json(message: &Message) -> Option<serde_json::Value> {
    use protocol::openwire::{MapLimits, PrimitiveMap};
    let map = match &*message.body_encoding {
        crate::transcode::AMQP_ENCODING => {
            crate::transcode::amqp_map_to_openwire(&message.body).ok()?
        }
        _ => PrimitiveMap::decode(&message.body, &MapLimits::MESSAGE).ok()?,
    };
    Some(primitive_map_json(&map))
}

fn primitive_map_json(map: &protocol::openwire::PrimitiveMap) -> serde_json::Value {
    serde_json::Value::Object(
        map.iter().map(|(name, value)| (name.to_owned(), primitive_json(value))).collect(),
    )
}

fn primitive_json(value: &protocol::openwire::PrimitiveValue) -> serde_json::Value {
    use protocol::openwire::PrimitiveValue as P;
    use serde_json::Value;
    match value {
        P::Null => Value::Null,
        P::Boolean(flag) => Value::Bool(*flag),
        P::Byte(n) => Value::from(*n),
        P::Char(c) => Value::String(String::from_utf16_lossy(&[*c])),
        P::Short(n) => Value::from(*n),
        P::Int(n) => Value::from(*n),
        P::Long(n) => Value::from(*n),
        P::Float(n) => Value::from(f64::from(*n)),
        P::Double(n) => Value::from(*n),
        P::String(text) => Value::String(text.clone()),
        P::Bytes(bytes) => Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
        P::Map(map) => primitive_map_json(map),
        P::List(values) => Value::Array(values.iter().map(primitive_json).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(method: Method, path: &str) -> Option<Result<Operation, &'static str>> {
        Operation::of(&method, path)
    }

    #[test]
    fn operations_are_named_by_method_and_path() {
        let queue = |name: &str| name.to_owned();
        assert_eq!(of(Method::GET, "/api/token"), Some(Ok(Operation::Token)));
        assert_eq!(of(Method::POST, "/api/token"), Some(Err("GET, HEAD")));
        assert_eq!(
            of(Method::POST, "/api/destinations/queue/orders%20EU/purge"),
            Some(Ok(Operation::Purge { queue: queue("orders EU") }))
        );
        assert_eq!(of(Method::GET, "/api/destinations/queue/q/purge"), Some(Err("POST")));
        assert_eq!(
            of(Method::GET, "/api/destinations/queue/q/messages"),
            Some(Ok(Operation::Browse { queue: queue("q") }))
        );
        assert_eq!(
            of(Method::DELETE, "/api/destinations/queue/q/messages/ID%3Aa%3A1"),
            Some(Ok(Operation::Message { queue: queue("q"), id: "ID:a:1".to_owned() }))
        );
        assert_eq!(
            of(Method::POST, "/api/destinations/topic/t/messages"),
            Some(Ok(Operation::Send { kind: StatsKind::Topic, name: "t".to_owned() }))
        );
        assert_eq!(
            of(Method::DELETE, "/api/destinations/topic/a%2Fb"),
            Some(Ok(Operation::Delete { kind: StatsKind::Topic, name: "a/b".to_owned() }))
        );
        assert_eq!(of(Method::GET, "/api/connections"), Some(Ok(Operation::Connections)));
        assert_eq!(of(Method::GET, "/api/producers/"), Some(Ok(Operation::Producers)));
        assert_eq!(
            of(Method::DELETE, "/api/connections/ID%3Ahost-1-2%3A1"),
            Some(Ok(Operation::CloseConnection { id: "ID:host-1-2:1".to_owned() }))
        );
        assert_eq!(of(Method::GET, "/api/connections/ID%3Ax"), Some(Err("DELETE")));
        assert_eq!(of(Method::DELETE, "/api/connections/"), Some(Err("GET, HEAD")));
        // The reads stay `mod.rs`'s; topics have no purge.
        assert_eq!(of(Method::GET, "/api/destinations/queue/q"), None);
        assert_eq!(of(Method::GET, "/api/destinations/topic/a/b"), None);
        assert_eq!(of(Method::POST, "/api/destinations/topic/t/purge"), None);
        assert_eq!(of(Method::GET, "/api/broker"), None);
    }

    #[test]
    fn the_openapi_document_parses_and_names_every_operation() {
        let document: serde_json::Value = serde_json::from_str(OPENAPI).expect("valid JSON");
        assert_eq!(document["openapi"].as_str().map(|v| &v[..2]), Some("3."));
        let paths = document["paths"].as_object().expect("paths");
        for path in [
            "/api/status",
            "/api/broker",
            "/api/destinations",
            "/api/destinations/{kind}/{name}",
            "/metrics",
            "/api/token",
            "/api/openapi.json",
            "/api/destinations/queue/{name}/messages",
            "/api/destinations/queue/{name}/messages/{id}",
            "/api/destinations/{kind}/{name}/messages",
            "/api/destinations/queue/{name}/purge",
            "/api/destinations/queue/{name}/move",
            "/api/destinations/queue/{name}/retry",
            "/api/consumers",
            "/api/producers",
            "/api/connections",
            "/api/connections/{id}",
            "/api/subscriptions",
            "/api/subscriptions/{client_id}/{subscription_name}",
        ] {
            assert!(paths.contains_key(path), "{path} is not in openapi.json");
        }
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
