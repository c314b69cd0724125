//! Differential test over the Upstash REST path: random call sequences through `MemoryStore`
//! (the Rust steps) and through `RestStore` → gateway → redis-server (the Lua twins over HTTP)
//! must give identical verdicts, field for field. The Lua twins themselves are proven on 10,000
//! sequences per kind over RESP (`redis_differential.rs`); here 2,000 per kind prove the REST
//! transport (JSON, base64, NOSCRIPT fall back) changes nothing.
//!
//! Run with `--nocapture` to see the counts.

mod common;

use common::differential::{generate, run, Kind};
use edgelimit::script::Topology;
use edgelimit::Algorithm;
use edgelimit_testkit::{gateway, RedisServer};

const SEQUENCES: u64 = 2_000;
const CONCURRENCY: usize = 32;

async fn differential(kind: Kind, seed: u64) {
    let server = RedisServer::start();
    let gateway = gateway::start(&server, "differential-token").await;
    let namespace = format!("rest-diff-{seed}");
    let store = gateway::rest_store(&gateway, "differential-token")
        // What is compared is decisions, not latency: a loaded CI machine must not turn a slow
        // answer into a mismatch (the default timeout is 1 s).
        .with_timeout(std::time::Duration::from_secs(30))
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
    report.assert_clean(&format!("REST {kind:?}"));
    assert_eq!(report.sequences, SEQUENCES);
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_over_rest_matches_rust() {
    for (i, algorithm) in Algorithm::EVERY.into_iter().enumerate() {
        differential(Kind::Single(algorithm), 100 + i as u64).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_limit_over_rest_matches_rust() {
    differential(Kind::Multi, 106).await;
}
