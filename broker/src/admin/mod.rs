//! The admin endpoint: a small HTTP/1 server with the broker's statistics, read by
//! `ferromq dstat`, dashboards and Prometheus.
//!
//! | request | answer |
//! |---|---|
//! | `GET /api/broker` | [`BrokerStats`] as JSON |
//! | `GET /api/destinations` | every [`DestinationStats`] as a JSON array |
//! | `GET /api/destinations/{queue\|topic}/{name}` | one [`DestinationStats`], or 404 |
//! | `GET /metrics` | the same numbers in Prometheus' text format (`metrics.rs`) |
//!
//! Anything else is a JSON [`ErrorBody`]: 404 for an unknown path, 405 (with `Allow`) for a
//! known path with another method.
//!
//! Layout: `mod.rs` binds and serves (one task per HTTP connection, all ended by the broker's
//! shutdown) and routes a request to a [`Route`]; `model.rs` holds the JSON types (shared with
//! `ferromq dstat`, which deserializes them); `metrics.rs` writes the Prometheus text;
//! `client.rs` is the tiny HTTP GET client `ferromq dstat` and the tests use.
//!
//! The operations (browse, send, purge, delete, move, retry; the lists of connections,
//! consumers, producers and durable subscriptions, and a connection's close:
//! `operations.rs`, described with every route in `openapi.json`, served at
//! `/api/openapi.json`) are named by method and path
//! before the reads' [`Route`]; their state-changing requests must pass a same-origin check
//! and carry the broker's token. With `[authentication]` enabled, every route but
//! `/api/status` needs HTTP Basic credentials of a user in `[admin] groups`, checked by the
//! connectors' `Authenticator` (`AdminAccess`, `refuse_unauthorized`). With `[admin] tls`, TLS wraps the accepted stream before
//! [`serve_connection`] (which takes any byte stream). A standby's endpoint serves
//! `/api/status` while it waits for the data directory's lock or the PostgreSQL lease
//! (`AdminState`).

mod admission;
mod client;
mod console;
mod metrics;
mod model;
mod operations;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use client::{AdminClient, AdminClientError, HttpAnswer};
pub use model::{
    AdminToken, BrokerRole, BrokerStats, BrokerStatus, ConnectionClosed, ConnectionView,
    ConsumerView, Deleted, DestinationCounts, DestinationRef, DurableSubscriptionView, ErrorBody,
    MessagePage, MessageView, MoveRequest, Moved, ProducerView, Removed, RetryOutcome,
    RetryRequest, SendRequest, Sent, StoreStats, SubscriptionRemoved, TempStats,
};

use crate::core::Core;
pub use crate::core::{DestinationStats, StatsKind, SubscriptionStats};
use crate::error::BrokerError;
use crate::transport::ConnectionCounts;
pub use crate::transport::ConnectionStats;

/// What the endpoint reads: the broker's core and connection counters.
pub(crate) struct AdminState {
    pub name: String,
    /// The broker's role, since when (milliseconds since the Unix epoch), and while waiting
    /// what for.
    role: parking_lot::Mutex<(BrokerRole, u64, Option<String>)>,
    /// Set once the broker serves: before, only `/api/status` answers (a standby's endpoint
    /// runs while it waits for the lock).
    active: std::sync::OnceLock<ActiveBroker>,
    /// Who may read more than the status; `None`: anyone (authentication is off).
    access: Option<AdminAccess>,
    /// The operations' token and the messages they send (`operations.rs`).
    operations: operations::Operations,
}

/// With `[authentication]` enabled: the users of `[admin] groups` may read the endpoint,
/// with HTTP Basic credentials checked (and failures rate-limited per address) as the
/// connectors check theirs.
pub(crate) struct AdminAccess {
    pub authenticator: Arc<crate::security::Authenticator>,
    pub groups: Vec<String>,
}

/// What the statistics are read from, once the broker serves.
pub(crate) struct ActiveBroker {
    pub core: Arc<Core>,
    pub connections: Arc<ConnectionCounts>,
    pub started: Instant,
}

impl AdminState {
    /// The endpoint's state of a broker in `role` from now on.
    pub fn new(name: &str, role: BrokerRole, access: Option<AdminAccess>) -> AdminState {
        AdminState {
            name: name.to_owned(),
            role: parking_lot::Mutex::new((
                role,
                unix_millis(),
                (role == BrokerRole::Waiting).then(|| model::DATA_DIR_LOCK.to_owned()),
            )),
            active: std::sync::OnceLock::new(),
            access,
            operations: operations::Operations::new(),
        }
    }

    /// The broker took `role` now.
    pub fn set_role(&self, role: BrokerRole) {
        *self.role.lock() = (role, unix_millis(), None);
    }

    /// The broker waits (as a standby) for `what`; since when it first waited, if it already
    /// did.
    pub fn set_waiting(&self, what: String) {
        let mut role = self.role.lock();
        let since = if role.0 == BrokerRole::Waiting { role.1 } else { unix_millis() };
        *role = (BrokerRole::Waiting, since, Some(what));
    }

    /// The broker serves: statistics come from `active` from now on.
    pub fn activate(&self, active: ActiveBroker) {
        let _ = self.active.set(active);
        self.set_role(BrokerRole::Active);
    }

    fn status(&self) -> BrokerStatus {
        let (role, since_unix_ms, waiting_for) = self.role.lock().clone();
        BrokerStatus { name: self.name.clone(), role, since_unix_ms, waiting_for }
    }
}

fn unix_millis() -> u64 {
    u64::try_from(crate::core::queue::now_millis()).unwrap_or(0)
}

impl ActiveBroker {
    /// The broker-wide numbers, from every destination's.
    async fn broker_stats(&self, name: &str, destinations: &[DestinationStats]) -> BrokerStats {
        let count = |kind| destinations.iter().filter(|d| d.kind == kind).count() as u64;
        // Each queue and each topic subscription is a queue task with its own overhead.
        let queue_tasks: u64 = destinations
            .iter()
            .map(|d| match d.kind {
                StatsKind::Queue => 1,
                StatsKind::Topic => d.subscriptions.len() as u64,
            })
            .sum();
        let store = self.core.store();
        let usage = store.usage();
        BrokerStats {
            name: name.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            uptime_seconds: self.started.elapsed().as_secs(),
            connections: self.connections.snapshot(),
            destinations: DestinationCounts {
                queues: count(StatsKind::Queue),
                topics: count(StatsKind::Topic),
            },
            memory_bytes: destinations.iter().map(|d| d.memory_bytes).sum::<u64>()
                + queue_tasks * crate::core::statistics::QUEUE_OVERHEAD_BYTES,
            memory_limit_bytes: Some(
                u64::try_from(self.core.settings().memory.broker_limit()).unwrap_or(u64::MAX),
            ),
            store: StoreStats {
                kind: store.name().to_owned(),
                used_bytes: usage.used_bytes,
                limit_bytes: usage.limit_bytes,
            },
            temp: self.core.settings().temp_store.as_ref().map(|temp| {
                let usage = temp.usage();
                TempStats {
                    used_bytes: usage.used_bytes,
                    limit_bytes: usage.limit_bytes,
                    full: self.core.temp_store_full(),
                }
            }),
        }
    }
}

/// How long a client may take to send a request's headers (from the connection's start or
/// the previous answer): a scraper sends them at once, and a connection that dawdles holds
/// one of the endpoint's few places (hyper's default is 30 s).
const HEADER_READ_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long an HTTPS client may take over its handshake.
const HANDSHAKE_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A bound, not yet serving, admin endpoint.
pub(crate) struct AdminServer {
    listener: TcpListener,
    pub local_addr: SocketAddr,
    /// HTTPS (`[admin] tls`): the handshake each connection starts with.
    tls: Option<tokio_rustls::TlsAcceptor>,
}

/// Binds `[admin] bind`; a taken port is an error naming both, and with `[admin] tls` a
/// certificate that cannot be used is one too.
pub(crate) async fn bind(config: &conf::Config) -> Result<AdminServer, BrokerError> {
    let bind = config.admin.bind.as_str();
    let tls = match config.admin.tls {
        true => Some(tokio_rustls::TlsAcceptor::from(
            crate::transport::tls_server_config(&config.tls, None).map_err(|source| {
                BrokerError::Tls { uri: format!("the admin endpoint ({bind})"), source }
            })?,
        )),
        false => None,
    };
    let error = |source| BrokerError::AdminBind { address: bind.to_owned(), source };
    let listener = TcpListener::bind(bind).await.map_err(error)?;
    let local_addr = listener.local_addr().map_err(error)?;
    Ok(AdminServer { listener, local_addr, tls })
}

impl AdminServer {
    /// Serves until `shutdown`, each HTTP connection a task on `tracker`.
    pub async fn run(
        self,
        state: Arc<AdminState>,
        shutdown: CancellationToken,
        tracker: TaskTracker,
    ) {
        tracing::info!(address = %self.local_addr, "admin endpoint listening");
        let admission = admission::Admission::default();
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => break,
                accepted = self.listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, peer)) => {
                    let permit = match admission.admit(peer.ip()) {
                        Ok(permit) => permit,
                        Err(refused) => {
                            tracing::debug!(%peer, ?refused, "admin endpoint: too many connections; closed");
                            continue;
                        }
                    };
                    let state = state.clone();
                    let shutdown = shutdown.clone();
                    let tls = self.tls.clone();
                    tracker.spawn(async move {
                        let serve = async move {
                            match tls {
                                None => serve_connection(stream, state, peer).await,
                                Some(acceptor) => {
                                    let handshake = acceptor.accept(stream);
                                    match tokio::time::timeout(HANDSHAKE_LIMIT, handshake).await {
                                        Ok(Ok(stream)) => serve_connection(stream, state, peer).await,
                                        Ok(Err(error)) => tracing::debug!(%peer, %error, "admin endpoint: TLS handshake failed"),
                                        Err(_) => tracing::debug!(%peer, "admin endpoint: TLS handshake timed out"),
                                    }
                                }
                            }
                        };
                        tokio::select! {
                            _ = shutdown.cancelled() => {}
                            () = serve => {}
                        }
                        drop(permit);
                    });
                }
                Err(error) => {
                    // Out of file descriptors, say: the broker goes on; try again shortly.
                    tracing::warn!(%error, "admin endpoint: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    }
}

/// Serves HTTP/1 requests on one connection until the client closes it; a client that takes
/// more than [`HEADER_READ_LIMIT`] to send a request's headers is disconnected.
pub(crate) async fn serve_connection<S>(stream: S, state: Arc<AdminState>, peer: SocketAddr)
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let state = state.clone();
        async move {
            let path = request.uri().path();
            // The operations (`operations.rs`), all behind the authentication.
            if operations::Operation::of(request.method(), path).is_some() {
                let response = match refuse_unauthorized(&state, &request, peer).await {
                    Some(refused) => refused,
                    None => operations::answer(&state, request).await,
                };
                return Ok::<_, Infallible>(response);
            }
            let refused = match Route::of(path) {
                Some(Route::Status) | None => None,
                Some(_) => refuse_unauthorized(&state, &request, peer).await,
            };
            let response = match refused {
                Some(refused) => refused,
                None => answer(&state, request.method(), path).await,
            };
            Ok::<_, Infallible>(response)
        }
    });
    if let Err(error) = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_LIMIT)
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(%error, "admin endpoint: connection ended with an error");
    }
}

/// What a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Route {
    Status,
    Broker,
    Destinations,
    Destination { kind: StatsKind, name: String },
    Metrics,
    Console(&'static console::Asset),
}

impl Route {
    /// The route a path names, if any (whatever the method).
    fn of(path: &str) -> Option<Route> {
        // The web console (`console/`): the page at `/`, its scripts and styles.
        if let Some(asset) = console::asset(path) {
            return Some(Route::Console(asset));
        }
        match path.trim_end_matches('/') {
            "/api/broker" => Some(Route::Broker),
            "/api/status" => Some(Route::Status),
            "/api/destinations" => Some(Route::Destinations),
            "/metrics" => Some(Route::Metrics),
            other => {
                let rest = other.strip_prefix("/api/destinations/")?;
                let (kind, name) = rest.split_once('/')?;
                let kind = StatsKind::parse(kind)?;
                let name = percent_decode(name)?;
                (!name.is_empty()).then_some(Route::Destination { kind, name })
            }
        }
    }

    /// The methods the route answers (only reads, for now).
    fn allows(&self, method: &Method) -> bool {
        method == Method::GET || method == Method::HEAD
    }
}

/// The response to `method path`.
/// With authentication on, the refusal of a request without the credentials of a user in
/// `[admin] groups`: 401 (with the challenge a browser or Prometheus answers) for missing or
/// wrong credentials, 403 for a user outside the groups. `None`: go ahead.
async fn refuse_unauthorized(
    state: &AdminState,
    request: &Request<Incoming>,
    peer: SocketAddr,
) -> Option<Response<Full<Bytes>>> {
    let access = state.access.as_ref()?;
    let challenge = |message: String| {
        let mut response = error(StatusCode::UNAUTHORIZED, message);
        response
            .headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"ferromq\""));
        response
    };
    let Some(header) = request.headers().get(AUTHORIZATION) else {
        return Some(challenge("credentials required (HTTP Basic)".to_owned()));
    };
    let Some((user, password)) = basic_credentials(header) else {
        return Some(challenge("the Authorization header is not HTTP Basic".to_owned()));
    };
    let subject = match access
        .authenticator
        .authenticate(&peer.to_string(), Some(&user), Some(&password))
        .await
    {
        Ok(subject) => subject,
        Err(refused) => return Some(challenge(refused.to_string())),
    };
    let admitted = subject.groups.iter().any(|group| access.groups.iter().any(|g| **g == **group));
    match admitted {
        true => None,
        false => {
            tracing::warn!(%peer, user = %subject.user, "admin endpoint: user not in [admin] groups");
            Some(error(
                StatusCode::FORBIDDEN,
                format!(
                    "user {} is not in a group allowed to read the admin endpoint",
                    subject.user
                ),
            ))
        }
    }
}

/// The user and password of an `Authorization: Basic base64(user:password)` header. The
/// scheme's name is case-insensitive (RFC 7235, 2.1): `basic` and `BASIC` are Basic too.
fn basic_credentials(header: &HeaderValue) -> Option<(String, String)> {
    use base64::Engine as _;
    let (scheme, encoded) = header.to_str().ok()?.trim_start().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let encoded = encoded.trim();
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

async fn answer(state: &AdminState, method: &Method, path: &str) -> Response<Full<Bytes>> {
    let Some(route) = Route::of(path) else {
        return error(StatusCode::NOT_FOUND, format!("no such resource: {path}"));
    };
    if !route.allows(method) {
        let mut response =
            error(StatusCode::METHOD_NOT_ALLOWED, format!("{method} is not allowed on {path}"));
        let allowed = match route {
            Route::Destination { .. } => "GET, HEAD, DELETE",
            _ => "GET, HEAD",
        };
        response.headers_mut().insert(ALLOW, HeaderValue::from_static(allowed));
        return response;
    }
    if route == Route::Status {
        return json(StatusCode::OK, &state.status());
    }
    // The console loads on a standby too: it shows what /api/status says.
    if let Route::Console(asset) = route {
        return console::serve(asset);
    }
    let Some(active) = state.active.get() else {
        let status = state.status();
        let message =
            format!("{} {} since {} (Unix ms)", status.name, status.doing(), status.since_unix_ms);
        return error(StatusCode::SERVICE_UNAVAILABLE, message);
    };
    match route {
        Route::Status => json(StatusCode::OK, &state.status()),
        Route::Broker => {
            let destinations = active.core.destination_stats().await;
            json(StatusCode::OK, &active.broker_stats(&state.name, &destinations).await)
        }
        Route::Destinations => json(StatusCode::OK, &active.core.destination_stats().await),
        Route::Destination { kind, name } => {
            match active.core.destination_stats_of(kind, &name).await {
                Some(stats) => json(StatusCode::OK, &stats),
                None => error(StatusCode::NOT_FOUND, format!("no such {}: {name}", kind.as_str())),
            }
        }
        Route::Metrics => {
            let destinations = active.core.destination_stats().await;
            let broker = active.broker_stats(&state.name, &destinations).await;
            let text = metrics::render(&broker, &destinations);
            let mut response = Response::new(Full::new(Bytes::from(text)));
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        }
        Route::Console(asset) => console::serve(asset),
    }
}

fn json<T: serde::Serialize>(status: StatusCode, value: &T) -> Response<Full<Bytes>> {
    match serde_json::to_vec_pretty(value) {
        Ok(mut body) => {
            body.push(b'\n');
            let mut response = Response::new(Full::new(Bytes::from(body)));
            *response.status_mut() = status;
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
        Err(failure) => {
            error(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot encode the answer: {failure}"))
        }
    }
}

fn error(status: StatusCode, message: String) -> Response<Full<Bytes>> {
    let body = ErrorBody { status: status.as_u16(), error: message };
    let text = serde_json::to_vec(&body).unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// Decodes `%XX` escapes (a destination name in a path); `None` if one is malformed or the
/// result is not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = text.get(index + 1..index + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            out.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_name_destinations_by_kind_and_decoded_name() {
        assert_eq!(Route::of("/api/broker"), Some(Route::Broker));
        assert_eq!(Route::of("/api/destinations/"), Some(Route::Destinations));
        assert_eq!(
            Route::of("/api/destinations/queue/orders%20EU"),
            Some(Route::Destination { kind: StatsKind::Queue, name: "orders EU".to_owned() })
        );
        assert_eq!(
            Route::of("/api/destinations/topic/a/b"),
            Some(Route::Destination { kind: StatsKind::Topic, name: "a/b".to_owned() })
        );
        assert_eq!(Route::of("/api/destinations/table/x"), None);
        assert_eq!(Route::of("/api/destinations/queue/"), None);
        assert_eq!(Route::of("/api/destinations/queue/%zz"), None);
        assert!(matches!(Route::of("/"), Some(Route::Console(_))));
    }

    #[test]
    fn the_basic_scheme_is_read_in_any_case() {
        // "root:secret"
        for header in
            ["Basic cm9vdDpzZWNyZXQ=", "basic cm9vdDpzZWNyZXQ=", "BASIC  cm9vdDpzZWNyZXQ="]
        {
            let value = HeaderValue::from_static(header);
            let expected = Some(("root".to_owned(), "secret".to_owned()));
            assert_eq!(basic_credentials(&value), expected, "{header}");
        }
        for header in ["Bearer cm9vdDpzZWNyZXQ=", "Basiccm9vdDpzZWNyZXQ=", "basic", "Basic !!"] {
            assert_eq!(basic_credentials(&HeaderValue::from_static(header)), None, "{header}");
        }
    }
}
