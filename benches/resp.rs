//! Decisions per second through `RespStore` at 1, 8 and 64 concurrent clients, beside
//! `redis-benchmark` running `EVALSHA` of a trivial script against the same server in the same
//! run, and the Redis memory per active key of each algorithm (`MEMORY USAGE`).
//! Target: ≥ 0.7 of redis-benchmark at 64 clients. Run: `cargo bench --bench resp`.

use std::process::Command;
use std::sync::Arc;

use edgelimit::{Algorithm, Check, Limit, Policy, RespStore, Store, TimeSource};

mod support;

const DECISIONS: usize = 60_000;
/// The instant every decision is made at (the memory table's steps on from it).
const T: u64 = 1_700_000_000_000;

/// `RespStore`'s decisions per second with `clients` concurrent clients.
async fn ours(store: Arc<RespStore>, clients: usize) -> f64 {
    let limit = Arc::new(Limit::new("api", "gcra 1000/1s".parse::<Policy>().unwrap()));
    support::rate(
        clients,
        DECISIONS / clients,
        (store, limit),
        move |(store, limit), c, i| async move {
            let check = Check::single(limit.clone(), format!("c{c}-{}", i % 100), 1);
            support::check_at(&*store, &check, T).await;
            (store, limit)
        },
    )
    .await
}

/// `redis-benchmark` running EVALSHA of `return 1` with `clients` connections, no pipelining.
fn anchor(port: u16, sha: &str, clients: usize) -> f64 {
    let out = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-c",
            &clients.to_string(),
        ])
        .args(["-n", &DECISIONS.to_string(), "--csv", "EVALSHA", sha, "0"])
        .output()
        .expect("redis-benchmark (redis-tools) is installed");
    let text = String::from_utf8_lossy(&out.stdout);
    // CSV: "test","rps",… — the second field of the data line.
    text.lines()
        .filter(|l| !l.starts_with("\"test\""))
        .find_map(|l| l.split(',').nth(1)?.trim_matches('"').parse().ok())
        .unwrap_or(f64::NAN)
}

fn main() {
    support::on_redis(|server, store| async move {
        let sha = server
            .command(&["SCRIPT", "LOAD", "return 1"])
            .ok()
            .and_then(|r| r.text())
            .expect("script loads");
        ours(store.clone(), 8).await;
        println!("\n{DECISIONS} decisions per row; loopback; one redis-server; same run");
        println!(
            "| clients | RespStore decisions/s | redis-benchmark EVALSHA `return 1`/s | ratio |"
        );
        println!("|---|---|---|---|");
        for clients in [1, 8, 64] {
            let us = ours(store.clone(), clients).await;
            let them = anchor(server.port(), &sha, clients);
            println!("| {clients} | {us:.0} | {them:.0} | {:.2} |", us / them);
        }
        println!("\n| algorithm | MEMORY USAGE bytes per active key (limit 100, 50 admitted) |");
        println!("|---|---|");
        for algorithm in Algorithm::ALL {
            let policy = Policy::new(algorithm, 100, 60_000, None).unwrap();
            let limit = Limit::new(format!("mem-{algorithm}"), policy);
            for i in 0..50u64 {
                let check = Check::single(limit.clone(), "one-client", 1);
                store
                    .check(&[check], TimeSource::At(T + i * 37))
                    .await
                    .unwrap();
            }
            let key = edgelimit::store::key::state_key(
                edgelimit::store::DEFAULT_NAMESPACE,
                &limit.name,
                algorithm,
                &"one-client".into(),
            );
            let bytes = support::memory_usage(&server, &key).map_or_else(|e| e, |n| n.to_string());
            println!("| {algorithm} | {bytes} |");
        }
    });
}
