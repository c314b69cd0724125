//! What idempotent checks cost (docs/design.md §3, "Idempotent checks"): the same decisions through
//! `RespStore` with and without a request id, in the same run against the same `redis-server` —
//! Redis's own script time per decision (`INFO commandstats`, so neither the client nor the
//! network is counted), decisions per second at 8 clients, and the Redis memory each remembered
//! request holds (`MEMORY USAGE` of its key, and `used_memory` growth per request, which adds the
//! keyspace's own overhead). A third row per algorithm repeats remembered ids: the recalled
//! answer a retry gets. Run: `cargo bench --bench idempotency`.

use std::sync::Arc;

use edgelimit::store::key::request_key;
use edgelimit::store::DEFAULT_NAMESPACE;
use edgelimit::{Check, Limit, Policy, RespStore};

mod support;

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
    let (store, limit) = (store.clone(), Arc::new(limit.clone()));
    // One instant: the states stay their smallest (one lease end, one window), so the rows differ
    // only by the request id.
    support::rate(
        CLIENTS,
        DECISIONS / CLIENTS,
        (store, limit),
        move |(store, limit), c, i| async move {
            let verdict = support::check_at(&*store, &check(&limit, mode, c, i), T).await;
            assert!(verdict.allowed, "the bench's limits admit everything");
            (store, limit)
        },
    )
    .await
}

fn main() {
    support::on_redis(|server, store| async move {
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
            let mut base = None;
            for mode in [Mode::Plain, Mode::Remembered, Mode::Repeat] {
                support::reset_stats(&server);
                let before = support::used_memory(&server);
                let per_s = run(&store, &limit, mode).await;
                let grown = support::used_memory(&server) - before;
                let cost = support::Cost {
                    usec: support::script_usec_per_call(&server),
                    per_s,
                };
                let base = *base.get_or_insert(cost);
                let (name, memory) = match mode {
                    Mode::Plain => ("plain", "0 (no key)".to_string()),
                    Mode::Remembered => {
                        // Every remembered request's key, averaged over a sample.
                        let sample: Vec<i64> = (0..CLIENTS)
                            .flat_map(|c| (0..50).map(move |i| (c, i)))
                            .filter_map(|(c, i)| {
                                let check = check(&limit, mode, c, i);
                                let item = &check.items()[0];
                                support::memory_usage(
                                    &server,
                                    &request_key(
                                        DEFAULT_NAMESPACE,
                                        &limit.name,
                                        &item.identifier,
                                        item.request_id.as_ref().unwrap(),
                                    ),
                                )
                                .ok()
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
                println!("{} {memory} |", cost.row(&base, spec, name));
            }
        }
    });
}
