//! "State carries its own timestamps; TTLs only collect garbage", proven on real servers:
//! zero-cost looks served by a replica answer exactly as the primary, and keys whose TTL
//! outlived their window (lagging expiry, as on a replica that has not yet seen the primary's
//! DEL) decide exactly as if they had expired.

use std::time::Duration;

use edgelimit::{Check, Limit, MemoryStore, Policy, RespStore, Store, TimeSource};
use edgelimit_testkit::{wait, RedisServer, Reply};

const SPECS: [&str; 5] = [
    "fixed 3/100ms",
    "sliding-log 3/100ms",
    "sliding-counter 3/100ms",
    "token-bucket 3/100ms burst 4",
    "gcra 3/100ms burst 4",
];

fn limits() -> Vec<Limit> {
    SPECS
        .iter()
        .enumerate()
        .map(|(i, s)| Limit::new(format!("l{i}"), s.parse::<Policy>().unwrap()))
        .collect()
}

async fn decide(store: &impl Store, check: &Check, now: u64) -> edgelimit::Verdict {
    store
        .check(std::slice::from_ref(check), TimeSource::At(now))
        .await
        .expect("store answers")
        .remove(0)
}

/// Waits (bounded) until the replica has applied every write the primary has made so far. `WAIT`
/// cannot say so here: it waits for the offset of its own connection's writes, and the stores
/// wrote on theirs; and a primary streams to a freshly synced replica only after the replica's
/// first acknowledgement, up to a second later.
async fn wait_until_replicated(primary: &RedisServer, replica: &RedisServer) {
    let written = primary
        .replication_field("master_repl_offset")
        .expect("the primary's offset");
    let replicated = wait::until_async(Duration::from_secs(30), Duration::from_millis(10), || {
        replica.replication_field("slave_repl_offset").unwrap_or(0) >= written
    })
    .await;
    assert!(
        replicated,
        "the replica did not reach the primary's offset {written} within 30 s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_answers_looks_exactly_as_the_primary() {
    // Without this a primary waits 5 s (Redis 7's default) for more replicas before it starts a
    // diskless sync.
    let primary_server = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
    let replica_server = RedisServer::start_with(&[
        "--replicaof",
        "127.0.0.1",
        &primary_server.port().to_string(),
    ]);
    replica_server.wait_replica_linked(Duration::from_secs(30));
    let primary = RespStore::connect(&primary_server.url()).await.unwrap();
    let replica = RespStore::connect(&replica_server.url()).await.unwrap();
    let limits = limits();
    let mut compared = 0;
    for (round, start) in [1_000_000u64, 2_000_000, 3_000_000].into_iter().enumerate() {
        for (i, limit) in limits.iter().enumerate() {
            for k in 0..5u64 {
                let id = format!("r{round}-{i}");
                decide(&primary, &Check::single(limit, id, 1), start + k * 7).await;
            }
        }
        wait_until_replicated(&primary_server, &replica_server).await;
        // Looks at many later times, inside and past every window: identical, field for field.
        for dt in [0u64, 1, 33, 99, 100, 101, 150, 250, 10_000] {
            for (i, limit) in limits.iter().enumerate() {
                let look = Check::single(limit, format!("r{round}-{i}"), 0);
                let at = start + 28 + dt;
                let from_primary = decide(&primary, &look, at).await;
                let from_replica = decide(&replica, &look, at).await;
                assert_eq!(from_primary, from_replica, "{} at +{dt}", SPECS[i]);
                compared += 1;
            }
        }
    }
    println!("replica looks: {compared} compared with the primary, 0 differences");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_that_outlive_their_window_decide_as_if_expired() {
    let server = RedisServer::start();
    let redis = RespStore::connect(&server.url()).await.unwrap();
    let reference = MemoryStore::new();
    let limits = limits();
    let mut now = 5_000_000u64;
    let mut checks = 0;
    for burst in 0..4 {
        for (i, limit) in limits.iter().enumerate() {
            for k in 0..6u64 {
                let check = Check::single(limit, format!("id{i}"), 1);
                let at = now + k * 9;
                assert_eq!(
                    decide(&redis, &check, at).await,
                    reference
                        .direct()
                        .check(std::slice::from_ref(&check), at)
                        .remove(0),
                    "{} burst {burst}",
                    SPECS[i]
                );
                checks += 1;
            }
        }
        // Keep every key a day, long past any window: only the stored timestamps may decide.
        let Reply::Array(scan) = server
            .command(&["SCAN", "0", "MATCH", "*", "COUNT", "1000"])
            .unwrap()
        else {
            panic!("SCAN answers an array")
        };
        let Some(Reply::Array(keys)) = scan.get(1) else {
            panic!("SCAN lists keys")
        };
        assert!(!keys.is_empty());
        for key in keys {
            let key = key.text().unwrap();
            assert_eq!(
                server.command(&["PEXPIRE", &key, "86400000"]).unwrap(),
                Reply::Int(1)
            );
        }
        // Then jump well past every window, in virtual time.
        now += 100_000 + burst * 37;
    }
    println!("lagging expiry: {checks} checks identical to the in-memory reference");
}
