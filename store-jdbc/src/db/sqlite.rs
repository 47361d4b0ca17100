//! SQLite through `rusqlite`: WAL mode, so that the reader connection reads while the writer
//! writes, and `synchronous` per the sync policy (FULL syncs the WAL at every COMMIT).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::types::{ToSql, ToSqlOutput, ValueRef};
use rusqlite::Connection;

use super::{Database, Durability, Param, Row, Value};
use crate::error::JdbcError;

pub struct SqliteDatabase {
    connection: Connection,
    path: PathBuf,
}

impl ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match *self {
            Param::Int(value) => ToSqlOutput::Borrowed(ValueRef::Integer(value)),
            Param::Blob(bytes) => ToSqlOutput::Borrowed(ValueRef::Blob(bytes)),
            Param::Text(text) => ToSqlOutput::Borrowed(ValueRef::Text(text.as_bytes())),
            Param::Null => ToSqlOutput::Borrowed(ValueRef::Null),
        })
    }
}

impl SqliteDatabase {
    pub fn open(path: &Path, durability: Durability) -> Result<Self, JdbcError> {
        let open_error = |detail: String, source: Option<rusqlite::Error>| JdbcError::SqliteOpen {
            path: path.to_path_buf(),
            detail,
            source: source.map(|e| Box::new(e) as _),
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| {
                open_error(format!("cannot create the directory {}: {e}", parent.display()), None)
            })?;
        }
        let connection = Connection::open(path)
            .map_err(|e| open_error(format!("opening failed: {e}"), Some(e)))?;
        // A writer waiting for the reader (or another process) retries instead of failing at
        // once; WAL readers never block the writer, so this only covers checkpoints.
        connection
            .busy_timeout(Duration::from_secs(10))
            .map_err(|e| open_error(format!("setting the busy timeout failed: {e}"), Some(e)))?;
        connection.set_prepared_statement_cache_capacity(64);
        let synchronous = match durability {
            Durability::Full => "FULL",
            Durability::Deferred => "NORMAL",
            Durability::Off => "OFF",
        };
        // journal_mode answers with a row; query it rather than execute it. The first write
        // of the WAL header is where a read-only directory shows, so say so clearly.
        let mode: String = connection
            .query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))
            .map_err(|e| open_error(format!("switching to WAL mode failed: {e}"), Some(e)))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(open_error(
                format!("the database refused WAL mode (it is in {mode} mode)"),
                None,
            ));
        }
        connection
            .execute_batch(&format!("PRAGMA synchronous={synchronous}; PRAGMA foreign_keys=OFF;"))
            .map_err(|e| open_error(format!("setting the sync mode failed: {e}"), Some(e)))?;
        Ok(SqliteDatabase { connection, path: path.to_path_buf() })
    }

    fn error(&self, context: &str, error: rusqlite::Error) -> JdbcError {
        JdbcError::Query {
            database: "SQLite",
            context: format!("{context} ({})", self.path.display()),
            detail: error.to_string(),
            connection_lost: false,
            source: Some(Box::new(error)),
        }
    }
}

fn statement_name(sql: &str) -> &str {
    let sql = sql.trim_start();
    sql.get(..sql.len().min(60)).unwrap_or(sql)
}

impl Database for SqliteDatabase {
    fn name(&self) -> &'static str {
        "SQLite"
    }

    fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<u64, JdbcError> {
        let result = self
            .connection
            .prepare_cached(sql)
            .and_then(|mut statement| statement.execute(rusqlite::params_from_iter(params.iter())));
        match result {
            Ok(changed) => Ok(changed as u64),
            Err(e) => Err(self.error(&format!("running `{}`", statement_name(sql)), e)),
        }
    }

    fn query(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>, JdbcError> {
        let result = (|| {
            let mut statement = self.connection.prepare_cached(sql)?;
            let columns = statement.column_count();
            let mut rows = statement.query(rusqlite::params_from_iter(params.iter()))?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                let mut values = Vec::with_capacity(columns);
                for index in 0..columns {
                    values.push(match row.get_ref(index)? {
                        ValueRef::Integer(value) => Value::Int(value),
                        ValueRef::Blob(bytes) => Value::Blob(bytes.to_vec()),
                        ValueRef::Text(text) => {
                            Value::Text(String::from_utf8_lossy(text).into_owned())
                        }
                        ValueRef::Null => Value::Null,
                        // No column of the schema is REAL; report it as the corruption it is.
                        ValueRef::Real(value) => Value::Text(format!("REAL {value}")),
                    });
                }
                out.push(values);
            }
            Ok(out)
        })();
        result.map_err(|e| self.error(&format!("running `{}`", statement_name(sql)), e))
    }

    fn execute_batch(&mut self, sql: &str) -> Result<(), JdbcError> {
        self.connection
            .execute_batch(sql)
            .map_err(|e| self.error(&format!("running `{}`", statement_name(sql)), e))
    }

    fn ddl(&self, portable: &str) -> String {
        portable.replace("{blob}", "BLOB").replace("{without_rowid}", "WITHOUT ROWID")
    }

    fn size_bytes(&mut self) -> Result<u64, JdbcError> {
        // File sizes, not a query: cheap, and they count the WAL too.
        Ok(super::sqlite_files(&self.path)
            .iter()
            .filter_map(|file| std::fs::metadata(file).ok())
            .map(|metadata| metadata.len())
            .sum())
    }

    fn sync(&mut self) -> Result<(), JdbcError> {
        // A checkpoint syncs the WAL before copying it into the database, so every commit
        // before it is durable after it.
        self.connection
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
            .map_err(|e| self.error("checkpointing the WAL", e))
    }

    fn is_broken(&self) -> bool {
        false
    }
}
