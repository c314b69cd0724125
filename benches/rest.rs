//! Decisions through `RestStore` → gateway → Redis beside `RespStore` straight to the same Redis,
//! in the same run, at 1, 8 and 64 concurrent clients on loopback: throughput, p50 and p99, and
//! what the HTTP hop adds. Targets: ≤ 0.3 ms added at p50, ≥ 50% of direct RESP throughput at 64
//! clients. The machine is shared and noisy: each round runs RESP then REST back to back, rounds
//! repeat, and the table gives medians with the spread of the REST/RESP ratio. Since other
//! processes take CPU from a run at random, it also gives what load does not change: the CPU time
//! one decision costs (this process — clients and gateway — plus redis-server, from `/proc`),
//! whose ratio is the throughput ratio a machine of our own would show. Results:
//! `docs/performance.md` §3.
//!
//! `cargo bench --bench rest [-- --rounds N] [--clients 1,8,64]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use edgelimit::{Check, Limit, Policy, RespStore, RestStore, Store, TimeSource};
use edgelimit_gateway::{Config, Gateway};
use edgelimit_testkit::RedisServer;

const DECISIONS: usize = 12_000;

struct Run {
    per_s: f64,
    p50_us: f64,
    p99_us: f64,
    /// CPU µs per decision, this process and redis-server together (`None` without `/proc`).
    cpu_us: Option<f64>,
}

/// CPU time used so far by process `pid` (user + system), from `/proc/<pid>/stat`, in clock
/// ticks; `None` where there is no `/proc`.
fn cpu_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): state is the first, utime the
    // 12th, stime the 13th (`proc(5)` fields 14 and 15).
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux when it cannot say).
fn ticks_per_s() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(100.0)
}

/// The CPU time of this process and of redis-server (`redis_pid`), in ticks.
fn cpu_now(redis_pid: &str) -> Option<u64> {
    Some(cpu_ticks("self")? + cpu_ticks(redis_pid)?)
}

async fn run(store: Arc<dyn Store>, clients: usize, redis_pid: &str) -> Run {
    let limit = Limit::new("api", "gcra 1000/1s".parse::<Policy>().unwrap());
    let per_client = DECISIONS / clients;
    let cpu_before = cpu_now(redis_pid);
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let (store, limit) = (store.clone(), limit.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per_client);
                for i in 0..per_client {
                    let check = Check::single(&limit, format!("c{c}-{}", i % 100), 1);
                    let t = Instant::now();
                    store
                        .check(
                            std::slice::from_ref(&check),
                            TimeSource::At(1_700_000_000_000),
                        )
                        .await
                        .expect("store answers");
                    latencies.push(t.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut latencies: Vec<Duration> = Vec::new();
    for t in tasks {
        latencies.extend(t.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu_us = cpu_before.zip(cpu_now(redis_pid)).map(|(before, after)| {
        (after - before) as f64 / ticks_per_s() * 1e6 / (per_client * clients) as f64
    });
    latencies.sort();
    let pct = |p: f64| {
        latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)].as_secs_f64()
            * 1e6
    };
    Run {
        per_s: latencies.len() as f64 / elapsed,
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        cpu_us,
    }
}

/// redis-server's process id, from `INFO server`.
async fn redis_pid(url: &str) -> String {
    let client = redis::Client::open(url).expect("redis URL");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis-server answers");
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut connection)
        .await
        .expect("INFO server");
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .expect("INFO server names process_id")
        .trim()
        .to_string()
}

/// `--name value` from the command line, parsed, or `default`.
fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}: cannot read `{v}`"))
        })
        .unwrap_or(default)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rounds: usize = arg("--rounds", 3).max(1);
    let clients: Vec<usize> = arg("--clients", "1,8,64".to_string())
        .split(',')
        .map(|c| {
            c.trim()
                .parse()
                .expect("--clients: numbers separated by commas")
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = RedisServer::start();
    runtime.block_on(async {
        let gateway = Gateway::start(Config::new(
            "127.0.0.1:0".parse().unwrap(),
            server.url(),
            "bench-token",
        ))
        .await
        .unwrap();
        let resp: Arc<dyn Store> = Arc::new(RespStore::connect(&server.url()).await.unwrap());
        let rest: Arc<dyn Store> = Arc::new(
            RestStore::new(&format!("http://{}", gateway.local_addr()), "bench-token").unwrap(),
        );
        let pid = redis_pid(&server.url()).await;
        run(resp.clone(), 8, &pid).await;
        run(rest.clone(), 8, &pid).await;
        println!(
            "\n{DECISIONS} decisions per run, loopback, one redis-server, the gateway in-process; \
             medians of {rounds} rounds (RESP then REST in each), REST/RESP as median (min–max); \
             CPU: µs per decision, this process (clients, gateway) + redis-server"
        );
        println!("| clients | RESP/s | REST/s | REST/RESP | RESP p50 µs | REST p50 µs | added p50 µs | RESP p99 µs | REST p99 µs | RESP CPU µs | REST CPU µs | RESP CPU ÷ REST CPU |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
        for &c in &clients {
            let mut pairs = Vec::with_capacity(rounds);
            for _ in 0..rounds {
                let d = run(resp.clone(), c, &pid).await;
                let r = run(rest.clone(), c, &pid).await;
                pairs.push((d, r));
            }
            let of = |f: &dyn Fn(&(Run, Run)) -> f64| median(pairs.iter().map(f).collect());
            let ratios: Vec<f64> = pairs.iter().map(|(d, r)| r.per_s / d.per_s).collect();
            let (lo, hi) = ratios
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
            let cpu = |f: &dyn Fn(&(Run, Run)) -> Option<f64>| {
                let xs: Option<Vec<f64>> = pairs.iter().map(f).collect();
                xs.map(median)
            };
            let (resp_cpu, rest_cpu) = (cpu(&|(d, _)| d.cpu_us), cpu(&|(_, r)| r.cpu_us));
            let shown = |x: Option<f64>| x.map_or("—".to_string(), |x| format!("{x:.0}"));
            let cpu_ratio = resp_cpu
                .zip(rest_cpu)
                .map_or("—".to_string(), |(d, r)| format!("{:.2}", d / r));
            println!(
                "| {c} | {:.0} | {:.0} | {:.2} ({lo:.2}–{hi:.2}) | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} | {cpu_ratio} |",
                of(&|(d, _)| d.per_s),
                of(&|(_, r)| r.per_s),
                median(ratios.clone()),
                of(&|(d, _)| d.p50_us),
                of(&|(_, r)| r.p50_us),
                of(&|(d, r)| r.p50_us - d.p50_us),
                of(&|(d, _)| d.p99_us),
                of(&|(_, r)| r.p99_us),
                shown(resp_cpu),
                shown(rest_cpu),
            );
        }
        gateway.shutdown().await;
    });
}
