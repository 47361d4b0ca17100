//! A throwaway PKI for the TLS tests: made once per test process by `scripts/test-pki` (openssl
//! and the JDK's keytool) in a temporary directory, and TLS clients that trust it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use anyhow::{bail, Context};
use conf::Config;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore, SupportedProtocolVersion};
use tokio_rustls::TlsConnector;

/// The certificates and keys `scripts/test-pki` makes (see it for what each is).
pub struct TestPki {
    dir: tempfile::TempDir,
}

static PKI: OnceLock<Result<TestPki, String>> = OnceLock::new();

impl TestPki {
    /// The process's PKI, made on first use.
    pub fn get() -> anyhow::Result<&'static TestPki> {
        match PKI.get_or_init(|| TestPki::make().map_err(|error| format!("{error:#}"))) {
            Ok(pki) => Ok(pki),
            Err(error) => bail!("making the test PKI: {error}"),
        }
    }

    fn make() -> anyhow::Result<TestPki> {
        let dir = tempfile::Builder::new().prefix("ferromq-test-pki-").tempdir()?;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/test-pki");
        let output = Command::new("bash")
            .arg(&script)
            .arg(dir.path())
            .output()
            .with_context(|| format!("running {}", script.display()))?;
        if !output.status.success() {
            bail!(
                "{} failed ({}): {}{} (it needs openssl and the JDK's keytool)",
                script.display(),
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(TestPki { dir })
    }

    /// The file `name` of the PKI, e.g. `ca.pem`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Points `[tls]` at the broker's certificate and key, and trusts the test CA for client
    /// certificates.
    pub fn configure(&self, config: &mut Config) {
        config.tls.certificate = self.path("server.pem");
        config.tls.private_key = self.path("server-key.pem");
        config.tls.client_ca = self.path("ca.pem");
    }

    /// The JVM options that make the ActiveMQ JMS client trust the test CA (and, with
    /// `client_certificate`, present the client certificate).
    pub fn jvm_options(&self, client_certificate: bool) -> Vec<String> {
        let mut options = vec![
            format!("-Djavax.net.ssl.trustStore={}", self.path("truststore.p12").display()),
            "-Djavax.net.ssl.trustStorePassword=password".to_owned(),
            "-Djavax.net.ssl.trustStoreType=PKCS12".to_owned(),
        ];
        if client_certificate {
            options.extend([
                format!("-Djavax.net.ssl.keyStore={}", self.path("client.p12").display()),
                "-Djavax.net.ssl.keyStorePassword=password".to_owned(),
                "-Djavax.net.ssl.keyStoreType=PKCS12".to_owned(),
            ]);
        }
        options
    }

    /// A rustls client that trusts the test CA, offers `versions` and presents the client
    /// certificate `identity` (`"client"`, `"rogue"`) if given.
    pub fn client(
        &self,
        versions: &[&'static SupportedProtocolVersion],
        identity: Option<&str>,
    ) -> anyhow::Result<TlsConnector> {
        let mut roots = RootCertStore::empty();
        for certificate in CertificateDer::pem_file_iter(self.path("ca.pem"))? {
            roots.add(certificate?)?;
        }
        let builder = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_protocol_versions(versions)?
            .with_root_certificates(roots);
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some(name) => {
                let chain = CertificateDer::pem_file_iter(self.path(&format!("{name}.pem")))?
                    .collect::<Result<Vec<_>, _>>()?;
                let key = PrivateKeyDer::from_pem_file(self.path(&format!("{name}-key.pem")))?;
                builder.with_client_auth_cert(chain, key)?
            }
        };
        Ok(TlsConnector::from(Arc::new(config)))
    }

    /// Connects to `addr` over TLS as `localhost` with the default versions and no client
    /// certificate.
    pub async fn connect(
        &self,
        addr: std::net::SocketAddr,
    ) -> anyhow::Result<TlsStream<TcpStream>> {
        self.connect_with(addr, tokio_rustls::rustls::DEFAULT_VERSIONS, None).await
    }

    /// Connects to `addr` over TLS as `localhost`, with [`client`](Self::client)'s choices.
    pub async fn connect_with(
        &self,
        addr: std::net::SocketAddr,
        versions: &[&'static SupportedProtocolVersion],
        identity: Option<&str>,
    ) -> anyhow::Result<TlsStream<TcpStream>> {
        let connector = self.client(versions, identity)?;
        let socket = TcpStream::connect(addr).await?;
        let name = ServerName::try_from("localhost")?;
        let handshake = connector.connect(name, socket);
        let stream = tokio::time::timeout(crate::ARRIVES, handshake)
            .await
            .context("the TLS handshake did not finish")??;
        Ok(stream)
    }
}
