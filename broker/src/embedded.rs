//! Starting, using and stopping a broker in-process: what the `ferromq` binary does, and what
//! tests and applications embedding ferromq do.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use conf::{Config, LsmEngine, Scheme, StoreKind, SyncMode};
use protocol::stomp::Limits;
use store::{Destination, MemoryStore, MessageStore, StoreError, SyncPolicy};
use store_jdbc::{SqlOptions, SqlStore};
use store_journal::{JournalOptions, JournalStore};
use store_lsm::{EngineKind, LsmOptions, LsmStore};
use tokio::io::DuplexStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::{ActiveBroker, AdminState, BrokerRole};
use crate::core::selector::Selector;
use crate::core::wildcard::DestinationFilter;
use crate::core::DestinationStats;
use crate::core::{
    CompositeRule, CompositeTarget, Composites, Core, CoreSettings, QueueStats, TempStore,
    TempStoreOpener, VirtualTopicRule,
};
use crate::data_dir::{DataDirLock, LockedStore};
use crate::error::BrokerError;
use crate::transport::{self, BoundConnector, ConnectionContext, Protocol};

/// Size of the in-process pipe behind a `vm://` connection, in each direction.
const IN_PROCESS_BUFFER: usize = 256 * 1024;

/// Builds and starts a broker.
///
/// ```no_run
/// # async fn example() -> Result<(), broker::BrokerError> {
/// let mut config = conf::Config::default();
/// config.transport.connectors = vec!["stomp://127.0.0.1:0".parse().expect("valid URI")];
/// let broker = broker::Broker::builder(config).start().await?;
/// println!("STOMP on {:?}", broker.stomp_addr());
/// broker.shutdown().await;
/// # Ok(()) }
/// ```
pub struct Broker;

impl Broker {
    pub fn builder(config: Config) -> BrokerBuilder {
        BrokerBuilder { config, store: None, lock_data_dir: false }
    }

    /// Starts a broker from `config` with the store it names.
    pub async fn start(config: Config) -> Result<BrokerHandle, BrokerError> {
        Broker::builder(config).start().await
    }
}

/// Options for starting a broker beyond its configuration.
pub struct BrokerBuilder {
    config: Config,
    store: Option<Arc<dyn MessageStore>>,
    lock_data_dir: bool,
}

impl BrokerBuilder {
    /// Uses this store instead of the one the configuration names (tests use it to keep a
    /// store across broker restarts, or to inject failures).
    pub fn store(mut self, store: Arc<dyn MessageStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Creates the data directory and locks it, so that a second broker on it refuses to
    /// start. The `ferromq` binary always does this, and so does every broker whose store is
    /// on disk.
    pub fn lock_data_dir(mut self, lock: bool) -> Self {
        self.lock_data_dir = lock;
        self
    }

    /// Validates the configuration, opens the store, recovers it, binds every connector and
    /// starts accepting. Fails without leaving anything running.
    pub async fn start(self) -> Result<BrokerHandle, BrokerError> {
        let config = self.config;
        config.validate()?;
        // A store on disk always locks its directory: two brokers must never write one journal.
        let on_disk = self.store.is_none() && config.store.kind != StoreKind::Memory;
        let locks = self.lock_data_dir || on_disk;
        let shutdown = CancellationToken::new();
        let tracker = TaskTracker::new();
        // Until `start` returns the handle, a failure stops what was started (the admin
        // endpoint).
        let mut stop_on_failure = CancelOnDrop(Some(shutdown.clone()));
        let standby = locks && config.broker.standby;
        let first_role = if standby { BrokerRole::Waiting } else { BrokerRole::Starting };
        let security = Arc::new(
            crate::security::Authenticator::new(&config)
                .map_err(|error| BrokerError::Security(error.to_string()))?,
        );
        let admin_access = security.enabled().then(|| crate::admin::AdminAccess {
            authenticator: security.clone(),
            groups: config.admin.groups.clone(),
        });
        let admin_state = Arc::new(AdminState::new(&config.broker.name, first_role, admin_access));
        // A standby's admin endpoint serves while it waits, to say so (`/api/status`); others
        // bind it once they hold the lock, so that a second broker on a locked directory
        // reports the lock, not a taken admin port.
        let mut admin_addr = None;
        if standby {
            admin_addr = serve_admin(&config, &admin_state, &shutdown, &tracker).await?;
        }
        let lock = match (locks, standby) {
            (false, _) => None,
            (true, false) => Some(Arc::new(DataDirLock::acquire(&config.broker.data_dir)?)),
            (true, true) => Some(Arc::new(
                DataDirLock::wait(&config.broker.data_dir, config.broker.lock_retry).await?,
            )),
        };
        // On PostgreSQL the data directory's lock keeps out only brokers on this directory:
        // the database is shared, and its lease decides which broker is active. Taken before
        // the store is opened or recovered and before any connector is bound.
        let lease_settings = lease_settings(&config, self.store.is_none(), standby)?;
        // The store's writes check the lease too (see `SqlOptions::lease_holder`).
        let lease_holder = lease_settings.as_ref().map(|settings| settings.options.holder.clone());
        let lease = match lease_settings {
            Some(settings) => Some(crate::lease::take(settings, &admin_state, &shutdown).await?),
            None => None,
        };
        admin_state.set_role(BrokerRole::Starting);
        if !standby {
            admin_addr = serve_admin(&config, &admin_state, &shutdown, &tracker).await?;
        }
        let store: Arc<dyn MessageStore> = match self.store {
            Some(store) => store,
            None => open_store(&config, lease_holder).await?,
        };
        // The lock lives as long as the store and its writer, not only the handle: see
        // `data_dir`.
        let store = match &lock {
            Some(lock) => Arc::new(LockedStore::new(store, lock.clone())),
            None => store,
        };
        // Only a broker that holds its data directory has a temporary store: two brokers must
        // not share one, and an embedded broker without a data directory keeps non-persistent
        // messages in memory (held by producer flow control) as before.
        let temp_store = match &lock {
            Some(lock) => Some(temp_store(&config, lock)?),
            None => None,
        };
        let settings = CoreSettings {
            default_prefetch: config.destinations.queue_prefetch,
            virtual_topics: config
                .virtual_topics
                .iter()
                .map(|rule| VirtualTopicRule {
                    name: DestinationFilter::new(&rule.name),
                    prefix: rule.prefix.clone(),
                })
                .collect(),
            composites: composites(&config)?,
            scheduler: config.broker.scheduler,
            dead_letters: crate::core::policy::dead_letter_settings(
                &config.dead_letter,
                config.destinations.expire_messages_period,
            ),
            policies: Arc::new(crate::core::policy::Policies::from_config(&config)),
            memory: crate::core::MemoryLimits::new(
                config.destinations.memory_limit,
                config.broker.memory_limit,
            ),
            flow: crate::core::FlowSettings {
                fail_if_no_space: config.broker.send_fail_if_no_space,
                fail_after: Some(config.broker.send_fail_if_no_space_after_timeout)
                    .filter(|timeout| !timeout.is_zero()),
            },
            temp_store: temp_store.clone(),
            max_destinations: usize::try_from(config.destinations.max_destinations).ok(),
        };
        let core = Core::recover(store, settings)?;
        core.start_scheduler();
        core.start_store_watch();
        core.start_inactive_sweep();

        let mut listeners = Vec::with_capacity(config.transport.connectors.len());
        for warning in config.warnings() {
            tracing::warn!("{warning}");
        }
        for uri in &config.transport.connectors {
            listeners.push(
                transport::bind(uri, config.transport.max_connections_for(uri), &config.tls)
                    .await?,
            );
        }
        let limits = Limits {
            max_frame_size: config.transport.max_frame_size,
            max_headers: config.transport.max_headers,
            max_header_length: config.transport.max_header_length,
        };
        let context = Arc::new(ConnectionContext {
            core: core.clone(),
            id_prefix: format!("{}-{}", config.broker.name, crate::core::queue::now_millis()),
            limits,
            connect_timeout: config.transport.connect_timeout,
            heart_beat_grace: config.transport.heart_beat_grace,
            shutdown: shutdown.clone(),
            connections: Arc::default(),
            security,
            authorizer: Arc::new(crate::security::Authorizer::new(&config)),
        });
        let mut connectors = Vec::with_capacity(listeners.len());
        for listener in listeners {
            connectors.push(listener.bound.clone());
            let mut context = context.clone();
            let max_frame_size = config.transport.max_frame_size_for(&listener.bound.uri);
            if max_frame_size != context.limits.max_frame_size {
                let mut own = ConnectionContext::clone(&context);
                own.limits.max_frame_size = max_frame_size;
                context = Arc::new(own);
            }
            tracker.spawn(listener.run(context, tracker.clone()));
        }
        admin_state.activate(ActiveBroker {
            core: core.clone(),
            connections: context.connections.clone(),
            started: std::time::Instant::now(),
        });
        stop_on_failure.0 = None;
        tracing::info!(name = %config.broker.name, store = core.store().name(), "broker started");
        Ok(BrokerHandle {
            core,
            context,
            connectors,
            admin_addr,
            tracker,
            shutdown,
            shutdown_timeout: config.broker.shutdown_timeout,
            temp_store,
            data_dir: config.broker.data_dir.clone(),
            lease,
            lock,
        })
    }
}

/// Where the temporary store lives, as ActiveMQ's `tmp_storage`.
fn temp_store_dir(data_dir: &Path) -> std::path::PathBuf {
    data_dir.join("tmp_storage")
}

/// The temporary store's data files: ActiveMQ's default journal file size is 32 MiB; smaller
/// files here let the space of a drained spill go back sooner.
const TEMP_SEGMENT_SIZE: u64 = 4 << 20;

/// Removes a directory and everything in it; one that is not there is fine.
fn wipe(dir: &Path) -> Result<(), StoreError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(StoreError::io(format!("removing {}", dir.display()), error)),
    }
}

/// The temporary store under `<data_dir>/tmp_storage`: what an earlier run left is wiped now
/// (nothing in it may be delivered after a restart), and the journal is opened only when a
/// queue first spills, so an idle broker creates nothing. A journal without syncs: its
/// contents never need to survive a crash, so it costs the disk writes only, and the page-in,
/// acks, reclaiming and size accounting are the journal's own. A journal rather than the
/// memory store, which would hold the spilled messages in memory again.
///
/// The journal holds the data directory's lock as the store does (a broker that takes the
/// directory over wipes `tmp_storage` when it starts).
fn temp_store(config: &Config, lock: &Arc<DataDirLock>) -> Result<Arc<TempStore>, BrokerError> {
    let dir = temp_store_dir(&config.broker.data_dir);
    let lock = lock.clone();
    wipe(&dir)?;
    let limit = config.broker.temp_limit;
    let opener: TempStoreOpener = Box::new(move || {
        wipe(&dir)?;
        let options = JournalOptions {
            segment_size: TEMP_SEGMENT_SIZE,
            sync: SyncPolicy::Never,
            // Drained messages free their files soon even when nothing more is spilled, so
            // that producers waiting for room resume.
            checkpoint_interval: Duration::from_secs(1),
            max_size: limit,
            ..JournalOptions::default()
        };
        let store = JournalStore::open(&dir, options)?;
        store.recover()?;
        Ok(Arc::new(LockedStore::new(Arc::new(store), lock.clone())) as Arc<dyn MessageStore>)
    });
    Ok(Arc::new(TempStore::new(limit, opener)))
}

/// Opens the store `[store]` names; on PostgreSQL its writes check `lease_holder`'s lease.
async fn open_store(
    config: &Config,
    lease_holder: Option<String>,
) -> Result<Arc<dyn MessageStore>, BrokerError> {
    let settings = &config.store;
    Ok(match settings.kind {
        StoreKind::Memory => Arc::new(MemoryStore::new()),
        StoreKind::Journal => {
            let dir = config.broker.data_dir.join("journal");
            let options = JournalOptions {
                segment_size: settings.segment_size,
                sync: sync_policy(settings),
                checkpoint_bytes: settings.checkpoint_bytes,
                checkpoint_interval: settings.checkpoint_interval,
                compaction_threshold: settings.compaction_threshold,
                max_size: settings.max_size,
                refuse_on_corruption: settings.refuse_on_corruption,
                ..JournalOptions::default()
            };
            // Recovery reads the journal: keep it off the async worker threads.
            let opened = tokio::task::spawn_blocking(move || JournalStore::open(&dir, options))
                .await
                .map_err(|error| {
                    BrokerError::Store(StoreError::Invalid {
                        reason: format!("opening the journal panicked: {error}"),
                    })
                })??;
            Arc::new(opened)
        }
        StoreKind::Lsm => {
            let dir = config.broker.data_dir.join("lsm");
            let options = LsmOptions {
                engine: match settings.engine {
                    LsmEngine::Rocksdb => EngineKind::RocksDb,
                    LsmEngine::Sled => EngineKind::Sled,
                },
                sync: sync_policy(settings),
                max_size: settings.max_size,
                ..LsmOptions::default()
            };
            // Recovery scans the engine's keys: keep it off the async worker threads.
            let opened = tokio::task::spawn_blocking(move || LsmStore::open(&dir, options))
                .await
                .map_err(|error| {
                    BrokerError::Store(StoreError::Invalid {
                        reason: format!("opening the LSM store panicked: {error}"),
                    })
                })??;
            Arc::new(opened)
        }
        StoreKind::Jdbc => {
            let url = settings.url.clone();
            let base = config.broker.data_dir.clone();
            let options = SqlOptions {
                sync: sync_policy(settings),
                max_size: settings.max_size,
                lease_holder,
                ..SqlOptions::default()
            };
            // Connecting, migrating and recovering block: keep them off the async workers.
            let opened = tokio::task::spawn_blocking(move || SqlStore::open(&url, &base, options))
                .await
                .map_err(|error| {
                    BrokerError::Store(StoreError::Invalid {
                        reason: format!("opening the SQL store panicked: {error}"),
                    })
                })??;
            Arc::new(opened)
        }
    })
}

fn sync_policy(settings: &conf::StoreConfig) -> SyncPolicy {
    match settings.sync {
        SyncMode::Always => SyncPolicy::Always,
        SyncMode::Periodic => SyncPolicy::Periodic(settings.sync_interval),
        SyncMode::Never => SyncPolicy::Never,
    }
}

/// A running broker. Dropping it stops the broker too, without waiting.
pub struct BrokerHandle {
    core: Arc<Core>,
    context: Arc<ConnectionContext>,
    connectors: Vec<BoundConnector>,
    admin_addr: Option<std::net::SocketAddr>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    shutdown_timeout: Duration,
    /// Closed and wiped at shutdown.
    temp_store: Option<Arc<TempStore>>,
    data_dir: PathBuf,
    /// The PostgreSQL lease, renewed while the broker runs; released after the store closes.
    lease: Option<crate::lease::LeaseKeeper>,
    /// The data directory's lock, released at the end of a clean [`BrokerHandle::shutdown`];
    /// otherwise it goes with the store (see `data_dir`).
    lock: Option<Arc<DataDirLock>>,
}

impl BrokerHandle {
    /// Every connector with the address it bound.
    pub fn connectors(&self) -> &[BoundConnector] {
        &self.connectors
    }

    /// The first STOMP connector's address.
    pub fn stomp_addr(&self) -> Option<std::net::SocketAddr> {
        self.addr_of(&[Scheme::Stomp, Scheme::StompNio])
    }

    /// The first OpenWire connector's address.
    pub fn openwire_addr(&self) -> Option<std::net::SocketAddr> {
        self.addr_of(&[Scheme::OpenWire, Scheme::OpenWireNio])
    }

    /// The first AMQP connector's address.
    pub fn amqp_addr(&self) -> Option<std::net::SocketAddr> {
        self.addr_of(&[Scheme::Amqp, Scheme::AmqpNio])
    }

    /// The first MQTT connector's address.
    pub fn mqtt_addr(&self) -> Option<std::net::SocketAddr> {
        self.addr_of(&[Scheme::Mqtt, Scheme::MqttNio])
    }

    /// The admin endpoint's address (`[admin] bind`, the port resolved when 0 was asked), or
    /// `None` when it is off.
    pub fn admin_addr(&self) -> Option<std::net::SocketAddr> {
        self.admin_addr
    }

    /// The first TLS connector's address for `protocol` (`ssl://`, `stomp+ssl://`,
    /// `amqp+ssl://`, `mqtt+ssl://` and their `nio` forms).
    pub fn tls_addr(&self, protocol: conf::WireProtocol) -> Option<std::net::SocketAddr> {
        let scheme =
            |c: &&BoundConnector| c.uri.scheme.uses_tls() && c.uri.scheme.protocol() == protocol;
        self.connectors.iter().find(scheme).map(|c| c.local_addr)
    }

    fn addr_of(&self, schemes: &[Scheme]) -> Option<std::net::SocketAddr> {
        self.connectors.iter().find(|c| schemes.contains(&c.uri.scheme)).map(|c| c.local_addr)
    }

    /// Opens an in-process STOMP connection (ActiveMQ's `vm://`): no socket, the same
    /// protocol handling. Speak STOMP over the returned stream, for example with
    /// `client::StompClient::connect_stream`.
    pub fn connect_in_process(&self) -> DuplexStream {
        let (ours, theirs) = tokio::io::duplex(IN_PROCESS_BUFFER);
        let context = self.context.clone();
        let counted = context.connections.opened(Protocol::Stomp);
        self.tracker.spawn(async move {
            let connect_deadline = tokio::time::Instant::now() + context.connect_timeout;
            crate::stomp::serve(ours, context, "vm://".to_owned(), connect_deadline).await;
            drop(counted);
        });
        theirs
    }

    /// The store the broker runs on.
    pub fn store(&self) -> &Arc<dyn MessageStore> {
        self.core.store()
    }

    /// A queue's counters, or `None` if no such queue exists.
    pub async fn queue_stats(&self, name: &str) -> Option<QueueStats> {
        self.core.existing_queue(name)?.stats().await
    }

    /// Every queue's and topic's counters, as the admin endpoint's `/api/destinations`.
    pub async fn destination_stats(&self) -> Vec<DestinationStats> {
        self.core.destination_stats().await
    }

    /// A durable subscription's counters, or `None` if it does not exist.
    pub async fn durable_subscription_stats(
        &self,
        client_id: &str,
        name: &str,
    ) -> Option<QueueStats> {
        let key = store::SubscriptionKey { client_id: client_id.into(), name: name.into() };
        self.core.durable_subscription(&key)?.stats().await
    }

    /// Resolves when the broker stopped serving on its own because it lost its PostgreSQL
    /// lease (see `lease.rs`), with the error to report; never otherwise. The `ferromq`
    /// binary then exits with a failure.
    pub async fn lease_lost(&self) -> BrokerError {
        match &self.lease {
            Some(lease) => {
                lease.lost().cancelled().await;
                lease.lost_error()
            }
            None => std::future::pending().await,
        }
    }

    /// Stops accepting, lets connections answer what waits for the store and close (for at
    /// most the configured shutdown timeout), stops the queues, closes the store and releases
    /// the PostgreSQL lease. After a lost lease the store is left as it is: another broker
    /// is active on it.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        self.tracker.close();
        if tokio::time::timeout(self.shutdown_timeout, self.tracker.wait()).await.is_err() {
            tracing::warn!(timeout = ?self.shutdown_timeout, "connections still open at the shutdown timeout");
        }
        self.core.stop_queues();
        let lost = self.lease.as_ref().is_some_and(|lease| lease.lost().is_cancelled());
        if lost {
            tracing::warn!("the PostgreSQL lease is lost: the store is not closed (another broker may be active on it)");
        } else if let Err(error) = self.core.store().close() {
            tracing::error!(%error, "closing the store failed");
        }
        if let Some(temp) = &self.temp_store {
            if let Err(error) = temp.close() {
                tracing::warn!(%error, "closing the temporary store failed");
            }
            if let Err(error) = wipe(&temp_store_dir(&self.data_dir)) {
                tracing::warn!(%error, "cannot remove the temporary store");
            }
        }
        if let Some(lease) = self.lease.take() {
            if !lost {
                lease.release().await;
            }
        }
        // Last: the store is closed (nothing can be written to it any more) and the temporary
        // store wiped, so a standby or a restart may take the directory now, even while a
        // task past the shutdown timeout still holds the store. After a lost lease the store
        // was not closed: the lock then goes with the store's last holder.
        if let Some(lock) = self.lock.take() {
            if !lost {
                lock.release();
            }
        }
        tracing::info!("broker stopped");
    }
}

impl Drop for BrokerHandle {
    fn drop(&mut self) {
        self.shutdown.cancel();
        self.tracker.close();
        // The queue tasks hold the store (and so the data directory's lock) and would
        // otherwise run for as long as the runtime, each holding a sender of its own inbox:
        // stopped, they end after what they were given, the connections end on the token,
        // and the store goes with the last of them, its writer joined, then the lock.
        self.core.stop_queues();
    }
}

/// Binds the admin endpoint (when `[admin] enabled`) and serves `state` on `tracker` until
/// `shutdown`; its address.
async fn serve_admin(
    config: &Config,
    state: &Arc<AdminState>,
    shutdown: &CancellationToken,
    tracker: &TaskTracker,
) -> Result<Option<std::net::SocketAddr>, BrokerError> {
    if !config.admin.enabled {
        return Ok(None);
    }
    let admin = crate::admin::bind(config).await?;
    let address = admin.local_addr;
    tracker.spawn(admin.run(state.clone(), shutdown.clone(), tracker.clone()));
    Ok(Some(address))
}

/// The PostgreSQL lease to take, for a broker that opens its own store on PostgreSQL (SQLite
/// is a file under the data directory, whose lock already keeps other brokers out).
fn lease_settings(
    config: &Config,
    own_store: bool,
    standby: bool,
) -> Result<Option<crate::lease::LeaseSettings>, BrokerError> {
    let store = &config.store;
    let postgres = ["postgres://", "postgresql://"].iter().any(|s| store.url.starts_with(s));
    if !own_store || store.kind != StoreKind::Jdbc || !postgres {
        return Ok(None);
    }
    let data_dir = &config.broker.data_dir;
    let token = data_dir_token(data_dir)?;
    let started = crate::core::queue::now_millis();
    let holder = format!(
        "{} on {}, pid {}, started {started} [{token}]",
        config.broker.name,
        host_name(),
        std::process::id()
    );
    Ok(Some(crate::lease::LeaseSettings {
        url: store.url.clone(),
        options: store_jdbc::LeaseOptions {
            holder,
            // Every holder with this data directory's token held its lock for its whole life;
            // this broker holds it now, so such a holder is dead: replaced at once (a broker
            // restarted after a crash does not wait for its own old lease).
            predecessor: Some(format!("[{token}]")),
            duration: store.lease,
            // A renewal that hangs is cut at about the renewal interval, so that the next
            // one can try a fresh connection before the broker must fence itself.
            io_timeout: store.lease_renew.max(Duration::from_millis(500)),
        },
        renew_every: store.lease_renew,
        standby,
        retry: config.broker.lock_retry,
    }))
}

/// A random token naming this data directory (`<data_dir>/broker-id`, made at its first
/// use), which ends the lease holder's text; see [`lease_settings`].
fn data_dir_token(data_dir: &Path) -> Result<String, BrokerError> {
    let io = |source| BrokerError::DataDir { path: data_dir.to_path_buf(), source };
    let path = data_dir.join("broker-id");
    match std::fs::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => return Ok(text.trim().to_owned()),
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(io(error)),
    }
    let token = format!("{:016x}", rand::random::<u64>());
    std::fs::write(&path, &token).map_err(io)?;
    Ok(token)
}

/// This machine's name, for the lease holder's text (which operators read).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned())
}

/// Cancels its token when dropped, unless emptied first.
struct CancelOnDrop(Option<CancellationToken>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(token) = self.0.take() {
            token.cancel();
        }
    }
}

/// The core's dead-letter settings from `[dead_letter]` and `destinations.expire_messages_period_ms`.
/// The configured composite destinations, with their selectors parsed: an invalid one is a
/// configuration error naming its key.
fn composites(config: &Config) -> Result<Composites, conf::ConfigError> {
    let destination = |name: &conf::DestinationName| match name.kind {
        conf::DestinationType::Queue => Destination::queue(name.name.as_str()),
        conf::DestinationType::Topic => Destination::topic(name.name.as_str()),
    };
    let mut composites = Composites::new();
    for (index, composite) in config.composite_destinations.iter().enumerate() {
        let mut targets = Vec::with_capacity(composite.forward_to.len());
        for (position, target) in composite.forward_to.iter().enumerate() {
            let selector = match Selector::parse_optional(target.selector.as_deref()) {
                Ok(selector) => selector.map(Arc::new),
                Err(error) => {
                    let key =
                        format!("composite_destinations[{index}].forward_to[{position}].selector");
                    let reason = error.to_string();
                    return Err(conf::ConfigError::new(conf::UNKNOWN_ORIGIN, None, key, reason));
                }
            };
            let destination = destination(&target.destination);
            targets.push(CompositeTarget { destination, selector });
        }
        let rule = CompositeRule { forward_only: composite.forward_only, targets };
        composites.insert(destination(&composite.name), rule);
    }
    Ok(composites)
}
