//! `ShardedStore` over in-process shards: identifiers spread evenly, adding a shard moves only
//! its share, and sharded decisions equal one store's, split checks included.

use edgelimit::algorithm::Charge;
use edgelimit::store::{Shard, ShardedStore};
use edgelimit::{Check, CheckItem, Limit, MemoryStore, Policy, Reason, Store, TimeSource};
use futures::executor::block_on;
use proptest::prelude::*;

fn sharded(names: &[&str]) -> ShardedStore<MemoryStore> {
    ShardedStore::new(
        names
            .iter()
            .map(|n| Shard::new(*n, MemoryStore::new()))
            .collect(),
    )
    .unwrap()
}

#[test]
fn identifiers_spread_within_ten_percent_of_even() {
    let store = sharded(&["redis-a:6379", "redis-b:6379", "redis-c:6379"]);
    let mut counts = [0usize; 3];
    for i in 0..100_000 {
        counts[store.shard_of(
            "per-ip",
            format!("198.51.{}.{}", i / 256, i % 256).as_bytes(),
        )] += 1;
    }
    let even = 100_000.0 / 3.0;
    for c in counts {
        assert!((c as f64 - even).abs() / even < 0.10, "{counts:?}");
    }
}

#[test]
fn adding_a_shard_moves_only_its_share() {
    let three = sharded(&["a", "b", "c"]);
    let four = sharded(&["a", "b", "c", "d"]);
    let mut moved = 0;
    for i in 0..100_000u32 {
        let id = i.to_be_bytes();
        let (before, after) = (three.shard_of("l", &id), four.shard_of("l", &id));
        if before != after {
            assert_eq!(after, 3, "a key only ever moves to the new shard");
            moved += 1;
        }
    }
    let share = moved as f64 / 100_000.0;
    assert!((share - 0.25).abs() < 0.02, "moved {share}");
    // Order does not matter: names decide.
    let shuffled = sharded(&["c", "a", "b"]);
    for i in 0..1_000u32 {
        let id = i.to_be_bytes();
        let name = |s: &ShardedStore<MemoryStore>, n: usize| s.shards()[n].name().to_string();
        assert_eq!(
            name(&three, three.shard_of("l", &id)),
            name(&shuffled, shuffled.shard_of("l", &id))
        );
    }
}

#[test]
fn shard_names_must_be_unique_and_present() {
    assert!(ShardedStore::<MemoryStore>::new(vec![]).is_err());
    let dup = ShardedStore::new(vec![
        Shard::new("a", MemoryStore::new()),
        Shard::new("a", MemoryStore::new()),
    ]);
    assert!(dup.unwrap_err().to_string().contains("`a`"));
}

proptest! {
    /// Random multi-limit checks through three shards decide exactly as through one store; only
    /// `atomic` differs, and only for checks split over shards. (No refunds: a refund inside a
    /// denied split check stands, by design.)
    #[test]
    fn sharded_decisions_equal_one_store(
        ops in prop::collection::vec((0u64..4, prop::collection::vec((0usize..3, 0usize..6, 0i64..3), 1..4)), 1..80),
    ) {
        let specs = ["fixed 3/10ms", "sliding-log 3/10ms", "gcra 2/10ms burst 3"];
        let limits: Vec<Limit> = specs.iter().enumerate()
            .map(|(i, s)| Limit::new(format!("l{i}"), s.parse::<Policy>().unwrap()))
            .collect();
        let single = MemoryStore::new();
        let shards = sharded(&["a", "b", "c"]);
        let mut now = 1_000;
        for (dt, items) in ops {
            now += dt;
            let mut check = Check::new();
            for (l, id, cost) in items {
                check = check.with(&limits[l], format!("id{id}"), cost);
            }
            let one = single.direct().check(std::slice::from_ref(&check), now).remove(0);
            let many = block_on(shards.check(std::slice::from_ref(&check), TimeSource::At(now))).unwrap().remove(0);
            prop_assert_eq!(one.allowed, many.allowed);
            prop_assert_eq!(&one.decisions, &many.decisions, "{:?}", check);
            let split = check.items().iter()
                .map(|i| shards.shard_of(&i.limit.name, i.identifier.as_bytes()))
                .collect::<std::collections::HashSet<_>>().len() > 1;
            prop_assert_eq!(many.atomic, !split);
        }
    }

    /// The same with items spending their capacity leases and checks crediting them: a split
    /// check one shard denies gives what a lease paid back to that lease, so every decision —
    /// and every lease, as later spends tell — is the one store's.
    #[test]
    fn sharded_leases_equal_one_store(
        ops in prop::collection::vec(
            (0u64..4, any::<bool>(), prop::collection::vec((0usize..3, 0usize..6, 0i64..4, any::<bool>()), 1..4)),
            1..80,
        ),
    ) {
        let specs = ["fixed 3/10ms", "sliding-log 3/10ms", "gcra 2/10ms burst 3"];
        let limits: Vec<Limit> = specs.iter().enumerate()
            .map(|(i, s)| Limit::new(format!("l{i}"), s.parse::<Policy>().unwrap()))
            .collect();
        let single = MemoryStore::new();
        let shards = sharded(&["a", "b", "c"]);
        let mut now = 1_000;
        for (dt, crediting, items) in ops {
            now += dt;
            let mut check = Check::new();
            for (l, id, cost, spends) in items {
                let item = CheckItem::new(&limits[l], format!("id{id}"), cost);
                check = check.with_item(match (crediting, spends) {
                    // Credits in checks of their own, as callers send them.
                    (true, _) => item.charged(Charge::LeaseCredit { until_ms: now + 25 }),
                    (false, true) => item.spending_lease(),
                    (false, false) => item,
                });
                if crediting {
                    break;
                }
            }
            let one = single.direct().check(std::slice::from_ref(&check), now).remove(0);
            let many = block_on(shards.check(std::slice::from_ref(&check), TimeSource::At(now))).unwrap().remove(0);
            prop_assert_eq!(one.allowed, many.allowed);
            prop_assert_eq!(&one.decisions, &many.decisions, "{:?}", check);
        }
    }
}

#[test]
fn a_split_check_denied_gives_a_lease_s_units_back_to_the_lease() {
    let store = sharded(&["a", "b", "c"]);
    let global = Limit::new("global", "fixed 1/1s".parse::<Policy>().unwrap());
    let daily = Limit::new("daily", "fixed 1/1d".parse::<Policy>().unwrap());
    // Identifiers whose items land on different shards.
    let (a, b) = (0..100)
        .flat_map(|i| (0..100).map(move |j| (format!("a{i}"), format!("b{j}"))))
        .find(|(a, b)| {
            store.shard_of("global", a.as_bytes()) != store.shard_of("daily", b.as_bytes())
        })
        .unwrap();
    let t = 1_000_000;
    let at = TimeSource::At(t);
    let one = |check: Check| block_on(store.check(&[check], at)).unwrap().remove(0);
    assert!(one(Check::single(&global, a.as_str(), 1)).allowed);
    let credit =
        CheckItem::new(&global, a.as_str(), 4).charged(Charge::LeaseCredit { until_ms: t + 500 });
    assert_eq!(
        one(Check::new().with_item(credit)).decisions[0].remaining,
        4
    );
    // The global item is admitted from its lease on its shard; the daily one denies on another.
    let check = Check::new()
        .with_item(CheckItem::new(&global, a.as_str(), 3).spending_lease())
        .with(&daily, b.as_str(), 2);
    let v = one(check);
    assert!(!v.allowed && !v.atomic);
    // Reported as the share's look, as one store reports it...
    assert_eq!(
        (v.decisions[0].remaining, v.decisions[0].reason),
        (0, Reason::Admitted)
    );
    // ...and the lease holds its 4 units again, the share none more.
    let spend =
        |cost| Check::new().with_item(CheckItem::new(&global, a.as_str(), cost).spending_lease());
    let v = one(spend(4));
    assert_eq!(
        (v.decisions[0].reason, v.decisions[0].remaining),
        (Reason::Leased, 0)
    );
    assert!(!one(spend(1)).allowed);
}
