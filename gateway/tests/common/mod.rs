//! What the probe suites share: a redis-server of their own, a gateway in front of it, and raw
//! HTTP/1.1 on a socket for the cases a well-behaved client cannot produce.

#![allow(dead_code)] // each suite uses its own share of these helpers

use std::net::SocketAddr;
use std::time::Duration;

use edgelimit_gateway::{Config, Gateway};
use edgelimit_testkit::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const TOKEN: &str = "probe-token-5f1c9a0e7b2d4c6a";
pub const READ_ONLY: &str = "probe-read-only-3e8b1d7f";

/// A redis-server and a gateway in front of it, both on free loopback ports.
pub struct Running {
    pub redis: RedisServer,
    pub gateway: Gateway,
}

impl Running {
    /// Starts both; `configure` adjusts the gateway's defaults.
    pub async fn start(configure: impl FnOnce(&mut Config)) -> Running {
        let redis = RedisServer::start();
        let mut config = Config::new("127.0.0.1:0".parse().unwrap(), redis.url(), TOKEN);
        config.read_only_token = Some(READ_ONLY.into());
        configure(&mut config);
        let gateway = Gateway::start(config).await.expect("gateway starts");
        Running { redis, gateway }
    }

    pub fn addr(&self) -> SocketAddr {
        self.gateway.local_addr()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr())
    }

    /// A Redis string value, read straight from Redis.
    pub fn get(&self, key: &str) -> Option<String> {
        self.redis
            .command(&["GET", key])
            .expect("redis answers")
            .text()
    }
}

/// `POST path` with `body` and `token` as one raw HTTP/1.1 request on a fresh connection; the
/// answer's status and body (`None` when the connection closed without an answer).
pub async fn raw_post(
    addr: SocketAddr,
    path: &str,
    token: &str,
    body: &[u8],
) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).await.expect("connects");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("writes");
    stream.write_all(body).await.expect("writes");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the gateway answers or closes within 10 s");
    if read.is_err() || answer.is_empty() {
        return None;
    }
    Some(parse_answer(&answer))
}

/// The status and body of a raw HTTP/1.1 answer.
pub fn parse_answer(answer: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(answer);
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {head}"));
    (status, body.to_string())
}

/// Waits until the server closes `stream` (EOF or reset), at most `limit`; whether it did.
pub async fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let mut buffer = [0u8; 1024];
    let waited = tokio::time::timeout(limit, async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    waited.is_ok()
}

/// One keep-alive HTTP/1.1 connection, written to and read from by hand: a client that costs
/// next to nothing, so a load test measures the gateway.
pub struct KeepAlive {
    stream: TcpStream,
    buffer: Vec<u8>,
}

impl KeepAlive {
    pub async fn connect(addr: SocketAddr) -> KeepAlive {
        let stream = TcpStream::connect(addr).await.expect("connects");
        stream.set_nodelay(true).expect("nodelay");
        KeepAlive {
            stream,
            buffer: Vec::with_capacity(4096),
        }
    }

    /// The socket, to watch it close.
    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Sends one request (its whole raw text) and reads its answer: status and body.
    pub async fn send(&mut self, request: &[u8]) -> std::io::Result<(u16, Vec<u8>)> {
        self.stream.write_all(request).await?;
        loop {
            if let Some(answer) = self.take_answer() {
                return Ok(answer);
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.buffer.extend_from_slice(&chunk[..n]);
        }
    }

    /// A complete answer from the front of the buffer, if there is one (`Content-Length` bodies,
    /// which is all the gateway sends).
    fn take_answer(&mut self) -> Option<(u16, Vec<u8>)> {
        let end = self.buffer.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
        let head = String::from_utf8_lossy(&self.buffer[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().expect("a length"));
        if self.buffer.len() < end + length {
            return None;
        }
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        let body = self.buffer[end..end + length].to_vec();
        self.buffer.drain(..end + length);
        Some((status, body))
    }
}
