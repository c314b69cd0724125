//! A Redis Cluster primary failed over to its replica (`CLUSTER FAILOVER`) mid-run: checks
//! continue, the ones that failed during the switch are counted, and every decision not touched by
//! a failed call stays exact against the in-memory reference (a manual failover loses no write).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use edgelimit::{Check, Limit, MemoryStore, Policy, RespStore, Store, TimeSource};
use edgelimit_testkit::{wait, RedisCluster, Reply};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_continue_across_a_manual_failover() {
    let cluster = RedisCluster::start_with_replicas(3, 1);
    let store =
        RespStore::connect_cluster_with_timeout(&cluster.urls(), Duration::from_millis(500))
            .await
            .expect("connect to the cluster");
    let reference = MemoryStore::new();
    let limit = Limit::new("per-user", "sliding-log 5/10s".parse::<Policy>().unwrap());
    let replica = cluster
        .nodes()
        .iter()
        .find(|n| {
            n.command(&["ROLE"])
                .ok()
                .and_then(|r| match r {
                    Reply::Array(parts) => parts.first().and_then(Reply::text),
                    _ => None,
                })
                .as_deref()
                == Some("slave")
        })
        .expect("a replica");
    let role = |node: &edgelimit_testkit::RedisServer| match node.command(&["ROLE"]) {
        Ok(Reply::Array(parts)) => parts.first().and_then(Reply::text).unwrap_or_default(),
        _ => String::new(),
    };
    // A manual failover needs the replica in sync first (bounded wait).
    replica.wait_replica_linked(Duration::from_secs(30));

    // A manual failover also needs the other primaries' votes, and they vote only for a replica
    // they know as one: wait (bounded) until every node's view of the cluster lists it so.
    let replica_id = replica
        .command(&["CLUSTER", "MYID"])
        .ok()
        .and_then(|r| r.text())
        .expect("the replica's node id");
    let known = wait::until_async(Duration::from_secs(30), Duration::from_millis(50), || {
        cluster.nodes().iter().all(|node| {
            node.command(&["CLUSTER", "NODES"])
                .ok()
                .and_then(|r| r.text())
                .is_some_and(|nodes| {
                    nodes
                        .lines()
                        .any(|line| line.starts_with(&replica_id) && line.contains("slave"))
                })
        })
    })
    .await;
    assert!(known, "the cluster never agreed on the replica");

    let (mut ok, mut failed) = (0, 0);
    let mut tainted: HashSet<usize> = HashSet::new();
    let mut now = 1_800_000_000_000u64;
    let mut failover_started = None;
    // A bound on the whole failover, not a measure: it takes about a second idle (the promotion
    // is immediate with CLUSTER FAILOVER); 30 s is slack for a loaded machine.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut round, mut rounds_after_promotion) = (0, 0);
    while rounds_after_promotion < 20 {
        round += 1;
        if failover_started.is_some() && role(replica) == "master" {
            rounds_after_promotion += 1;
        }
        if round == 20 {
            assert_eq!(role(replica), "slave");
            let answer = replica.command(&["CLUSTER", "FAILOVER"]).unwrap();
            assert_eq!(answer, Reply::Status("OK".into()));
            failover_started = Some(Instant::now());
        }
        for user in 0..40usize {
            let check = Check::single(&limit, format!("user{user}"), 1);
            let got = store
                .check(std::slice::from_ref(&check), TimeSource::At(now))
                .await;
            match got {
                Ok(mut verdicts) => {
                    ok += 1;
                    let expected = reference
                        .direct()
                        .check(std::slice::from_ref(&check), now)
                        .remove(0);
                    if !tainted.contains(&user) {
                        assert_eq!(verdicts.remove(0), expected, "user{user} round {round}");
                    }
                }
                Err(e) => {
                    assert!(e.is_transient(), "a failover error is transient: {e}");
                    failed += 1;
                    // The call may or may not have run: this user's count is unknown from now on.
                    tainted.insert(user);
                }
            }
            now += 37;
        }
        assert!(Instant::now() < deadline, "bounded in time");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(role(replica), "master", "the replica took over");
    println!(
        "failover: {round} rounds, {ok} checks answered, {failed} failed during the switch, \
         20 rounds after the promotion; {} of 40 users compared exactly throughout",
        40 - tainted.len()
    );
    assert!(failed <= 200, "checks continue: {failed} failed");
}
