//! `[tls]`: the certificate, key and trust every TLS connector (`ssl://`, `nio+ssl://`,
//! `stomp+ssl://`, `stomp+nio+ssl://`, `amqp+ssl://`, `mqtt+ssl://`, `mqtt+nio+ssl://`)
//! serves with, like ActiveMQ's broker-wide `<sslContext>`. Each connector may narrow the
//! protocol versions and cipher suites, and ask for client certificates, with ActiveMQ's URI
//! options (`needClientAuth=true`, `wantClientAuth=true`, `transport.enabledProtocols=TLSv1.3`,
//! `transport.enabledCipherSuites=...`).
//!
//! Files are PEM, as most operators' certificates already are (a Java key store converts with
//! `keytool -importkeystore ... -deststoretype PKCS12` and `openssl pkcs12 -nodes`). They are
//! read when the broker starts, not here: this crate knows nothing of TLS libraries.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::validate::Invalid;

/// `[tls]`: what TLS connectors present and whom they trust.
///
/// A path left empty (the default; TOML has no null) is not set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// The broker's certificate chain, PEM: its own certificate first, then the
    /// intermediates. Needed as soon as one connector uses TLS.
    pub certificate: PathBuf,
    /// The private key of [`certificate`](Self::certificate), PEM (PKCS#8, PKCS#1 or SEC1),
    /// unencrypted: keep the file readable by the broker's user only.
    pub private_key: PathBuf,
    /// Certificate authorities, PEM, that client certificates must chain to. Needed by
    /// connectors with `needClientAuth=true` or `wantClientAuth=true`.
    pub client_ca: PathBuf,
    /// Protocol versions offered, for connectors without `transport.enabledProtocols`.
    /// Default both TLS 1.2 and TLS 1.3; older versions are not available (they are unsafe).
    pub protocols: Vec<TlsVersion>,
    /// Cipher suites offered (IANA names such as `TLS_AES_256_GCM_SHA384` or
    /// `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`), for connectors without
    /// `transport.enabledCipherSuites`. Default empty: the TLS library's safe defaults
    /// (AEAD suites with forward secrecy only). Checked when the broker starts.
    pub cipher_suites: Vec<String>,
}

/// A TLS protocol version, written as Java writes it (`TLSv1.2`, `TLSv1.3`) so that values
/// copied from an `activemq.xml` work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TlsVersion {
    /// `TLSv1.2`
    Tls12,
    /// `TLSv1.3`
    Tls13,
}

impl TlsVersion {
    /// Java's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "TLSv1.2",
            TlsVersion::Tls13 => "TLSv1.3",
        }
    }
}

impl fmt::Display for TlsVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TlsVersion {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "tlsv1.2" | "tls1.2" | "1.2" => Ok(TlsVersion::Tls12),
            "tlsv1.3" | "tls1.3" | "1.3" => Ok(TlsVersion::Tls13),
            "sslv3" | "tlsv1" | "tlsv1.1" | "tls1.0" | "tls1.1" | "1.0" | "1.1" => Err(format!(
                "`{text}` is not offered: it is broken or deprecated (RFC 8996); use TLSv1.2 or \
                 TLSv1.3"
            )),
            _ => Err(format!("unknown TLS version `{text}`; use TLSv1.2 or TLSv1.3")),
        }
    }
}

impl Serialize for TlsVersion {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for TlsVersion {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            certificate: PathBuf::new(),
            private_key: PathBuf::new(),
            client_ca: PathBuf::new(),
            protocols: vec![TlsVersion::Tls12, TlsVersion::Tls13],
            cipher_suites: Vec::new(),
        }
    }
}

impl TlsConfig {
    /// Checks what a TLS connector needs of this section: called only when one exists;
    /// `connector` names it in the error.
    pub(crate) fn check_for_connector(
        &self,
        connector: &str,
        wants_client_certificates: bool,
    ) -> Result<(), Invalid> {
        let missing = |key: &str, what: &str| {
            Invalid::new(
                format!("tls.{key}"),
                format!(
                    "{connector} uses TLS and needs {what}: set [tls] certificate and private_key \
                     to PEM files"
                ),
            )
        };
        if self.certificate.as_os_str().is_empty() {
            return Err(missing("certificate", "the broker's certificate chain"));
        }
        if self.private_key.as_os_str().is_empty() {
            return Err(missing("private_key", "the certificate's private key"));
        }
        if wants_client_certificates && self.client_ca.as_os_str().is_empty() {
            return Err(Invalid::new(
                "tls.client_ca",
                format!(
                    "{connector} asks for client certificates (needClientAuth or \
                     wantClientAuth) and needs the authorities they chain to: set [tls] \
                     client_ca to a PEM file"
                ),
            ));
        }
        Ok(())
    }

    /// Checks the section on its own.
    pub(crate) fn check(&self, section: &str) -> Result<(), Invalid> {
        if self.protocols.is_empty() {
            return Err(Invalid::new(
                format!("{section}.protocols"),
                "at least one version is needed: [\"TLSv1.2\", \"TLSv1.3\"]",
            ));
        }
        if self.cipher_suites.iter().any(|suite| suite.trim().is_empty()) {
            return Err(Invalid::new(
                format!("{section}.cipher_suites"),
                "a cipher suite name is empty",
            ));
        }
        Ok(())
    }
}
