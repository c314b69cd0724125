//! Loopback sockets for tests: a free port to start a server on, and a listener that accepts
//! connections and never answers (a store or origin that hangs).

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{sleep, JoinHandle};
use std::time::Duration;

/// A port nothing listens on right now, on `127.0.0.1`: bound and released, so another process
/// may take it before the caller binds it (servers that start on one retry on another).
pub fn free_port() -> u16 {
    find_port(false)
}

/// A free port whose port + 10000 is free too: a Redis Cluster node's bus listens there.
pub(crate) fn free_port_with_bus() -> u16 {
    find_port(true)
}

fn find_port(with_bus: bool) -> u16 {
    for _ in 0..100 {
        let Ok(listener) = TcpListener::bind(("127.0.0.1", 0)) else {
            continue;
        };
        let Ok(addr) = listener.local_addr() else {
            continue;
        };
        let port = addr.port();
        if !with_bus {
            return port;
        }
        if let Some(bus) = port.checked_add(10_000) {
            if TcpListener::bind(("127.0.0.1", bus)).is_ok() {
                return port;
            }
        }
    }
    panic!("no free loopback port found");
}

/// A listener on a free loopback port that accepts every connection and never answers, holding
/// the connections open until dropped: what a client's timeout must cut off.
#[derive(Debug)]
pub struct SilentServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl SilentServer {
    /// Starts listening.
    pub fn start() -> SilentServer {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind a loopback port");
        let addr = listener.local_addr().expect("the listener's address");
        // Non-blocking, so the thread sees `stop` between connections rather than sitting in
        // `accept` forever.
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => held.push(stream),
                    Err(_) => sleep(Duration::from_millis(10)),
                }
            }
        });
        SilentServer {
            addr,
            stop,
            thread: Some(thread),
        }
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for SilentServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpStream;

    #[test]
    fn a_silent_server_accepts_and_never_answers_until_dropped() {
        let server = SilentServer::start();
        let mut stream = TcpStream::connect(server.addr()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 1];
        let err = stream.read(&mut buf).unwrap_err();
        assert!(
            matches!(
                err.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{err:?}"
        );
        drop(server);
        // Dropped: the held connection is closed.
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(stream.read(&mut buf).unwrap_or(0), 0);
    }
}
