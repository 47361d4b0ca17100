//! Opening TCP connections: every address a host name resolves to is tried in turn.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpStream;

use crate::client::within;
use crate::ClientError;

/// Connects to `host:port`, trying each address the name resolves to (in the resolver's
/// order) until one accepts; each attempt may take up to `timeout`. So `localhost` works
/// whether the broker listens on `127.0.0.1` or `::1`, whichever the resolver lists first.
/// Sets `TCP_NODELAY`.
pub async fn connect_tcp(
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<TcpStream, ClientError> {
    let addresses: Vec<SocketAddr> =
        within(timeout, format!("resolving {host}"), tokio::net::lookup_host((host, port)))
            .await??
            .collect();
    connect_any(&addresses, timeout).await
}

/// Connects to the first of `addresses` that accepts within `timeout`; the last error if
/// none does.
pub(crate) async fn connect_any(
    addresses: &[SocketAddr],
    timeout: Duration,
) -> Result<TcpStream, ClientError> {
    let mut last_error = None;
    for address in addresses {
        let attempt = within(
            timeout,
            format!("the TCP connection to {address}"),
            TcpStream::connect(address),
        )
        .await;
        match attempt {
            Ok(Ok(stream)) => {
                stream.set_nodelay(true)?;
                return Ok(stream);
            }
            Ok(Err(error)) => {
                tracing::debug!(%address, %error, "connection attempt failed");
                last_error = Some(ClientError::from(error));
            }
            Err(timeout) => last_error = Some(timeout),
        }
    }
    Err(last_error.unwrap_or_else(|| {
        ClientError::Io(std::sync::Arc::new(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the host name resolves to no address",
        )))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_address_is_tried_in_turn() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let open = listener.local_addr().expect("address");
        // Nothing listens on the first: a port just released.
        let closed = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            probe.local_addr().expect("address")
        };
        let v6_first: SocketAddr = format!("[::1]:{}", closed.port()).parse().expect("address");
        let stream = connect_any(&[v6_first, closed, open], Duration::from_secs(5))
            .await
            .expect("the third address accepts");
        assert_eq!(stream.peer_addr().expect("peer"), open);

        let error = connect_any(&[closed], Duration::from_secs(5)).await.expect_err("refused");
        assert!(matches!(error, ClientError::Io(_)), "{error:?}");
        let error = connect_any(&[], Duration::from_secs(5)).await.expect_err("no address");
        assert!(error.to_string().contains("no address"), "{error}");
    }

    #[tokio::test]
    async fn localhost_reaches_a_broker_on_ipv4_loopback() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        connect_tcp("localhost", port, Duration::from_secs(5)).await.expect("connects");
    }
}
