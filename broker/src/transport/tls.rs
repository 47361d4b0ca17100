//! TLS for connectors: one rustls server configuration per TLS connector, built when the
//! broker starts from `[tls]` and the connector's own options, so that a missing file, a key
//! that does not fit or an unknown cipher suite stops the start with a clear message rather
//! than failing each handshake later.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use conf::{ConnectorUri, TlsConfig, TlsVersion};
use rustls::crypto::{ring, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite, SupportedProtocolVersion};

/// Why a TLS connector could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsSetupError {
    /// A PEM file that cannot be read or parsed.
    #[error("cannot read the {what} from {path} ([tls] {key}): {reason}")]
    File { key: &'static str, what: &'static str, path: PathBuf, reason: String },
    /// A PEM file without what it should hold.
    #[error("{path} ([tls] {key}) holds no {what}")]
    Empty { key: &'static str, what: &'static str, path: PathBuf },
    /// A cipher suite name the TLS library does not have.
    #[error("unknown cipher suite `{name}`; available: {available}")]
    UnknownCipherSuite { name: String, available: String },
    /// The certificate, key, versions or suites do not go together.
    #[error("{0}")]
    Rejected(String),
}

/// The server configuration of the TLS connector `uri`, or of the admin endpoint (`None`:
/// `[tls]` alone, without client certificates).
pub fn server_config(
    tls: &TlsConfig,
    uri: Option<&ConnectorUri>,
) -> Result<Arc<ServerConfig>, TlsSetupError> {
    let none = conf::ConnectorOptions::default();
    let options = uri.map_or(&none, |uri| &uri.options);
    let suite_names = options.enabled_cipher_suites.as_ref().unwrap_or(&tls.cipher_suites);
    let provider = Arc::new(CryptoProvider {
        cipher_suites: cipher_suites(suite_names)?,
        ..ring::default_provider()
    });
    let versions = protocol_versions(options.enabled_protocols.as_ref().unwrap_or(&tls.protocols));
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|error| {
            TlsSetupError::Rejected(format!(
                "the cipher suites and protocol versions have nothing in common: {error}"
            ))
        })?;
    let need = options.need_client_auth == Some(true);
    let want = options.want_client_auth == Some(true);
    let builder = if need || want {
        let roots = client_roots(&tls.client_ca)?;
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
        // wantClientAuth: check a certificate when one comes, let clients without one in.
        let verifier = if need { verifier } else { verifier.allow_unauthenticated() };
        let verifier = verifier.build().map_err(|error| {
            TlsSetupError::Rejected(format!("client certificate verification: {error}"))
        })?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let chain = certificate_chain(&tls.certificate)?;
    let key = private_key(&tls.private_key)?;
    let mut config = builder.with_single_cert(chain, key).map_err(|error| {
        TlsSetupError::Rejected(format!(
            "the certificate ({}) and private key ({}) do not go together: {error}",
            tls.certificate.display(),
            tls.private_key.display()
        ))
    })?;
    // No TLS 1.3 session tickets. They arrive after the handshake, while a client may be
    // sending its first frame: stomp.py reads on one thread and writes on another, and
    // OpenSSL's handling of a ticket read during a write failed its CONNECT ("[SSL] internal
    // error", once a segfault) about one connection in ten. Broker connections live long, so
    // resumption saves little; full handshakes it is.
    config.send_tls13_tickets = 0;
    Ok(Arc::new(config))
}

fn protocol_versions(versions: &[TlsVersion]) -> Vec<&'static SupportedProtocolVersion> {
    versions
        .iter()
        .map(|version| match version {
            TlsVersion::Tls12 => &rustls::version::TLS12,
            TlsVersion::Tls13 => &rustls::version::TLS13,
        })
        .collect()
}

/// The suites named, in the order given (the server's preference); none named: the library's
/// defaults. Names are IANA's, as Java writes them (`TLS_AES_128_GCM_SHA256`), or rustls's
/// (`TLS13_AES_128_GCM_SHA256`).
fn cipher_suites(names: &[String]) -> Result<Vec<SupportedCipherSuite>, TlsSetupError> {
    if names.is_empty() {
        return Ok(ring::DEFAULT_CIPHER_SUITES.to_vec());
    }
    names
        .iter()
        .map(|name| {
            ring::ALL_CIPHER_SUITES
                .iter()
                .find(|suite| suite_names(suite).iter().any(|known| known == name.trim()))
                .copied()
                .ok_or_else(|| TlsSetupError::UnknownCipherSuite {
                    name: name.clone(),
                    available: ring::ALL_CIPHER_SUITES
                        .iter()
                        .map(|suite| suite_names(suite)[0].clone())
                        .collect::<Vec<_>>()
                        .join(", "),
                })
        })
        .collect()
}

/// A suite's IANA name first, then rustls's when it differs.
fn suite_names(suite: &SupportedCipherSuite) -> Vec<String> {
    let rustls_name = suite.suite().as_str().unwrap_or("unknown").to_owned();
    match rustls_name.strip_prefix("TLS13_") {
        Some(rest) => vec![format!("TLS_{rest}"), rustls_name],
        None => vec![rustls_name],
    }
}

fn certificate_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    const KEY: &str = "certificate";
    const WHAT: &str = "certificate chain";
    let chain = CertificateDer::pem_file_iter(path)
        .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
        .map_err(|error| file_error(KEY, WHAT, path, error))?;
    if chain.is_empty() {
        return Err(TlsSetupError::Empty { key: KEY, what: WHAT, path: path.to_owned() });
    }
    Ok(chain)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsSetupError> {
    PrivateKeyDer::from_pem_file(path).map_err(|error| match error {
        rustls::pki_types::pem::Error::NoItemsFound => {
            TlsSetupError::Empty { key: "private_key", what: "private key", path: path.to_owned() }
        }
        error => file_error("private_key", "private key", path, error),
    })
}

fn client_roots(path: &Path) -> Result<RootCertStore, TlsSetupError> {
    const KEY: &str = "client_ca";
    const WHAT: &str = "client certificate authorities";
    let mut roots = RootCertStore::empty();
    for certificate in
        CertificateDer::pem_file_iter(path).map_err(|error| file_error(KEY, WHAT, path, error))?
    {
        let certificate = certificate.map_err(|error| file_error(KEY, WHAT, path, error))?;
        roots.add(certificate).map_err(|error| TlsSetupError::File {
            key: KEY,
            what: WHAT,
            path: path.to_owned(),
            reason: error.to_string(),
        })?;
    }
    if roots.is_empty() {
        return Err(TlsSetupError::Empty { key: KEY, what: WHAT, path: path.to_owned() });
    }
    Ok(roots)
}

fn file_error(
    key: &'static str,
    what: &'static str,
    path: &Path,
    error: rustls::pki_types::pem::Error,
) -> TlsSetupError {
    let reason = match error {
        rustls::pki_types::pem::Error::Io(error) => error.to_string(),
        other => format!("not valid PEM ({other:?})"),
    };
    TlsSetupError::File { key, what, path: path.to_owned(), reason }
}
