//! Loopback ports for tests' servers, and a listener that accepts connections and never answers
//! (a store or origin that hangs).
//!
//! # How a test's server gets its port
//!
//! Every server a test starts gets its port in one of two ways, both here:
//!
//! - **In process** (the gateway, origins, the delay proxy): it binds port 0 itself
//!   ([`loopback_listener`], or [`ANY_LOOPBACK_PORT`] as a listen address) and reports the port
//!   the system gave it. Nothing can take that port first.
//! - **A process that must be told its port** (`redis-server` and Cluster nodes with their bus
//!   ports, `wrangler dev`): [`start_on_free_port`] picks a free port and runs the launcher's
//!   attempt on it; when the server says its port was taken ([`StartError::PortTaken`]), it tries
//!   again on a fresh port, up to [`START_ATTEMPTS`] times.
//!
//! A picked port is never in the system's ephemeral range (`ip_local_port_range`, 32768–60999 by
//! default), which is where every outgoing connection's local port and every port-0 bind comes
//! from: so neither a client's connection (reqwest, Redis clients, workerd's own sockets) nor an
//! in-process server can take it between the pick and the server's bind, nor while a server
//! restarts on it. A port is handed out once per process ([`free_port`] never repeats one), so
//! two launchers of one test binary never race for the same port. What is left — another process
//! on the machine naming the same port at the same moment — is what the retry is for.

use std::collections::hash_map::RandomState;
use std::collections::HashSet;
use std::hash::BuildHasher;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{sleep, JoinHandle};
use std::time::Duration;

/// `127.0.0.1:0`: a listen address for a server that binds its own port and reports it.
pub const ANY_LOOPBACK_PORT: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// How many ports [`start_on_free_port`] tries before giving up. A taken port is rare (see the
/// module's documentation): eight in a row means something else is wrong.
pub const START_ATTEMPTS: usize = 8;

/// The lowest port handed out: below it sit well-known and registered services' defaults.
const LOWEST_PORT: u16 = 10_000;

/// How far above a Cluster node's port its bus listens (fixed by Redis).
pub const CLUSTER_BUS_OFFSET: u16 = 10_000;

/// The ports a server needs named up front.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ports {
    /// One port.
    One,
    /// A port and the port [`CLUSTER_BUS_OFFSET`] above it (a Redis Cluster node's bus).
    WithClusterBus,
}

/// Why one attempt to start a server on a port failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartError {
    /// The server could not bind its port (or its bus port): another process took it. Another
    /// attempt on a fresh port may succeed.
    PortTaken(String),
    /// Anything else (a missing program, a bad argument, no answer in time): another port would
    /// fail the same way.
    Failed(String),
}

impl StartError {
    /// The error a server's output (its log, its exit message) shows: [`StartError::PortTaken`]
    /// when it says an address was in use (`EADDRINUSE`, as redis-server, workerd and node word
    /// it), else [`StartError::Failed`]. The whole output is kept for the message.
    pub fn from_output(output: &str) -> StartError {
        if port_taken_in(output) {
            StartError::PortTaken(output.to_string())
        } else {
            StartError::Failed(output.to_string())
        }
    }
}

/// Whether a server's output says it could not bind because the address was in use.
pub fn port_taken_in(output: &str) -> bool {
    output.contains("Address already in use") || output.contains("EADDRINUSE")
}

/// Starts a server with `attempt`, which gets a free loopback port (and the port of its bus,
/// [`CLUSTER_BUS_OFFSET`] above, when `ports` asks for it) and either starts the server on it or
/// says why not. A [`StartError::PortTaken`] is tried again on a fresh port, up to
/// [`START_ATTEMPTS`] attempts; a [`StartError::Failed`] ends at once. The error names `what`,
/// each port tried and what the server said.
///
/// ```
/// use edgelimit_testkit::net::{start_on_free_port, Ports, StartError};
///
/// let mut tries = 0;
/// let port = start_on_free_port("a flaky server", Ports::One, |port| {
///     tries += 1;
///     if tries < 3 {
///         Err(StartError::PortTaken("Address already in use".into()))
///     } else {
///         Ok(port)
///     }
/// })
/// .unwrap();
/// assert!(port > 0 && tries == 3);
/// ```
pub fn start_on_free_port<S>(
    what: &str,
    ports: Ports,
    mut attempt: impl FnMut(u16) -> Result<S, StartError>,
) -> Result<S, String> {
    let mut taken = Vec::new();
    for _ in 0..START_ATTEMPTS {
        let port = pick_port(ports);
        match attempt(port) {
            Ok(server) => return Ok(server),
            Err(StartError::PortTaken(output)) => taken.push(format!("port {port}: {output}")),
            Err(StartError::Failed(output)) => {
                return Err(format!("{what} did not start on port {port}: {output}"))
            }
        }
    }
    Err(format!(
        "{what} found its port taken {START_ATTEMPTS} times in a row:\n{}",
        taken.join("\n")
    ))
}

/// A loopback port nothing listens on, outside the ephemeral range and never handed out before
/// by this process (see the module's documentation): for a server started on it, or for an
/// address where nothing answers.
pub fn free_port() -> u16 {
    pick_port(Ports::One)
}

/// A tokio listener on `127.0.0.1:0`: an in-process server's socket, its port chosen by the
/// system (`local_addr` reports it). Panics when loopback cannot be bound.
pub async fn loopback_listener() -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind(ANY_LOOPBACK_PORT)
        .await
        .expect("bind a loopback port")
}

/// Every port handed out by this process.
static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// The range ports are picked from: [`LOWEST_PORT`] up to the ephemeral range, less the bus
/// offset when the bus must fit below it too. Falls back to everything above [`LOWEST_PORT`] when
/// the ephemeral range leaves too little room below it (a machine configured unusually): the
/// retry then covers what the range no longer does.
fn candidate_range(ports: Ports) -> (u16, u16) {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let room = match ports {
        Ports::One => 0,
        Ports::WithClusterBus => CLUSTER_BUS_OFFSET,
    };
    let high = ephemeral_low.saturating_sub(room);
    if high > LOWEST_PORT.saturating_add(1_000) {
        (LOWEST_PORT, high)
    } else {
        (LOWEST_PORT, u16::MAX - room)
    }
}

/// A port (and its bus port) in [`candidate_range`], not handed out before, that can be bound
/// right now; recorded as handed out. Panics when none is found in many tries.
fn pick_port(ports: Ports) -> u16 {
    let (low, high) = candidate_range(ports);
    let span = u64::from(high - low);
    // A fresh random seed per pick: processes started at once draw different sequences.
    let seed = RandomState::new().hash_one(std::process::id());
    let mut handed = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let handed = handed.get_or_insert_with(HashSet::new);
    for i in 0..10_000u64 {
        let port = low + (seed.wrapping_add(i.wrapping_mul(7_919)) % span) as u16;
        let bus = match ports {
            Ports::One => None,
            Ports::WithClusterBus => Some(port + CLUSTER_BUS_OFFSET),
        };
        if handed.contains(&port) || bus.is_some_and(|b| handed.contains(&b)) {
            continue;
        }
        // Bound and released at once: a listening socket leaves nothing behind (no TIME_WAIT).
        if TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        if bus.is_some_and(|b| TcpListener::bind(("127.0.0.1", b)).is_err()) {
            continue;
        }
        handed.insert(port);
        handed.extend(bus);
        return port;
    }
    panic!("no free loopback port found in {low}..{high}");
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
        let listener = TcpListener::bind(ANY_LOOPBACK_PORT).expect("bind a loopback port");
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

    #[test]
    fn ports_are_never_handed_out_twice_and_stay_below_the_ephemeral_range() {
        let (low, high) = candidate_range(Ports::One);
        let mut seen = HashSet::new();
        for _ in 0..500 {
            let port = free_port();
            assert!((low..high).contains(&port), "{port} outside {low}..{high}");
            assert!(seen.insert(port), "{port} handed out twice");
        }
        let (low, high) = candidate_range(Ports::WithClusterBus);
        for _ in 0..200 {
            let port = pick_port(Ports::WithClusterBus);
            assert!((low..high).contains(&port), "{port} outside {low}..{high}");
            assert!(seen.insert(port), "{port} handed out twice");
            assert!(
                seen.insert(port + CLUSTER_BUS_OFFSET),
                "bus of {port} taken"
            );
        }
    }

    #[test]
    fn a_taken_port_is_tried_again_on_another_and_a_failure_ends_at_once() {
        // A port really taken: the attempt binds it as the server would, and fails as it would.
        let mut tried = Vec::new();
        let holder = TcpListener::bind(ANY_LOOPBACK_PORT).unwrap();
        let held = holder.local_addr().unwrap().port();
        let port = start_on_free_port("a test server", Ports::One, |port| {
            let port = if tried.is_empty() { held } else { port };
            tried.push(port);
            TcpListener::bind(("127.0.0.1", port))
                .map(|l| l.local_addr().unwrap().port())
                .map_err(|e| StartError::from_output(&format!("bind: {e}")))
        })
        .unwrap();
        assert_eq!(tried.len(), 2, "{tried:?}");
        assert_ne!(port, held);

        let mut attempts = 0;
        let error = start_on_free_port("a broken server", Ports::One, |_| -> Result<(), _> {
            attempts += 1;
            Err(StartError::from_output("unknown option --nope"))
        })
        .unwrap_err();
        assert_eq!(attempts, 1);
        assert!(
            error.starts_with("a broken server did not start on port"),
            "{error}"
        );

        let error = start_on_free_port("a crowded server", Ports::One, |_| -> Result<(), _> {
            Err(StartError::PortTaken("EADDRINUSE".into()))
        })
        .unwrap_err();
        assert!(error.contains("taken 8 times in a row"), "{error}");
    }
}
