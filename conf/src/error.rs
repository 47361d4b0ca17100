//! The one error type of this crate: where the problem is (origin, line, key) and what it is.

use std::fmt;
use std::io;
use std::path::Path;

/// Origin of errors from [`Config::validate`](crate::Config::validate), which does not know where
/// the values came from. Callers that do (the command line) replace it.
pub const UNKNOWN_ORIGIN: &str = "configuration";

/// A configuration the broker refuses to start with.
///
/// Displays as `{origin}:{line}: `{key}`: {reason}`, e.g.
/// ``ferromq.toml:7: `transport.max_connections`: must be at least 1``; `:{line}` is left out
/// when unknown and `` `{key}`: `` when the problem is not one key's (a TOML syntax error). An
/// unreadable file displays as `cannot read configuration file {origin}: {io error}`.
#[derive(Debug, thiserror::Error)]
pub struct ConfigError {
    /// Where the configuration came from: a file name, `--connector`, or [`UNKNOWN_ORIGIN`].
    pub origin: String,
    /// 1-based line in `origin`, when it is a file and the line is known.
    pub line: Option<usize>,
    /// Dotted path of the offending key, as written in the file: `transport.max_frame_size`,
    /// `transport.connectors[1]`. Empty when the error is not about one key.
    pub key: String,
    /// What is wrong, written for the operator.
    pub reason: String,
    /// Set when the file could not be read at all.
    #[source]
    io: Option<io::Error>,
}

impl ConfigError {
    /// An error about `key` in `origin`.
    pub fn new(
        origin: impl Into<String>,
        line: Option<usize>,
        key: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        ConfigError {
            origin: origin.into(),
            line,
            key: key.into(),
            reason: reason.into(),
            io: None,
        }
    }

    /// The configuration file at `path` could not be read.
    pub fn unreadable(path: &Path, error: io::Error) -> Self {
        ConfigError {
            origin: path.display().to_string(),
            line: None,
            key: String::new(),
            reason: error.to_string(),
            io: Some(error),
        }
    }

    /// The I/O error, when the file could not be read.
    pub fn io_error(&self) -> Option<&io::Error> {
        self.io.as_ref()
    }

    /// The same error, attributed to `origin` (e.g. `--connector` after a command-line override).
    pub fn with_origin(mut self, origin: impl Into<String>) -> Self {
        self.origin = origin.into();
        self
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(io) = &self.io {
            return write!(f, "cannot read configuration file {}: {io}", self.origin);
        }
        f.write_str(&self.origin)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if !self.key.is_empty() {
            write!(f, ": `{}`", self.key)?;
        }
        write!(f, ": {}", self.reason)
    }
}
