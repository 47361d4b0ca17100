//! Errors the broker reports when it starts or runs.

use std::path::PathBuf;

/// Why a broker could not start or had to stop.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrokerError {
    #[error("cannot listen on {uri}: {source}")]
    Bind {
        uri: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot set up TLS for {uri}: {source}")]
    Tls {
        uri: String,
        #[source]
        source: crate::transport::TlsSetupError,
    },
    #[error("invalid security configuration: {0}")]
    Security(String),
    #[error("invalid configuration: {0}")]
    Config(#[from] conf::ConfigError),
    #[error("store failed: {0}")]
    Store(#[from] store::StoreError),
    #[error("cannot use data directory {path}: {source}")]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the PostgreSQL lease: {source}")]
    Lease {
        #[source]
        source: store_jdbc::LeaseError,
    },
    #[error(
        "the PostgreSQL database {target} is in use by another broker ({holder}) whose lease is \
         valid; stop it, or set `[broker] standby = true` to wait as its standby"
    )]
    LeaseHeld { target: String, holder: String },
    #[error(
        "lost the PostgreSQL lease on {target} ({reason}): stopped serving so that the standby \
         can take over; restart this broker (it comes back as a standby)"
    )]
    LeaseLost { target: String, reason: String },
    #[error("data directory {path} is locked by another broker{holder}; stop it or choose another --data-dir")]
    DataDirLocked { path: PathBuf, holder: String },
    #[error(
        "cannot serve the admin endpoint on {address} (`admin.bind`): {source}; choose another \
         address, or set `admin.enabled = false`"
    )]
    AdminBind {
        address: String,
        #[source]
        source: std::io::Error,
    },
}
