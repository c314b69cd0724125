//! HTTP from a test's side: a response header as text, and raw HTTP/1.1 on a socket for what a
//! well-behaved client cannot produce (half a request, a stalled body, a connection watched until
//! the server closes it) or for a load whose client must cost next to nothing.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The header `name` of `response` as text, if present and visible ASCII.
pub fn header(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// `POST path` with `body` and `token` as one raw HTTP/1.1 request on a fresh connection; the
/// answer's status and body (`None` when the connection closed without an answer). Panics when
/// nothing arrives within 10 s.
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
        .expect("the server answers or closes within 10 s");
    if read.is_err() || answer.is_empty() {
        return None;
    }
    Some(parse_answer(&answer))
}

/// The status and body of a raw HTTP/1.1 answer. Panics when it is none.
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

/// Waits until the server closes one of `streams` (EOF or reset), at most `limit`; which one.
/// For a test that knows one connection must give its place up but not which: the server picks
/// by when it last heard from each, and under load it reads them in no fixed order.
pub async fn first_closed(streams: &mut [TcpStream], limit: Duration) -> Option<usize> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut buffer = [0u8; 1024];
    loop {
        for (index, stream) in streams.iter_mut().enumerate() {
            // Whatever the server sent before closing (an h2c SETTINGS frame) is read past.
            loop {
                match stream.try_read(&mut buffer) {
                    Ok(0) => return Some(index),
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(_) => return Some(index),
                }
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Asserts that the server closes exactly one of `streams` within `limit` and leaves the others
/// open for 100 ms more: a connection evicted to make room, whichever the server picked.
pub async fn exactly_one_closed(streams: &mut Vec<TcpStream>, limit: Duration) {
    let evicted = first_closed(streams, limit)
        .await
        .expect("a connection gave its place up");
    streams.remove(evicted);
    assert_eq!(
        first_closed(streams, Duration::from_millis(100)).await,
        None,
        "only one gave its place up"
    );
}

/// One keep-alive HTTP/1.1 connection, written to and read from by hand: a client that costs
/// next to nothing, so a load test measures the server.
#[derive(Debug)]
pub struct KeepAlive {
    stream: TcpStream,
    buffer: Vec<u8>,
}

impl KeepAlive {
    /// Connects to `addr`, with Nagle off (each request is one small write the test waits on).
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

    /// A complete answer from the front of the buffer, if there is one (`Content-Length` bodies
    /// only: chunked ones are not read).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_splits_into_status_and_body() {
        assert_eq!(
            parse_answer(b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 2\r\n\r\n{}"),
            (408, "{}".to_string())
        );
    }
}
