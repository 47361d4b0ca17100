//! The small internal trait the store talks to a database through, and its two
//! implementations: [`sqlite`] (embedded, `rusqlite`) and [`postgres`] (a server, the
//! `postgres` client).
//!
//! Everything above this module writes one SQL text for both databases: parameters are
//! numbered `?1`, `?2`, ... (PostgreSQL's connection rewrites them to `$1`, `$2`), every
//! integer column is a 64-bit integer (PostgreSQL checks parameter types strictly), and the
//! DDL names its blob type `{blob}` and SQLite's clustered tables `{without_rowid}`, which
//! each database spells its own way ([`Database::ddl`]).

use std::path::PathBuf;

use crate::error::JdbcError;
use crate::url::Target;

pub mod postgres;
pub mod sqlite;

/// A statement parameter.
#[derive(Debug, Clone, Copy)]
pub enum Param<'a> {
    Int(i64),
    Blob(&'a [u8]),
    Text(&'a str),
    Null,
}

/// A column value read back.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(i64),
    Blob(Vec<u8>),
    Text(String),
    Null,
}

impl Value {
    /// The integer in this column, or a [`JdbcError::Corrupt`] naming `table`.
    pub fn int(&self, table: &'static str) -> Result<i64, JdbcError> {
        match self {
            Value::Int(value) => Ok(*value),
            other => Err(corrupt(table, format!("expected an integer, found {other:?}"))),
        }
    }

    pub fn blob(&self, table: &'static str) -> Result<&[u8], JdbcError> {
        match self {
            Value::Blob(bytes) => Ok(bytes),
            other => Err(corrupt(table, format!("expected bytes, found {}", other.kind()))),
        }
    }

    pub fn text(&self, table: &'static str) -> Result<&str, JdbcError> {
        match self {
            Value::Text(text) => Ok(text),
            other => Err(corrupt(table, format!("expected text, found {}", other.kind()))),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Value::Int(_) => "an integer",
            Value::Blob(_) => "bytes",
            Value::Text(_) => "text",
            Value::Null => "NULL",
        }
    }
}

fn corrupt(table: &'static str, reason: String) -> JdbcError {
    JdbcError::Corrupt { table, reason }
}

/// One row: its columns in the order the query selected them.
pub type Row = Vec<Value>;

/// The column `index` of `row`, or a [`JdbcError::Corrupt`] if the row is shorter.
pub fn column<'r>(row: &'r Row, index: usize, table: &'static str) -> Result<&'r Value, JdbcError> {
    row.get(index).ok_or_else(|| corrupt(table, format!("row without column {index}")))
}

/// How hard a commit tries to reach stable storage; from the store's sync policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Synced before COMMIT returns (SQLite `synchronous=FULL`, PostgreSQL
    /// `synchronous_commit=on`).
    Full,
    /// Written at COMMIT, synced later (SQLite `synchronous=NORMAL` in WAL mode: synced at
    /// checkpoints; PostgreSQL `synchronous_commit=off`: the WAL writer syncs within
    /// `wal_writer_delay`).
    Deferred,
    /// Left to the operating system (SQLite `synchronous=OFF`; PostgreSQL as Deferred, the
    /// server never skips its own syncs).
    Off,
}

/// One connection to the store's database.
pub trait Database: Send {
    /// `"SQLite"` or `"PostgreSQL"`, for messages.
    fn name(&self) -> &'static str;

    /// Runs one statement; returns the rows it changed.
    fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<u64, JdbcError>;

    /// Runs one query; returns every row.
    fn query(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>, JdbcError>;

    /// Runs statements without parameters, separated by `;` (BEGIN, COMMIT, DDL).
    fn execute_batch(&mut self, sql: &str) -> Result<(), JdbcError>;

    /// Spells the portable DDL for this database (see the module documentation).
    fn ddl(&self, portable: &str) -> String;

    /// The bytes the database takes on disk (SQLite: its files; PostgreSQL:
    /// `pg_database_size`).
    fn size_bytes(&mut self) -> Result<u64, JdbcError>;

    /// Makes committed writes durable now (SQLite: a WAL checkpoint; PostgreSQL: nothing, its
    /// WAL writer does it), for the periodic sync policy.
    fn sync(&mut self) -> Result<(), JdbcError>;

    /// True once the connection is known to be gone.
    fn is_broken(&self) -> bool;
}

/// Opens one connection to `target`.
pub fn connect(target: &Target, durability: Durability) -> Result<Box<dyn Database>, JdbcError> {
    match target {
        Target::Sqlite(path) => Ok(Box::new(sqlite::SqliteDatabase::open(path, durability)?)),
        Target::Postgres { config, display } => Ok(Box::new(postgres::PostgresDatabase::connect(
            (**config).clone(),
            display,
            durability,
        )?)),
    }
}

/// The files of a SQLite database at `path` (the database, its WAL and shared memory).
pub fn sqlite_files(path: &std::path::Path) -> [PathBuf; 3] {
    let with_suffix = |suffix: &str| {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    [path.to_path_buf(), with_suffix("-wal"), with_suffix("-shm")]
}
