//! A tiny HTTP/1.1 client for the admin endpoint, for `ferromq dstat`, `browse`, `purge`,
//! `query` and the tests: one request per connection (`Connection: close`), the answer read
//! to its end. It speaks only to ferromq's endpoint (`http://`, or `https://` when it serves
//! `[admin] tls`), so it needs none of a general client's features.
//!
//! State-changing requests ([`AdminClient::post_json`], [`AdminClient::delete_json`]) carry
//! the broker's admin token in `X-Ferromq-Token`, read once from `GET /api/token` and kept.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{BrokerStats, DestinationStats, ErrorBody};

/// How long a request may take, connecting included.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read (a broker with very many destinations stays well below).
const MAX_ANSWER: u64 = 256 << 20;
/// The header that carries the admin token on state-changing requests.
const TOKEN_HEADER: &str = "X-Ferromq-Token";

/// Why a request to the admin endpoint failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdminClientError {
    #[error("invalid admin URL `{url}`: {reason}")]
    Url { url: String, reason: String },
    #[error(
        "no broker answers at {url} ({source}): is ferromq running there with its admin \
         endpoint on ([admin] enabled and bind in its configuration)?"
    )]
    Connect {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{url} did not answer within {} s", TIMEOUT.as_secs())]
    Timeout { url: String },
    #[error("reading the answer of {url} failed: {source}")]
    Io {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{url} answered with something that is not HTTP: {reason}")]
    Protocol { url: String, reason: String },
    #[error("{url} answered {status}: {message}")]
    Status { url: String, status: u16, message: String },
    #[error("cannot read the answer of {url}: {reason}")]
    Decode { url: String, reason: String },
}

/// An HTTP answer: its status and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpAnswer {
    pub status: u16,
    /// Header names in lower case, with their values.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpAnswer {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }
}

/// The admin endpoint of one broker, by its base URL (`http://127.0.0.1:8161`).
#[derive(Debug, Clone)]
pub struct AdminClient {
    url: String,
    /// `host:port`, to connect to and to send as `Host`.
    authority: String,
    /// `https://`.
    tls: bool,
    /// For `https://`: the PEM authorities the endpoint's certificate must chain to; `None`:
    /// the system's.
    trust_store: Option<std::path::PathBuf>,
    /// `Authorization: Basic ...`, sent with every request when set.
    authorization: Option<String>,
    /// The broker's admin token once read (`GET /api/token`), for POST and DELETE.
    token: std::sync::OnceLock<String>,
}

impl AdminClient {
    /// Parses `http://HOST[:PORT]` or `https://HOST[:PORT]` (port 8161 when left out; a
    /// trailing `/` is ignored).
    pub fn new(url: &str) -> Result<AdminClient, AdminClientError> {
        let invalid =
            |reason: &str| AdminClientError::Url { url: url.to_owned(), reason: reason.to_owned() };
        let (scheme, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => ("http", rest),
            (None, Some(rest)) => ("https", rest),
            (None, None) => return Err(invalid("it must start with http:// or https://")),
        };
        let authority = rest.trim_end_matches('/');
        if authority.is_empty() || authority.contains('/') {
            return Err(invalid("write http://HOST:PORT, without a path"));
        }
        let has_port = match authority.rsplit_once(':') {
            // `[::1]` alone has colons but no port.
            Some((host, port)) => !host.ends_with(':') && !port.ends_with(']'),
            None => false,
        };
        let authority = if has_port { authority.to_owned() } else { format!("{authority}:8161") };
        Ok(AdminClient {
            url: format!("{scheme}://{authority}"),
            authority,
            tls: scheme == "https",
            trust_store: None,
            authorization: None,
            token: std::sync::OnceLock::new(),
        })
    }

    /// For `https://`: check the endpoint's certificate against the authorities in
    /// `trust_store` (PEM) instead of the system's.
    pub fn with_trust_store(mut self, trust_store: Option<std::path::PathBuf>) -> AdminClient {
        self.trust_store = trust_store;
        self
    }

    /// Sends `(user, password)` with every request (HTTP Basic), for a broker with
    /// `[authentication]` enabled.
    pub fn with_credentials(mut self, credentials: Option<(String, String)>) -> AdminClient {
        use base64::Engine as _;
        self.authorization = credentials.map(|(user, password)| {
            let token =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            format!("Basic {token}")
        });
        self
    }

    /// The base URL, as errors show it.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `GET /api/status`.
    pub async fn status(&self) -> Result<super::BrokerStatus, AdminClientError> {
        self.get_json("/api/status").await
    }

    /// `GET /api/broker`.
    pub async fn broker(&self) -> Result<BrokerStats, AdminClientError> {
        self.get_json("/api/broker").await
    }

    /// `GET /api/destinations`.
    pub async fn destinations(&self) -> Result<Vec<DestinationStats>, AdminClientError> {
        self.get_json("/api/destinations").await
    }

    /// `GET path`, its 2xx JSON body decoded; another status is [`AdminClientError::Status`]
    /// with the endpoint's error message.
    pub async fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T, AdminClientError> {
        let answer = self.request("GET", path).await?;
        self.decode(path, answer)
    }

    /// `POST path` with `body` as JSON and the admin token, its 2xx JSON answer decoded.
    pub async fn post_json<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, AdminClientError> {
        let body = serde_json::to_vec(body).map_err(|error| AdminClientError::Decode {
            url: format!("{}{path}", self.url),
            reason: format!("cannot encode the request: {error}"),
        })?;
        let token = self.token().await?;
        let headers = [("Content-Type", "application/json"), (TOKEN_HEADER, token.as_str())];
        let answer = self.send("POST", path, &headers, &body).await?;
        self.decode(path, answer)
    }

    /// `DELETE path` with the admin token, its 2xx JSON answer decoded.
    pub async fn delete_json<T: DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<T, AdminClientError> {
        let token = self.token().await?;
        let answer = self.send("DELETE", path, &[(TOKEN_HEADER, token.as_str())], b"").await?;
        self.decode(path, answer)
    }

    /// The broker's admin token (`GET /api/token`), read once.
    pub async fn token(&self) -> Result<String, AdminClientError> {
        if let Some(token) = self.token.get() {
            return Ok(token.clone());
        }
        #[derive(serde::Deserialize)]
        struct Token {
            token: String,
        }
        let read: Token = self.get_json("/api/token").await?;
        Ok(self.token.get_or_init(|| read.token).clone())
    }

    /// A 2xx answer's JSON, or the error the endpoint gave.
    fn decode<T: DeserializeOwned>(
        &self,
        path: &str,
        answer: HttpAnswer,
    ) -> Result<T, AdminClientError> {
        let url = format!("{}{path}", self.url);
        if !(200..300).contains(&answer.status) {
            let message = serde_json::from_str::<ErrorBody>(&answer.body)
                .map(|body| body.error)
                .unwrap_or(answer.body);
            return Err(AdminClientError::Status { url, status: answer.status, message });
        }
        serde_json::from_str(&answer.body)
            .map_err(|error| AdminClientError::Decode { url, reason: error.to_string() })
    }

    /// Sends `method path` and reads the whole answer, whatever its status.
    pub async fn request(&self, method: &str, path: &str) -> Result<HttpAnswer, AdminClientError> {
        self.send(method, path, &[], b"").await
    }

    /// Sends `method path` with extra `headers` (name, value) and `body`, and reads the whole
    /// answer, whatever its status. Header values must not hold line breaks.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<HttpAnswer, AdminClientError> {
        let url = format!("{}{path}", self.url);
        let unsafe_text = |text: &str| text.contains(['\r', '\n']);
        if unsafe_text(method)
            || unsafe_text(path)
            || headers.iter().any(|(name, value)| unsafe_text(name) || unsafe_text(value))
        {
            return Err(AdminClientError::Url {
                url,
                reason: "a line break in the request line or a header".to_owned(),
            });
        }
        match tokio::time::timeout(TIMEOUT, self.exchange(method, path, headers, body, &url)).await
        {
            Ok(result) => result,
            Err(_) => Err(AdminClientError::Timeout { url }),
        }
    }

    async fn exchange(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        url: &str,
    ) -> Result<HttpAnswer, AdminClientError> {
        let host = self.authority.as_str();
        let connect_host = host.replace(['[', ']'], "");
        let (name, port) = connect_host.rsplit_once(':').unwrap_or((connect_host.as_str(), "8161"));
        let port: u16 = port.parse().map_err(|_| AdminClientError::Url {
            url: self.url.clone(),
            reason: format!("`{port}` is not a port"),
        })?;
        let authorization = match &self.authorization {
            Some(value) => format!("Authorization: {value}\r\n"),
            None => String::new(),
        };
        let extra: String =
            headers.iter().map(|(name, value)| format!("{name}: {value}\r\n")).collect();
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\nAccept: */*\r\nContent-Length: {}\r\n\
             {authorization}{extra}Connection: close\r\nUser-Agent: ferromq\r\n\r\n",
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body);
        if self.tls {
            let stream = client::connect_tls(name, port, self.trust_store.as_deref(), TIMEOUT)
                .await
                .map_err(|error| AdminClientError::Connect {
                    url: self.url.clone(),
                    source: std::io::Error::other(error.to_string()),
                })?;
            return exchange_on(stream, &request, url).await;
        }
        let stream = TcpStream::connect((name, port))
            .await
            .map_err(|source| AdminClientError::Connect { url: self.url.clone(), source })?;
        exchange_on(stream, &request, url).await
    }
}

/// Writes `request` on `stream` and reads the whole answer.
async fn exchange_on<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    request: &[u8],
    url: &str,
) -> Result<HttpAnswer, AdminClientError> {
    let io = |source| AdminClientError::Io { url: url.to_owned(), source };
    stream.write_all(request).await.map_err(io)?;
    let mut raw = Vec::new();
    stream.take(MAX_ANSWER).read_to_end(&mut raw).await.map_err(io)?;
    parse_answer(&raw).map_err(|reason| AdminClientError::Protocol { url: url.to_owned(), reason })
}

/// Splits a whole HTTP/1.1 answer into status, headers and body (by `Content-Length`,
/// chunked, or to the end).
fn parse_answer(raw: &[u8]) -> Result<HttpAnswer, String> {
    let end = raw
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .ok_or_else(|| "the answer ended before its headers did".to_owned())?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "headers are not UTF-8".to_owned())?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.get(2..5))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| format!("bad status line `{status_line}`"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let header = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    let rest = &raw[end + 4..];
    let body = if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        dechunk(rest)?
    } else if let Some(length) = header("content-length") {
        let length: usize = length.parse().map_err(|_| format!("bad Content-Length `{length}`"))?;
        rest.get(..length)
            .ok_or_else(|| "the body is shorter than its Content-Length".to_owned())?
            .to_vec()
    } else {
        rest.to_vec()
    };
    let body = String::from_utf8(body).map_err(|_| "the body is not UTF-8".to_owned())?;
    Ok(HttpAnswer { status, headers, body })
}

/// Joins the chunks of a chunked body.
fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line_end = rest
            .windows(2)
            .position(|window| window == b"\r\n")
            .ok_or_else(|| "a chunk size line never ends".to_owned())?;
        let size_text = std::str::from_utf8(&rest[..line_end]).unwrap_or_default();
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size `{size_text}`"))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        let chunk = rest.get(..size).ok_or_else(|| "a chunk is cut short".to_owned())?;
        body.extend_from_slice(chunk);
        rest = rest.get(size + 2..).unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_default_to_port_8161_and_refuse_paths_and_other_schemes() {
        assert_eq!(
            AdminClient::new("http://localhost").expect("valid").authority,
            "localhost:8161"
        );
        assert_eq!(
            AdminClient::new("http://127.0.0.1:9/").expect("valid").authority,
            "127.0.0.1:9"
        );
        assert_eq!(AdminClient::new("http://[::1]").expect("valid").authority, "[::1]:8161");
        assert_eq!(AdminClient::new("http://[::1]:80").expect("valid").authority, "[::1]:80");
        let https = AdminClient::new("https://localhost").expect("valid");
        assert_eq!((https.authority.as_str(), https.tls), ("localhost:8161", true));
        assert!(!AdminClient::new("http://localhost").expect("valid").tls);
        assert!(AdminClient::new("ftp://localhost").is_err());
        assert!(AdminClient::new("http://localhost/api").is_err());
    }

    #[test]
    fn answers_parse_by_length_and_chunked() {
        let answer = parse_answer(b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\n{}xx")
            .expect("parses");
        assert_eq!((answer.status, answer.body.as_str()), (404, "{}"));
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_answer(chunked).expect("parses").body, "abcde");
        assert!(parse_answer(b"SSH-2.0\r\n\r\n").is_err());
    }
}
