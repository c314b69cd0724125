//! The differential and multi-limit tests on a real 3-node Redis Cluster, then hygiene and a
//! script-cache flush on every node.
//!
//! On a Cluster a check whose keys span slots is split into per-limit scripts (`atomic: false`);
//! the reference then decides those items one by one, as the store does. Half the multi-limit
//! sequences use limit names whose keys share a slot, so the all-or-nothing script runs there too.

mod common;

use common::differential::{generate, run, Kind, Report};
use common::hygiene::assert_hygiene;
use edgelimit::script::Topology;
use edgelimit::store::Store;
use edgelimit::{Algorithm, Check, Limit, Policy, RespStore, TimeSource};
use edgelimit_testkit::RedisCluster;

const SEQUENCES: u64 = 10_000;
const CONCURRENCY: usize = 64;
const COMPARE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

async fn store(cluster: &RedisCluster, namespace: &str) -> RespStore {
    // Decisions are compared, not latency: a loaded CI machine must not turn a slow reply into
    // a mismatch (the default timeout is 2 s).
    RespStore::connect_cluster_with_timeout(&cluster.urls(), COMPARE_TIMEOUT)
        .await
        .expect("connect to the cluster")
        .with_namespace(namespace)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_and_multi_limit_checks_match_rust_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    let mut total = Report::default();
    for (seed, algorithm) in (11..).zip(Algorithm::EVERY) {
        let namespace = format!("cdiff-{seed}");
        let store = store(&cluster, &namespace).await;
        let sequences = generate(Kind::Single(algorithm), seed, SEQUENCES, &namespace, false);
        let report = run(
            &store,
            sequences,
            &namespace,
            Topology::Cluster,
            CONCURRENCY,
        )
        .await;
        report.assert_clean(&format!("cluster {algorithm}"));
        total.mismatches += report.mismatches;
    }
    // Multi-limit: half with keys in one slot (one atomic script), half spread (split).
    for (seed, same_slot) in [(21, true), (22, false)] {
        let namespace = format!("cmulti-{seed}");
        let store = store(&cluster, &namespace).await;
        let sequences = generate(Kind::Multi, seed, SEQUENCES / 2, &namespace, same_slot);
        let report = run(
            &store,
            sequences,
            &namespace,
            Topology::Cluster,
            CONCURRENCY,
        )
        .await;
        report.assert_clean(&format!("cluster multi (same slot: {same_slot})"));
        if same_slot {
            assert_eq!(report.non_atomic, 0, "same-slot checks run as one script");
        } else {
            assert!(report.non_atomic > 0, "spread checks are split");
        }
    }
    assert_eq!(total.mismatches, 0);
    let namespaces: Vec<String> = (11..)
        .take(Algorithm::EVERY.len())
        .map(|s| format!("cdiff-{s}"))
        .chain(["cmulti-21".to_string(), "cmulti-22".to_string()])
        .collect();
    let namespaces: Vec<&str> = namespaces.iter().map(String::as_str).collect();
    let keys: usize = cluster
        .nodes()
        .iter()
        .map(|node| assert_hygiene(node.port(), &namespaces))
        .sum();
    assert!(keys > 0, "the run left no state at all");
    println!("cluster hygiene: {keys} keys, all with a TTL, all in their namespace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_flush_on_every_node_is_survived() {
    let cluster = RedisCluster::start(3);
    let store = store(&cluster, "cflush").await;
    let limit = Limit::new("f", "sliding-log 3/1s".parse::<Policy>().unwrap());
    let t = 1_700_000_000_000;
    let checks: Vec<Check> = (0..20)
        .map(|i| Check::single(&limit, format!("id-{i}"), 1))
        .collect();
    let first = store.check(&checks, TimeSource::At(t)).await.unwrap();
    assert!(first.iter().all(|v| v.allowed));
    for node in cluster.nodes() {
        node.command(&["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
    }
    let second = store.check(&checks, TimeSource::At(t)).await.unwrap();
    assert!(second.iter().all(|v| v.allowed));
    assert!(second.iter().all(|v| v.decisions[0].remaining == 1));
    let keys: usize = cluster
        .nodes()
        .iter()
        .map(|node| assert_hygiene(node.port(), &["cflush"]))
        .sum();
    assert_eq!(keys, 20);
}
