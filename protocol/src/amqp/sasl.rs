//! The SASL layer (the spec, part 5.3): the frames of the authentication exchange that
//! follows the SASL protocol header, and the initial responses of the PLAIN (RFC 4616) and
//! ANONYMOUS (RFC 4505) mechanisms.
//!
//! The exchange: the server sends [`SaslMechanisms`], the client [`SaslInit`] (its choice
//! and initial response), then zero or more [`SaslChallenge`] / [`SaslResponse`] rounds,
//! and the server ends it with [`SaslOutcome`]. Both sides then start over with the AMQP
//! protocol header.

use bytes::Bytes;

use super::composite::{describe_descriptor, number_enum, Composite, FieldReader, FieldWriter};
use super::error::WireError;
use super::types::{Symbol, Value};

/// Any SASL frame body.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)] // The variants are the frames they hold.
pub enum SaslFrame {
    Mechanisms(SaslMechanisms),
    Init(SaslInit),
    Challenge(SaslChallenge),
    Response(SaslResponse),
    Outcome(SaslOutcome),
}

impl SaslFrame {
    /// Reads a SASL frame body from its described list.
    pub fn from_value(value: Value) -> Result<SaslFrame, WireError> {
        let Value::Described(described) = &value else {
            return Err(WireError::UnexpectedValue {
                expected: "a SASL frame",
                found: value.type_name().to_owned(),
            });
        };
        let d = &described.descriptor;
        Ok(if SaslMechanisms::is_described_by(d) {
            SaslFrame::Mechanisms(SaslMechanisms::from_value(value)?)
        } else if SaslInit::is_described_by(d) {
            SaslFrame::Init(SaslInit::from_value(value)?)
        } else if SaslChallenge::is_described_by(d) {
            SaslFrame::Challenge(SaslChallenge::from_value(value)?)
        } else if SaslResponse::is_described_by(d) {
            SaslFrame::Response(SaslResponse::from_value(value)?)
        } else if SaslOutcome::is_described_by(d) {
            SaslFrame::Outcome(SaslOutcome::from_value(value)?)
        } else {
            return Err(WireError::UnexpectedValue {
                expected: "a SASL frame",
                found: describe_descriptor(d),
            });
        })
    }

    /// The described list for this frame.
    pub fn to_value(&self) -> Value {
        match self {
            SaslFrame::Mechanisms(f) => f.to_value(),
            SaslFrame::Init(f) => f.to_value(),
            SaslFrame::Challenge(f) => f.to_value(),
            SaslFrame::Response(f) => f.to_value(),
            SaslFrame::Outcome(f) => f.to_value(),
        }
    }
}

/// `sasl-mechanisms`: the mechanisms the server offers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SaslMechanisms {
    /// Mechanism names such as `PLAIN` and `ANONYMOUS`, preferred first (mandatory).
    pub mechanisms: Vec<Symbol>,
}

impl Composite for SaslMechanisms {
    const NAME: &'static str = "sasl-mechanisms";
    const CODE: u64 = 0x40;
    const SYMBOL: &'static str = "amqp:sasl-mechanisms:list";

    fn read_fields(f: &mut FieldReader) -> Result<Self, WireError> {
        Ok(SaslMechanisms { mechanisms: f.required("sasl-server-mechanisms")? })
    }

    fn write_fields(&self, f: &mut FieldWriter) {
        f.field(self.mechanisms.clone());
    }
}

/// `sasl-init`: the client's mechanism and initial response.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SaslInit {
    /// The chosen mechanism (mandatory).
    pub mechanism: Symbol,
    /// The mechanism's initial response (for PLAIN: `authzid\0authcid\0passwd`).
    pub initial_response: Option<Bytes>,
    /// The host the client wants to reach.
    pub hostname: Option<String>,
}

impl Composite for SaslInit {
    const NAME: &'static str = "sasl-init";
    const CODE: u64 = 0x41;
    const SYMBOL: &'static str = "amqp:sasl-init:list";

    fn read_fields(f: &mut FieldReader) -> Result<Self, WireError> {
        Ok(SaslInit {
            mechanism: f.required("mechanism")?,
            initial_response: f.optional("initial-response")?,
            hostname: f.optional("hostname")?,
        })
    }

    fn write_fields(&self, f: &mut FieldWriter) {
        f.field(self.mechanism.clone()).optional(&self.initial_response).optional(&self.hostname);
    }
}

/// `sasl-challenge`: the server's challenge.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SaslChallenge {
    /// The challenge (mandatory).
    pub challenge: Bytes,
}

impl Composite for SaslChallenge {
    const NAME: &'static str = "sasl-challenge";
    const CODE: u64 = 0x42;
    const SYMBOL: &'static str = "amqp:sasl-challenge:list";

    fn read_fields(f: &mut FieldReader) -> Result<Self, WireError> {
        Ok(SaslChallenge { challenge: f.required("challenge")? })
    }

    fn write_fields(&self, f: &mut FieldWriter) {
        f.field(self.challenge.clone());
    }
}

/// `sasl-response`: the client's answer to a challenge.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SaslResponse {
    /// The response (mandatory).
    pub response: Bytes,
}

impl Composite for SaslResponse {
    const NAME: &'static str = "sasl-response";
    const CODE: u64 = 0x43;
    const SYMBOL: &'static str = "amqp:sasl-response:list";

    fn read_fields(f: &mut FieldReader) -> Result<Self, WireError> {
        Ok(SaslResponse { response: f.required("response")? })
    }

    fn write_fields(&self, f: &mut FieldWriter) {
        f.field(self.response.clone());
    }
}

/// The result of the exchange (ubyte on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SaslCode {
    /// 0: authenticated.
    Ok,
    /// 1: wrong credentials.
    Auth,
    /// 2: a permanent system error.
    Sys,
    /// 3: a permanent system error.
    SysPerm,
    /// 4: a transient system error; try again later.
    SysTemp,
}

impl SaslCode {
    fn from_field(value: Value) -> Result<SaslCode, WireError> {
        number_enum(value, "sasl-code 0 to 4", |code: u8| match code {
            0 => Some(SaslCode::Ok),
            1 => Some(SaslCode::Auth),
            2 => Some(SaslCode::Sys),
            3 => Some(SaslCode::SysPerm),
            4 => Some(SaslCode::SysTemp),
            _ => None,
        })
    }
}

impl From<SaslCode> for Value {
    fn from(code: SaslCode) -> Value {
        Value::Ubyte(code as u8)
    }
}

/// `sasl-outcome`: the server's verdict; the SASL layer ends here.
#[derive(Debug, Clone, PartialEq)]
pub struct SaslOutcome {
    /// The result (mandatory).
    pub code: SaslCode,
    /// Mechanism-specific data for the client.
    pub additional_data: Option<Bytes>,
}

impl Composite for SaslOutcome {
    const NAME: &'static str = "sasl-outcome";
    const CODE: u64 = 0x44;
    const SYMBOL: &'static str = "amqp:sasl-outcome:list";

    fn read_fields(f: &mut FieldReader) -> Result<Self, WireError> {
        Ok(SaslOutcome {
            code: f.required_with("code", SaslCode::from_field)?,
            additional_data: f.optional("additional-data")?,
        })
    }

    fn write_fields(&self, f: &mut FieldWriter) {
        f.field(self.code).optional(&self.additional_data);
    }
}

/// The mechanism names this module knows.
pub mod mechanism {
    /// RFC 4616: a user name and password in the initial response.
    pub const PLAIN: &str = "PLAIN";
    /// RFC 4505: no credentials, optionally a trace string.
    pub const ANONYMOUS: &str = "ANONYMOUS";
}

/// The credentials in a PLAIN initial response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlainCredentials {
    /// The identity to act as; empty means the authenticated one.
    pub authzid: String,
    /// The user name.
    pub authcid: String,
    /// The password.
    pub password: String,
}

/// Parses a PLAIN initial response, `authzid\0authcid\0passwd` in UTF-8 (RFC 4616).
pub fn parse_plain(response: &[u8]) -> Result<PlainCredentials, WireError> {
    let mut parts = response.split(|&b| b == 0);
    let (Some(authzid), Some(authcid), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(WireError::InvalidSaslPlain(
            "expected authzid, authcid and password separated by two NUL bytes",
        ));
    };
    if authcid.is_empty() {
        return Err(WireError::InvalidSaslPlain("the user name (authcid) is empty"));
    }
    let text = |bytes: &[u8]| {
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| WireError::InvalidSaslPlain("a part is not valid UTF-8"))
    };
    Ok(PlainCredentials {
        authzid: text(authzid)?,
        authcid: text(authcid)?,
        password: text(password)?,
    })
}

/// The PLAIN initial response for `user` and `password` (no authzid).
pub fn plain_response(user: &str, password: &str) -> Bytes {
    let mut response = Vec::with_capacity(user.len() + password.len() + 2);
    response.push(0);
    response.extend_from_slice(user.as_bytes());
    response.push(0);
    response.extend_from_slice(password.as_bytes());
    Bytes::from(response)
}

/// The trace string of an ANONYMOUS initial response (RFC 4505: optional, often an email
/// address), lossily decoded; `None` when the client sent none.
pub fn parse_anonymous(response: Option<&[u8]>) -> Option<String> {
    response.filter(|r| !r.is_empty()).map(|r| String::from_utf8_lossy(r).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_splits_into_three_parts() {
        let creds = parse_plain(b"\0guest\0secret").unwrap();
        assert_eq!(creds.authzid, "");
        assert_eq!(creds.authcid, "guest");
        assert_eq!(creds.password, "secret");
        let creds = parse_plain(b"admin\0bob\0").unwrap();
        assert_eq!((creds.authzid.as_str(), creds.password.as_str()), ("admin", ""));
        assert_eq!(parse_plain(&plain_response("u", "p")).unwrap().authcid, "u");
    }

    #[test]
    fn malformed_plain_is_an_error() {
        for bad in [&b""[..], b"guest", b"\0guest", b"a\0b\0c\0d", b"\0\0pw", b"\0\xff\0pw"] {
            assert!(matches!(parse_plain(bad), Err(WireError::InvalidSaslPlain(_))), "{bad:?}");
        }
    }

    #[test]
    fn anonymous_trace_is_optional() {
        assert_eq!(parse_anonymous(None), None);
        assert_eq!(parse_anonymous(Some(b"")), None);
        assert_eq!(parse_anonymous(Some(b"me@example.org")).as_deref(), Some("me@example.org"));
    }
}
