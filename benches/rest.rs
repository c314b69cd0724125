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
//! REST runs in several variants per round, so changes compare in one run (their order rotates
//! from round to round). `--rest` lists them as `PROTOCOL` or `PROTOCOL@GATEWAY`: the protocol
//! from `RestStore` to the gateway is `h1` (HTTP/1.1) or `h2c` (HTTP/2 with prior knowledge,
//! `RestStore::with_h2c`); the gateway is the one in this process, on the clients' runtime,
//! unless `@` names a built `gateway` binary, then run as a process of its own whose CPU is
//! counted too — the way to compare builds of the binary (e.g. allocators, or `main`'s).
//!
//! `PROTOCOL+N` (e.g. `h1+1`) puts the library's `Coalescing` in front of `RestStore`: concurrent
//! checks go together in one `/pipeline`, at most N in flight: what sharing the HTTP hop among
//! decisions gains.
//!
//! `cargo bench --bench rest [-- --rounds N] [--clients 1,8,64]
//! [--rest h1,h2c,h1+1,h2c@/tmp/gateway-a,h2c@/tmp/gateway-b]`

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use edgelimit::{Check, Coalescing, Limit, Policy, RespStore, RestStore, Store};
use edgelimit_gateway::{Config, Gateway};
use edgelimit_testkit::RedisServer;
use support::{median, Run};

mod support;

const DECISIONS: usize = 12_000;
/// The instant every decision is made at.
const T: u64 = 1_700_000_000_000;

/// `DECISIONS` decisions through `store` from `clients` concurrent clients (100 identifiers
/// each); CPU counted for this process and `pids`.
async fn run(store: Arc<dyn Store>, clients: usize, pids: &[String]) -> Run {
    let limit = Arc::new(Limit::new("api", "gcra 1000/1s".parse::<Policy>().unwrap()));
    support::measured(
        clients,
        DECISIONS / clients,
        pids,
        (store, limit),
        move |(store, limit), c, i| async move {
            let check = Check::single(limit.clone(), format!("c{c}-{}", i % 100), 1);
            support::check_at(&*store, &check, T).await;
            (store, limit)
        },
    )
    .await
}

/// A `gateway` binary run as a process of its own for the bench, killed on drop.
struct GatewayProcess {
    child: Child,
    url: String,
}

impl GatewayProcess {
    /// Starts `binary` on a free loopback port in front of `redis_url`; its URL is the address
    /// it prints first.
    fn start(binary: &str, redis_url: &str) -> GatewayProcess {
        let mut child = Command::new(binary)
            .args(["--listen", "127.0.0.1:0", "--redis-url", redis_url])
            .args(["--token", "bench-token", "--log", "warn"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("--gateway: cannot run `{binary}`: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut first = String::new();
        BufReader::new(stdout)
            .read_line(&mut first)
            .unwrap_or_else(|e| panic!("--gateway: no address from `{binary}`: {e}"));
        let url = first
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("--gateway: `{binary}` printed `{first}`, not its address"))
            .to_string();
        GatewayProcess { child, url }
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One way REST runs: a protocol against a gateway.
struct Variant {
    name: String,
    store: Arc<dyn Store>,
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

fn main() {
    if support::listing() {
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
    let runtime = support::runtime();
    let specs: Vec<String> = list(&arg("--rest", "h1,h2c".to_string()));
    let server = RedisServer::start();
    runtime.block_on(async {
        let in_process = Gateway::start(Config::new(
            "127.0.0.1:0".parse().unwrap(),
            server.url(),
            "bench-token",
        ))
        .await
        .unwrap();
        let mut pids = vec![support::redis_pid(&server)];
        let mut processes: Vec<(String, GatewayProcess)> = Vec::new();
        let resp: Arc<dyn Store> = Arc::new(
            RespStore::connect_with_timeout(&server.url(), Duration::from_secs(30))
                .await
                .unwrap(),
        );
        let mut variants = Vec::new();
        for spec in &specs {
            let (protocol, gateway) = spec.split_once('@').unwrap_or((spec, ""));
            let (protocol, lanes) = match protocol.split_once('+') {
                Some((p, lanes)) => (
                    p,
                    Some(lanes.parse::<usize>().unwrap_or_else(|_| {
                        panic!("--rest: `{spec}`: the number after + is the batches in flight")
                    })),
                ),
                None => (protocol, None),
            };
            let (url, gateway_name) = if gateway.is_empty() {
                (format!("http://{}", in_process.local_addr()), "in-process")
            } else {
                if !processes.iter().any(|(g, _)| g == gateway) {
                    let process = GatewayProcess::start(gateway, &server.url());
                    pids.push(process.child.id().to_string());
                    processes.push((gateway.to_string(), process));
                }
                let (_, process) = processes.iter().find(|(g, _)| g == gateway).unwrap();
                let name = gateway.rsplit('/').next().unwrap_or(gateway);
                (process.url.clone(), name)
            };
            // Far beyond any answer: a loaded machine may stall one, and a bench measures, it
            // does not time out.
            let store = RestStore::new(&url, "bench-token")
                .unwrap()
                .with_timeout(Duration::from_secs(30));
            let store = match protocol {
                "h1" => store,
                "h2c" => store.with_h2c().unwrap(),
                other => panic!("--rest: `{other}` is neither h1 nor h2c"),
            };
            let (name, store): (String, Arc<dyn Store>) = match lanes {
                None => (format!("{protocol}, {gateway_name}"), Arc::new(store)),
                Some(n) => (
                    format!("{protocol}, {gateway_name}, coalesced ({n} in flight)"),
                    Arc::new(Coalescing::new(store).with_in_flight(n)),
                ),
            };
            variants.push(Variant { name, store });
        }
        // Warm-up: connections, scripts, allocator pools.
        run(resp.clone(), 8, &pids).await;
        for v in &variants {
            run(v.store.clone(), 8, &pids).await;
        }
        println!(
            "\n{DECISIONS} decisions per run, loopback, one redis-server; medians of {rounds} \
             rounds (RESP, then each REST variant, their order rotating), REST/RESP against the \
             same round's RESP as median (min–max); CPU: µs per decision, this process (clients, \
             in-process gateway) + redis-server + gateway processes"
        );
        println!("| clients | REST | RESP/s | REST/s | REST/RESP | RESP p50 µs | REST p50 µs | added p50 µs | RESP p99 µs | REST p99 µs | RESP CPU µs | REST CPU µs | RESP CPU ÷ REST CPU |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for &c in &clients {
            // pairs[v]: (RESP, REST) per round for variant v.
            let mut pairs: Vec<Vec<(Run, Run)>> = variants.iter().map(|_| Vec::new()).collect();
            for round in 0..rounds {
                let d = run(resp.clone(), c, &pids).await;
                let mut results = Vec::new();
                for k in 0..variants.len() {
                    let v = (k + round) % variants.len();
                    results.push((v, run(variants[v].store.clone(), c, &pids).await));
                }
                for (v, r) in results {
                    pairs[v].push((d.clone(), r));
                }
            }
            for (variant, pairs) in variants.iter().zip(&pairs) {
                print_row(c, &variant.name, pairs);
            }
        }
        drop(processes);
        in_process.shutdown().await;
    });
}

/// A comma-separated list, trimmed, without empty items.
fn list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// One row of the table: medians over the rounds of (RESP, REST) runs.
fn print_row(c: usize, name: &str, pairs: &[(Run, Run)]) {
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
        "| {c} | {name} | {:.0} | {:.0} | {:.2} ({lo:.2}–{hi:.2}) | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} | {cpu_ratio} |",
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
