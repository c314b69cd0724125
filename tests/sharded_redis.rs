//! `ShardedStore` over three real `redis-server`s: exact decisions against the in-memory
//! reference, and a shard killed mid-run — only its identifiers take the fail mode, the others
//! stay exact, and exact decisions resume on the shard once it is back.

use std::time::Duration;

use edgelimit::store::{Shard, ShardedStore};
use edgelimit::{
    Check, FailMode, Limit, Limiter, MemoryStore, Policy, Reason, RespStore, Store, TimeSource,
};
use edgelimit_testkit::RedisServer;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};

const TIMEOUT: Duration = Duration::from_millis(300);

async fn sharded(servers: &[RedisServer]) -> ShardedStore<RespStore> {
    let mut shards = Vec::new();
    for (i, server) in servers.iter().enumerate() {
        let store = RespStore::connect_with_timeout(&server.url(), TIMEOUT)
            .await
            .expect("connect");
        shards.push(Shard::new(format!("shard-{i}"), store));
    }
    ShardedStore::new(shards).unwrap()
}

fn limits() -> Vec<Limit> {
    [
        "fixed 3/10ms",
        "sliding-log 3/10ms",
        "sliding-counter 4/10ms",
        "gcra 2/10ms burst 3",
    ]
    .iter()
    .enumerate()
    .map(|(i, s)| Limit::new(format!("l{i}"), s.parse::<Policy>().unwrap()))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_redis_shards_decide_exactly_as_one_memory_store() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let store = sharded(&servers).await;
    let limits = limits();
    // 200 random sequences of multi-limit checks (split over shards or not), on a virtual clock.
    let strategy = prop::collection::vec(
        (
            0u64..5,
            prop::collection::vec((0usize..4, 0usize..8, 0i64..3), 1..4),
        ),
        1..30,
    );
    let mut runner = TestRunner::new(Config::with_cases(200));
    let (mut sequences, mut calls, mut split) = (0, 0, 0);
    for seq in 0..200u64 {
        let ops = strategy.new_tree(&mut runner).unwrap().current();
        let reference = MemoryStore::new();
        let mut now = 1_000_000 + seq * 1_000_000;
        for (dt, items) in ops {
            now += dt;
            let mut check = Check::new();
            for (l, id, cost) in items {
                check = check.with(&limits[l], format!("seq{seq}-id{id}"), cost);
            }
            let expected = reference
                .direct()
                .check(std::slice::from_ref(&check), now)
                .remove(0);
            let got = store
                .check(std::slice::from_ref(&check), TimeSource::At(now))
                .await
                .unwrap()
                .remove(0);
            assert_eq!(got.allowed, expected.allowed, "{check:?} at {now}");
            assert_eq!(got.decisions, expected.decisions, "{check:?} at {now}");
            calls += 1;
            split += usize::from(!got.atomic);
        }
        sequences += 1;
    }
    println!(
        "sharded differential: {sequences} sequences, {calls} checks ({split} split), 0 mismatches"
    );
    assert!(split > 0, "some checks must span shards");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_shard_fails_only_its_own_identifiers_and_recovers() {
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let store = sharded(&servers).await;
    let owner: Vec<usize> = (0..60)
        .map(|i| store.shard_of("per-user", format!("user{i}").as_bytes()))
        .collect();
    let limiter = Limiter::new(store).with_denial_cache(0);
    let limit = Limit::new("per-user", "fixed 2/1h".parse::<Policy>().unwrap())
        .with_fail_mode(FailMode::Closed);
    let check = |i: usize| Check::single(&limit, format!("user{i}"), 1);

    // Every user takes one of two.
    for i in 0..60 {
        let v = limiter.check(&check(i)).await;
        assert_eq!(v.decisions[0].remaining, 1);
    }
    servers[1].stop();
    let (mut failed, mut exact) = (0, 0);
    for (i, &shard) in owner.iter().enumerate() {
        let v = limiter.check(&check(i)).await;
        if shard == 1 {
            assert_eq!(v.decisions[0].reason, Reason::FailedClosed, "user{i}");
            failed += 1;
        } else {
            assert_eq!(v.decisions[0].reason, Reason::Admitted, "user{i}");
            assert_eq!(v.decisions[0].remaining, 0, "user{i} keeps exact state");
            exact += 1;
        }
    }
    assert!(failed > 5 && exact > 30, "{failed} failed, {exact} exact");

    servers[1].restart();
    // The connection manager reconnects by itself; give it a moment, bounded (30 s).
    let mut recovered = false;
    for _ in 0..300 {
        if let Some(i) = (0..60).find(|&i| owner[i] == 1) {
            let v = limiter
                .check(&Check::single(&limit, format!("probe{i}"), 0))
                .await;
            if v.decisions[0].reason == Reason::Admitted {
                recovered = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(recovered, "the restarted shard answers again");
    for (i, &shard) in owner.iter().enumerate() {
        let v = limiter.check(&check(i)).await;
        let d = v.decisions[0];
        if shard == 1 {
            // The shard came back empty (no persistence): exact again, from a fresh state.
            assert_eq!((d.reason, d.remaining), (Reason::Admitted, 1), "user{i}");
        } else {
            assert_eq!((d.reason, d.allowed), (Reason::OverLimit, false), "user{i}");
        }
    }
    println!("kill/restart: {failed} identifiers failed closed on the killed shard, {exact} stayed exact; all exact after restart");
}
