//! Deny and allow lists (docs/design.md §"Deny and allow lists"): address matching against a
//! direct prefix computation (property), and the gate rule decided by the Rust reference
//! (`MemoryStore`) and by the Lua twin — on one redis-server, through the REST gateway (whose
//! default allow-list must carry what the gated script sends), and on a Cluster, where the lists
//! are read first — for random lists, probes and checks.
//!
//! Run with `--nocapture` to see the counts.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use edgelimit::control::list::{Gate, ListEntry, ListProbe, Listed};
use edgelimit::store::Store;
use edgelimit::Control;
use edgelimit::{Check, CheckItem, Limit, MemoryStore, Policy, Reason, RespStore, TimeSource};
use edgelimit_testkit::rng::Rng;
use edgelimit_testkit::{gateway, RedisCluster, RedisServer};
use proptest::prelude::*;

const T0: u64 = 1_700_000_000_000;
const COMPARE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

fn mask_v4(ip: Ipv4Addr, len: u8) -> u32 {
    u32::from(ip) & u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

fn mask_v6(ip: Ipv6Addr, len: u8) -> u128 {
    u128::from(ip) & u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

/// Whether the request from `addr` matches the single-entry list `entry`, as the stores decide
/// it: by membership of the entry's member among the request's candidates.
fn matches(addr: IpAddr, entry: &ListEntry) -> bool {
    let probe = ListProbe::new().with("ip", &addr.to_string());
    probe.candidates().contains(&entry.member())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn an_ipv4_address_matches_exactly_the_prefixes_it_lies_in(
        addr in any::<u32>(), flips in any::<u32>(), len in 0u8..=32, near in any::<bool>(),
    ) {
        let addr = Ipv4Addr::from(addr);
        // Half the entries are the address with a few low bits changed, so both answers occur.
        let other = if near { u32::from(addr) ^ (flips & 0xFF) } else { flips };
        let other = Ipv4Addr::from(other);
        let entry: ListEntry = format!("ip {other}/{len}").parse().unwrap();
        prop_assert_eq!(matches(IpAddr::V4(addr), &entry), mask_v4(addr, len) == mask_v4(other, len));
    }

    #[test]
    fn an_ipv6_address_matches_exactly_the_prefixes_it_lies_in(
        addr in any::<u128>(), flips in any::<u128>(), nibbles in 0u8..=32, near in any::<bool>(),
    ) {
        let len = nibbles * 4;
        let addr = Ipv6Addr::from(addr);
        let other = if near { u128::from(addr) ^ (flips & 0xFFFF) } else { flips };
        let other = Ipv6Addr::from(other);
        prop_assume!(other.to_ipv4_mapped().is_none() && addr.to_ipv4_mapped().is_none());
        let entry: ListEntry = format!("ip {other}/{len}").parse().unwrap();
        prop_assert_eq!(matches(IpAddr::V6(addr), &entry), mask_v6(addr, len) == mask_v6(other, len));
    }
}

/// The lists the generated operations use: configuration-wide and per rule.
const LISTS: [&str; 4] = ["deny", "allow", "deny:r1", "allow:r1"];

const ADDRESSES: [&str; 6] = [
    "203.0.113.7",
    "203.0.113.200",
    "198.51.100.1",
    "10.1.2.3",
    "2001:db8::1",
    "2001:db8:0:1::9",
];

/// An entry about something the generated requests may offer.
fn random_entry(rng: &mut Rng) -> ListEntry {
    let text = match rng.range(0, 5) {
        0 => format!("ip {}", rng.pick(&ADDRESSES)),
        1 => {
            let addr: IpAddr = rng.pick(&ADDRESSES).parse().unwrap();
            let len = match addr {
                IpAddr::V4(_) => *rng.pick(&[0, 8, 16, 24, 25, 31]),
                IpAddr::V6(_) => *rng.pick(&[0, 32, 48, 64, 124]),
            };
            format!("ip {addr}/{len}")
        }
        2 => format!("country {}", rng.pick(&["CN", "nl", "T1"])),
        3 => format!("header:x-key {}", rng.pick(&["k1", "k2"])),
        4 => format!(
            "api-key:header:authorization {}",
            rng.pick(&["ab", "cd"]).repeat(32)
        ),
        _ => format!("query:user {}", rng.pick(&["alice", "bob"])),
    };
    text.parse().expect("generated entries parse")
}

fn pick<'a>(rng: &mut Rng, items: &[&'a str]) -> &'a str {
    items[(rng.next_u64() % items.len() as u64) as usize]
}

fn random_probe(rng: &mut Rng) -> ListProbe {
    let mut probe = ListProbe::new();
    if rng.chance(90) {
        probe = probe.with("ip", pick(rng, &ADDRESSES));
    }
    if rng.chance(50) {
        probe = probe.with("country", pick(rng, &["CN", "NL", "US"]));
    }
    if rng.chance(50) {
        probe = probe.with("header:X-Key", pick(rng, &["k1", "k2", "k3"]));
    }
    if rng.chance(30) {
        probe = probe.with(
            "api-key:header:authorization",
            &rng.pick(&["ab", "ef"]).repeat(32),
        );
    }
    if rng.chance(30) {
        probe = probe.with("query:user", pick(rng, &["alice", "carol"]));
    }
    probe
}

/// Some of `lists`, each with probability `percent`/100.
fn random_lists(rng: &mut Rng, lists: &[&str], percent: u64) -> Vec<String> {
    lists
        .iter()
        .filter(|_| rng.chance(percent))
        .map(|l| l.to_string())
        .collect()
}

fn limits() -> Vec<Limit> {
    ["fixed 3/10s", "gcra 2/1s burst 3", "sliding-log 2/5s"]
        .iter()
        .enumerate()
        .map(|(i, spec)| Limit::new(format!("l{i}"), spec.parse::<Policy>().unwrap()))
        .collect()
}

fn random_check(rng: &mut Rng, limits: &[Limit], max_items: u64) -> Check {
    let gates: Vec<Gate> = (0..rng.range(1, 2))
        .map(|_| {
            // Mostly the Worker's shape (deny lists deny, allow lists allow), sometimes any list
            // in either role.
            if rng.chance(80) {
                Gate::new(
                    random_lists(rng, &["deny", "deny:r1"], 35),
                    random_lists(rng, &["allow", "allow:r1"], 60),
                )
            } else {
                Gate::new(random_lists(rng, &LISTS, 30), random_lists(rng, &LISTS, 30))
            }
        })
        .collect();
    let mut check = Check::new();
    for _ in 0..rng.range(0, max_items) {
        let limit = rng.pick(limits);
        let id = *rng.pick(&["a", "b"]);
        let mut item = CheckItem::new(limit, id, rng.range(0, 2) as i64);
        match rng.range(0, 4) {
            0 => {}
            // An index past the gates is no gate.
            1 => item = item.gated(gates.len()),
            _ => item = item.gated(rng.range(0, gates.len() as u64 - 1) as usize),
        }
        if rng.chance(15) {
            item = item.with_request_id(format!("rq{}", rng.range(0, 3)));
        }
        check = check.with_item(item);
    }
    check.gated(random_probe(rng), gates)
}

/// One generated operation and what the two stores answered, compared by the caller.
#[derive(Debug)]
enum Op {
    Add(String, ListEntry, Option<u64>),
    Remove(String, ListEntry),
    Entries(String),
    Check(Check),
}

fn random_op(rng: &mut Rng, now: u64, limits: &[Limit], max_items: u64) -> Op {
    match rng.range(0, 9) {
        0..=2 => {
            let until = match rng.range(0, 1) {
                0 => None,
                _ => Some(now + rng.range(1, 6_000)),
            };
            Op::Add(rng.pick(&LISTS).to_string(), random_entry(rng), until)
        }
        3 => Op::Remove(rng.pick(&LISTS).to_string(), random_entry(rng)),
        4 => Op::Entries(rng.pick(&LISTS).to_string()),
        _ => Op::Check(random_check(rng, limits, max_items)),
    }
}

#[derive(Debug, Default)]
struct Report {
    sequences: u64,
    checks: u64,
    denied_by_list: u64,
    allowlisted: u64,
    mismatches: u64,
}

/// Runs `sequences` random sequences through a fresh `MemoryStore` and through `make(namespace)`,
/// comparing every answer; returns the counts.
async fn differential<S: Control, F: Fn(String) -> S>(
    make: F,
    seed: u64,
    sequences: u64,
    max_items: u64,
    prefix: &str,
) -> Report {
    let limits = limits();
    let mut report = Report::default();
    for s in 0..sequences {
        let mut rng = Rng::new(seed.wrapping_mul(1_000_003).wrapping_add(s));
        let reference = MemoryStore::new();
        let store = make(format!("{prefix}-{s}"));
        let mut now = T0;
        for _ in 0..rng.range(4, 14) {
            now += rng.range(0, 1_500);
            let op = random_op(&mut rng, now, &limits, max_items);
            let same = match &op {
                Op::Add(list, entry, until) => {
                    let a = reference.list_add(list, entry, *until, now).await;
                    let b = store.list_add(list, entry, *until, now).await;
                    format!("{a:?}") == format!("{b:?}")
                }
                Op::Remove(list, entry) => {
                    let a = reference.list_remove(list, entry).await.unwrap();
                    let b = store.list_remove(list, entry).await.unwrap();
                    a == b
                }
                Op::Entries(list) => {
                    let a = reference.list_entries(list, now).await.unwrap();
                    let b = store.list_entries(list, now).await.unwrap();
                    a == b
                }
                Op::Check(check) => {
                    let at = TimeSource::At(now);
                    let a = reference
                        .check(std::slice::from_ref(check), at)
                        .await
                        .unwrap();
                    let b = store.check(std::slice::from_ref(check), at).await.unwrap();
                    report.checks += 1;
                    if a[0].listed.iter().any(Listed::is_denied) {
                        report.denied_by_list += 1;
                    }
                    if a[0]
                        .decisions
                        .iter()
                        .any(|d| d.reason == Reason::Allowlisted)
                    {
                        report.allowlisted += 1;
                    }
                    // A Cluster may split the rest of a check across slots (not atomic); every
                    // field but that one must agree.
                    let mut b0 = b[0].clone();
                    b0.atomic = a[0].atomic;
                    a[0] == b0
                }
            };
            if !same {
                report.mismatches += 1;
                if report.mismatches <= 5 {
                    eprintln!("mismatch in sequence {s} at {now}: {op:?}");
                }
            }
        }
        report.sequences += 1;
    }
    println!("{prefix}: {report:?}");
    assert_eq!(report.mismatches, 0, "{prefix}: {report:?}");
    assert!(
        report.denied_by_list > 0 && report.allowlisted > 0,
        "{report:?}"
    );
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_decide_alike_in_rust_and_lua_on_one_node() {
    let server = RedisServer::start();
    let base = RespStore::connect_with_timeout(&server.url(), COMPARE_TIMEOUT)
        .await
        .expect("connect");
    differential(|ns| base.clone().with_namespace(ns), 1, 2_000, 3, "lists").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_decide_alike_through_the_rest_gateway() {
    let server = RedisServer::start();
    let token = "lists-token";
    let gateway = gateway::start(&server, token).await;
    let base = gateway::rest_store(&gateway, token).with_timeout(COMPARE_TIMEOUT);
    differential(
        |ns| base.clone().with_namespace(ns),
        2,
        300,
        3,
        "rest-lists",
    )
    .await;
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_decide_alike_on_a_cluster_reading_the_lists_first() {
    let cluster = RedisCluster::start(3);
    let base = RespStore::connect_cluster_with_timeout(&cluster.urls(), COMPARE_TIMEOUT)
        .await
        .expect("connect to the cluster");
    // One item at most: a check whose items span slots is split there (not all or nothing),
    // which tests/redis_cluster.rs covers; here the lists are what is compared.
    differential(
        |ns| base.clone().with_namespace(ns),
        3,
        500,
        1,
        "cluster-lists",
    )
    .await;
}

#[tokio::test]
async fn a_deny_refuses_everything_and_an_allow_skips_its_gate_only() {
    let store = MemoryStore::new();
    let limit = Limit::new("api", "fixed 1/1m".parse::<Policy>().unwrap());
    let other = Limit::new("global", "fixed 100/1m".parse::<Policy>().unwrap());
    let partner: ListEntry = "header:x-partner-key s3cret".parse().unwrap();
    store.list_add("allow", &partner, None, T0).await.unwrap();
    let probe = ListProbe::new()
        .with("ip", "203.0.113.7")
        .with("header:x-partner-key", "s3cret");
    let gates = vec![Gate::new(vec!["deny".into()], vec!["allow".into()])];
    let check = || {
        Check::new()
            .with_item(CheckItem::new(&limit, "203.0.113.7", 1).gated(0))
            .with(&other, "203.0.113.7", 1)
            .gated(probe.clone(), gates.clone())
    };
    for _ in 0..3 {
        let v = &store.check(&[check()], TimeSource::At(T0)).await.unwrap()[0];
        assert!(v.allowed);
        assert_eq!(v.decisions[0].reason, Reason::Allowlisted);
        assert_eq!(
            v.decisions[0].remaining, 1,
            "the allowlisted limit is never charged"
        );
        assert_eq!(
            v.decisions[1].reason,
            Reason::Admitted,
            "the ungated one is"
        );
        assert!(v.listed[0].is_allowed());
    }
    // A block for an hour: the address's /24 is denied, and deny beats allow.
    let block: ListEntry = "ip 203.0.113.0/24".parse().unwrap();
    store
        .list_add("deny", &block, Some(T0 + 3_600_000), T0)
        .await
        .unwrap();
    let v = &store
        .check(&[check()], TimeSource::At(T0 + 1))
        .await
        .unwrap()[0];
    assert!(!v.allowed);
    assert!(v.decisions.iter().all(|d| d.reason == Reason::Denylisted));
    assert_eq!(v.denied_by(), Some(("deny", "ip 203.0.113.0/24")));
    let global = Check::single(&other, "203.0.113.7", 0);
    let look = &store
        .check(&[global], TimeSource::At(T0 + 2))
        .await
        .unwrap()[0];
    assert_eq!(
        look.decisions[0].remaining, 97,
        "the denied check charged nothing"
    );
    // The hour passes: the entry has lapsed, though nobody removed it.
    let v = &store
        .check(&[check()], TimeSource::At(T0 + 3_600_000))
        .await
        .unwrap()[0];
    assert!(v.allowed);
    assert_eq!(
        store.list_entries("deny", T0 + 3_600_000).await.unwrap(),
        []
    );
    // Bad input is refused with what was wrong.
    let err = store
        .list_add("deny", &block, Some(T0), T0 + 1)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("lapse"), "{err}");
    let err = store.list_add("", &block, None, T0).await.unwrap_err();
    assert!(err.to_string().contains("list name"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_decide_alike_on_a_sharded_store_holding_them_on_every_shard() {
    use edgelimit::store::{Shard, ShardedStore};
    let make = |_ns: String| {
        ShardedStore::new(
            ["a", "b", "c"]
                .into_iter()
                .map(|name| Shard::new(name, MemoryStore::new()))
                .collect(),
        )
        .expect("three shards")
    };
    // One item per check: a check split over shards is not all or nothing (its own tests
    // cover that); the split gated check is below.
    differential(make, 4, 1_000, 1, "sharded-lists").await;
    // A check split over shards carries every gate to each part.
    let store = make(String::new());
    let limit = Limit::new("api", "fixed 5/1m".parse::<Policy>().unwrap());
    let ids: Vec<String> = (0..64).map(|i| format!("id-{i}")).collect();
    let first = store.shard_of("api", ids[0].as_bytes());
    let other = ids
        .iter()
        .find(|id| store.shard_of("api", id.as_bytes()) != first)
        .expect("64 identifiers spread over three shards");
    let gates = vec![
        Gate::new(vec!["deny".into()], vec!["allow".into()]),
        Gate::new(vec![], vec![]),
    ];
    let split = |address: &str| {
        Check::new()
            .with_item(CheckItem::new(&limit, ids[0].as_str(), 1).gated(0))
            .with_item(CheckItem::new(&limit, other.as_str(), 1).gated(1))
            .gated(ListProbe::new().with("ip", address), gates.clone())
    };
    let entry = |text: &str| text.parse::<ListEntry>().unwrap();
    store
        .list_add("allow", &entry("ip 198.51.100.0/24"), None, T0)
        .await
        .unwrap();
    store
        .list_add("deny", &entry("ip 203.0.113.7"), None, T0)
        .await
        .unwrap();
    let v = &store
        .check(&[split("198.51.100.1")], TimeSource::At(T0))
        .await
        .unwrap()[0];
    assert!(v.allowed && !v.atomic);
    assert_eq!(v.decisions[0].reason, Reason::Allowlisted);
    assert_eq!(
        (v.decisions[1].reason, v.decisions[1].remaining),
        (Reason::Admitted, 4)
    );
    assert!(v.listed[0].is_allowed() && v.listed[1] == Listed::No);
    let v = &store
        .check(&[split("203.0.113.7")], TimeSource::At(T0))
        .await
        .unwrap()[0];
    assert!(!v.allowed);
    assert!(v.decisions.iter().all(|d| d.reason == Reason::Denylisted));
    assert_eq!(v.denied_by(), Some(("deny", "ip 203.0.113.7")));
    let look = Check::single(&limit, other.as_str(), 0);
    let look = &store.check(&[look], TimeSource::At(T0)).await.unwrap()[0];
    assert_eq!(
        look.decisions[0].remaining, 4,
        "the denied check charged nothing"
    );
}
