//! One Redis vs three shards behind `ShardedStore`, on loopback, 64 concurrent clients: decisions
//! per second and the client's CPU per decision (this process's user+system time, not Redis's),
//! plus the latency a split multi-limit check adds over one that stays on one shard.
//!
//! This machine has two cores, so throughput cannot grow with shards here; what must hold is that
//! sharding costs the client ≤ 10% more CPU per decision. Run: `cargo bench --bench sharded`.

use std::sync::Arc;
use std::time::Instant;

use edgelimit::store::{Shard, ShardedStore};
use edgelimit::{Check, Limit, Policy, RespStore, Store};
use edgelimit_testkit::RedisServer;
use support::Run;

mod support;

const CLIENTS: usize = 64;
const PER_CLIENT: usize = 400;
/// The instant every decision is made at.
const T: u64 = 1_700_000_000_000;

/// `CLIENTS` clients × `PER_CLIENT` decisions through `store`, 50 identifiers per client.
async fn run(store: Arc<dyn Store>, limit: &Limit) -> Run {
    let limit = Arc::new(limit.clone());
    support::measured(
        CLIENTS,
        PER_CLIENT,
        &[],
        (store, limit),
        move |(store, limit), client, i| async move {
            let check = Check::single(limit.clone(), format!("client{client}-{}", i % 50), 1);
            support::check_at(&*store, &check, T).await;
            (store, limit)
        },
    )
    .await
}

/// This process's CPU µs per decision over `run` (NaN where there is no `/proc` to read).
fn cpu_us(run: &Run) -> f64 {
    run.cpu_us.unwrap_or(f64::NAN)
}

async fn split_latency(store: &ShardedStore<RespStore>, a: &Limit, b: &Limit, split: bool) -> f64 {
    // Find identifiers whose two limits land on different shards (or on the same one).
    let mut latencies = Vec::new();
    let mut found = 0;
    for i in 0.. {
        let id = format!("user{i}");
        let apart =
            store.shard_of(&a.name, id.as_bytes()) != store.shard_of(&b.name, id.as_bytes());
        if apart != split {
            continue;
        }
        let check = Check::new().with(a, id.as_str(), 1).with(b, id.as_str(), 1);
        let t = Instant::now();
        support::check_at(store, &check, T).await;
        latencies.push(t.elapsed().as_secs_f64() * 1e6);
        found += 1;
        if found == 2_000 {
            break;
        }
    }
    support::median(latencies)
}

fn main() {
    if support::listing() {
        return;
    }
    let runtime = support::runtime();
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    runtime.block_on(async {
        let limit = Limit::new("api", "gcra 1000/1s".parse::<Policy>().unwrap());
        let single: Arc<dyn Store> = Arc::new(RespStore::connect(&servers[0].url()).await.unwrap());
        let mut shards = Vec::new();
        for (i, s) in servers.iter().enumerate() {
            shards.push(Shard::new(format!("shard-{i}"), RespStore::connect(&s.url()).await.unwrap()));
        }
        let sharded = Arc::new(ShardedStore::new(shards).unwrap());
        // Warm up connections and scripts on every shard.
        run(single.clone(), &limit).await;
        run(sharded.clone(), &limit).await;
        let mut rows = Vec::new();
        for round in 0..3 {
            rows.push(("1 store", round, run(single.clone(), &limit).await));
            rows.push(("3 shards", round, run(sharded.clone(), &limit).await));
        }
        println!("\n{CLIENTS} clients × {PER_CLIENT} decisions, loopback, 3 rounds interleaved");
        println!("| store | round | decisions/s | client CPU µs/decision | p50 µs | p99 µs |");
        println!("|---|---|---|---|---|---|");
        for (name, round, r) in &rows {
            println!(
                "| {name} | {round} | {:.0} | {:.1} | {:.0} | {:.0} |",
                r.per_s,
                cpu_us(r),
                r.p50_us,
                r.p99_us
            );
        }
        let mean = |name: &str, f: &dyn Fn(&Run) -> f64| {
            let v: Vec<f64> = rows.iter().filter(|r| r.0 == name).map(|r| f(&r.2)).collect();
            v.iter().sum::<f64>() / v.len() as f64
        };
        let cpu_one = mean("1 store", &cpu_us);
        let cpu_three = mean("3 shards", &cpu_us);
        println!(
            "\nclient CPU per decision, 3 shards / 1 store: {:.3} (target ≤ 1.10); throughput ratio {:.3}",
            cpu_three / cpu_one,
            mean("3 shards", &|r| r.per_s) / mean("1 store", &|r| r.per_s)
        );
        let a = Limit::new("per-second", "gcra 1000/1s".parse::<Policy>().unwrap());
        let b = Limit::new("per-day", "sliding-counter 1000000/day".parse::<Policy>().unwrap());
        let together = split_latency(&sharded, &a, &b, false).await;
        let apart = split_latency(&sharded, &a, &b, true).await;
        println!(
            "two-limit check, p50: same shard {together:.0} µs, split over two shards {apart:.0} µs (+{:.0} µs)",
            apart - together
        );
    });
}
