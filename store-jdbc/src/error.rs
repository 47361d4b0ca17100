//! [`JdbcError`]: what can go wrong between ferromq and its database, with a remedy in the
//! message. Converted to [`StoreError`] at the contract's boundary (boxed as the engine's
//! source), so the broker sees one error type and the operator sees this text.

use std::path::PathBuf;
use std::sync::Arc;

use store::StoreError;

/// A failure of the SQL store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JdbcError {
    /// The `[store] url` is not one this store understands.
    #[error("invalid store url `{url}`: {reason} (expected sqlite://PATH or postgres://user:password@host:port/database)")]
    Url { url: String, reason: String },
    /// The SQLite database file (or its directory) cannot be created or opened.
    #[error("cannot open the SQLite database {}: {detail}; check that the directory exists and is writable", path.display())]
    SqliteOpen {
        path: PathBuf,
        detail: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The PostgreSQL server cannot be reached, or refused the connection (credentials,
    /// database name).
    #[error("cannot connect to PostgreSQL at {target}: {detail}; check that the server runs and that the user, password and database in [store] url are right")]
    Connect {
        target: String,
        detail: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The database was written by a newer ferromq whose schema this build does not know.
    #[error("the database at {target} has ferromq schema version {found}, newer than this build supports ({supported}); upgrade ferromq, or point [store] url at another database")]
    SchemaTooNew { target: String, found: i64, supported: i64 },
    /// A statement failed.
    #[error("{database} failed while {context}: {detail}")]
    Query {
        database: &'static str,
        context: String,
        detail: String,
        /// The connection is gone (PostgreSQL restarted or unreachable): reconnect.
        connection_lost: bool,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// A write was refused because this broker no longer holds the PostgreSQL lease (see
    /// [`crate::SqlOptions::lease_holder`]): another broker may be active on the database.
    #[error("this broker no longer holds the lease on the PostgreSQL database {target} (held by {holder}): writes are refused so that only the active broker writes")]
    LeaseLost { target: String, holder: String },
    /// A row that does not hold what the schema says it must.
    #[error("unexpected data in {table}: {reason}")]
    Corrupt { table: &'static str, reason: String },
}

impl JdbcError {
    /// True when the connection is gone and the store must reconnect before the next batch.
    pub fn connection_lost(&self) -> bool {
        matches!(self, JdbcError::Query { connection_lost: true, .. } | JdbcError::Connect { .. })
    }
}

impl From<JdbcError> for StoreError {
    fn from(error: JdbcError) -> Self {
        match error {
            JdbcError::Corrupt { table, reason } => {
                StoreError::Corrupt { location: format!("table {table}"), reason }
            }
            // Nothing more may be written through this store: the broker is fencing itself.
            lost @ JdbcError::LeaseLost { .. } => StoreError::Poisoned { reason: lost.to_string() },
            other => StoreError::Engine(Arc::new(other)),
        }
    }
}
