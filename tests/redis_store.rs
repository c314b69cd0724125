//! `RespStore` against a real redis-server: key hygiene, concurrent clients on one key, a
//! script-cache flush mid-run, a restart, and inputs the scripts refuse.

mod common;

use std::sync::Arc;

use common::differential::{generate, run, Kind};
use common::hygiene::assert_hygiene;
use edgelimit::script::{Topology, MAX_SCRIPT_TIME_MS};
use edgelimit::store::Store;
use edgelimit::{Algorithm, Check, Limit, MemoryStore, Policy, RespStore, StoreError, TimeSource};
use edgelimit_testkit::rng::Rng;
use edgelimit_testkit::RedisServer;

async fn connect(server: &RedisServer, namespace: &str) -> RespStore {
    RespStore::connect(&server.url())
        .await
        .expect("connect")
        .with_namespace(namespace)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_written_has_a_ttl_and_lives_in_the_namespace() {
    let server = RedisServer::start();
    for (seed, kind) in [
        (31, Kind::Single(Algorithm::SlidingLog)),
        (32, Kind::Single(Algorithm::Gcra)),
        (33, Kind::Multi),
    ] {
        let namespace = format!("hyg-{seed}");
        let store = connect(&server, &namespace).await;
        let report = run(
            &store,
            generate(kind, seed, 1_000, &namespace, false),
            &namespace,
            Topology::SingleNode,
            32,
        )
        .await;
        assert_eq!(report.mismatches, 0);
    }
    let keys = assert_hygiene(server.port(), &["hyg-31", "hyg-32", "hyg-33"]);
    assert!(keys > 1_000, "only {keys} keys written");
    // Denials and peeks of fresh keys write nothing.
    let store = connect(&server, "hyg-none").await;
    let limit = Limit::new("n", "fixed 1/1s".parse::<Policy>().unwrap());
    let checks = [
        Check::single(&limit, "peek", 0),
        Check::single(&limit, "too-costly", 2),
        Check::single(&limit, "refund", -1),
    ];
    store
        .check(&checks, TimeSource::At(1_700_000_000_000))
        .await
        .unwrap();
    let dbsize = server.command(&["DBSIZE"]).unwrap();
    assert_eq!(dbsize, edgelimit_testkit::Reply::Int(keys as i64));
}

/// 32 clients, each on its own connection, hit one key at once, round after round at a shared
/// virtual time. Identical requests at one instant may be admitted in any order, so each round's
/// admitted count is known exactly: the Rust steps give it. A lost update would admit more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_clients_on_one_key_never_exceed_the_limit() {
    const CLIENTS: usize = 32;
    const ROUNDS: usize = 40;
    let server = RedisServer::start();
    let mut stores = Vec::new();
    for _ in 0..CLIENTS {
        stores.push(connect(&server, "conc").await);
    }
    for spec in [
        "sliding-log 10/100ms",
        "gcra 10/100ms burst 5",
        "token-bucket 10/100ms burst 5",
        "fixed 10/100ms",
    ] {
        let policy: Policy = spec.parse().unwrap();
        let limit = Limit::new(format!("c-{}", policy.algorithm()), policy);
        let memory = MemoryStore::new();
        let mut rng = Rng::new(41);
        let mut t = 1_700_000_000_000u64;
        let mut admitted_at: Vec<(u64, usize)> = Vec::new();
        for round in 0..ROUNDS {
            t += rng.range(0, 60);
            let barrier = Arc::new(tokio::sync::Barrier::new(CLIENTS));
            let mut tasks = tokio::task::JoinSet::new();
            for store in &stores {
                let (store, limit, barrier) = (store.clone(), limit.clone(), barrier.clone());
                tasks.spawn(async move {
                    barrier.wait().await;
                    store
                        .check(&[Check::single(&limit, "hot", 1)], TimeSource::At(t))
                        .await
                        .expect("store answers")[0]
                        .allowed
                });
            }
            let mut admitted = 0;
            while let Some(allowed) = tasks.join_next().await {
                admitted += allowed.expect("client task") as usize;
            }
            let checks: Vec<Check> = (0..CLIENTS)
                .map(|_| Check::single(&limit, "hot", 1))
                .collect();
            let expected = memory
                .direct()
                .check(&checks, t)
                .iter()
                .filter(|v| v.allowed)
                .count();
            assert_eq!(admitted, expected, "{spec}: round {round} at {t}");
            admitted_at.push((t, admitted));
        }
        // The guarantee, from the admitted timestamps: in any window of W ms (aligned ones for
        // the fixed window), at most L — plus the burst's head start for the buckets.
        let (l, w) = (policy.limit() as usize, policy.window_ms());
        let bound = match policy.algorithm() {
            Algorithm::TokenBucket | Algorithm::Gcra => {
                policy.burst() as usize + (policy.limit() * (w - 1) / w) as usize
            }
            _ => l,
        };
        for &(start, _) in &admitted_at {
            let in_window: usize = admitted_at
                .iter()
                .filter(|&&(s, _)| match policy.algorithm() {
                    Algorithm::FixedWindow => s / w == start / w,
                    _ => s >= start && s < start + w,
                })
                .map(|&(_, n)| n)
                .sum();
            assert!(
                in_window <= bound,
                "{spec}: {in_window} admitted in one window from {start}"
            );
        }
        let total: usize = admitted_at.iter().map(|&(_, n)| n).sum();
        assert!(
            total > l,
            "{spec}: the test admitted too little to mean anything"
        );
        println!("{spec}: {CLIENTS} clients × {ROUNDS} rounds, {total} admitted, at most {bound} per window");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_flush_mid_run_is_survived() {
    let server = RedisServer::start();
    let store = connect(&server, "flush").await;
    let memory = MemoryStore::new();
    let limits: Vec<Limit> = ["sliding-counter 5/1s", "gcra 5/1s", "fixed 5/1s"]
        .iter()
        .enumerate()
        .map(|(i, s)| Limit::new(format!("l{i}"), s.parse::<Policy>().unwrap()))
        .collect();
    let mut t = 1_700_000_000_000;
    for round in 0..20 {
        if round % 5 == 2 {
            server.command(&["SCRIPT", "FLUSH"]).unwrap();
        }
        t += 97;
        let checks = vec![
            Check::single(&limits[0], "a", 1),
            Check::new()
                .with(&limits[1], "a", 2)
                .with(&limits[2], "a", 1),
        ];
        let expected = memory.direct().check(&checks, t);
        let actual = store.check(&checks, TimeSource::At(t)).await;
        assert_eq!(actual, Ok(expected), "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_is_a_transient_error_then_heals() {
    let mut server = RedisServer::start();
    let store =
        RespStore::connect_with_timeout(&server.url(), std::time::Duration::from_millis(500))
            .await
            .unwrap();
    let limit = Limit::new("r", "gcra 5/1s".parse::<Policy>().unwrap());
    let check = [Check::single(&limit, "a", 1)];
    assert!(store.check(&check, TimeSource::Server).await.is_ok());
    server.stop();
    let err = store.check(&check, TimeSource::Server).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    server.restart();
    // The connection comes back by itself within a few attempts (bounded at 30 s for a loaded
    // machine).
    let mut healed = false;
    for _ in 0..300 {
        if store.check(&check, TimeSource::Server).await.is_ok() {
            healed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(healed, "the store did not reconnect after the restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn times_beyond_exact_lua_arithmetic_are_refused() {
    let server = RedisServer::start();
    let store = connect(&server, "bounds").await;
    let limit = Limit::new("b", "fixed 5/1s".parse::<Policy>().unwrap());
    let err = store
        .check(
            &[Check::single(&limit, "a", 1)],
            TimeSource::At(MAX_SCRIPT_TIME_MS),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidInput(_)), "{err:?}");
    assert!(!err.is_transient());
    // The last representable instant still decides like the Rust step.
    let t = MAX_SCRIPT_TIME_MS - 1;
    let checks = [Check::single(&limit, "a", 1)];
    assert_eq!(
        store.check(&checks, TimeSource::At(t)).await,
        Ok(MemoryStore::new().direct().check(&checks, t))
    );
    // A state the scripts did not write is an error, not a decision.
    let key =
        edgelimit::store::key::state_key("bounds", "b", Algorithm::FixedWindow, &"corrupt".into());
    server.command(&["SET", &key, "not a state"]).unwrap();
    let err = store
        .check(&[Check::single(&limit, "corrupt", 1)], TimeSource::At(t))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Script(_)), "{err:?}");
}
