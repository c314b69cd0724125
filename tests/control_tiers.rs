//! Tiers and overrides (docs/design.md §2, "Policy changes"): the effective policy and what each
//! algorithm's state becomes when it changes.
//!
//! - The differential (tests/common/differential.rs) with tiers on every limit and assignment
//!   changes mid-stream — tiers known and unknown, overrides of the limit's algorithm and of
//!   another, clears, lapsing and past `until`s — Rust reference ≡ Lua twin, ≥ 10,000 sequences
//!   per algorithm, on one redis-server and on a 3-node Cluster.
//! - Store conformance of `assign`/`clear_assignment`/`assignments` and of the effective policy
//!   over memory, RESP (single and Cluster), REST through the gateway, and sharded.
//! - Properties of the policy-change rules on `MemoryStore` (the reference).
//!
//! Run with `--nocapture` to see the counts.

mod common;

use common::differential::{generate_controlled, run, Kind};
use edgelimit::control::AssignmentKind;
use edgelimit::script::Topology;
use edgelimit::store::{Shard, ShardedStore};
use edgelimit::Control;
use edgelimit::{
    Algorithm, Assignment, Check, Identifier, Limit, MemoryStore, Policy, RespStore, RestStore,
    Store, TimeSource,
};
use edgelimit_testkit::{gateway, RedisCluster, RedisServer};
use proptest::prelude::*;

const SEQUENCES: u64 = 10_000;
const CONCURRENCY: usize = 64;
const COMPARE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

fn policy(spec: &str) -> Policy {
    spec.parse().unwrap()
}

/// Every algorithm's sequences, then multi-limit ones, through `store`, each run in a namespace
/// of its own (a control key names no algorithm: runs sharing identifiers must not share them).
async fn differential(store: &RespStore, topology: Topology, seed: u64) {
    for (seed, algorithm) in (seed..).zip(Algorithm::EVERY) {
        let namespace = format!("{}-{seed}", store.namespace());
        let store = &store.clone().with_namespace(namespace.clone());
        let sequences =
            generate_controlled(Kind::Single(algorithm), seed, SEQUENCES, &namespace, false);
        let report = run(store, sequences, &namespace, topology, CONCURRENCY).await;
        report.assert_clean(&format!("{topology:?} {algorithm} with assignments"));
        assert_eq!(report.sequences, SEQUENCES);
        assert!(
            report.reassigned > report.items / 20,
            "assignments decided too few items: {report:?}"
        );
    }
    // Multi-limit checks of mixed algorithms; on a Cluster some with every key in one slot (the
    // name search that puts them there is slow in a debug build, hence fewer).
    let parts: &[(bool, u64)] = match topology {
        Topology::SingleNode => &[(false, 5_000)],
        Topology::Cluster => &[(true, 1_000), (false, 2_000)],
    };
    for (i, &(same_slot, count)) in parts.iter().enumerate() {
        let namespace = format!("{}-multi-{i}", store.namespace());
        let store = &store.clone().with_namespace(namespace.clone());
        let sequences = generate_controlled(
            Kind::Multi,
            seed + 50 + i as u64,
            count,
            &namespace,
            same_slot,
        );
        let report = run(store, sequences, &namespace, topology, CONCURRENCY).await;
        report.assert_clean(&format!(
            "{topology:?} multi with assignments (same slot: {same_slot})"
        ));
        assert!(report.reassigned > 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assignment_changes_mid_stream_decide_alike_in_rust_and_lua_on_one_node() {
    let server = RedisServer::start();
    let store = RespStore::connect_with_timeout(&server.url(), COMPARE_TIMEOUT)
        .await
        .expect("connect")
        .with_namespace("ctl-diff");
    differential(&store, Topology::SingleNode, 301).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assignment_changes_mid_stream_decide_alike_in_rust_and_lua_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    let store = RespStore::connect_cluster_with_timeout(&cluster.urls(), COMPARE_TIMEOUT)
        .await
        .expect("connect to the cluster")
        .with_namespace("ctl-cdiff");
    differential(&store, Topology::Cluster, 401).await;
}

/// What every store must do with assignments; `ns` keeps runs on one server apart.
async fn control_conformance<S: Control>(store: &S, label: &str) {
    let t = 1_700_000_000_000u64;
    let limit = Limit::new(format!("{label}-api"), policy("gcra 10/1s burst 10"))
        .with_tiers(vec![
            ("free", policy("gcra 2/1s")),
            ("pro", policy("gcra 100/1s burst 100")),
        ])
        .unwrap();
    let id = Identifier::from("customer{1}:x");
    let capacity = |at: u64| {
        let check = Check::single(&limit, id.clone(), 0);
        async move { store.check(&[check], TimeSource::At(at)).await.unwrap()[0].decisions[0].limit }
    };
    assert_eq!(
        store.assignments(&limit, &id).await.unwrap(),
        vec![],
        "{label}"
    );
    assert_eq!(
        store.assignment(&limit, &id).await.unwrap(),
        None,
        "{label}"
    );
    assert_eq!(capacity(t).await, 10, "{label}: the default");

    // A tier, never lapsing.
    let pro = Assignment::Tier("pro".into());
    store.assign(&limit, &id, Some(&pro), None).await.unwrap();
    assert_eq!(
        store.assignment(&limit, &id).await.unwrap(),
        Some((pro.clone(), None)),
        "{label}"
    );
    assert_eq!(capacity(t).await, 100, "{label}: the tier");

    // An override on top, until t + 1000: decides while it lasts, then the tier again.
    let boost = Assignment::Override(policy("gcra 3/1s"));
    store
        .assign(&limit, &id, Some(&boost), Some(t + 1_000))
        .await
        .unwrap();
    assert_eq!(
        store.assignments(&limit, &id).await.unwrap(),
        vec![(boost.clone(), Some(t + 1_000)), (pro.clone(), None)],
        "{label}"
    );
    assert_eq!(capacity(t + 999).await, 3, "{label}: the override");
    assert_eq!(
        capacity(t + 1_000).await,
        100,
        "{label}: lapsed to the tier"
    );

    // An override of another algorithm is ignored; it replaced the first override.
    let fixed = Assignment::Override(policy("fixed 7/1s"));
    store.assign(&limit, &id, Some(&fixed), None).await.unwrap();
    assert_eq!(
        capacity(t).await,
        100,
        "{label}: another algorithm is ignored"
    );

    // Clearing the override leaves the tier; an unknown tier is the default.
    store
        .clear_assignment(&limit, &id, AssignmentKind::Override)
        .await
        .unwrap();
    assert_eq!(
        store.assignments(&limit, &id).await.unwrap(),
        vec![(pro.clone(), None)],
        "{label}"
    );
    let gold = Assignment::Tier("gold".into());
    store.assign(&limit, &id, Some(&gold), None).await.unwrap();
    assert_eq!(
        capacity(t).await,
        10,
        "{label}: an unknown tier is the default"
    );

    // A tier until t + 5: the tier before, the default from then on.
    let free = Assignment::Tier("free".into());
    store
        .assign(&limit, &id, Some(&free), Some(t + 5))
        .await
        .unwrap();
    assert_eq!(capacity(t + 4).await, 2, "{label}");
    assert_eq!(capacity(t + 5).await, 10, "{label}: lapsed to the default");

    // A multi-limit check decides each item with its own effective policy.
    let other = Limit::new(format!("{label}-other"), policy("fixed 5/1s"));
    store
        .assign(
            &other,
            &id,
            Some(&Assignment::Override(policy("fixed 9/1s"))),
            None,
        )
        .await
        .unwrap();
    let both = Check::single(&limit, id.clone(), 1).with(&other, id.clone(), 1);
    let verdict = store
        .check(&[both], TimeSource::At(t))
        .await
        .unwrap()
        .remove(0);
    let limits: Vec<u64> = verdict.decisions.iter().map(|d| d.limit).collect();
    assert_eq!(limits, [2, 9], "{label}");

    // Clearing everything returns to the default and leaves nothing stored.
    store.assign(&limit, &id, None, None).await.unwrap();
    assert_eq!(
        store.assignments(&limit, &id).await.unwrap(),
        vec![],
        "{label}"
    );
    assert_eq!(capacity(t + 10).await, 10, "{label}");
    store
        .clear_assignment(&other, &id, AssignmentKind::Override)
        .await
        .unwrap();
    assert_eq!(
        store.assignment(&other, &id).await.unwrap(),
        None,
        "{label}"
    );
}

async fn gateway_store(server: &RedisServer) -> (edgelimit_gateway::Gateway, RestStore) {
    let gateway = gateway::start(server, "ctl-token").await;
    let store = gateway::rest_store(&gateway, "ctl-token").with_namespace("ctl-rest");
    (gateway, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_store_assigns_reads_back_and_decides_with_the_effective_policy() {
    control_conformance(&MemoryStore::new(), "memory").await;

    let server = RedisServer::start();
    let resp = RespStore::connect(&server.url())
        .await
        .unwrap()
        .with_namespace("ctl-conf");
    control_conformance(&resp, "resp").await;
    let (_gateway, rest) = gateway_store(&server).await;
    control_conformance(&rest, "rest").await;
    // A never-lapsing line keeps its key; a lapsing one gives it a TTL that only collects
    // garbage (a day past the until).
    let limit = Limit::new("ttl", policy("fixed 1/1s"));
    let id = Identifier::from("x");
    let key = edgelimit::store::key::control_key("ctl-conf", "ttl", &id);
    let pttl = || server.command(&["PTTL", &key]).unwrap();
    resp.assign(&limit, &id, Some(&Assignment::Tier("a".into())), None)
        .await
        .unwrap();
    assert_eq!(pttl(), edgelimit_testkit::Reply::Int(-1));
    let far = 4_000_000_000_000u64;
    resp.assign(
        &limit,
        &id,
        Some(&Assignment::Override(policy("fixed 2/1s"))),
        Some(far),
    )
    .await
    .unwrap();
    assert_eq!(
        pttl(),
        edgelimit_testkit::Reply::Int(-1),
        "the tier never lapses"
    );
    resp.clear_assignment(&limit, &id, AssignmentKind::Tier)
        .await
        .unwrap();
    match pttl() {
        edgelimit_testkit::Reply::Int(ms) => assert!(ms > 86_400_000, "{ms}"),
        other => panic!("{other:?}"),
    }

    let cluster = RedisCluster::start(3);
    let clustered = RespStore::connect_cluster(&cluster.urls())
        .await
        .unwrap()
        .with_namespace("ctl-conf");
    control_conformance(&clustered, "cluster").await;

    let servers: Vec<RedisServer> = (0..2).map(|_| RedisServer::start()).collect();
    let mut shards = Vec::new();
    for (i, server) in servers.iter().enumerate() {
        let store = RespStore::connect(&server.url()).await.unwrap();
        shards.push(Shard::new(format!("shard-{i}"), store));
    }
    let sharded = ShardedStore::new(shards).unwrap();
    control_conformance(&sharded, "sharded").await;
}

#[tokio::test]
async fn unreadable_control_keys_are_errors_not_decisions() {
    let server = RedisServer::start();
    let store = RespStore::connect(&server.url())
        .await
        .unwrap()
        .with_namespace("ctl-bad");
    let limit = Limit::new("l", policy("gcra 1/1s"));
    let id = Identifier::from("x");
    let key = edgelimit::store::key::control_key("ctl-bad", "l", &id);
    server.command(&["SET", &key, "0 z what"]).unwrap();
    let err = store.assignments(&limit, &id).await.unwrap_err();
    assert!(err.to_string().contains("kind `z`"), "{err}");
    let err = store
        .check(&[Check::single(&limit, id, 1)], TimeSource::At(1))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("unreadable assignment"), "{err}");
}

/// A token bucket keeps the share of its capacity it owes across a change of policy (rounded
/// against the client); GCRA keeps its debt as a time, read at most the new tolerance. Both on
/// `MemoryStore`, the reference (the differential ties the Lua twins to it).
#[test]
fn bucket_debts_are_rescaled_or_capped_on_a_policy_change() {
    let t = 1_000_000u64;
    let id = Identifier::from("c");
    // (algorithm, remaining once upgraded, after 100 more, at t + 1000, at t + 1500)
    for (algorithm, upgraded, after, at_1000, at_1500) in
        [("token-bucket", 100, 0, 10, 10), ("gcra", 150, 50, 5, 10)]
    {
        let limit = Limit::new("b", policy(&format!("{algorithm} 10/1s burst 10")))
            .with_tiers(vec![(
                "pro",
                policy(&format!("{algorithm} 100/1s burst 200")),
            )])
            .unwrap();
        let store = MemoryStore::new();
        let at = |cost: i64, t: u64| {
            store
                .direct()
                .check(&[Check::single(&limit, id.clone(), cost)], t)[0]
                .decisions[0]
        };
        assert!(at(5, t).allowed);
        // Half the bucket used. Upgraded: the bucket owes half its new capacity (100 of 200);
        // GCRA owes the same 500 ms, 50 requests at the new rate.
        store
            .direct()
            .assign(&limit, &id, Some(&Assignment::Tier("pro".into())), None);
        let look = at(0, t);
        assert_eq!((look.limit, look.remaining), (200, upgraded), "{algorithm}");
        assert_eq!(at(100, t).remaining, after, "{algorithm}");
        // Downgraded: the debt is at most a full bucket, never more.
        store.direct().assign(&limit, &id, None, None);
        let look = at(0, t);
        assert_eq!((look.limit, look.remaining), (10, 0), "{algorithm}");
        assert_eq!(
            at(1, t).retry_after_ms,
            100,
            "{algorithm}: one emission interval"
        );
        assert_eq!(at(0, t + 1_000).remaining, at_1000, "{algorithm}");
        assert_eq!(at(0, t + 1_500).remaining, at_1500, "{algorithm}");
    }
}

#[test]
fn windows_keep_their_count_and_realign_and_leases_outlive_a_lower_limit() {
    let id = Identifier::from("c");
    // Fixed window: 6 used in the minute; a 10/1s tier counts them in the current second only
    // while the stored window is the current one.
    let limit = Limit::new("f", policy("fixed 10/1m"))
        .with_tiers(vec![("fast", policy("fixed 10/1s"))])
        .unwrap();
    let store = MemoryStore::new();
    let at = |cost: i64, t: u64| {
        store
            .direct()
            .check(&[Check::single(&limit, id.clone(), cost)], t)[0]
            .decisions[0]
    };
    assert!(at(6, 60_500).allowed);
    store
        .direct()
        .assign(&limit, &id, Some(&Assignment::Tier("fast".into())), None);
    assert_eq!(at(0, 60_900).remaining, 4, "the used quota carries over");
    assert_eq!(at(0, 61_000).remaining, 10, "a new second starts fresh");

    // Concurrency: 3 live leases; lowered to 1, it denies until all three have ended.
    let limit = Limit::new("c", policy("concurrency 3 timeout 10s"))
        .with_tiers(vec![("one", policy("concurrency 1 timeout 10s"))])
        .unwrap();
    let store = MemoryStore::new();
    let at = |cost: i64, t: u64| {
        store
            .direct()
            .check(&[Check::single(&limit, id.clone(), cost)], t)[0]
            .decisions[0]
    };
    assert!(at(1, 0).allowed && at(1, 1).allowed && at(1, 2).allowed);
    store
        .direct()
        .assign(&limit, &id, Some(&Assignment::Tier("one".into())), None);
    let denied = at(1, 5);
    assert!(!denied.allowed);
    assert_eq!(
        denied.retry_after_ms,
        10_002 - 5,
        "room once the last lease ends"
    );
    assert!(at(1, 10_002).allowed);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// An override decides exactly until its `until`, then the tier (or the default when the
    /// tier is unknown) — as if the store held only what is still live.
    #[test]
    fn an_override_lapses_at_until_to_the_tier_or_the_default(
        until in 1u64..1_000,
        known in any::<bool>(),
        times in prop::collection::vec(0u64..2_000, 1..20),
        costs in prop::collection::vec(0i64..4, 1..20),
    ) {
        let limit = Limit::new("p", policy("sliding-log 5/100ms"))
            .with_tiers(vec![("pro", policy("sliding-log 50/100ms"))])
            .unwrap();
        let id = Identifier::from("c");
        let tier = Assignment::Tier(if known { "pro" } else { "nope" }.into());
        let over = Assignment::Override(policy("sliding-log 2/100ms"));
        let store = MemoryStore::new();
        store.direct().assign(&limit, &id, Some(&tier), None);
        store.direct().assign(&limit, &id, Some(&over), Some(until));
        let mut times = times;
        times.sort_unstable();
        for (t, cost) in times.into_iter().zip(costs) {
            let d = store.direct().check(&[Check::single(&limit, id.clone(), cost)], t)[0].decisions[0];
            let expected = if t < until { 2 } else if known { 50 } else { 5 };
            prop_assert_eq!(d.limit, expected, "at {} (until {})", t, until);
        }
    }

    /// An override of another algorithm changes nothing: decisions equal a store holding none.
    #[test]
    fn an_override_of_another_algorithm_is_ignored(
        ops in prop::collection::vec((0u64..300, -2i64..4), 1..30),
    ) {
        let limit = Limit::new("p", policy("gcra 5/100ms burst 8"));
        let id = Identifier::from("c");
        let with = MemoryStore::new();
        with.direct().assign(&limit, &id, Some(&Assignment::Override(policy("fixed 50/1s"))), None);
        let without = MemoryStore::new();
        let mut t = 0;
        for (dt, cost) in ops {
            t += dt;
            let check = [Check::single(&limit, id.clone(), cost)];
            prop_assert_eq!(with.direct().check(&check, t), without.direct().check(&check, t));
        }
    }
}
