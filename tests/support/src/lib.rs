//! Test support for edgelimit: throwaway `redis-server` instances and Redis Clusters that tests
//! start themselves, on free loopback ports, in their own temporary directories.
//!
//! ```no_run
//! use edgelimit_testkit::{RedisCluster, RedisServer};
//!
//! let server = RedisServer::start(); // killed when dropped
//! println!("{}", server.url()); // redis://127.0.0.1:<port>/
//! let cluster = RedisCluster::start(3);
//! println!("{:?}", cluster.urls());
//! ```
//!
//! Every server binds `127.0.0.1` only, persists nothing (`--save ""`, `--appendonly no`), and is
//! killed on drop; its directory is removed. Starting panics with a clear message when
//! `redis-server` is missing (`scripts/test` installs it) or does not come up: these are test
//! helpers, and a test without its server cannot say anything useful.
//!
//! [`command`] is a minimal RESP client (std only) for setup and assertions, so this crate needs no
//! Redis client dependency; [`metrics::scrape`] reads a Prometheus page (the gateway's
//! `/metrics`) the same way, and [`WranglerDev`] runs a Worker under `wrangler dev`.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// How long a server may take to answer PING, and a cluster to reach `cluster_state:ok`.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// How often a starting server is tried on a new port before giving up (another process may take
/// the free port between our probe and the server's bind).
const START_ATTEMPTS: usize = 5;

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

pub mod metrics;
pub mod wrangler;
pub use wrangler::WranglerDev;

/// One `redis-server` process on `127.0.0.1:<port>`, killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a standalone server on a free port and waits until it answers PING.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments (e.g. `["--maxmemory", "10mb"]`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let mut last_error = String::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port(false);
            let mut server = RedisServer {
                port,
                dir: fresh_dir(port),
                extra: extra.clone(),
                child: None,
            };
            match server.spawn() {
                Ok(()) => return server,
                Err(e) => last_error = e.to_string(),
            }
        }
        panic!("redis-server did not start after {START_ATTEMPTS} attempts: {last_error}");
    }

    /// The connection URL, `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port the server listens on (kept across [`RedisServer::restart`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server (SIGKILL: a crash, not a clean shutdown). Idempotent.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server if running and starts it again on the same port, empty (nothing is
    /// persisted). Panics if the port was taken meanwhile or the server does not come up.
    pub fn restart(&mut self) {
        self.stop();
        if let Err(e) = self.spawn() {
            panic!("redis-server did not restart on port {}: {e}", self.port);
        }
    }

    /// Sends one command and returns its reply (see [`command`]).
    pub fn command(&self, args: &[&str]) -> io::Result<Reply> {
        command(self.port, args)
    }

    /// One numeric field of `INFO replication` (`master_repl_offset`, `slave_repl_offset`, …).
    pub fn replication_field(&self, field: &str) -> Option<u64> {
        let info = self.command(&["INFO", "replication"]).ok()?.text()?;
        info.lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|value| value.trim().parse().ok())
    }

    /// Waits until this replica's link to its primary is up, polling every 20 ms. Panics after
    /// `timeout`: the first sync takes a moment, and a loaded machine needs a generous bound.
    pub fn wait_replica_linked(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self
            .command(&["INFO", "replication"])
            .ok()
            .and_then(|info| info.text())
            .is_some_and(|info| info.contains("master_link_status:up"))
        {
            assert!(
                Instant::now() < deadline,
                "the replica on port {} did not link to its primary within {timeout:?}",
                self.port
            );
            sleep(Duration::from_millis(20));
        }
    }

    fn spawn(&mut self) -> io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let port = self.port.to_string();
        let mut args: Vec<&str> = vec![
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
            "--logfile",
            "redis.log",
        ];
        args.extend(self.extra.iter().map(String::as_str));
        let child = Command::new("redis-server")
            .args(&args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "cannot run redis-server ({e}); install it with \
                         `apt-get install redis-server redis-tools` or run scripts/test"
                    ),
                )
            })?;
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Reply::Status(s)) = command(self.port, &["PING"]) {
                if s == "PONG" {
                    return Ok(());
                }
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > deadline {
                self.stop();
                let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
                return Err(io::Error::other(format!(
                    "redis-server on port {} did not answer PING: {}",
                    self.port,
                    log.lines().last().unwrap_or("(no log)")
                )));
            }
            sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of `n` primaries (no replicas), each a [`RedisServer`] with
/// `--cluster-enabled yes`, joined with `redis-cli --cluster create`. Killed on drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `n` (≥ 3, as `redis-cli --cluster create` demands) nodes, assigns all slots and
    /// waits until every node reports `cluster_state:ok`.
    pub fn start(n: usize) -> RedisCluster {
        RedisCluster::start_with_replicas(n, 0)
    }

    /// Starts `primaries` (≥ 3) primaries with `replicas` replicas each (so a test can fail one
    /// over), and waits until every node reports `cluster_state:ok`.
    pub fn start_with_replicas(primaries: usize, replicas: usize) -> RedisCluster {
        assert!(primaries >= 3, "a Redis Cluster needs at least 3 primaries");
        let n = primaries * (1 + replicas);
        let mut nodes = Vec::with_capacity(n);
        for _ in 0..n {
            let mut last_error = String::new();
            let mut started = None;
            for _ in 0..START_ATTEMPTS {
                // The cluster bus listens on port + 10000: check both are free.
                let port = free_port(true);
                let mut server = RedisServer {
                    port,
                    dir: fresh_dir(port),
                    extra: vec![
                        "--cluster-enabled".into(),
                        "yes".into(),
                        "--cluster-config-file".into(),
                        "nodes.conf".into(),
                        "--cluster-node-timeout".into(),
                        "5000".into(),
                    ],
                    child: None,
                };
                match server.spawn() {
                    Ok(()) => {
                        started = Some(server);
                        break;
                    }
                    Err(e) => last_error = e.to_string(),
                }
            }
            match started {
                Some(server) => nodes.push(server),
                None => panic!("cluster node did not start: {last_error}"),
            }
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let output = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run redis-cli ({e}); install redis-tools"));
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_ok();
        cluster
    }

    fn wait_ok(&self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let all_ok = self.nodes.iter().all(|n| {
                matches!(n.command(&["CLUSTER", "INFO"]),
                    Ok(Reply::Bulk(info)) if String::from_utf8_lossy(&info).contains("cluster_state:ok"))
            });
            if all_ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "cluster did not reach cluster_state:ok"
            );
            sleep(Duration::from_millis(50));
        }
    }

    /// One URL per node, `redis://127.0.0.1:<port>/`: the seed list for a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The nodes, for per-node commands (`SCAN`, `SCRIPT FLUSH`, …).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }
}

/// A RESP reply, as [`command`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`-style status.
    Status(String),
    /// `-ERR …`.
    Error(String),
    /// `:42`.
    Int(i64),
    /// `$…` bulk string.
    Bulk(Vec<u8>),
    /// `$-1` / `*-1`.
    Nil,
    /// `*…` array.
    Array(Vec<Reply>),
}

impl Reply {
    /// The reply as text, for bulk and status replies.
    pub fn text(&self) -> Option<String> {
        match self {
            Reply::Status(s) => Some(s.clone()),
            Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }
}

/// Sends one command to `127.0.0.1:port` on a fresh connection and reads its reply. For setup
/// and assertions in tests (`SCAN`, `TTL`, `SCRIPT FLUSH`, `MEMORY USAGE`), not for speed.
pub fn command(port: u16, args: &[&str]) -> io::Result<Reply> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    stream.write_all(&out)?;
    read_reply(&mut BufReader::new(stream))
}

fn read_reply(reader: &mut BufReader<TcpStream>) -> io::Result<Reply> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("bad reply `{line}`"));
    let (kind, rest) = line.split_at_checked(1).ok_or_else(bad)?;
    Ok(match kind {
        "+" => Reply::Status(rest.to_string()),
        "-" => Reply::Error(rest.to_string()),
        ":" => Reply::Int(rest.parse().map_err(|_| bad())?),
        "$" => {
            let len: i64 = rest.parse().map_err(|_| bad())?;
            if len < 0 {
                Reply::Nil
            } else {
                let mut buf = vec![0; len as usize + 2];
                reader.read_exact(&mut buf)?;
                buf.truncate(len as usize);
                Reply::Bulk(buf)
            }
        }
        "*" => {
            let len: i64 = rest.parse().map_err(|_| bad())?;
            if len < 0 {
                Reply::Nil
            } else {
                let mut items = Vec::with_capacity(len as usize);
                for _ in 0..len {
                    items.push(read_reply(reader)?);
                }
                Reply::Array(items)
            }
        }
        _ => return Err(bad()),
    })
}

/// A free loopback port (and, for cluster nodes, port + 10000 free too, for the cluster bus).
fn free_port(with_bus: bool) -> u16 {
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

fn fresh_dir(port: u16) -> PathBuf {
    let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
    let dir =
        std::env::temp_dir().join(format!("edgelimit-redis-{}-{port}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}
