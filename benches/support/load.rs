//! The load every Redis bench puts on a store: `clients` concurrent tasks on a two-thread tokio
//! runtime, each deciding `per_client` checks one after another, timed as a whole — and, where a
//! bench reports them, each decision's latency and the CPU time the run took.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use edgelimit::{Check, RespStore, Store, TimeSource, Verdict};
use edgelimit_testkit::RedisServer;

use super::percentile_us;

/// The runtime the benches' clients run on: two worker threads, one a core of the machine the
/// numbers in docs/performance.md come from.
pub use edgelimit_testkit::task::runtime;

/// Whether this is a listing run (`--list`, as `cargo test -- --list` and test runners ask every
/// target): a bench has nothing to list, and returns before it starts any server.
pub fn listing() -> bool {
    std::env::args().any(|a| a == "--list")
}

/// The frame of a bench against one Redis: nothing on a listing run ([`listing`]); otherwise a
/// fresh `redis-server` (killed when `body` ends) and a `RespStore` connected to it, handed to
/// `body`, which runs on [`runtime`].
pub fn on_redis<F, Fut>(body: F)
where
    F: FnOnce(RedisServer, Arc<RespStore>) -> Fut,
    Fut: Future<Output = ()>,
{
    if listing() {
        return;
    }
    let server = RedisServer::start();
    runtime().block_on(async {
        let store = RespStore::connect(&server.url())
            .await
            .expect("RespStore connects to the bench's redis-server");
        body(server, Arc::new(store)).await;
    });
}

/// `check` through `store` at `at_ms` (fixed, so states stay small and every run alike): its
/// verdict. A store error stops the bench, which measures and has no failure to report.
pub async fn check_at<S: Store + ?Sized>(store: &S, check: &Check, at_ms: u64) -> Verdict {
    let mut verdicts = store
        .check(std::slice::from_ref(check), TimeSource::At(at_ms))
        .await
        .expect("the store answers");
    verdicts.swap_remove(0)
}

/// Decisions per second: `clients` tasks, client `c` awaiting `decide(state, c, i)` for `i` in
/// `0..per_client`, all started together and timed until the last ends.
///
/// Each client holds its own clone of `state` (its store, connection, limits: cloned once per
/// client, as a loop written out in the bench would), lent to each decision by value and handed
/// back by its future, so a decision clones nothing and no reference count is shared between
/// the clients' threads.
pub async fn rate<S, F, Fut>(clients: usize, per_client: usize, state: S, decide: F) -> f64
where
    S: Clone + Send + 'static,
    F: Fn(S, usize, usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = S> + Send + 'static,
{
    let (elapsed, _) = drive(clients, per_client, false, state, decide).await;
    (per_client * clients) as f64 / elapsed.as_secs_f64()
}

/// One run as the latency benches (`sharded`, `rest`) report it.
#[derive(Debug, Clone)]
pub struct Run {
    /// Decisions per second.
    pub per_s: f64,
    /// Median latency of one decision, µs.
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// CPU µs per decision: this process plus the processes of `pids` (redis-server, gateways);
    /// `None` where there is no `/proc` to read it from.
    pub cpu_us: Option<f64>,
}

/// [`rate`]'s load (`state` and `decide` as there), each decision timed too, and the CPU time of this process and of `pids` over
/// the run.
pub async fn measured<S, F, Fut>(
    clients: usize,
    per_client: usize,
    pids: &[String],
    state: S,
    decide: F,
) -> Run
where
    S: Clone + Send + 'static,
    F: Fn(S, usize, usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = S> + Send + 'static,
{
    let cpu_before = cpu_now(pids);
    let (elapsed, mut latencies) = drive(clients, per_client, true, state, decide).await;
    let cpu_us = cpu_before.zip(cpu_now(pids)).map(|(before, after)| {
        (after - before) as f64 / ticks_per_s() * 1e6 / (per_client * clients) as f64
    });
    latencies.sort();
    Run {
        per_s: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50_us: percentile_us(&latencies, 0.5),
        p99_us: percentile_us(&latencies, 0.99),
        cpu_us,
    }
}

/// The load of [`rate`] and [`measured`]: the wall time from the first task's start to the last
/// one's end, and every decision's latency when `timed` (none otherwise, so a throughput bench
/// reads no clock per decision).
async fn drive<S, F, Fut>(
    clients: usize,
    per_client: usize,
    timed: bool,
    state: S,
    decide: F,
) -> (Duration, Vec<Duration>)
where
    S: Clone + Send + 'static,
    F: Fn(S, usize, usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = S> + Send + 'static,
{
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let (decide, mut state) = (decide.clone(), state.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(if timed { per_client } else { 0 });
                for i in 0..per_client {
                    if timed {
                        let t = Instant::now();
                        state = decide(state, c, i).await;
                        latencies.push(t.elapsed());
                    } else {
                        state = decide(state, c, i).await;
                    }
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("a client task ends without panicking"));
    }
    (started.elapsed(), latencies)
}

/// CPU time used so far by process `pid` (`"self"` for this one; user + system), from
/// `/proc/<pid>/stat`, in clock ticks; `None` where there is no `/proc`.
fn cpu_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): state is the first, utime the
    // 12th, stime the 13th (`proc(5)` fields 14 and 15).
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100, Linux's, when it cannot say).
fn ticks_per_s() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(100.0)
}

/// The CPU time of this process and of the others in `pids`, in ticks.
fn cpu_now(pids: &[String]) -> Option<u64> {
    pids.iter()
        .try_fold(cpu_ticks("self")?, |sum, pid| Some(sum + cpu_ticks(pid)?))
}
