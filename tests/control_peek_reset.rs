//! Peek and reset (docs/design.md §"Peek and reset"), and the list calls, on every store:
//! one body over memory, RESP, Cluster, REST (through the gateway) and sharded; a peek never
//! changes state (property: every key's DUMP before and after, on Redis; later decisions, in
//! memory); after a reset no state key of the identifier remains (hygiene). A peek looks under
//! the identifier's effective policy (tier, override), on every store and in the property, where
//! identifiers get tiers and overrides along the way.

use edgelimit::control::list::{Gate, ListEntry, ListProbe};
use edgelimit::control::AssignmentKind;
use edgelimit::store::{Shard, ShardedStore, Store};
use edgelimit::Control;
use edgelimit::{
    Algorithm, Assignment, Check, CheckItem, Identifier, Limit, MemoryStore, Policy, Reason,
    RespStore, TimeSource, Verdict,
};
use edgelimit_testkit::rng::Rng;
use edgelimit_testkit::{gateway, RedisCluster, RedisServer};

const T0: u64 = 1_700_000_000_000;

fn limit(name: &str, spec: &str) -> Limit {
    Limit::new(name, spec.parse::<Policy>().expect("valid spec"))
}

fn spec(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::FixedWindow => "fixed 3/1s",
        Algorithm::SlidingLog => "sliding-log 3/1s",
        Algorithm::SlidingCounter => "sliding-counter 3/1s",
        Algorithm::TokenBucket => "token-bucket 3/1s",
        Algorithm::Gcra => "gcra 3/1s",
        Algorithm::Concurrency => "concurrency 3 timeout 1s",
    }
}

/// Another policy of `algorithm`, with `n` in place of the default 3.
fn other_spec(algorithm: Algorithm, n: u64) -> String {
    match algorithm {
        Algorithm::FixedWindow => format!("fixed {n}/1s"),
        Algorithm::SlidingLog => format!("sliding-log {n}/2s"),
        Algorithm::SlidingCounter => format!("sliding-counter {n}/1s"),
        Algorithm::TokenBucket => format!("token-bucket {n}/500ms"),
        Algorithm::Gcra => format!("gcra {n}/1s burst {}", n + 2),
        Algorithm::Concurrency => format!("concurrency {n} timeout 2s"),
    }
}

async fn charge<S: Store>(store: &S, limit: &Limit, id: &str, cost: i64, at: u64) -> Verdict {
    store
        .check(&[Check::single(limit, id, cost)], TimeSource::At(at))
        .await
        .expect("store answers")
        .remove(0)
}

/// The body every store runs; numbers spelled out.
async fn peek_reset_and_lists_conform<S: Control>(store: &S) {
    for algorithm in Algorithm::EVERY {
        let l = limit(&format!("pr-{}", algorithm.as_str()), spec(algorithm));
        let id = Identifier::from("client");
        // Nothing stored yet: the whole quota, and a reset finds nothing.
        let fresh = store.peek(&l, &id, TimeSource::At(T0)).await.unwrap();
        assert!(fresh.allowed, "{algorithm}");
        assert_eq!(fresh.decisions[0].remaining, 3, "{algorithm}");
        assert!(!store.reset(&l, &id).await.unwrap(), "{algorithm}");
        assert!(charge(store, &l, "client", 2, T0).await.allowed);
        // A peek shows what is left and takes nothing, however often.
        for _ in 0..3 {
            let v = store.peek(&l, &id, TimeSource::At(T0 + 1)).await.unwrap();
            assert!(v.allowed, "{algorithm}");
            assert_eq!(v.decisions[0].remaining, 1, "{algorithm}");
            assert_eq!(v.decisions[0].limit, 3, "{algorithm}");
            assert_eq!(v.decided_at_ms, T0 + 1, "{algorithm}");
            assert!(v.listed.is_empty());
        }
        // The peek agrees with a zero-cost check.
        let look = charge(store, &l, "client", 0, T0 + 1).await;
        let peek = store.peek(&l, &id, TimeSource::At(T0 + 1)).await.unwrap();
        assert_eq!(peek.decisions, look.decisions, "{algorithm}");
        assert!(!charge(store, &l, "client", 2, T0 + 2).await.allowed);
        // A reset gives the whole quota back, to this identifier only.
        assert!(charge(store, &l, "other", 1, T0).await.allowed);
        assert!(store.reset(&l, &id).await.unwrap(), "{algorithm}");
        assert!(!store.reset(&l, &id).await.unwrap(), "{algorithm}");
        let after = store.peek(&l, &id, TimeSource::At(T0 + 3)).await.unwrap();
        assert_eq!(after.decisions[0].remaining, 3, "{algorithm}");
        let other = store
            .peek(&l, &Identifier::from("other"), TimeSource::At(T0 + 3))
            .await
            .unwrap();
        assert_eq!(other.decisions[0].remaining, 2, "{algorithm}");
        assert!(charge(store, &l, "client", 3, T0 + 4).await.allowed);
    }
    // A reset keeps remembered request ids: a retry of an admitted request still charges once.
    let l = limit("pr-rq", "fixed 2/1m");
    let item = || CheckItem::new(&l, "client", 1).with_request_id("req-1");
    let first = store
        .check(&[Check::new().with_item(item())], TimeSource::At(T0))
        .await
        .unwrap();
    assert!(first[0].allowed);
    assert!(store.reset(&l, &Identifier::from("client")).await.unwrap());
    let retry = store
        .check(&[Check::new().with_item(item())], TimeSource::At(T0 + 1))
        .await
        .unwrap();
    assert_eq!(retry[0].decisions, first[0].decisions);
    let peek = store
        .peek(&l, &Identifier::from("client"), TimeSource::At(T0 + 2))
        .await
        .unwrap();
    assert_eq!(peek.decisions[0].remaining, 2, "the retry charged nothing");

    peek_under_the_effective_policy(store).await;

    // Lists: add (with and without a lapse), re-time, list in lapse order, remove.
    let a: ListEntry = "ip 203.0.113.0/24".parse().unwrap();
    let b: ListEntry = "country cn".parse().unwrap();
    let c: ListEntry = "header:X-Key k".parse().unwrap();
    store.list_add("deny", &a, None, T0).await.unwrap();
    store
        .list_add("deny", &b, Some(T0 + 500), T0)
        .await
        .unwrap();
    store
        .list_add("deny", &c, Some(T0 + 100), T0)
        .await
        .unwrap();
    store
        .list_add("deny", &c, Some(T0 + 200), T0)
        .await
        .unwrap();
    assert_eq!(
        store.list_entries("deny", T0).await.unwrap(),
        [
            ("header:x-key k".to_string(), Some(T0 + 200)),
            ("country CN".to_string(), Some(T0 + 500)),
            ("ip 203.0.113.0/24".to_string(), None),
        ]
    );
    assert_eq!(
        store.list_entries("deny", T0 + 200).await.unwrap(),
        [
            ("country CN".to_string(), Some(T0 + 500)),
            ("ip 203.0.113.0/24".to_string(), None),
        ],
        "an entry lapses at its time, whoever removes it"
    );
    assert!(store.list_remove("deny", &a).await.unwrap());
    assert!(!store.list_remove("deny", &a).await.unwrap());
    assert!(store.list_entries("allow", T0).await.unwrap().is_empty());
    assert!(store.list_add("deny", &a, Some(T0), T0).await.is_err());
}

/// A block (docs/design.md §2, "Blocks") is not a peek's business, and goes with a reset.
async fn a_reset_lifts_a_block<S: Control>(store: &S) {
    let l = limit("pr-block", "fixed 1/1s").with_block_for(60_000);
    let id = Identifier::from("blocked");
    assert!(charge(store, &l, "blocked", 1, T0).await.allowed);
    let v = charge(store, &l, "blocked", 1, T0 + 1).await;
    assert_eq!(v.decisions[0].reason, Reason::OverLimit);
    let v = charge(store, &l, "blocked", 1, T0 + 2_000).await;
    assert_eq!(v.decisions[0].reason, Reason::Blocked);
    // A peek is a look: not blocked, the window's standing.
    let peek = store
        .peek(&l, &id, TimeSource::At(T0 + 2_000))
        .await
        .unwrap();
    assert!(peek.allowed);
    assert_eq!(peek.decisions[0].remaining, 1);
    assert!(store.reset(&l, &id).await.unwrap());
    let v = charge(store, &l, "blocked", 1, T0 + 2_001).await;
    assert_eq!(v.decisions[0].reason, Reason::Admitted);
    // The reset took the block with the state: denied on its own again, a new block starts,
    // and a reset leaves nothing of either.
    assert_eq!(
        charge(store, &l, "blocked", 1, T0 + 2_002).await.decisions[0].reason,
        Reason::OverLimit
    );
    assert!(store.reset(&l, &id).await.unwrap());
    assert!(!store.reset(&l, &id).await.unwrap());
}

/// A peek at a delaying GCRA limit reads its queue: `reset_at` is the last reserved place, as a
/// zero-cost check reports it.
async fn a_peek_sees_the_queue_of_a_delaying_limit<S: Control>(store: &S) {
    let l = limit("pr-delay", "gcra 10/1s burst 1").with_max_delay(1_000);
    let id = Identifier::from("queued");
    for _ in 0..5 {
        assert!(charge(store, &l, "queued", 1, T0).await.allowed);
    }
    let v = charge(store, &l, "queued", 1, T0).await;
    assert_eq!(
        (v.decisions[0].reason, v.decisions[0].retry_after_ms),
        (Reason::Delayed, 500)
    );
    let peek = store.peek(&l, &id, TimeSource::At(T0)).await.unwrap();
    assert_eq!(peek.decisions[0].reset_at_ms, T0 + 600);
    assert_eq!(
        peek.decisions[0],
        charge(store, &l, "queued", 0, T0).await.decisions[0]
    );
}

/// A peek looks under the identifier's effective policy (docs/design.md §2, "Policy changes"):
/// its tier, an unlapsed override on top, the default once both are gone — and agrees with a
/// zero-cost check, which reads the assignment the same way.
async fn peek_under_the_effective_policy<S: Control>(store: &S) {
    let l = limit("pr-tiers", "gcra 3/1s")
        .with_tiers(vec![
            ("free", "gcra 1/1s".parse().unwrap()),
            ("pro", "gcra 10/1s burst 10".parse().unwrap()),
        ])
        .unwrap();
    let id = Identifier::from("tiered");
    let peek = |at: u64| {
        let id = id.clone();
        let l = &l;
        async move { store.peek(l, &id, TimeSource::At(at)).await.unwrap() }
    };
    let look = |at: u64| charge(store, &l, "tiered", 0, at);
    assert_eq!(peek(T0).await.decisions[0].limit, 3, "the default");

    let pro = Assignment::Tier("pro".into());
    store.assign(&l, &id, Some(&pro), None).await.unwrap();
    let v = peek(T0).await;
    assert_eq!(
        (v.decisions[0].limit, v.decisions[0].remaining),
        (10, 10),
        "the tier"
    );
    assert!(
        charge(store, &l, "tiered", 4, T0).await.allowed,
        "pro admits 4"
    );
    let v = peek(T0).await;
    assert_eq!((v.decisions[0].limit, v.decisions[0].remaining), (10, 6));
    assert_eq!(v.decisions, look(T0).await.decisions);

    // An override on top, until T0 + 1000; the tier again from then on.
    let boost = Assignment::Override("gcra 20/1s burst 20".parse().unwrap());
    store
        .assign(&l, &id, Some(&boost), Some(T0 + 1_000))
        .await
        .unwrap();
    let v = peek(T0 + 1).await;
    assert_eq!(v.decisions[0].limit, 20, "the override");
    assert_eq!(v.decisions, look(T0 + 1).await.decisions);
    let v = peek(T0 + 1_000).await;
    assert_eq!(v.decisions[0].limit, 10, "lapsed to the tier");
    assert_eq!(v.decisions, look(T0 + 1_000).await.decisions);

    // An override of another algorithm is ignored; an unknown tier is the default.
    let fixed = Assignment::Override("fixed 7/1s".parse().unwrap());
    store.assign(&l, &id, Some(&fixed), None).await.unwrap();
    assert_eq!(peek(T0 + 1_001).await.decisions[0].limit, 10);
    let gold = Assignment::Tier("gold".into());
    store.assign(&l, &id, Some(&gold), None).await.unwrap();
    assert_eq!(peek(T0 + 1_001).await.decisions[0].limit, 3);

    // A lower tier: the same state, looked at under the smaller policy.
    let free = Assignment::Tier("free".into());
    store.assign(&l, &id, Some(&free), None).await.unwrap();
    store
        .clear_assignment(&l, &id, AssignmentKind::Override)
        .await
        .unwrap();
    let v = peek(T0 + 1_002).await;
    assert_eq!(v.decisions[0].limit, 1, "the free tier");
    assert_eq!(v.decisions, look(T0 + 1_002).await.decisions);

    // Cleared: the default again.
    store.assign(&l, &id, None, None).await.unwrap();
    let v = peek(T0 + 1_003).await;
    assert_eq!(v.decisions[0].limit, 3, "cleared");
    assert_eq!(v.decisions, look(T0 + 1_003).await.decisions);
}

/// An item an allow list lets through, or a check a deny list refuses, reports the capacity of
/// the identifier's effective policy (its tier here), as a decided item does — where the lists
/// are read in the deciding script (memory, one node, REST). Not on a Cluster: there the lists
/// are read first and settle their items without reading the control key, so a listed decision
/// reports the limit's own capacity (docs/design.md §"Peek and reset").
async fn listed_decisions_report_the_effective_capacity<S: Control>(store: &S) {
    let l = limit("pr-listed", "gcra 3/1s")
        .with_tiers(vec![("pro", "gcra 10/1s burst 10".parse().unwrap())])
        .unwrap();
    let address = "203.0.113.9";
    let id = Identifier::from(address);
    let pro = Assignment::Tier("pro".into());
    store.assign(&l, &id, Some(&pro), None).await.unwrap();
    let entry: ListEntry = format!("ip {address}").parse().unwrap();
    let gated = || {
        Check::new()
            .with_item(CheckItem::new(&l, address, 1).gated(0))
            .gated(
                ListProbe::new().with("ip", address),
                vec![Gate::new(vec!["deny:pr".into()], vec!["allow:pr".into()])],
            )
    };
    let decide = || async {
        store
            .check(&[gated()], TimeSource::At(T0))
            .await
            .unwrap()
            .remove(0)
            .decisions
            .remove(0)
    };
    let d = decide().await;
    assert_eq!((d.reason, d.limit), (Reason::Admitted, 10), "decided");
    store.list_add("allow:pr", &entry, None, T0).await.unwrap();
    let d = decide().await;
    assert_eq!(
        (d.reason, d.limit, d.remaining),
        (Reason::Allowlisted, 10, 10),
        "allowlisted"
    );
    store.list_add("deny:pr", &entry, None, T0).await.unwrap();
    let d = decide().await;
    assert_eq!((d.reason, d.limit), (Reason::Denylisted, 10), "denylisted");
    store.list_remove("allow:pr", &entry).await.unwrap();
    store.list_remove("deny:pr", &entry).await.unwrap();
    store.assign(&l, &id, None, None).await.unwrap();
}

/// A calendar limit's peek looks at its calendar period (the scripts take the calendar in the
/// window's place), under a calendar tier too, and agrees with a zero-cost check.
async fn a_calendar_peek_counts_to_the_periods_end<S: Control>(store: &S) {
    let l = limit("pr-cal", "fixed 3/month anchor 15 utc+02:00")
        .with_tiers(vec![("pro", "fixed 10/week".parse().unwrap())])
        .unwrap();
    let id = Identifier::from("cal");
    // Tuesday 2023-11-14 21:00 UTC: 23:00 at UTC+02:00, an hour before the 15th.
    let at = 1_699_995_600_000;
    assert!(charge(store, &l, "cal", 2, at).await.allowed);
    let v = store.peek(&l, &id, TimeSource::At(at)).await.unwrap();
    let d = &v.decisions[0];
    assert_eq!(
        (d.limit, d.remaining, d.reset_at_ms),
        (3, 1, at + 3_600_000)
    );
    assert_eq!(v.decisions, charge(store, &l, "cal", 0, at).await.decisions);
    let pro = Assignment::Tier("pro".into());
    store.assign(&l, &id, Some(&pro), None).await.unwrap();
    let v = store.peek(&l, &id, TimeSource::At(at)).await.unwrap();
    let d = &v.decisions[0];
    // The count carries over (its write is in the current ISO week), which ends on Monday
    // 2023-11-20 00:00 UTC.
    assert_eq!(
        (d.limit, d.remaining, d.reset_at_ms),
        (10, 8, 1_700_438_400_000)
    );
    assert_eq!(v.decisions, charge(store, &l, "cal", 0, at).await.decisions);
    store.assign(&l, &id, None, None).await.unwrap();
}

#[tokio::test]
async fn calendar_peek_memory() {
    a_calendar_peek_counts_to_the_periods_end(&MemoryStore::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calendar_peek_resp() {
    let server = RedisServer::start();
    let store = RespStore::connect(&server.url())
        .await
        .unwrap()
        .with_namespace("pr-cal");
    a_calendar_peek_counts_to_the_periods_end(&store).await;
}

#[tokio::test]
async fn memory() {
    let store = MemoryStore::new();
    peek_reset_and_lists_conform(&store).await;
    a_reset_lifts_a_block(&store).await;
    a_peek_sees_the_queue_of_a_delaying_limit(&store).await;
    listed_decisions_report_the_effective_capacity(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp() {
    let server = RedisServer::start();
    let store = RespStore::connect(&server.url())
        .await
        .unwrap()
        .with_namespace("pr");
    peek_reset_and_lists_conform(&store).await;
    a_reset_lifts_a_block(&store).await;
    a_peek_sees_the_queue_of_a_delaying_limit(&store).await;
    listed_decisions_report_the_effective_capacity(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp_cluster() {
    let cluster = RedisCluster::start(3);
    let store = RespStore::connect_cluster(&cluster.urls())
        .await
        .unwrap()
        .with_namespace("pr");
    peek_reset_and_lists_conform(&store).await;
    a_reset_lifts_a_block(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_via_gateway() {
    let server = RedisServer::start();
    let gateway = gateway::start(&server, "pr-token").await;
    let store = gateway::rest_store(&gateway, "pr-token").with_namespace("pr");
    peek_reset_and_lists_conform(&store).await;
    a_reset_lifts_a_block(&store).await;
    a_peek_sees_the_queue_of_a_delaying_limit(&store).await;
    listed_decisions_report_the_effective_capacity(&store).await;
    gateway.shutdown().await;
}

#[tokio::test]
async fn sharded() {
    let store = ShardedStore::new(vec![
        Shard::new("a", MemoryStore::new()),
        Shard::new("b", MemoryStore::new()),
        Shard::new("c", MemoryStore::new()),
    ])
    .unwrap();
    peek_reset_and_lists_conform(&store).await;
    a_reset_lifts_a_block(&store).await;
    a_peek_sees_the_queue_of_a_delaying_limit(&store).await;
    listed_decisions_report_the_effective_capacity(&store).await;
}

/// Every key of `namespace` with its DUMP (the serialized value, no TTL).
fn dump_all(conn: &mut redis::Connection, namespace: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let pattern = format!("{{el:{namespace}:*");
    let mut keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg(pattern).query(conn).expect("KEYS");
    keys.sort();
    keys.into_iter()
        .map(|key| {
            let dump: Vec<u8> = redis::cmd("DUMP").arg(&key).query(conn).expect("DUMP");
            (key, dump)
        })
        .collect()
}

fn random_check(rng: &mut Rng, limits: &[Limit]) -> Check {
    let mut check = Check::new();
    for _ in 0..rng.range(1, 2) {
        let l = rng.pick(limits);
        let id = *rng.pick(&["a", "b", "c"]);
        check = check.with(l, id, rng.range(0, 2) as i64);
    }
    check
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peek_never_changes_state_and_agrees_with_memory() {
    let server = RedisServer::start();
    let store = RespStore::connect(&server.url())
        .await
        .unwrap()
        .with_namespace("peek");
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_connection().unwrap();
    // Every limit has tiers, and identifiers get tiers and overrides along the way: the peek
    // must look under the effective policy, as the checks decide.
    let limits: Vec<Limit> = Algorithm::EVERY
        .iter()
        .map(|&a| {
            limit(&format!("p-{}", a.as_str()), spec(a))
                .with_tiers(vec![("pro", other_spec(a, 7).parse().unwrap())])
                .unwrap()
        })
        .collect();
    let (mut peeks, mut reassigned) = (0, 0);
    for seed in 0..100u64 {
        let mut rng = Rng::new(seed);
        // A namespace per seed: assignments outlive the states a seed leaves behind.
        let namespace = format!("peek-{seed}");
        let store = store.clone().with_namespace(namespace.clone());
        let reference = MemoryStore::new();
        // A twin that is never peeked at: it must decide every check exactly alike.
        let twin = MemoryStore::new();
        let mut now = T0 + seed * 1_000_000;
        for _ in 0..30 {
            now += rng.range(0, 400);
            if rng.chance(25) {
                let l = rng.pick(&limits);
                let id = Identifier::from(*rng.pick(&["a", "b", "c"]));
                let assignment = match rng.range(0, 5) {
                    0 => None,
                    1 | 2 => Some(Assignment::Tier(
                        (*rng.pick(&["pro", "pro", "gold"])).into(),
                    )),
                    _ => Some(Assignment::Override(
                        other_spec(l.policy.algorithm(), rng.range(1, 5))
                            .parse()
                            .unwrap(),
                    )),
                };
                let until = rng.chance(30).then(|| now + rng.range(1, 2_000));
                for s in [&reference, &twin] {
                    s.assign(l, &id, assignment.as_ref(), until).await.unwrap();
                }
                store
                    .assign(l, &id, assignment.as_ref(), until)
                    .await
                    .unwrap();
            } else if rng.chance(40) {
                let l = rng.pick(&limits);
                let id = Identifier::from(*rng.pick(&["a", "b", "c"]));
                let before = dump_all(&mut conn, &namespace);
                let on_redis = store.peek(l, &id, TimeSource::At(now)).await.unwrap();
                assert_eq!(dump_all(&mut conn, &namespace), before, "a peek wrote");
                let in_memory = reference.peek(l, &id, TimeSource::At(now)).await.unwrap();
                assert_eq!(on_redis, in_memory, "seed {seed}");
                peeks += 1;
                let held = reference.assignments(l, &id).await.unwrap();
                if *l.effective_policy(&held, now) != l.policy {
                    reassigned += 1;
                }
            } else {
                let check = random_check(&mut rng, &limits);
                let at = TimeSource::At(now);
                let a = reference
                    .check(std::slice::from_ref(&check), at)
                    .await
                    .unwrap();
                let b = twin.check(std::slice::from_ref(&check), at).await.unwrap();
                let c = store.check(std::slice::from_ref(&check), at).await.unwrap();
                assert_eq!(a, b, "a peek changed a memory state (seed {seed})");
                assert_eq!(a, c, "seed {seed}");
            }
        }
        assert_eq!(reference.len(), twin.len());
    }
    println!("{peeks} peeks ({reassigned} under a tier or override), none wrote");
    assert!(
        reassigned > peeks / 20,
        "too few peeks under an assignment: {reassigned} of {peeks}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reset_no_state_key_of_the_identifier_remains() {
    let server = RedisServer::start();
    let store = RespStore::connect(&server.url())
        .await
        .unwrap()
        .with_namespace("reset");
    // One limit name whose policy changed over time: a state key under every algorithm.
    for (i, algorithm) in Algorithm::EVERY.into_iter().enumerate() {
        let l = limit("api", spec(algorithm));
        let item = CheckItem::new(&l, "victim", 1).with_request_id(format!("r{i}"));
        let at = TimeSource::At(T0 + i as u64);
        store
            .check(&[Check::new().with_item(item)], at)
            .await
            .unwrap();
        charge(&store, &l, "bystander", 1, T0).await;
    }
    let keys = |pattern: &str| -> Vec<String> {
        let mut conn = redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let mut keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(&mut conn).unwrap();
        keys.sort();
        keys
    };
    assert_eq!(
        keys("{el:reset:api:victim}:*").len(),
        12,
        "6 states, 6 request ids"
    );
    let l = limit("api", "gcra 3/1s");
    assert!(store.reset(&l, &Identifier::from("victim")).await.unwrap());
    let left = keys("{el:reset:api:victim}:*");
    assert_eq!(left.len(), 6, "{left:?}");
    assert!(left.iter().all(|k| k.contains("}:rq:")), "{left:?}");
    assert_eq!(
        keys("{el:reset:api:bystander}:*").len(),
        6,
        "others untouched"
    );
}
