//! A TCP proxy on a free loopback port that delays what it forwards: a fixed one-way latency
//! between a client (a Worker under `wrangler dev`) and a server (a gateway), so a store on
//! loopback answers as one across a region or an ocean would.
//!
//! What it delays: every chunk of bytes, in either direction, is written to the other side
//! `one_way` after the proxy read it, chunks kept in order and pipelined (a delay line, not a
//! queue: two chunks read 1 ms apart leave 1 ms apart). An HTTP exchange on a kept-alive
//! connection therefore takes twice `one_way` more than it would. What it does not delay: the TCP
//! handshake (a new connection is accepted and dialled at once; its first request still pays the
//! delay), and it adds no jitter, loss or bandwidth limit.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{sleep_until, Instant};

/// A running delay proxy; it stops (and drops every connection it carries) when dropped.
#[derive(Debug)]
pub struct DelayProxy {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl DelayProxy {
    /// Listens on a free loopback port, forwarding every connection to `target` with `one_way`
    /// added to each direction. Runs on the caller's tokio runtime.
    pub async fn start(target: SocketAddr, one_way: Duration) -> DelayProxy {
        let listener = crate::net::loopback_listener().await;
        let addr = listener.local_addr().expect("the proxy's address");
        let task = tokio::spawn(async move {
            // Owned here: aborting the accept loop drops the set, which aborts every connection.
            let mut connections = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((client, _)) = accepted else { continue };
                        connections.spawn(carry(client, target, one_way));
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        DelayProxy { addr, task }
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<address>`: a base URL through the proxy.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One connection: dials `target` and pumps both directions through delay lines.
async fn carry(client: TcpStream, target: SocketAddr, one_way: Duration) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::join!(
        delay_line(client_read, server_write, one_way),
        delay_line(server_read, client_write, one_way),
    );
}

/// Reads chunks from `from`, stamping each with when it was read, and writes each to `to`
/// `one_way` later; an end of stream is passed on (as a write shutdown) just as late.
async fn delay_line(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, one_way: Duration) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    let _ = tx.send((Instant::now(), Vec::new()));
                    return;
                }
                Ok(n) => {
                    if tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    };
    let writer = async move {
        while let Some((read_at, chunk)) = rx.recv().await {
            sleep_until(read_at + one_way).await;
            if chunk.is_empty() {
                let _ = to.shutdown().await;
                return;
            }
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_exchange_takes_twice_the_one_way_delay_more() {
        let echo = crate::net::loopback_listener().await;
        let target = echo.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = echo.accept().await.unwrap();
            let mut buf = [0u8; 64];
            loop {
                let n = socket.read(&mut buf).await.unwrap();
                if n == 0 {
                    return;
                }
                socket.write_all(&buf[..n]).await.unwrap();
            }
        });
        let proxy = DelayProxy::start(target, Duration::from_millis(30)).await;
        let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
        for _ in 0..2 {
            let started = Instant::now();
            client.write_all(b"ping").await.unwrap();
            let mut buf = [0u8; 4];
            client.read_exact(&mut buf).await.unwrap();
            assert_eq!(&buf, b"ping");
            let took = started.elapsed();
            // Exact below (a delay is never short); above, 440 ms of slack for a loaded
            // machine: a proxy that queued chunks behind each other's delays would show it.
            assert!(took >= Duration::from_millis(60), "{took:?}");
            assert!(took < Duration::from_millis(500), "{took:?}");
        }
    }
}
