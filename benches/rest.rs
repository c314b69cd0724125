//! Decisions through `RestStore` → gateway → Redis beside `RespStore` straight to the same Redis,
//! in the same run, at 1, 8 and 64 concurrent clients on loopback: throughput, p50 and p99, and
//! what the HTTP hop adds. Targets: ≤ 0.3 ms added at p50, ≥ 50% of direct RESP throughput at 64
//! clients. Run: `cargo bench --bench rest`.

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
}

async fn run(store: Arc<dyn Store>, clients: usize) -> Run {
    let limit = Limit::new("api", "gcra 1000/1s".parse::<Policy>().unwrap());
    let per_client = DECISIONS / clients;
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
    latencies.sort();
    let pct = |p: f64| {
        latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)].as_secs_f64()
            * 1e6
    };
    Run {
        per_s: latencies.len() as f64 / elapsed,
        p50_us: pct(0.5),
        p99_us: pct(0.99),
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = RedisServer::start();
    runtime.block_on(async {
        let gateway = Gateway::start(Config::new("127.0.0.1:0".parse().unwrap(), server.url(), "bench-token"))
            .await
            .unwrap();
        let resp: Arc<dyn Store> = Arc::new(RespStore::connect(&server.url()).await.unwrap());
        let rest: Arc<dyn Store> = Arc::new(
            RestStore::new(&format!("http://{}", gateway.local_addr()), "bench-token").unwrap(),
        );
        run(resp.clone(), 8).await;
        run(rest.clone(), 8).await;
        println!("\n{DECISIONS} decisions per row, loopback, one redis-server, the gateway in-process");
        println!("| clients | RESP/s | REST/s | REST/RESP | RESP p50 µs | REST p50 µs | added p50 µs | RESP p99 µs | REST p99 µs |");
        println!("|---|---|---|---|---|---|---|---|---|");
        for clients in [1, 8, 64] {
            let d = run(resp.clone(), clients).await;
            let r = run(rest.clone(), clients).await;
            println!(
                "| {clients} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
                d.per_s, r.per_s, r.per_s / d.per_s, d.p50_us, r.p50_us, r.p50_us - d.p50_us, d.p99_us, r.p99_us
            );
        }
        gateway.shutdown().await;
    });
}
