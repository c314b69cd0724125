//! Differential test: random call sequences through `MemoryStore` (the Rust steps) and through
//! `RespStore` on a real redis-server (the Lua twins) must give identical verdicts, field for
//! field — per algorithm, and for multi-limit checks of mixed algorithms.
//!
//! Run with `--nocapture` to see the counts.

mod common;

use common::differential::{generate, run, Kind};
use edgelimit::script::Topology;
use edgelimit::{Algorithm, RespStore};
use edgelimit_testkit::RedisServer;

const SEQUENCES: u64 = 10_000;
const CONCURRENCY: usize = 64;
const COMPARE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

async fn differential(kind: Kind, seed: u64) {
    let server = RedisServer::start();
    let namespace = format!("diff-{seed}");
    // Decisions are compared, not latency: a loaded CI machine must not turn a slow reply into
    // a mismatch (the default timeout is 2 s).
    let store = RespStore::connect_with_timeout(&server.url(), COMPARE_TIMEOUT)
        .await
        .expect("connect")
        .with_namespace(namespace.clone());
    let sequences = generate(kind, seed, SEQUENCES, &namespace, false);
    let report = run(
        &store,
        sequences,
        &namespace,
        Topology::SingleNode,
        CONCURRENCY,
    )
    .await;
    report.assert_clean(&format!("{kind:?}"));
    assert_eq!(report.sequences, SEQUENCES);
    assert_eq!(report.non_atomic, 0, "one node never splits a check");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_window_lua_matches_rust() {
    differential(Kind::Single(Algorithm::FixedWindow), 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_log_lua_matches_rust() {
    differential(Kind::Single(Algorithm::SlidingLog), 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_counter_lua_matches_rust() {
    differential(Kind::Single(Algorithm::SlidingCounter), 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_bucket_lua_matches_rust() {
    differential(Kind::Single(Algorithm::TokenBucket), 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_lua_matches_rust() {
    differential(Kind::Single(Algorithm::Gcra), 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_lua_matches_rust() {
    differential(Kind::Single(Algorithm::Concurrency), 7).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_limit_lua_matches_rust() {
    differential(Kind::Multi, 6).await;
}
