//! TLS for the client: a rustls client (ring as its crypto provider) that checks the broker's
//! certificate against a PEM file of authorities (`--trustStore`, perf's
//! `factory.trustStore`), else against the system's bundle.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

use crate::client::within;
use crate::ClientError;

/// Where Debian (and most Linux systems) keep the system's certificate authorities.
pub const SYSTEM_TRUST_STORE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Connects to `host:port` over TLS, checking the broker's certificate for `host` against
/// the authorities in `trust_store` (PEM), else [`SYSTEM_TRUST_STORE`].
pub async fn connect_tls(
    host: &str,
    port: u16,
    trust_store: Option<&Path>,
    timeout: Duration,
) -> Result<TlsStream<TcpStream>, ClientError> {
    let connector = connector(trust_store.unwrap_or(Path::new(SYSTEM_TRUST_STORE)))?;
    let name = ServerName::try_from(host.to_owned())
        .map_err(|error| tls_error(format!("`{host}` is not a valid server name: {error}")))?;
    let socket = crate::net::connect_tcp(host, port, timeout).await?;
    within(timeout, "the TLS handshake", connector.connect(name, socket))
        .await?
        .map_err(|error| tls_error(format!("the TLS handshake with {host}:{port} failed: {error}")))
}

fn connector(trust_store: &Path) -> Result<TlsConnector, ClientError> {
    let unreadable = |error: &dyn std::fmt::Display| {
        tls_error(format!("cannot read the trust store {}: {error}", trust_store.display()))
    };
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_file_iter(trust_store).map_err(|e| unreadable(&e))? {
        roots.add(certificate.map_err(|e| unreadable(&e))?).map_err(|e| unreadable(&e))?;
    }
    if roots.is_empty() {
        return Err(unreadable(&"it holds no certificate"));
    }
    let config = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|error| tls_error(error.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

fn tls_error(message: String) -> ClientError {
    ClientError::Tls { message }
}
