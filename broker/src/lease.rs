//! The broker's side of the PostgreSQL lease (issue 12, active/standby on one database):
//! take it before the store opens, keep it renewed while serving, and fence: stop serving
//! on its own before the lease can expire on the database when it cannot renew.
//!
//! The [`store_jdbc::Lease`] lives on a thread of its own (`ferromq-lease`), never on the
//! runtime: its synchronous client blocks, and its own runtime panics when dropped on a
//! runtime thread. That thread first tries to acquire (every `lock_retry_ms` for a standby),
//! reporting each outcome to [`take`], then renews every `lease_renew_ms`.
//!
//! Fencing does not depend on a renewal returning: a second thread (`ferromq-lease-watch`)
//! looks at the monotonic instant at which the last successful acquire or renewal was
//! *sent* (the database's expiry is at least a lease after it); once a lease minus the
//! safety margin (a quarter of a lease) has passed without a newer success, it cancels the
//! broker's shutdown token (listeners stop accepting, every connection closes) and the
//! [`LeaseKeeper::lost`] token, which the `ferromq` binary turns into a non-zero exit. A
//! renewal that finds the row taken by another broker fences at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use store_jdbc::{Lease, LeaseError, LeaseOptions};
use tokio_util::sync::CancellationToken;

use crate::admin::AdminState;
use crate::error::BrokerError;

/// What [`take`] needs.
pub(crate) struct LeaseSettings {
    pub url: String,
    pub options: LeaseOptions,
    pub renew_every: Duration,
    /// A standby waits (trying every `retry`) while another broker holds the lease.
    pub standby: bool,
    pub retry: Duration,
}

/// An acquire attempt's outcome, from the lease thread to [`take`].
enum Attempt {
    Acquired,
    Held { holder: String, error: String },
    Failed(LeaseError),
}

/// The lease held and kept renewed; dropping it stops the renewals (the lease then expires
/// on its own), [`LeaseKeeper::release`] gives it up.
pub(crate) struct LeaseKeeper {
    shared: Arc<Shared>,
    /// Dropped to stop the lease thread (it waits on the other end between renewals).
    stop: Option<mpsc::Sender<Stop>>,
    thread: Option<std::thread::JoinHandle<()>>,
    target: String,
}

enum Stop {
    /// Give the lease up, then answer.
    Release(tokio::sync::oneshot::Sender<()>),
}

/// What the lease thread and the watchdog share.
struct Shared {
    /// When the last successful acquire or renewal was sent (see the module documentation).
    last_success_sent: parking_lot::Mutex<Instant>,
    /// Cancelled when the broker lost its lease.
    lost: CancellationToken,
    /// Why, for the error the broker reports.
    reason: parking_lot::Mutex<Option<String>>,
    /// The broker's shutdown token: cancelled at once when fencing.
    shutdown: CancellationToken,
    /// Set when the broker stops on purpose: the watchdog stops watching.
    stopping: AtomicBool,
    lease: Duration,
    target: String,
}

impl Shared {
    /// Stops the broker serving, once.
    fn fence(&self, reason: String) {
        let mut slot = self.reason.lock();
        if slot.is_some() || self.stopping.load(Ordering::SeqCst) {
            return;
        }
        tracing::error!(
            target = %self.target,
            "lost the PostgreSQL lease: {reason}; stopped serving (closing every connection) so \
             that a standby can take over"
        );
        *slot = Some(reason);
        drop(slot);
        self.shutdown.cancel();
        self.lost.cancel();
    }
}

/// Takes the lease on `settings.url`: at once, or (a standby) waiting while another broker
/// holds a valid one, saying so in `admin`. Without standby, a held lease is
/// [`BrokerError::LeaseHeld`].
pub(crate) async fn take(
    settings: LeaseSettings,
    admin: &AdminState,
    shutdown: &CancellationToken,
) -> Result<LeaseKeeper, BrokerError> {
    let mut lease = Lease::new(&settings.url, settings.options.clone())
        .map_err(|source| BrokerError::Lease { source })?;
    let target = lease.target();
    if settings.standby {
        admin.set_waiting("the PostgreSQL lease".to_owned());
    }
    let (attempts_tx, mut attempts) = tokio::sync::mpsc::unbounded_channel();
    let (stop_tx, stop_rx) = mpsc::channel();
    let shared = Arc::new(Shared {
        last_success_sent: parking_lot::Mutex::new(Instant::now()),
        lost: CancellationToken::new(),
        reason: parking_lot::Mutex::new(None),
        shutdown: shutdown.clone(),
        stopping: AtomicBool::new(false),
        lease: settings.options.duration,
        target: target.clone(),
    });
    let thread_shared = shared.clone();
    let (renew_every, retry, standby) = (settings.renew_every, settings.retry, settings.standby);
    let thread = std::thread::Builder::new()
        .name("ferromq-lease".to_owned())
        .spawn(move || {
            // Phase one: acquire, reporting each try; the receiver gone means `take` gave up.
            loop {
                let sent = Instant::now();
                let attempt = match lease.try_acquire() {
                    Ok(()) => {
                        *thread_shared.last_success_sent.lock() = sent;
                        Attempt::Acquired
                    }
                    Err(LeaseError::Held { holder, expires_in_ms, target }) => {
                        let error =
                            LeaseError::Held { holder: holder.clone(), expires_in_ms, target };
                        Attempt::Held { holder, error: error.to_string() }
                    }
                    Err(error) => Attempt::Failed(error),
                };
                let acquired = matches!(attempt, Attempt::Acquired);
                if attempts_tx.send(attempt).is_err() || (!acquired && !standby) {
                    return;
                }
                if acquired {
                    break;
                }
                match stop_rx.recv_timeout(retry) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
            }
            renew(&mut lease, &thread_shared, renew_every, &stop_rx);
        })
        .map_err(|source| BrokerError::Lease {
            source: LeaseError::Database(store_jdbc::JdbcError::Corrupt {
                table: "ferromq_lock",
                reason: format!("cannot start the lease thread: {source}"),
            }),
        })?;
    let mut keeper =
        LeaseKeeper { shared: shared.clone(), stop: Some(stop_tx), thread: Some(thread), target };
    let mut waiting_since: Option<Instant> = None;
    let mut last_failure: Option<String> = None;
    loop {
        let Some(attempt) = attempts.recv().await else {
            return Err(BrokerError::Lease {
                source: LeaseError::Database(store_jdbc::JdbcError::Corrupt {
                    table: "ferromq_lock",
                    reason: "the lease thread stopped".to_owned(),
                }),
            });
        };
        match attempt {
            Attempt::Acquired => break,
            Attempt::Held { holder, error } if standby => {
                admin.set_waiting(format!("the PostgreSQL lease (held by {holder})"));
                if waiting_since.is_none() {
                    tracing::info!("{error}: waiting as its standby");
                    waiting_since = Some(Instant::now());
                }
            }
            Attempt::Held { holder, .. } => {
                return Err(BrokerError::LeaseHeld { target: keeper.target.clone(), holder });
            }
            Attempt::Failed(error) if standby => {
                // Once per distinct failure: a standby may wait through a long outage.
                let text = error.to_string();
                if last_failure.as_deref() != Some(text.as_str()) {
                    tracing::warn!(
                        "cannot try the PostgreSQL lease: {text}; trying again every {retry:?}"
                    );
                    last_failure = Some(text);
                }
            }
            Attempt::Failed(source) => return Err(BrokerError::Lease { source }),
        }
    }
    if let Some(since) = waiting_since {
        let waited = since.elapsed();
        tracing::info!(target = %keeper.target, ?waited, "PostgreSQL lease acquired: taking over as the active broker");
    } else {
        tracing::info!(target = %keeper.target, "PostgreSQL lease acquired");
    }
    keeper.watch()?;
    Ok(keeper)
}

/// Phase two of the lease thread: renew every `every` until told to stop.
fn renew(lease: &mut Lease, shared: &Shared, every: Duration, stop: &mpsc::Receiver<Stop>) {
    let mut next = Instant::now() + every;
    loop {
        match stop.recv_timeout(next.saturating_duration_since(Instant::now())) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(Stop::Release(done)) => {
                if let Err(error) = lease.release() {
                    tracing::warn!(%error, "cannot release the PostgreSQL lease; it expires on its own");
                } else {
                    tracing::info!(target = %lease.target(), "PostgreSQL lease released");
                }
                let _ = done.send(());
                return;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if shared.lost.is_cancelled() {
            return;
        }
        let sent = Instant::now();
        next = sent + every;
        match lease.renew() {
            Ok(()) => *shared.last_success_sent.lock() = sent,
            Err(LeaseError::Lost { holder, .. }) => {
                let holder = holder.unwrap_or_else(|| "nobody".to_owned());
                shared.fence(format!("the lease row is now held by {holder}"));
                return;
            }
            Err(error) => {
                let left = shared.lease.saturating_sub(shared.last_success_sent.lock().elapsed());
                tracing::warn!(%error, ?left, "cannot renew the PostgreSQL lease; retrying");
            }
        }
    }
}

impl LeaseKeeper {
    /// Starts the watchdog that fences the broker (see the module documentation).
    fn watch(&mut self) -> Result<(), BrokerError> {
        let shared = self.shared.clone();
        // Stop serving a quarter of a lease before the lease can expire on the database:
        // room for the clocks' rates to differ and for the connections to close.
        let deadline = shared.lease - shared.lease / 4;
        let poll = (shared.lease / 50).clamp(Duration::from_millis(5), Duration::from_millis(100));
        std::thread::Builder::new()
            .name("ferromq-lease-watch".to_owned())
            .spawn(move || loop {
                std::thread::sleep(poll);
                if shared.stopping.load(Ordering::SeqCst) || shared.lost.is_cancelled() {
                    return;
                }
                let since = shared.last_success_sent.lock().elapsed();
                if since >= deadline {
                    shared.fence(format!(
                        "no renewal succeeded for {} ms (the lease is {} ms)",
                        since.as_millis(),
                        shared.lease.as_millis()
                    ));
                    return;
                }
            })
            .map(drop)
            .map_err(|source| BrokerError::Lease {
                source: LeaseError::Database(store_jdbc::JdbcError::Corrupt {
                    table: "ferromq_lock",
                    reason: format!("cannot start the lease watchdog: {source}"),
                }),
            })
    }

    /// Cancelled when the broker lost its lease and stopped serving.
    pub fn lost(&self) -> CancellationToken {
        self.shared.lost.clone()
    }

    /// Why the lease was lost, once it was.
    pub fn lost_error(&self) -> BrokerError {
        let reason = self.shared.reason.lock().clone().unwrap_or_default();
        BrokerError::LeaseLost { target: self.target.clone(), reason }
    }

    /// Gives the lease up (after the store is closed), so that a standby takes over at once.
    pub async fn release(mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        let Some(stop) = self.stop.take() else { return };
        let (done, released) = tokio::sync::oneshot::channel();
        if stop.send(Stop::Release(done)).is_ok() {
            // Bounded: the release's statement is, and a lost lease has nothing to release.
            let _ = tokio::time::timeout(self.shared.lease, released).await;
        }
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Dropping the sender wakes the lease thread, which ends without releasing: whatever
        // still writes to the store must not race a standby taking over.
        self.stop.take();
        // Detached: it may be in a statement, bounded by the lease's timeouts.
        self.thread.take();
    }
}
