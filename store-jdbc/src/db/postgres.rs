//! PostgreSQL through the synchronous `postgres` client (tokio-postgres on a runtime of its
//! own): the store calls it from its writer and reader threads, never from the broker's
//! runtime. Statements are prepared once per connection and cached by their text.

use std::collections::HashMap;
use std::error::Error as _;

use bytes::BytesMut;
use postgres::types::{to_sql_checked, IsNull, ToSql, Type};
use postgres::{Client, NoTls, Statement};

use super::{Database, Durability, Param, Row, Value};
use crate::error::JdbcError;

pub struct PostgresDatabase {
    client: Client,
    statements: HashMap<String, Statement>,
    /// `host:port/database`, for messages (never the password).
    display: String,
}

impl ToSql for Param<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match *self {
            Param::Int(value) => value.to_sql(ty, out),
            Param::Blob(bytes) => bytes.to_sql(ty, out),
            Param::Text(text) => text.to_sql(ty, out),
            Param::Null => Ok(IsNull::Yes),
        }
    }

    fn accepts(ty: &Type) -> bool {
        <i64 as ToSql>::accepts(ty) || <&[u8] as ToSql>::accepts(ty) || <&str as ToSql>::accepts(ty)
    }

    to_sql_checked!();
}

/// The error's text with its causes, since the client's own text can be as short as
/// "db error".
pub fn describe(error: &postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return format!("{} {}: {}", db.severity(), db.code().code(), db.message());
    }
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// How long the server lets one of our sessions sit idle inside a transaction before it
/// ends it (see [`PostgresDatabase::connect`]).
const IDLE_IN_TRANSACTION_MS: u64 = 5_000;

impl PostgresDatabase {
    pub fn connect(
        config: postgres::Config,
        display: &str,
        durability: Durability,
    ) -> Result<Self, JdbcError> {
        let connect_error = |e: postgres::Error| JdbcError::Connect {
            target: display.to_string(),
            detail: describe(&e),
            source: Some(Box::new(e)),
        };
        let mut client = config.connect(NoTls).map_err(connect_error)?;
        // PostgreSQL always syncs its WAL itself; `off` lets COMMIT return before the sync
        // (the WAL writer syncs within wal_writer_delay), as the periodic policy allows.
        let synchronous = if durability == Durability::Full { "on" } else { "off" };
        // A broker that vanishes mid-transaction (its machine lost power, a partition) leaves
        // its backend holding row locks, the lease row's among them, until the server notices
        // the dead socket: the TCP keepalive default is two hours, and a standby taking over
        // would wait that long. ferromq never leaves a transaction idle between statements,
        // so an idle one is a dead client: the server ends it after a few seconds.
        client
            .batch_execute(&format!(
                "SET synchronous_commit = {synchronous}; \
                 SET idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_MS}"
            ))
            .map_err(connect_error)?;
        Ok(PostgresDatabase { client, statements: HashMap::new(), display: display.to_string() })
    }

    fn error(&self, context: &str, error: postgres::Error) -> JdbcError {
        let connection_lost = error.is_closed() || self.client.is_closed();
        JdbcError::Query {
            database: "PostgreSQL",
            context: format!("{context} (at {})", self.display),
            detail: describe(&error),
            connection_lost,
            source: Some(Box::new(error)),
        }
    }

    fn statement(&mut self, sql: &str) -> Result<Statement, JdbcError> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let text = sql.replace('?', "$");
        let statement = self
            .client
            .prepare(&text)
            .map_err(|e| self.error(&format!("preparing `{}`", short(sql)), e))?;
        self.statements.insert(sql.to_string(), statement.clone());
        Ok(statement)
    }
}

fn short(sql: &str) -> &str {
    let sql = sql.trim_start();
    sql.get(..sql.len().min(60)).unwrap_or(sql)
}

fn params<'a>(params: &'a [Param<'a>]) -> Vec<&'a (dyn ToSql + Sync)> {
    params.iter().map(|param| param as &(dyn ToSql + Sync)).collect()
}

fn value(row: &postgres::Row, index: usize, ty: &Type) -> Result<Value, postgres::Error> {
    Ok(match *ty {
        Type::INT8 => row.try_get::<_, Option<i64>>(index)?.map_or(Value::Null, Value::Int),
        Type::INT4 => {
            row.try_get::<_, Option<i32>>(index)?.map_or(Value::Null, |v| Value::Int(v.into()))
        }
        Type::INT2 => {
            row.try_get::<_, Option<i16>>(index)?.map_or(Value::Null, |v| Value::Int(v.into()))
        }
        Type::BOOL => {
            row.try_get::<_, Option<bool>>(index)?.map_or(Value::Null, |v| Value::Int(i64::from(v)))
        }
        Type::BYTEA => row.try_get::<_, Option<Vec<u8>>>(index)?.map_or(Value::Null, Value::Blob),
        _ => row.try_get::<_, Option<String>>(index)?.map_or(Value::Null, Value::Text),
    })
}

impl Database for PostgresDatabase {
    fn name(&self) -> &'static str {
        "PostgreSQL"
    }

    fn execute(&mut self, sql: &str, values: &[Param<'_>]) -> Result<u64, JdbcError> {
        let statement = self.statement(sql)?;
        self.client
            .execute(&statement, &params(values))
            .map_err(|e| self.error(&format!("running `{}`", short(sql)), e))
    }

    fn query(&mut self, sql: &str, values: &[Param<'_>]) -> Result<Vec<Row>, JdbcError> {
        let statement = self.statement(sql)?;
        let rows = self
            .client
            .query(&statement, &params(values))
            .map_err(|e| self.error(&format!("running `{}`", short(sql)), e))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut values = Vec::with_capacity(row.len());
            for (index, column) in row.columns().iter().enumerate() {
                values.push(
                    value(row, index, column.type_())
                        .map_err(|e| self.error(&format!("reading `{}`", short(sql)), e))?,
                );
            }
            out.push(values);
        }
        Ok(out)
    }

    fn execute_batch(&mut self, sql: &str) -> Result<(), JdbcError> {
        self.client
            .batch_execute(sql)
            .map_err(|e| self.error(&format!("running `{}`", short(sql)), e))
    }

    fn ddl(&self, portable: &str) -> String {
        portable.replace("{blob}", "BYTEA").replace("{without_rowid}", "")
    }

    fn size_bytes(&mut self) -> Result<u64, JdbcError> {
        let rows = self.query("SELECT pg_database_size(current_database())", &[])?;
        let size = rows.first().and_then(|row| row.first()).map(|v| v.int("pg_database_size"));
        Ok(size.transpose()?.map_or(0, |size| u64::try_from(size).unwrap_or(0)))
    }

    fn sync(&mut self) -> Result<(), JdbcError> {
        Ok(())
    }

    fn is_broken(&self) -> bool {
        self.client.is_closed()
    }
}
