//! Replay through `RespStore` (the Lua twins on a real redis-server, and on a Redis Cluster found
//! from one seed node) and through `RestStore` (the Upstash REST protocol, via the gateway in
//! front of the same server) gives the same decisions as the in-process steps: per-policy counts
//! equal, and no single decision differs.
//! Needs `redis-server` (`scripts/test` installs it); without it each test fails with a message
//! naming it and how to install it (`edgelimit_testkit::RedisServer`), rather than passing
//! without having compared anything.

use edgelimit::Policy;
use edgelimit_sim::generate::{write_csv, Generator, Kind};
use edgelimit_sim::input::Source;
use edgelimit_sim::policy::StoreChoice;
use edgelimit_sim::policy::{run, RunOptions};
use edgelimit_sim::readers::ReadOptions;
use edgelimit_testkit::dir::TempDir;
use edgelimit_testkit::{gateway, task, RedisCluster, RedisServer};

#[test]
fn resp_store_decides_as_the_steps() {
    let server = RedisServer::start();
    agrees_with_memory("resp", StoreChoice::Redis(server.url()));
}

#[test]
fn a_redis_cluster_decides_as_the_steps() {
    let cluster = RedisCluster::start(3);
    let url = format!(
        "redis+cluster://{}",
        cluster.urls()[0].trim_start_matches("redis://")
    );
    agrees_with_memory("cluster", url.parse().expect("a cluster URL"));
}

#[test]
fn rest_store_through_the_gateway_decides_as_the_steps() {
    let server = RedisServer::start();
    // The gateway needs a runtime of its own: `sim` blocks on its own single-threaded one.
    let runtime = task::runtime();
    let token = "sim-test-token";
    let gateway = runtime.block_on(gateway::start(&server, token));
    agrees_with_memory(
        "rest",
        StoreChoice::Upstash {
            url: gateway::url(&gateway),
            token: Some(token.into()),
        },
    );
    runtime.block_on(gateway.shutdown());
}

fn agrees_with_memory(name: &str, external: StoreChoice) {
    let dir = TempDir::new(&format!("sim-{name}"));
    let path = dir.join("bursty.csv");
    let kind = Kind::Bursty {
        rate: 30.0,
        clients: 4,
        burst_factor: 6.0,
        period_ms: 4_000.0,
    };
    let mut csv = Vec::new();
    write_csv(Generator::new(kind, 5, 3_000, 1_700_000_000_000), &mut csv).unwrap();
    std::fs::write(&path, csv).unwrap();
    let policies: Vec<Policy> = [
        "fixed 10/5s",
        "sliding-log 10/5s",
        "sliding-counter 10/5s",
        "token-bucket 2/1s burst 10",
        "gcra 2/1s burst 10",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    let options = |store| RunOptions {
        source: Source::File(path.clone()),
        read: ReadOptions::default(),
        policies: policies.clone(),
        store,
        progress: false,
        boundaries: false,
        threads: 1,
    };
    let memory = run(&options(StoreChoice::Memory)).unwrap();
    let redis = run(&options(external)).unwrap();
    assert_eq!(redis.store_mismatches, Some(0));
    for (m, r) in memory.policies.iter().zip(&redis.policies) {
        assert_eq!(
            (
                m.admitted,
                m.denied,
                m.false_allows,
                m.false_denies,
                m.max_admitted_in_window
            ),
            (
                r.admitted,
                r.denied,
                r.false_allows,
                r.false_denies,
                r.max_admitted_in_window
            ),
            "{}",
            m.spec
        );
        assert!(m.denied > 0, "{} should bind", m.spec);
    }
}
