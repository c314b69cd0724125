//! What idempotent checks cost (docs/design.md §3, issue 13): the same decisions through
//! `RespStore` with and without a request id, in the same run against the same `redis-server` —
//! Redis's own script time per decision (`INFO commandstats`, so neither the client nor the
//! network is counted), decisions per second at 8 clients, and the Redis memory each remembered
//! request holds (`MEMORY USAGE` of its key, and `used_memory` growth per request, which adds the
//! keyspace's own overhead). A third row per algorithm repeats remembered ids: the recalled
//! answer a retry gets. Run: `cargo bench --bench idempotency`.

use std::sync::Arc;
use std::time::Instant;

use edgelimit::store::key::request_key;
use edgelimit::store::DEFAULT_NAMESPACE;
use edgelimit::{Check, Limit, Policy, RespStore, Store, TimeSource};
use edgelimit_testkit::{RedisServer, Reply};

const DECISIONS: usize = 20_000;
const CLIENTS: usize = 8;
const IDENTIFIERS: usize = 100;
const T: u64 = 1_700_000_000_000;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Plain,
    /// A fresh request id per decision: decided, then remembered.
    Remembered,
    /// The ids of the `Remembered` row again: answered from memory, charging nothing.
    Repeat,
}

fn check(limit: &Limit, mode: Mode, c: usize, i: usize) -> Check {
    let check = Check::single(limit, format!("id-{}", (c * 7 + i) % IDENTIFIERS), 1);
    match mode {
        Mode::Plain => check,
        Mode::Remembered | Mode::Repeat => check.with_request_id(format!("req-{c}-{i}")),
    }
}

/// Decisions per second with `CLIENTS` concurrent clients.
async fn run(store: &Arc<RespStore>, limit: &Limit, mode: Mode) -> f64 {
    let per_client = DECISIONS / CLIENTS;
    let started = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (store, limit) = (store.clone(), limit.clone());
            tokio::spawn(async move {
                // One instant: the states stay their smallest (one lease end, one window), so
                // the rows differ only by the request id.
                for i in 0..per_client {
                    let check = check(&limit, mode, c, i);
                    let verdict = store
                        .check(std::slice::from_ref(&check), TimeSource::At(T))
                        .await
                        .expect("redis answers");
                    assert!(verdict[0].allowed, "the bench's limits admit everything");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    (per_client * CLIENTS) as f64 / started.elapsed().as_secs_f64()
}

/// Microseconds Redis spent per script call since the last `CONFIG RESETSTAT`.
fn script_usec_per_call(server: &RedisServer) -> f64 {
    let info = server
        .command(&["INFO", "commandstats"])
        .ok()
        .and_then(|r| r.text())
        .expect("INFO answers");
    let (mut calls, mut usec) = (0.0, 0.0);
    for line in info.lines() {
        let Some(stats) = line
            .strip_prefix("cmdstat_evalsha:")
            .or_else(|| line.strip_prefix("cmdstat_eval:"))
        else {
            continue;
        };
        for field in stats.split(',') {
            match field.split_once('=') {
                Some(("calls", n)) => calls += n.parse::<f64>().unwrap_or(0.0),
                Some(("usec", n)) => usec += n.parse::<f64>().unwrap_or(0.0),
                _ => {}
            }
        }
    }
    usec / calls
}

fn used_memory(server: &RedisServer) -> i64 {
    let info = server
        .command(&["INFO", "memory"])
        .ok()
        .and_then(|r| r.text())
        .expect("INFO answers");
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:")?.trim().parse().ok())
        .expect("used_memory")
}

fn memory_usage(server: &RedisServer, key: &str) -> Option<i64> {
    match server.command(&["MEMORY", "USAGE", key, "SAMPLES", "0"]) {
        Ok(Reply::Int(n)) => Some(n),
        _ => None,
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = Arc::new(RespStore::connect(&server.url()).await.unwrap());
        println!(
            "\n{DECISIONS} decisions per row, {CLIENTS} clients, {IDENTIFIERS} identifiers; \
             loopback; one redis-server; same run"
        );
        println!(
            "| limit | check | script µs/decision (Redis) | ratio | decisions/s | ratio | \
             bytes per remembered request (MEMORY USAGE / used_memory) |"
        );
        println!("|---|---|---|---|---|---|---|");
        for spec in [
            "fixed 1000000/1h",
            "gcra 1000000/1h",
            "concurrency 1000000 timeout 1h",
        ] {
            let policy: Policy = spec.parse().unwrap();
            let limit = Limit::new(format!("bench-{}", policy.algorithm()), policy);
            // Warm up: scripts loaded, states created.
            run(&store, &limit, Mode::Plain).await;
            let mut base = (0.0, 0.0);
            for mode in [Mode::Plain, Mode::Remembered, Mode::Repeat] {
                server.command(&["CONFIG", "RESETSTAT"]).expect("RESETSTAT");
                let before = used_memory(&server);
                let rate = run(&store, &limit, mode).await;
                let grown = used_memory(&server) - before;
                let usec = script_usec_per_call(&server);
                if mode == Mode::Plain {
                    base = (usec, rate);
                }
                let (name, memory) = match mode {
                    Mode::Plain => ("plain", "0 (no key)".to_string()),
                    Mode::Remembered => {
                        // Every remembered request's key, averaged over a sample.
                        let sample: Vec<i64> = (0..CLIENTS)
                            .flat_map(|c| (0..50).map(move |i| (c, i)))
                            .filter_map(|(c, i)| {
                                let check = check(&limit, mode, c, i);
                                let item = &check.items()[0];
                                memory_usage(
                                    &server,
                                    &request_key(
                                        DEFAULT_NAMESPACE,
                                        &limit.name,
                                        &item.identifier,
                                        item.request_id.as_ref().unwrap(),
                                    ),
                                )
                            })
                            .collect();
                        let per_key = sample.iter().sum::<i64>() as f64 / sample.len() as f64;
                        (
                            "request id",
                            format!(
                                "{per_key:.0} / {:.0}",
                                grown as f64 / (DECISIONS / CLIENTS * CLIENTS) as f64
                            ),
                        )
                    }
                    Mode::Repeat => ("repeated id (recalled)", "0 (no new key)".to_string()),
                };
                println!(
                    "| `{spec}` | {name} | {usec:.2} | {:.2} | {rate:.0} | {:.2} | {memory} |",
                    usec / base.0,
                    rate / base.1
                );
            }
        }
    });
}
