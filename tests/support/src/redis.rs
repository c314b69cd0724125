//! One throwaway `redis-server`: on a free loopback port, in its own temporary directory,
//! persisting nothing, killed on drop.

use std::io;
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::Duration;

use crate::dir::TempDir;
use crate::net::{start_on_free_port, Ports, StartError};
use crate::resp::{command, Reply};
use crate::wait;

/// How long a server may take to answer PING, and a cluster to reach `cluster_state:ok`.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(20);

/// One `redis-server` process on `127.0.0.1:<port>`, killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: TempDir,
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
        let extra = extra.iter().map(|s| s.to_string()).collect();
        RedisServer::start_on(Ports::One, extra).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts a server with `extra` arguments on a free port (and its Cluster bus port, when
    /// `ports` says so), through [`start_on_free_port`]: a fresh port when the server found its
    /// port taken. The error says why it did not start.
    pub(crate) fn start_on(ports: Ports, extra: Vec<String>) -> Result<RedisServer, String> {
        start_on_free_port("redis-server", ports, |port| {
            let mut server = RedisServer {
                port,
                dir: TempDir::new("edgelimit-redis"),
                extra: extra.clone(),
                child: None,
            };
            server.spawn().map(|()| server)
        })
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
            panic!("redis-server did not restart on port {}: {e:?}", self.port);
        }
    }

    /// Sends one command and returns its reply (see [`command`]).
    pub fn command(&self, args: &[&str]) -> io::Result<Reply> {
        command(self.port, args)
    }

    /// The names of the keys matching `pattern` (`KEYS`), sorted. Panics when the server does not
    /// answer with a list: a test asking what Redis holds needs the answer.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let mut keys: Vec<String> = match self.command(&["KEYS", pattern]).expect("redis answers") {
            Reply::Array(items) => items.iter().filter_map(Reply::text).collect(),
            other => panic!("KEYS answered {other:?}"),
        };
        keys.sort();
        keys
    }

    /// `INFO section` as text; `None` when the server does not answer.
    pub fn info(&self, section: &str) -> Option<String> {
        self.command(&["INFO", section]).ok()?.text()
    }

    /// How many calls of scripts (`EVALSHA` and `EVAL`) the server has run, by `INFO
    /// commandstats`. Panics when the server does not answer.
    pub fn script_calls(&self) -> u64 {
        let stats = self.info("commandstats").expect("INFO commandstats");
        stats
            .lines()
            .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    }

    /// One `name:value` field of `INFO section`, parsed; `None` when the server does not answer,
    /// or the field is missing or not a `T`.
    pub fn info_field<T: FromStr>(&self, section: &str, name: &str) -> Option<T> {
        self.info(section)?
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|value| value.trim().parse().ok())
    }

    /// One numeric field of `INFO replication` (`master_repl_offset`, `slave_repl_offset`, …).
    pub fn replication_field(&self, field: &str) -> Option<u64> {
        self.info_field("replication", field)
    }

    /// Waits until this replica's link to its primary is up, polling every 20 ms. Panics after
    /// `timeout`: the first sync takes a moment, and a loaded machine needs a generous bound.
    pub fn wait_replica_linked(&self, timeout: Duration) {
        let linked = wait::until(timeout, Duration::from_millis(20), || {
            self.info("replication")
                .is_some_and(|info| info.contains("master_link_status:up"))
        });
        assert!(
            linked,
            "the replica on port {} did not link to its primary within {timeout:?}",
            self.port
        );
    }

    /// Runs `redis-server` on the server's port and waits until it answers PING: a
    /// [`StartError::PortTaken`] when it exited saying its port (or bus port) was in use.
    fn spawn(&mut self) -> Result<(), StartError> {
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
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                StartError::Failed(format!(
                    "cannot run redis-server ({e}); install it with \
                     `apt-get install redis-server redis-tools` or run scripts/test"
                ))
            })?;
        let pid = format!("process_id:{}", child.id());
        self.child = Some(child);
        let mut up = false;
        // Done when it answers, or when it has exited (a taken port, a bad argument). Up only
        // when the server answering is this one (its process id): on a port taken by another
        // redis-server, that one would answer while ours exits. A server that refuses INFO (a
        // password set by `extra`) is taken as up while ours still runs.
        wait::until(START_TIMEOUT, Duration::from_millis(20), || {
            let exited = self
                .child
                .as_mut()
                .is_some_and(|c| c.try_wait().ok().flatten().is_some());
            up = !exited
                && match command(self.port, &["INFO", "server"]) {
                    Ok(Reply::Bulk(info)) => String::from_utf8_lossy(&info)
                        .lines()
                        .any(|l| l.trim_end() == pid),
                    Ok(Reply::Error(_)) => true,
                    _ => false,
                };
            up || exited
        });
        if up {
            return Ok(());
        }
        let exited = self
            .child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_some());
        self.stop();
        let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let log = if log.trim().is_empty() {
            "(empty)"
        } else {
            log.trim_end()
        };
        let why = if exited {
            format!("redis-server exited; its log:\n{log}")
        } else {
            format!("redis-server did not answer within {START_TIMEOUT:?}; its log:\n{log}")
        };
        Err(StartError::from_output(&why))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // Before the directory goes (TempDir's own drop, after this).
        self.stop();
    }
}
