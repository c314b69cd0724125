//! A `MemoryStore` kept elsewhere and put back (`Saved`, what the Worker's Durable Objects
//! persist): a store restored from the entries saved after every call decides every later call
//! exactly as the store that never stopped, whatever the algorithms, costs, request ids,
//! assignments, lists and capacity leases.

use std::collections::HashMap;

use edgelimit::algorithm::Charge;
use edgelimit::control::list::{Gate, ListEntry, ListProbe};
use edgelimit::control::Assignment;
use edgelimit::store::Saved;
use edgelimit::{Algorithm, Check, CheckItem, Identifier, Limit, MemoryStore, Policy};

use edgelimit_testkit::rng::Rng;

fn limits() -> Vec<Limit> {
    [
        ("fixed", "fixed 3/1s"),
        ("log", "sliding-log 4/2s"),
        ("counter", "sliding-counter 5/1s"),
        ("bucket", "token-bucket 2/1s burst 4"),
        ("gcra", "gcra 3/1s burst 3"),
        ("leases", "concurrency 2 timeout 3s"),
        // A small share, often spent: what a global limit's capacity lease is for.
        ("global", "fixed 1/2s"),
    ]
    .into_iter()
    .map(|(name, spec)| {
        let policy: Policy = spec.parse().unwrap();
        let limit = Limit::new(name, policy);
        if name == "fixed" {
            limit
                .with_tiers([("pro", "fixed 6/1s".parse().unwrap())])
                .unwrap()
        } else {
            limit
        }
    })
    .collect()
}

/// What is kept elsewhere: entries by key, updated after every call.
#[derive(Default)]
struct Kept(HashMap<String, Saved>);

impl Kept {
    fn update(&mut self, entries: Vec<(String, Option<Saved>)>) {
        for (key, saved) in entries {
            match saved {
                Some(saved) => {
                    assert_eq!(saved.key(), key, "an entry is kept under its own key");
                    // Through its serialized form, as a store elsewhere keeps it.
                    let text = serde_json::to_string(&saved).unwrap();
                    self.0.insert(key, serde_json::from_str(&text).unwrap());
                }
                None => {
                    self.0.remove(&key);
                }
            }
        }
    }

    fn restored(&self) -> MemoryStore {
        let store = MemoryStore::new();
        for saved in self.0.values() {
            store.restore(saved.clone()).unwrap();
        }
        store
    }
}

#[test]
fn a_store_restored_from_its_saved_entries_decides_as_the_one_that_never_stopped() {
    let limits = limits();
    let gate = Gate::new(vec!["deny".into()], vec!["allow".into()]);
    let mut restarts = 0;
    let mut leased = 0;
    for seed in 0..40u64 {
        let mut rng = Rng::new(seed.wrapping_mul(0x9e37_79b9).wrapping_add(7));
        let original = MemoryStore::new();
        let mut kept = Kept::default();
        let mut restored = MemoryStore::new();
        let mut now = 1_700_000_000_000u64;
        for step in 0..120 {
            now += rng.range(0, 700);
            let who = ["a", "b", "c"][rng.range(0, 2) as usize];
            let id = Identifier::from(who);
            match rng.range(0, 9) {
                0 => {
                    let limit = &limits[0];
                    let tier = Assignment::Tier("pro".into());
                    let until = (rng.range(0, 1) == 0).then(|| now + rng.range(1, 3_000));
                    for store in [&original, &restored] {
                        store.direct().assign(limit, &id, Some(&tier), until);
                    }
                    kept.update(vec![original.saved_assignments(limit, &id)]);
                }
                1 => {
                    let entry: ListEntry = format!("header:x-user {who}").parse().unwrap();
                    let list = ["deny", "allow"][rng.range(0, 1) as usize];
                    let until = Some(now + rng.range(1, 2_000));
                    for store in [&original, &restored] {
                        store.direct().list_add(list, &entry, until, now).unwrap();
                    }
                    kept.update(vec![original.saved_list(list)]);
                }
                2 => {
                    let limit = &limits[rng.range(0, limits.len() as u64 - 1) as usize];
                    let existed = original.direct().reset(limit, id.as_bytes());
                    assert_eq!(restored.direct().reset(limit, id.as_bytes()), existed);
                    kept.update(original.saved_states(limit, id.as_bytes()));
                }
                _ => {
                    let mut check = Check::new();
                    for _ in 0..rng.range(1, 3) {
                        // The global limit (the last) half the time.
                        let limit = match rng.range(0, 1) {
                            0 => limits.last().expect("limits"),
                            _ => &limits[rng.range(0, limits.len() as u64 - 1) as usize],
                        };
                        let cost = rng.range(0, 2) as i64 - i64::from(rng.range(0, 7) == 0);
                        let mut item = CheckItem::new(limit, who, cost).gated(0);
                        // The global limit's items spend its capacity lease, or credit it
                        // (units live for up to three seconds); now and then another rate
                        // limit's do too.
                        let global = &*limit.name == "global"
                            || (limit.policy.algorithm() != Algorithm::Concurrency
                                && rng.range(0, 5) == 0);
                        if global {
                            item = match rng.range(0, 2) {
                                0 => {
                                    let until_ms = now + rng.range(0, 3_000);
                                    CheckItem::new(limit, who, rng.range(1, 4) as i64)
                                        .charged(Charge::LeaseCredit { until_ms })
                                        .gated(0)
                                }
                                _ => item.spending_lease(),
                            };
                        }
                        if rng.range(0, 3) == 0 {
                            item = item.with_request_id(format!("req-{}", rng.range(0, 3)));
                        }
                        check.add_item(item);
                    }
                    if rng.range(0, 2) == 0 {
                        let probe = ListProbe::new().with("header:x-user", who);
                        check = check.gated(probe, vec![gate.clone()]);
                    }
                    let checks = [check];
                    let expected = original.direct().check(&checks, now);
                    let got = restored.direct().check(&checks, now);
                    assert_eq!(got, expected, "seed {seed} step {step}");
                    leased += expected[0]
                        .decisions
                        .iter()
                        .filter(|d| d.reason == edgelimit::Reason::Leased)
                        .count();
                    kept.update(original.saved_for(&checks));
                }
            }
            // Now and then the store elsewhere is all there is: restart from it.
            if rng.range(0, 9) == 0 {
                restored = kept.restored();
                restarts += 1;
            }
        }
    }
    assert!(restarts > 100, "{restarts} restarts");
    assert!(leased > 50, "{leased} admissions from a capacity lease");
}

#[test]
fn saved_entries_say_when_they_may_be_dropped() {
    let limits = limits();
    let store = MemoryStore::new();
    let check = Check::single(&limits[0], "a", 1);
    store.direct().check(std::slice::from_ref(&check), 1_000);
    let saved = store.saved_for(std::slice::from_ref(&check));
    let (_, Some(state)) = &saved[0] else {
        panic!("the charged state is held")
    };
    // Its window ends at 2,000; it is kept the grace period longer.
    assert_eq!(
        state.keep_until_ms(),
        Some(2_000 + edgelimit::store::GC_GRACE_MS)
    );
    // A look at a fresh key writes nothing: nothing to keep.
    let look = Check::single(&limits[1], "fresh", 0);
    store.direct().check(std::slice::from_ref(&look), 1_000);
    assert_eq!(store.saved_for(std::slice::from_ref(&look))[0].1, None);
    // An assignment in an unknown form does not read back.
    let bad = Saved::Assignments {
        limit: "fixed".into(),
        identifier: b"a".to_vec(),
        held: vec!["not an assignment".into()],
    };
    assert!(store.restore(bad).is_err());
    // A lease is kept the grace period past its end; one beyond a lease's bounds does not read
    // back.
    let credit = Check::new().with_item(
        CheckItem::new(&limits[0], "a", 3).charged(Charge::LeaseCredit { until_ms: 5_000 }),
    );
    store.direct().check(std::slice::from_ref(&credit), 1_000);
    let saved = store.saved_for(std::slice::from_ref(&credit));
    let lease = saved
        .iter()
        .find_map(|(_, s)| match s {
            Some(lease @ Saved::CapacityLease { .. }) => Some(lease.clone()),
            _ => None,
        })
        .expect("the credited lease is saved");
    assert_eq!(
        lease.keep_until_ms(),
        Some(5_000 + edgelimit::store::GC_GRACE_MS)
    );
    let Saved::CapacityLease { balance, .. } = lease else {
        unreachable!()
    };
    assert_eq!(balance, 3);
    let bad = Saved::CapacityLease {
        limit: "fixed".into(),
        identifier: b"a".to_vec(),
        balance: 1 << 52,
        until_ms: 0,
        keep_until_ms: 0,
    };
    assert!(store.restore(bad).is_err());
}

#[test]
fn a_block_is_saved_and_put_back_and_a_reset_drops_it() {
    let limit =
        Limit::new("blocking", "fixed 1/1s".parse::<Policy>().unwrap()).with_block_for(5_000);
    let t = 1_700_000_000_000u64;
    let store = MemoryStore::new();
    let mut kept = Kept::default();
    for at in [t, t + 1] {
        let checks = [Check::single(&limit, "u", 1)];
        store.direct().check(&checks, at);
        kept.update(store.saved_for(&checks));
    }
    let block = kept
        .0
        .values()
        .find(|s| matches!(s, Saved::Block { .. }))
        .cloned()
        .expect("the denial's block is saved");
    let Saved::Block {
        until_ms,
        keep_until_ms,
        ..
    } = block
    else {
        unreachable!()
    };
    assert_eq!(until_ms, t + 1 + 5_000);
    assert_eq!(block.keep_until_ms(), Some(keep_until_ms));
    assert!(keep_until_ms > until_ms);
    // Restarted from what was kept, the store still refuses until the block's end.
    let restored = kept.restored();
    let look = [Check::single(&limit, "u", 1)];
    let d = restored.direct().check(&look, t + 2_000)[0].decisions[0];
    assert_eq!(
        (d.reason, d.retry_after_ms),
        (edgelimit::Reason::Blocked, 3_001)
    );
    // A reset drops the block, and what is kept drops it too.
    assert!(store.direct().reset(&limit, b"u"));
    kept.update(store.saved_states(&limit, b"u"));
    assert!(!kept.0.values().any(|s| matches!(s, Saved::Block { .. })));
    let d = kept.restored().direct().check(&look, t + 2_000)[0].decisions[0];
    assert_eq!(d.reason, edgelimit::Reason::Admitted);
}
