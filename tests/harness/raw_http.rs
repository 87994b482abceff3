//! HTTP on 127.0.0.1 without a client library: a misbehaving server for cloud
//! scenarios, a plain GET, free ports.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Answers a whole request (head and body, as text) with a status and a body.
pub type Responder = std::sync::Arc<dyn Fn(&str) -> (u16, String) + Send + Sync>;

/// How a [`RawServer`] answers every connection.
#[derive(Clone)]
pub enum RawBehavior {
    /// Reads each request with its body and answers what the function says, keeping
    /// the connection open for the next request.
    Respond(Responder),
    /// Accepts and reads, never answers.
    Silent,
    /// Answers 200 with this body (e.g. garbage instead of JSON).
    Fixed(&'static str),
    /// Announces a 1 GiB body with Content-Length and streams zeros.
    HugeWithLength,
    /// Streams an endless chunked body.
    EndlessChunked,
    /// Answers 200 with this many 128-byte header fields and a 2-byte body.
    ManyHeaders(usize),
}

impl std::fmt::Debug for RawBehavior {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RawBehavior::Respond(_) => "Respond",
            RawBehavior::Silent => "Silent",
            RawBehavior::Fixed(_) => "Fixed",
            RawBehavior::HugeWithLength => "HugeWithLength",
            RawBehavior::EndlessChunked => "EndlessChunked",
            RawBehavior::ManyHeaders(_) => "ManyHeaders",
        })
    }
}

/// A raw TCP HTTP server on 127.0.0.1 for misbehaving-cloud scenarios. It counts
/// connections and stops when dropped.
pub struct RawServer {
    pub addr: std::net::SocketAddr,
    pub connections: std::sync::Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl RawServer {
    pub async fn start(behavior: RawBehavior) -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().unwrap();
        let connections = std::sync::Arc::new(AtomicU64::new(0));
        let counter = connections.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                counter.fetch_add(1, Ordering::SeqCst);
                let behavior = behavior.clone();
                tokio::spawn(async move {
                    // Read the request head.
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    match behavior {
                        RawBehavior::Respond(respond) => loop {
                            let text = String::from_utf8_lossy(&head).to_string();
                            let split = text.find("\r\n\r\n").map_or(text.len(), |i| i + 4);
                            let length: usize = text[..split]
                                .lines()
                                .find_map(|l| {
                                    l.to_ascii_lowercase()
                                        .strip_prefix("content-length:")
                                        .and_then(|v| v.trim().parse().ok())
                                })
                                .unwrap_or(0);
                            while head.len() < split + length {
                                match socket.read(&mut buf).await {
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => head.extend_from_slice(&buf[..n]),
                                }
                            }
                            let request =
                                String::from_utf8_lossy(&head[..split + length]).to_string();
                            head.drain(..split + length);
                            let (status, body) = respond(&request);
                            let response = format!(
                                "HTTP/1.1 {status} X\r\ncontent-type: text/xml\r\ncontent-length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            if socket.write_all(response.as_bytes()).await.is_err() {
                                return;
                            }
                            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                                match socket.read(&mut buf).await {
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => head.extend_from_slice(&buf[..n]),
                                }
                            }
                        },
                        RawBehavior::Silent => {
                            let _ = socket.read(&mut buf).await;
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                        }
                        RawBehavior::Fixed(body) => {
                            let response = format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            let _ = socket.write_all(response.as_bytes()).await;
                            let _ = socket.read(&mut buf).await;
                        }
                        RawBehavior::HugeWithLength => {
                            let _ = socket
                                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1073741824\r\n\r\n")
                                .await;
                            let zeros = vec![0u8; 64 * 1024];
                            while socket.write_all(&zeros).await.is_ok() {}
                        }
                        RawBehavior::EndlessChunked => {
                            let _ = socket
                                .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                                .await;
                            let mut chunk = b"10000\r\n".to_vec();
                            chunk.extend(std::iter::repeat_n(b'x', 0x10000));
                            chunk.extend_from_slice(b"\r\n");
                            while socket.write_all(&chunk).await.is_ok() {}
                        }
                        RawBehavior::ManyHeaders(count) => {
                            let mut response = String::from("HTTP/1.1 200 OK\r\n");
                            for i in 0..count {
                                response
                                    .push_str(&format!("x-field-{i:05}: {}\r\n", "v".repeat(110)));
                            }
                            response.push_str("connection: close\r\ncontent-length: 2\r\n\r\nok");
                            let _ = socket.write_all(response.as_bytes()).await;
                            let _ = socket.read(&mut buf).await;
                        }
                    }
                });
            }
        });
        Self {
            addr,
            connections,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A plain HTTP/1.1 GET on 127.0.0.1: (status, body).
///
/// Fails after [`REQUEST_TIMEOUT`]: a controller manager's port stays bound by the test
/// ([`crate::listening_port`]) after the process ends, so a connection to it is accepted
/// and never answered instead of refused.
pub async fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    within_request_timeout(port, plain_get(port, path)).await
}

/// How long [`http_get`] and [`crate::https::https_get`] wait for a whole answer.
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `request` to `port`, or a `TimedOut` error after [`REQUEST_TIMEOUT`].
pub async fn within_request_timeout<T>(
    port: u16,
    request: impl std::future::Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    tokio::time::timeout(REQUEST_TIMEOUT, request)
        .await
        .unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer on 127.0.0.1:{port} within {REQUEST_TIMEOUT:?}"),
            ))
        })
}

async fn plain_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    Ok(parse_response(&raw))
}

/// The status and body of a whole HTTP/1.1 response (status 0 when there is none).
pub fn parse_response(raw: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(raw);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}
