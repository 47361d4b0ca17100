//! `[store] url`: which database the SQL store uses.
//!
//! - `sqlite://PATH`: a SQLite database file; a relative `PATH` is resolved against a base
//!   directory (the broker passes its `data_dir`). `sqlite:///var/lib/ferromq/store.db` is
//!   absolute.
//! - `postgres://user:password@host:port/database` (or `postgresql://`): a PostgreSQL
//!   server, in the connection-URI form libpq documents (query parameters such as
//!   `?connect_timeout=10` included).

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use crate::error::JdbcError;

/// How long connecting to PostgreSQL may take unless the url says otherwise: long enough for
/// a loaded server, short enough that a broker pointed at a dead address says so quickly.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A parsed store url.
#[derive(Clone)]
pub enum Target {
    Sqlite(PathBuf),
    Postgres {
        config: Box<postgres::Config>,
        /// `host:port/database` for messages: never the password.
        display: String,
    },
}

impl Target {
    /// Parses `url`, resolving a relative SQLite path against `base`.
    pub fn parse(url: &str, base: &Path) -> Result<Target, JdbcError> {
        let invalid =
            |reason: &str| JdbcError::Url { url: redact(url), reason: reason.to_string() };
        if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(invalid("the path is empty"));
            }
            let path = Path::new(path);
            return Ok(Target::Sqlite(if path.is_absolute() {
                path.to_path_buf()
            } else {
                base.join(path)
            }));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let mut config =
                postgres::Config::from_str(url).map_err(|e| invalid(&e.to_string()))?;
            if config.get_user().is_none_or(str::is_empty) {
                return Err(invalid("it names no user"));
            }
            if config.get_connect_timeout().is_none() {
                config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
            }
            if config.get_application_name().is_none() {
                config.application_name("ferromq");
            }
            let display = display(&config);
            return Ok(Target::Postgres { config: Box::new(config), display });
        }
        Err(invalid("unknown scheme"))
    }

    /// What messages call this database.
    pub fn describe(&self) -> String {
        match self {
            Target::Sqlite(path) => format!("sqlite://{}", path.display()),
            Target::Postgres { display, .. } => format!("postgres://{display}"),
        }
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

fn display(config: &postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(postgres::config::Host::Tcp(host)) => host.clone(),
        Some(postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("");
    let database = config.get_dbname().unwrap_or(user);
    format!("{user}@{host}:{port}/{database}")
}

/// `url` without its password, for error messages and logs.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let Some((credentials, host)) = rest.split_once('@') else { return url.to_string() };
    match credentials.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_sqlite_path_is_under_the_base_directory() {
        let base = Path::new("/data");
        match Target::parse("sqlite://store/ferromq.db", base).expect("valid") {
            Target::Sqlite(path) => assert_eq!(path, Path::new("/data/store/ferromq.db")),
            other => panic!("{other:?}"),
        }
        match Target::parse("sqlite:///abs/ferromq.db", base).expect("valid") {
            Target::Sqlite(path) => assert_eq!(path, Path::new("/abs/ferromq.db")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn postgres_url_is_described_without_its_password() {
        let target =
            Target::parse("postgres://broker:secret@127.0.0.1:5433/ferromq", Path::new("/"))
                .expect("valid");
        assert_eq!(target.describe(), "postgres://broker@127.0.0.1:5433/ferromq");
        assert!(!format!("{target:?}").contains("secret"));
    }

    #[test]
    fn bad_urls_are_refused_with_the_reason() {
        for url in
            ["mysql://x", "sqlite://", "postgres://:pw@host/db", "postgres://u:p@host:notaport/db"]
        {
            let error = Target::parse(url, Path::new("/")).expect_err(url).to_string();
            assert!(error.contains("invalid store url"), "{url}: {error}");
        }
        let error =
            Target::parse("postgres://u:secret@host:x/db", Path::new("/")).expect_err("bad port");
        assert!(!error.to_string().contains("secret"), "{error}");
    }
}
