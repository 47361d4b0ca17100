//! STOMP protocol versions and their negotiation.

use std::fmt;

use super::WireError;

/// A STOMP protocol version. Ordered, so the highest common version is a `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    /// STOMP 1.0: no header escaping, no NACK, no heart-beats.
    V1_0,
    /// STOMP 1.1: header escaping (`\n`, `\c`, `\\`), NACK, heart-beats.
    V1_1,
    /// STOMP 1.2: adds the `\r` escape, CRLF line ends and ACK by the `ack` header.
    V1_2,
}

impl Version {
    /// Every version, oldest first.
    pub const ALL: [Version; 3] = [Version::V1_0, Version::V1_1, Version::V1_2];

    /// The version as written in `accept-version` and `version` headers, e.g. `"1.2"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1_0 => "1.0",
            Version::V1_1 => "1.1",
            Version::V1_2 => "1.2",
        }
    }

    /// The version spelled by `s` (surrounding whitespace ignored), if it is one we speak.
    pub fn parse(s: &str) -> Option<Version> {
        let s = s.trim();
        Version::ALL.into_iter().find(|version| version.as_str() == s)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Picks the highest version both sides accept from CONNECT's `accept-version` header
/// (a comma-separated list such as `"1.0,1.1,1.2"`; absent means 1.0, as the spec says).
/// Versions we do not know are ignored; if none is left, the answer is
/// [`WireError::UnsupportedVersion`] carrying the header as received.
pub fn negotiate_version(accept_version: Option<&str>) -> Result<Version, WireError> {
    let Some(accepted) = accept_version else {
        return Ok(Version::V1_0);
    };
    accepted
        .split(',')
        .filter_map(Version::parse)
        .max()
        .ok_or_else(|| WireError::UnsupportedVersion(accepted.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_picks_the_highest_common_version() {
        assert_eq!(negotiate_version(Some("1.0,1.1,1.2")), Ok(Version::V1_2));
        assert_eq!(negotiate_version(Some("1.2,1.0")), Ok(Version::V1_2));
        assert_eq!(negotiate_version(Some("1.1")), Ok(Version::V1_1));
        assert_eq!(negotiate_version(Some("1.0")), Ok(Version::V1_0));
        assert_eq!(negotiate_version(Some(" 1.0 , 1.1 ")), Ok(Version::V1_1));
    }

    #[test]
    fn absent_accept_version_means_1_0() {
        assert_eq!(negotiate_version(None), Ok(Version::V1_0));
    }

    #[test]
    fn unknown_versions_are_ignored_and_none_in_common_is_an_error() {
        assert_eq!(negotiate_version(Some("2.0,1.1")), Ok(Version::V1_1));
        assert_eq!(
            negotiate_version(Some("2.0")),
            Err(WireError::UnsupportedVersion("2.0".into()))
        );
        assert_eq!(negotiate_version(Some("")), Err(WireError::UnsupportedVersion(String::new())));
    }

    #[test]
    fn versions_are_ordered_and_print_as_on_the_wire() {
        assert!(Version::V1_0 < Version::V1_1 && Version::V1_1 < Version::V1_2);
        assert_eq!(Version::V1_2.to_string(), "1.2");
        assert_eq!(Version::parse("1.1"), Some(Version::V1_1));
        assert_eq!(Version::parse("1.3"), None);
    }
}
