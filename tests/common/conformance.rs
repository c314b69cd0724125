//! One conformance body for every store. A store joins with one line in a test file:
//!
//! ```ignore
//! mod common;
//! common::conformance::conformance_tests!(memory, async { ((), MemoryStore::new()) });
//! ```
//!
//! The expression is an async block giving `(guard, store)`: the guard keeps whatever the store
//! needs alive (a `RedisServer`, a gateway) for the test's duration. It is evaluated afresh in
//! every test, so tests never share state. The bodies only use the `Store` trait and times they
//! choose, so every store must answer alike; numbers are spelled out, not recomputed.

use edgelimit::algorithm::Charge;
use edgelimit::store::Store;
use edgelimit::{
    Algorithm, Check, CheckItem, Identifier, Limit, MemoryStore, Policy, Reason, StoreError,
    TimeSource, Verdict, RETRY_NEVER,
};

use edgelimit_testkit::rng::Rng;

/// Expands to a module `$name` with one `#[tokio::test]` per conformance body.
#[allow(unused_macros)] // defined for every test binary, used by some
macro_rules! conformance_tests {
    ($name:ident, $make:expr) => {
        $crate::common::conformance::conformance_tests!(@tests $name, $make, [
            a_limit_admits_then_denies_with_exact_times,
            several_limits_are_all_or_nothing,
            peeks_and_refunds,
            a_cost_beyond_capacity_is_denied_for_good,
            an_empty_check_is_admitted,
            a_batch_runs_in_order,
            server_time_is_near_the_wall_clock,
            every_algorithm_agrees_with_the_rust_steps,
            hostile_identifiers_never_share_state,
            concurrency_leases_end_on_time_and_release_once,
            a_settlement_is_never_denied_and_stops_at_empty,
            a_repeated_request_id_charges_once,
            a_repeated_request_id_answers_only_its_own_items,
            capacity_leases_are_spent_after_the_share_and_credits_merge,
            a_denied_check_spends_and_credits_no_lease,
            a_lease_alone_decides_and_the_state_is_never_touched,
            a_batch_of_several_scripts_runs_in_order_on_a_fresh_store,
            a_concurrency_limit_holds_no_capacity_lease,
            a_block_starts_at_the_denial_and_ends_exactly,
            a_blocked_item_denies_its_check_and_only_its_own_denial_blocks,
            a_delayed_admission_reserves_its_place_and_the_next_queue_behind_it,
            a_delaying_limit_of_another_algorithm_is_refused
        ]);
    };
    (@tests $name:ident, $make:expr, [$($test:ident),*]) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let (_guard, store) = $make.await;
                    $crate::common::conformance::$test(&store).await;
                }
            )*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use conformance_tests;

const T0: u64 = 1_700_000_000_000;

fn limit(name: &str, spec: &str) -> Limit {
    Limit::new(name, spec.parse::<Policy>().expect("valid spec"))
}

async fn one<S: Store>(store: &S, check: Check, at: u64) -> Verdict {
    store
        .check(&[check], TimeSource::At(at))
        .await
        .expect("store answers")
        .remove(0)
}

pub async fn a_limit_admits_then_denies_with_exact_times<S: Store>(store: &S) {
    let l = limit("conf-fixed", "fixed 3/1s");
    for i in 0..3 {
        let v = one(store, Check::single(&l, "a", 1), T0 + 100).await;
        assert!(v.allowed, "request {i}");
        assert_eq!(v.decisions[0].remaining, 2 - i);
        assert_eq!(v.decisions[0].reset_at_ms, T0 + 1000);
    }
    let v = one(store, Check::single(&l, "a", 1), T0 + 400).await;
    assert!(!v.allowed);
    assert_eq!(v.decisions[0].reason, Reason::OverLimit);
    assert_eq!(v.decisions[0].retry_after_ms, 600);
    assert!(
        one(store, Check::single(&l, "a", 1), T0 + 1000)
            .await
            .allowed
    );

    let g = limit("conf-gcra", "gcra 10/1s burst 2");
    assert!(one(store, Check::single(&g, "a", 2), T0).await.allowed);
    let v = one(store, Check::single(&g, "a", 1), T0 + 30).await;
    assert!(!v.allowed);
    // One token per 100 ms; 30 ms have passed.
    assert_eq!(v.decisions[0].retry_after_ms, 70);
    assert!(
        one(store, Check::single(&g, "a", 1), T0 + 100)
            .await
            .allowed
    );
}

pub async fn several_limits_are_all_or_nothing<S: Store>(store: &S) {
    let burst = limit("conf-burst", "token-bucket 10/1s burst 5");
    let daily = limit("conf-daily", "sliding-log 3/day");
    let both = |cost| Check::new().with(&burst, "u", cost).with(&daily, "u", cost);
    assert!(one(store, both(3), T0).await.allowed);
    // The daily limit has 0 left for cost 1 after 3: denied, and the bucket keeps its tokens.
    let v = one(store, both(1), T0 + 1).await;
    assert!(!v.allowed);
    assert!(v.atomic || !v.decisions[0].allowed || !v.decisions[1].allowed);
    assert!(!v.decisions[1].allowed);
    if v.atomic {
        assert!(v.decisions[0].allowed);
        // A zero-cost look: 5 - 3 tokens, nothing taken by the denied check.
        assert_eq!(v.decisions[0].remaining, 2);
        let bucket = one(store, Check::single(&burst, "u", 0), T0 + 1).await;
        assert_eq!(bucket.decisions[0].remaining, 2);
    }
}

pub async fn peeks_and_refunds<S: Store>(store: &S) {
    let l = limit("conf-refund", "sliding-counter 10/1m");
    assert_eq!(
        one(store, Check::single(&l, "r", 7), T0).await.decisions[0].remaining,
        3
    );
    let peek = one(store, Check::single(&l, "r", 0), T0 + 5).await;
    assert!(peek.allowed);
    assert_eq!(peek.decisions[0].remaining, 3);
    let refund = one(store, Check::single(&l, "r", -5), T0 + 6).await;
    assert!(refund.allowed);
    assert_eq!(refund.decisions[0].remaining, 8);
    // Refunding more than was taken gives back only what was taken.
    let refund = one(store, Check::single(&l, "r", -100), T0 + 7).await;
    assert_eq!(refund.decisions[0].remaining, 10);
}

pub async fn a_cost_beyond_capacity_is_denied_for_good<S: Store>(store: &S) {
    for spec in [
        "fixed 5/1s",
        "sliding-log 5/1s",
        "sliding-counter 5/1s",
        "token-bucket 5/1s burst 6",
        "gcra 5/1s burst 6",
    ] {
        let l = limit("conf-big", spec);
        let cost = l.policy.capacity() as i64 + 1;
        let v = one(store, Check::single(&l, "b", cost), T0).await;
        assert!(!v.allowed, "{spec}");
        assert_eq!(v.decisions[0].reason, Reason::CostExceedsCapacity, "{spec}");
        assert_eq!(v.decisions[0].retry_after_ms, RETRY_NEVER, "{spec}");
        assert!(v.decisions[0].is_permanent_denial());
        let v = one(store, Check::single(&l, "b", i64::MAX), T0).await;
        assert_eq!(v.decisions[0].retry_after_ms, RETRY_NEVER, "{spec}");
        // Nothing was taken.
        let v = one(store, Check::single(&l, "b", 0), T0).await;
        assert_eq!(v.decisions[0].remaining, l.policy.capacity(), "{spec}");
    }
}

pub async fn an_empty_check_is_admitted<S: Store>(store: &S) {
    let verdicts = store
        .check(&[Check::new()], TimeSource::At(T0))
        .await
        .expect("store answers");
    assert_eq!(
        verdicts,
        vec![Verdict {
            allowed: true,
            decisions: vec![],
            atomic: true,
            decided_at_ms: T0,
            listed: Vec::new(),
        }]
    );
    assert!(store
        .check(&[], TimeSource::At(T0))
        .await
        .expect("store answers")
        .is_empty());
}

pub async fn a_batch_runs_in_order<S: Store>(store: &S) {
    let l = limit("conf-batch", "sliding-log 2/1s");
    let checks: Vec<Check> = (0..4).map(|_| Check::single(&l, "o", 1)).collect();
    let verdicts = store
        .check(&checks, TimeSource::At(T0))
        .await
        .expect("store answers");
    let allowed: Vec<bool> = verdicts.iter().map(|v| v.allowed).collect();
    assert_eq!(allowed, [true, true, false, false]);
    assert_eq!(verdicts[1].decisions[0].remaining, 0);
}

pub async fn server_time_is_near_the_wall_clock<S: Store>(store: &S) {
    let l = limit("conf-server", "fixed 5/1h");
    let wall = edgelimit::clock::Clock::now_ms(&edgelimit::SystemClock);
    let v = store
        .check(&[Check::single(&l, "s", 1)], TimeSource::Server)
        .await
        .expect("store answers")
        .remove(0);
    assert!(v.allowed);
    let reset = v.decisions[0].reset_at_ms;
    // The window holding "now" ends within the hour after it.
    assert!(
        reset > wall.saturating_sub(60_000) && reset <= wall + 3_600_000 + 60_000,
        "reset {reset} vs wall clock {wall}"
    ); // The verdict says when it was decided, on the store's clock: in that hour's window.
    let at = v.decided_at_ms;
    assert!(
        at.abs_diff(wall) <= 60_000 && at / 3_600_000 == (reset - 1) / 3_600_000,
        "decided at {at}, reset {reset}, wall clock {wall}"
    );
    // A multi-limit check is decided at one instant, and the caller's time is echoed exactly.
    let both = Check::new()
        .with(&l, "m", 1)
        .with(limit("conf-server-2", "gcra 5/1s"), "m", 1);
    let v = store
        .check(std::slice::from_ref(&both), TimeSource::Server)
        .await
        .expect("store answers")
        .remove(0);
    assert!(v.decided_at_ms.abs_diff(wall) <= 60_000, "{v:?}");
    assert_eq!(one(store, both, T0).await.decided_at_ms, T0);
}

pub async fn every_algorithm_agrees_with_the_rust_steps<S: Store>(store: &S) {
    let mut rng = Rng::new(7);
    for (n, algorithm) in Algorithm::EVERY.into_iter().enumerate() {
        let l = limit(
            &format!("conf-all-{n}"),
            match algorithm {
                Algorithm::FixedWindow => "fixed 4/1s",
                Algorithm::SlidingLog => "sliding-log 4/1s",
                Algorithm::SlidingCounter => "sliding-counter 4/1s",
                Algorithm::TokenBucket => "token-bucket 4/1s burst 3",
                Algorithm::Gcra => "gcra 4/1s burst 3",
                Algorithm::Concurrency => "concurrency 3 timeout 1s",
            },
        );
        let memory = MemoryStore::new();
        let mut t = T0;
        for i in 0..200 {
            t += rng.range(0, 400);
            let cost = *rng.pick(&[1, 1, 1, 2, 0, -1, 5]);
            let check = Check::single(&l, "e", cost);
            let expected = memory.direct().check(std::slice::from_ref(&check), t);
            let actual = store
                .check(&[check], TimeSource::At(t))
                .await
                .expect("store answers");
            assert_eq!(actual, expected, "{algorithm} call {i} at {t} cost {cost}");
        }
    }
}

pub async fn hostile_identifiers_never_share_state<S: Store>(store: &S) {
    let l = limit("conf-hostile", "fixed 1/1h");
    let ids: Vec<Identifier> = vec![
        "a".into(),
        "{a}".into(),
        "a}".into(),
        "{a".into(),
        "a:b".into(),
        "a%3Ab".into(),
        "*".into(),
        "a*".into(),
        "line\nbreak".into(),
        "line\r\nbreak".into(),
        "".into(),
        "x".repeat(10_240).into(),
        "x".repeat(10_241).into(),
        vec![0u8, 255, b'{', b'}', b':'].into(),
        vec![0u8].into(),
        "ü".into(),
        "#".into(),
    ];
    for id in &ids {
        let v = one(store, Check::single(&l, id.clone(), 1), T0).await;
        assert!(v.allowed, "{id:?} shares state with an earlier identifier");
    }
    for id in &ids {
        let v = one(store, Check::single(&l, id.clone(), 1), T0).await;
        assert!(!v.allowed, "{id:?} lost its state");
    }
    // Several hostile identifiers in one check: never a cross-slot failure.
    let other = limit("conf-hostile-2", "gcra 5/1s");
    let mut check = Check::new();
    for id in &ids[..4] {
        check = check.with(&other, id.clone(), 1);
    }
    let v = one(store, check, T0).await;
    assert!(v.allowed);
}

pub async fn concurrency_leases_end_on_time_and_release_once<S: Store>(store: &S) {
    let l = limit("conf-conc", "concurrency 2 timeout 10s");
    let first = one(store, Check::single(&l, "c", 1), T0).await;
    assert!(first.allowed);
    // The lease's end is its name: T0 + 10 s.
    assert_eq!(first.decisions[0].reset_at_ms, T0 + 10_000);
    assert_eq!(first.decisions[0].remaining, 1);
    assert!(
        one(store, Check::single(&l, "c", 1), T0 + 1_000)
            .await
            .allowed
    );
    let third = one(store, Check::single(&l, "c", 1), T0 + 2_000).await;
    assert!(!third.allowed);
    assert_eq!(third.decisions[0].retry_after_ms, 8_000);
    let release = |lease_ms| {
        Check::new().with_item(CheckItem::new(&l, "c", 1).charged(Charge::Release { lease_ms }))
    };
    let released = one(store, release(T0 + 11_000), T0 + 3_000).await;
    assert_eq!(released.decisions[0].remaining, 1);
    // The same release again frees nothing more.
    let again = one(store, release(T0 + 11_000), T0 + 3_001).await;
    assert_eq!(again.decisions[0].remaining, 1);
    assert!(
        one(store, Check::single(&l, "c", 1), T0 + 3_002)
            .await
            .allowed
    );
    assert!(
        !one(store, Check::single(&l, "c", 1), T0 + 3_003)
            .await
            .allowed
    );
    // At the very millisecond the first lease ends, it is over.
    assert!(
        one(store, Check::single(&l, "c", 1), T0 + 10_000)
            .await
            .allowed
    );
}

pub async fn a_settlement_is_never_denied_and_stops_at_empty<S: Store>(store: &S) {
    let l = limit("conf-settle", "fixed 100/1m");
    let reserve = one(store, Check::single(&l, "s", 30), T0).await;
    assert_eq!(reserve.decisions[0].remaining, 70);
    let settle =
        |cost| Check::new().with_item(CheckItem::new(&l, "s", cost).charged(Charge::Settle));
    // Used 20 of the 30 reserved: 10 back.
    let v = one(store, settle(-10), T0 + 1).await;
    assert_eq!(v.decisions[0].remaining, 80);
    // Used 500 more than reserved: charged, not denied, down to empty.
    let v = one(store, settle(500), T0 + 2).await;
    assert!(v.allowed);
    assert_eq!(v.decisions[0].remaining, 0);
    assert!(!one(store, Check::single(&l, "s", 1), T0 + 3).await.allowed);
    // An excess on an empty quota is a look.
    let v = one(store, settle(5), T0 + 4).await;
    assert!(v.allowed);
    assert_eq!(v.decisions[0].remaining, 0);
}

pub async fn a_repeated_request_id_charges_once<S: Store>(store: &S) {
    let l = limit("conf-idem", "fixed 5/1m");
    let m = limit("conf-idem-2", "gcra 10/1m");
    let check = |id: &str| {
        Check::new()
            .with(&l, "i", 2)
            .with(&m, "i", 1)
            .with_request_id(id)
    };
    let first = one(store, check("req-1"), T0).await;
    assert!(first.allowed);
    assert_eq!(first.decisions[0].remaining, 3);
    // Retried later with the same id: the first decision, at its time, and nothing charged.
    let repeat = one(store, check("req-1"), T0 + 500).await;
    assert!(repeat.allowed);
    assert_eq!(repeat.decisions, first.decisions);
    if repeat.atomic {
        assert_eq!(repeat.decided_at_ms, T0);
    }
    let single = |id: &str| Check::single(&l, "i", 2).with_request_id(id);
    assert_eq!(
        one(store, single("req-2"), T0 + 600).await.decisions[0].remaining,
        1
    );
    assert_eq!(
        one(store, single("req-2"), T0 + 601).await.decisions[0].remaining,
        1
    );
    // Another id charges; a denied one is not remembered, so its retry is decided afresh.
    assert!(!one(store, single("req-3"), T0 + 700).await.allowed);
    assert!(!one(store, single("req-3"), T0 + 701).await.allowed);
    // Past the limit's window the id is forgotten and the window has passed too.
    let fresh = one(store, single("req-2"), T0 + 60_600).await;
    assert_eq!(fresh.decided_at_ms, T0 + 60_600);
    assert_eq!(fresh.decisions[0].remaining, 3);
}

/// The attack of a client repeating one request id: an item remembered under the id answers
/// from memory, every other item of the check is decided as new (docs/design.md §3). A rule of
/// `{fixed 3/1h, idempotent}` beside `{fixed 5/1h}`, 12 requests with one id: 5 admitted.
pub async fn a_repeated_request_id_answers_only_its_own_items<S: Store>(store: &S) {
    let remembered = limit("conf-partial-idem", "fixed 3/1h");
    let plain = limit("conf-partial-plain", "fixed 5/1h");
    let check = Check::new()
        .with_item(CheckItem::new(&remembered, "acct", 1).with_request_id("same"))
        .with_item(CheckItem::new(&plain, "acct", 1));
    let mut admitted = 0;
    for i in 0..12 {
        let v = one(store, check.clone(), T0 + i).await;
        if v.allowed {
            admitted += 1;
            // Charged once under the id: the remembered item answers its first decision.
            assert_eq!(v.decisions[0].remaining, 2, "request {i}");
            assert_eq!(v.decisions[1].remaining, 4 - i, "request {i}");
        } else {
            // Denied by the plain limit; the remembered item reports a look at its state.
            assert!(
                v.decisions[0].allowed && !v.decisions[1].allowed,
                "request {i}"
            );
            assert_eq!(v.decisions[0].remaining, 2, "request {i}");
        }
    }
    assert_eq!(
        admitted, 5,
        "the plain limit admits its 5, however the id repeats"
    );
    // Every item remembered: a pure repeat, answered whole at its first time.
    let only = Check::single(&remembered, "acct", 1).with_request_id("same");
    let repeat = one(store, only, T0 + 100).await;
    assert!(repeat.allowed);
    assert_eq!(repeat.decisions[0].remaining, 2);
    if repeat.atomic {
        assert_eq!(repeat.decided_at_ms, T0);
    }
}

/// A spending item of `l` for `id` at `cost`.
fn spend(l: &Limit, id: &str, cost: i64) -> Check {
    Check::new().with_item(CheckItem::new(l, id, cost).spending_lease())
}

/// A credit of `amount` units to the lease of `l` for `id`, ending at `until_ms`.
fn credit(l: &Limit, id: &str, amount: i64, until_ms: u64) -> Check {
    Check::new().with_item(CheckItem::new(l, id, amount).charged(Charge::LeaseCredit { until_ms }))
}

pub async fn capacity_leases_are_spent_after_the_share_and_credits_merge<S: Store>(store: &S) {
    // Every rate algorithm with a share of 2 per second, spent at T0 (a second's start).
    for (n, spec) in [
        "fixed 2/1s",
        "sliding-log 2/1s",
        "sliding-counter 2/1s",
        "token-bucket 2/1s burst 2",
        "gcra 2/1s burst 2",
    ]
    .into_iter()
    .enumerate()
    {
        let l = limit(&format!("conf-lease-{n}"), spec);
        let v = one(store, spend(&l, "g", 2), T0).await;
        assert_eq!(
            v.decisions[0].reason,
            Reason::Admitted,
            "{spec}: the share first"
        );
        // No lease: the share's denial stands.
        let v = one(store, spend(&l, "g", 1), T0 + 1).await;
        assert_eq!(v.decisions[0].reason, Reason::OverLimit, "{spec}");
        // Credited 3 units until T0 + 500.
        let v = one(store, credit(&l, "g", 3, T0 + 500), T0 + 1).await;
        let d = v.decisions[0];
        assert!(v.allowed, "{spec}");
        assert_eq!(
            (d.remaining, d.reset_at_ms, d.limit),
            (3, T0 + 500, 2),
            "{spec}"
        );
        // The share denies, the lease admits: its balance is what remains.
        let v = one(store, spend(&l, "g", 2), T0 + 2).await;
        let d = v.decisions[0];
        assert!(v.allowed, "{spec}");
        assert_eq!(
            (d.reason, d.remaining, d.retry_after_ms),
            (Reason::Leased, 1, 0),
            "{spec}"
        );
        // A live lease adds the credit and keeps the later end.
        let v = one(store, credit(&l, "g", 4, T0 + 400), T0 + 3).await;
        let d = v.decisions[0];
        assert_eq!((d.remaining, d.reset_at_ms), (5, T0 + 500), "{spec}");
        // More than the share and the lease hold: the share's denial, nothing spent.
        let v = one(store, spend(&l, "g", 6), T0 + 4).await;
        assert_eq!(v.decisions[0].reason, Reason::CostExceedsCapacity, "{spec}");
        let look = one(store, credit(&l, "g", 0, 0), T0 + 5).await;
        assert_eq!(
            look.decisions[0].remaining, 5,
            "{spec}: a credit of nothing looks"
        );
        // A look at the spending item is the share's: spent.
        let v = one(store, spend(&l, "g", 0), T0 + 6).await;
        assert_eq!(
            (v.decisions[0].remaining, v.decisions[0].reason),
            (0, Reason::Admitted)
        );
        // At its end the lease is over (a bucket has refilled one unit by then: ask for 2).
        let v = one(store, spend(&l, "g", 2), T0 + 500).await;
        assert_eq!(v.decisions[0].reason, Reason::OverLimit, "{spec}");
        // A credit already over changes nothing; a later one replaces the ended lease.
        let v = one(store, credit(&l, "g", 1, T0 + 499), T0 + 500).await;
        let d = v.decisions[0];
        assert_eq!((d.remaining, d.reset_at_ms), (0, T0 + 500), "{spec}");
        let v = one(store, credit(&l, "g", 2, T0 + 2_000), T0 + 500).await;
        let d = v.decisions[0];
        assert_eq!((d.remaining, d.reset_at_ms), (2, T0 + 2_000), "{spec}");
        // A credit sent twice under one request id is credited once.
        let refill = || {
            Check::new().with_item(
                CheckItem::new(&l, "g", 10)
                    .charged(Charge::LeaseCredit {
                        until_ms: T0 + 3_000,
                    })
                    .with_request_id("refill-1"),
            )
        };
        let first = one(store, refill(), T0 + 600).await;
        assert_eq!(first.decisions[0].remaining, 12, "{spec}");
        let again = one(store, refill(), T0 + 601).await;
        assert_eq!(again.decisions, first.decisions, "{spec}");
        let look = one(store, credit(&l, "g", 0, 0), T0 + 602).await;
        assert_eq!(look.decisions[0].remaining, 12, "{spec}");
        // Another identifier has a lease of its own.
        let look = one(store, credit(&l, "h", 0, 0), T0 + 602).await;
        assert_eq!(look.decisions[0].remaining, 0, "{spec}");
    }
}

pub async fn a_denied_check_spends_and_credits_no_lease<S: Store>(store: &S) {
    let global = limit("conf-lease-all", "fixed 1/1s");
    let daily = limit("conf-lease-daily", "fixed 1/1d");
    assert!(one(store, spend(&global, "a", 1), T0).await.allowed);
    assert_eq!(
        one(store, credit(&global, "a", 5, T0 + 900), T0)
            .await
            .decisions[0]
            .remaining,
        5
    );
    // The lease would admit the first item; the daily limit denies the check.
    let check = Check::new()
        .with_item(CheckItem::new(&global, "a", 1).spending_lease())
        .with(&daily, "a", 2);
    let v = one(store, check, T0 + 1).await;
    assert!(!v.allowed);
    assert_eq!(v.decisions[1].reason, Reason::CostExceedsCapacity);
    if v.atomic {
        // A zero-cost look at the share, whatever the lease holds.
        let d = v.decisions[0];
        assert_eq!(
            (d.allowed, d.remaining, d.reason),
            (true, 0, Reason::Admitted)
        );
        let look = one(store, credit(&global, "a", 0, 0), T0 + 2).await;
        assert_eq!(look.decisions[0].remaining, 5, "nothing spent");
    }
    // A credit beside a denial is not written either.
    let check = Check::new()
        .with_item(
            CheckItem::new(&global, "a", 7).charged(Charge::LeaseCredit { until_ms: T0 + 900 }),
        )
        .with(&daily, "a", 2);
    let v = one(store, check, T0 + 3).await;
    assert!(!v.allowed);
    if v.atomic {
        let d = v.decisions[0];
        assert_eq!((d.allowed, d.remaining, d.reset_at_ms), (true, 5, T0 + 900));
        let look = one(store, credit(&global, "a", 0, 0), T0 + 4).await;
        assert_eq!(look.decisions[0].remaining, 5, "nothing credited");
    }
}

pub async fn a_lease_alone_decides_and_the_state_is_never_touched<S: Store>(store: &S) {
    for (n, spec) in [
        "fixed 2/1s",
        "token-bucket 2/1s burst 2",
        "gcra 2/1s burst 2",
    ]
    .into_iter()
    .enumerate()
    {
        let l = limit(&format!("conf-alone-{n}"), spec);
        let alone =
            |cost| Check::new().with_item(CheckItem::new(&l, "g", cost).spending_lease_only());
        // No lease: denied though the policy would admit, retry after its window.
        let v = one(store, alone(1), T0).await;
        let d = v.decisions[0];
        assert_eq!(
            (
                v.allowed,
                d.reason,
                d.remaining,
                d.reset_at_ms,
                d.retry_after_ms
            ),
            (false, Reason::OverLimit, 0, T0, 1_000),
            "{spec}"
        );
        one(store, credit(&l, "g", 5, T0 + 800), T0).await;
        // Five units, spent beyond what the policy alone would admit in the instant.
        for left in [3, 1] {
            let d = one(store, alone(2), T0 + 1).await.decisions[0];
            assert_eq!(
                (d.allowed, d.reason, d.remaining, d.reset_at_ms),
                (true, Reason::Leased, left, T0 + 800),
                "{spec}"
            );
        }
        let v = one(store, alone(2), T0 + 2).await;
        assert_eq!(
            (
                v.allowed,
                v.decisions[0].remaining,
                v.decisions[0].reset_at_ms
            ),
            (false, 1, T0 + 800),
            "{spec}"
        );
        // A settlement only looks at the lease.
        let settle = Check::new().with_item(
            CheckItem::new(&l, "g", 1)
                .spending_lease_only()
                .charged(Charge::Settle),
        );
        assert_eq!(
            one(store, settle, T0 + 3).await.decisions[0].remaining,
            1,
            "{spec}"
        );
        // The policy's state was never written: the same limit unleased admits its full burst.
        let plain = Check::new().with_item(CheckItem::new(&l, "g", 2));
        let d = one(store, plain, T0 + 4).await.decisions[0];
        assert_eq!((d.allowed, d.remaining), (true, 0), "{spec}");
    }
}

/// A batch whose later check reads what an earlier one wrote, each run by a script of its
/// own (a single-limit credit, then a gated multi-limit check spending it), runs in order even
/// when the store has run the later script but not the earlier one yet.
pub async fn a_batch_of_several_scripts_runs_in_order_on_a_fresh_store<S: Store>(store: &S) {
    use edgelimit::control::list::{Gate, ListProbe};
    let share = limit("conf-order-share", "fixed 1/1h");
    let other = limit("conf-order-other", "gcra 10/1s burst 10");
    let spend_with_other = || {
        Check::new()
            .with_item(CheckItem::new(&share, "o", 1).spending_lease().gated(0))
            .with_item(CheckItem::new(&other, "o", 1).gated(0))
            .gated(
                ListProbe::new().with("ip", "192.0.2.1"),
                vec![Gate::new(vec!["conf-order-deny".into()], Vec::new())],
            )
    };
    // The multi-limit script has run; the single-limit one has not.
    let warm = spend_with_other();
    one(store, warm, T0 - 1).await;
    let batch = [
        credit(&share, "o", 2, T0 + 60_000),
        spend_with_other(),
        spend_with_other(),
        spend_with_other(),
    ];
    let verdicts = store
        .check(&batch, TimeSource::At(T0))
        .await
        .expect("store answers");
    let reasons: Vec<Reason> = verdicts[1..]
        .iter()
        .map(|v| v.decisions[0].reason)
        .collect();
    assert_eq!(
        reasons,
        [Reason::Leased, Reason::Leased, Reason::OverLimit],
        "the lease credited first in the batch, then spent"
    );
}

pub async fn a_concurrency_limit_holds_no_capacity_lease<S: Store>(store: &S) {
    let inflight = limit("conf-lease-conc", "concurrency 2 timeout 1s");
    for item in [
        CheckItem::new(&inflight, "c", 1).spending_lease(),
        CheckItem::new(&inflight, "c", 1).charged(Charge::LeaseCredit { until_ms: T0 + 9 }),
    ] {
        let refused = store
            .check(&[Check::new().with_item(item)], TimeSource::At(T0))
            .await;
        assert!(
            matches!(&refused, Err(StoreError::InvalidInput(m)) if m.contains("conf-lease-conc")),
            "{refused:?}"
        );
    }
    // Nothing was taken.
    let v = one(store, Check::single(&inflight, "c", 0), T0).await;
    assert_eq!(v.decisions[0].remaining, 2);
}

pub async fn a_block_starts_at_the_denial_and_ends_exactly<S: Store>(store: &S) {
    // T0 is a multiple of 1 s: windows start at T0, T0 + 1000, ...
    let l = limit("conf-block", "fixed 2/1s").with_block_for(5_000);
    let at = |cost, t| one(store, Check::single(&l, "b", cost), t);
    // A cost beyond capacity is denied for good but blocks nothing.
    let v = at(3, T0).await;
    assert_eq!(v.decisions[0].reason, Reason::CostExceedsCapacity);
    assert!(at(1, T0).await.allowed);
    assert!(at(1, T0 + 1).await.allowed);
    // The limit's own denial: OverLimit, and the block starts here, ending at T0 + 5100 —
    // which the denial tells (its window alone would have said 900 ms).
    let v = at(1, T0 + 100).await.decisions[0];
    assert_eq!(
        (v.reason, v.retry_after_ms, v.reset_at_ms),
        (Reason::OverLimit, 5_000, T0 + 5_100)
    );
    let v = at(1, T0 + 200).await.decisions[0];
    assert_eq!(
        (
            v.allowed,
            v.reason,
            v.remaining,
            v.retry_after_ms,
            v.reset_at_ms
        ),
        (false, Reason::Blocked, 0, 4_900, T0 + 5_100)
    );
    // Looks and refunds are not blocked.
    let v = at(0, T0 + 300).await.decisions[0];
    assert_eq!((v.allowed, v.remaining), (true, 0));
    let v = at(-1, T0 + 400).await.decisions[0];
    assert_eq!((v.allowed, v.remaining), (true, 1));
    // The quota has room, but the block holds; the retry counts to its end.
    let v = at(1, T0 + 500).await.decisions[0];
    assert_eq!((v.reason, v.retry_after_ms), (Reason::Blocked, 4_600));
    // A later window has room: still blocked, nothing charged, the block not extended.
    for t in [T0 + 2_000, T0 + 3_000, T0 + 4_999] {
        let v = at(1, t).await.decisions[0];
        assert_eq!(v.reason, Reason::Blocked, "at T0 + {}", t - T0);
        assert_eq!(v.retry_after_ms, T0 + 5_100 - t);
    }
    // One ms before the end: blocked, retry 1. At the end: decided normally, with the whole
    // window's quota (nothing was charged during the block).
    let v = at(1, T0 + 5_099).await.decisions[0];
    assert_eq!((v.reason, v.retry_after_ms), (Reason::Blocked, 1));
    let v = at(1, T0 + 5_100).await.decisions[0];
    assert_eq!(
        (v.allowed, v.reason, v.remaining),
        (true, Reason::Admitted, 1)
    );
    // Another identifier was never blocked.
    assert!(
        one(store, Check::single(&l, "other", 1), T0 + 200)
            .await
            .allowed
    );
}

pub async fn a_blocked_item_denies_its_check_and_only_its_own_denial_blocks<S: Store>(store: &S) {
    let strict = limit("conf-block-strict", "fixed 1/1s").with_block_for(10_000);
    let loose = limit("conf-block-loose", "fixed 5/1s");
    let both = || Check::new().with(&strict, "u", 1).with(&loose, "u", 1);
    assert!(one(store, both(), T0).await.allowed);
    // The strict limit denies on its own: the check is denied and the block starts.
    let v = one(store, both(), T0 + 1).await;
    assert!(!v.allowed);
    assert_eq!(v.decisions[0].reason, Reason::OverLimit);
    // In the next window the strict limit has room, but its block denies the whole check.
    let v = one(store, both(), T0 + 1_500).await;
    assert!(!v.allowed);
    assert_eq!(v.decisions[0].reason, Reason::Blocked);
    assert_eq!(v.decisions[0].retry_after_ms, 10_000 - 1_499);
    if v.atomic {
        // Nothing was charged on the loose limit: a look at a fresh window.
        assert_eq!(v.decisions[1].reason, Reason::Admitted);
        assert_eq!(v.decisions[1].remaining, 5);
    }
    // The loose limit alone is not blocked.
    assert!(
        one(store, Check::single(&loose, "u", 1), T0 + 1_501)
            .await
            .allowed
    );
    // At the block's end the check is decided normally.
    assert!(one(store, both(), T0 + 10_001).await.allowed);

    // A blocking limit denied only because another item of its check denied is not blocked.
    let blocking = limit("conf-block-other", "fixed 5/1s").with_block_for(10_000);
    let tight = limit("conf-block-tight", "fixed 1/1s");
    let pair = || Check::new().with(&blocking, "v", 1).with(&tight, "v", 1);
    assert!(one(store, pair(), T0).await.allowed);
    let v = one(store, pair(), T0 + 1).await;
    assert!(!v.allowed);
    assert_eq!(v.decisions[1].reason, Reason::OverLimit);
    let v = one(store, Check::single(&blocking, "v", 1), T0 + 2).await;
    assert!(v.allowed, "{v:?}");
}

pub async fn a_delayed_admission_reserves_its_place_and_the_next_queue_behind_it<S: Store>(
    store: &S,
) {
    // T = 100 ms, tolerance 200 ms, longest wait 500 ms (docs/design.md §2, "Delays").
    let l = limit("conf-delay", "gcra 10/1s burst 2").with_max_delay(500);
    let l = &l;
    let at = |cost, t| async move { one(store, Check::single(l, "d", cost), t).await.decisions[0] };
    let seen = |d: edgelimit::Decision| (d.allowed, d.reason, d.retry_after_ms, d.reset_at_ms);
    assert_eq!(seen(at(1, T0).await), (true, Reason::Admitted, 0, T0 + 100));
    assert_eq!(seen(at(1, T0).await), (true, Reason::Admitted, 0, T0 + 200));
    // Over the tolerance: admitted after the first ms the plain rule would admit it.
    let d = at(1, T0).await;
    assert_eq!(seen(d), (true, Reason::Delayed, 100, T0 + 300));
    assert_eq!(d.remaining, 0);
    // The next request queues behind the reserved place.
    assert_eq!(
        seen(at(1, T0 + 50).await),
        (true, Reason::Delayed, 150, T0 + 400)
    );
    // A refund gives back its own cost only: the queue before it stays.
    assert_eq!(
        seen(at(-1, T0 + 60).await),
        (true, Reason::Admitted, 0, T0 + 300)
    );
    for (wait, reset) in [(140, 400), (240, 500), (340, 600), (440, 700)] {
        assert_eq!(
            seen(at(1, T0 + 60).await),
            (true, Reason::Delayed, wait, T0 + reset)
        );
    }
    // Beyond the longest wait: denied, nothing written, retry when admitted without a wait.
    assert_eq!(
        seen(at(1, T0 + 60).await),
        (false, Reason::OverLimit, 540, T0 + 700)
    );
    assert_eq!(
        seen(at(1, T0 + 599).await),
        (true, Reason::Delayed, 1, T0 + 800)
    );
    assert_eq!(
        seen(at(-1, T0 + 599).await),
        (true, Reason::Admitted, 0, T0 + 700)
    );
    assert_eq!(
        seen(at(1, T0 + 600).await),
        (true, Reason::Admitted, 0, T0 + 800)
    );

    // With another limit in the check: the delayed item's wait is the check's, and a denial
    // elsewhere writes nothing.
    let paced = limit("conf-delay-paced", "gcra 10/1s burst 1").with_max_delay(1_000);
    let window = limit("conf-delay-window", "fixed 2/1s");
    let both = || Check::new().with(&paced, "m", 1).with(&window, "m", 1);
    assert!(one(store, both(), T0).await.allowed);
    let v = one(store, both(), T0).await;
    assert!(v.allowed, "{v:?}");
    assert_eq!(
        (v.decisions[0].reason, v.decisions[0].retry_after_ms),
        (Reason::Delayed, 100)
    );
    assert_eq!(v.decisions[1].reason, Reason::Admitted);
    let v = one(store, both(), T0).await;
    assert!(!v.allowed);
    assert_eq!(v.decisions[1].reason, Reason::OverLimit);
    if v.atomic {
        // Nothing was taken from the delaying limit: the next place is still 200 ms on.
        assert_eq!(v.decisions[0].reason, Reason::Admitted);
        let d = one(store, Check::single(&paced, "m", 1), T0)
            .await
            .decisions[0];
        assert_eq!((d.reason, d.retry_after_ms), (Reason::Delayed, 200));
    }
}

pub async fn a_delaying_limit_of_another_algorithm_is_refused<S: Store>(store: &S) {
    for spec in [
        "fixed 10/1s",
        "token-bucket 10/1s",
        "concurrency 5 timeout 1s",
    ] {
        let delaying = limit("conf-delay-other", spec).with_max_delay(500);
        let refused = store
            .check(&[Check::single(&delaying, "d", 1)], TimeSource::At(T0))
            .await;
        assert!(
            matches!(&refused, Err(StoreError::InvalidInput(m))
                if m.contains("conf-delay-other") && m.contains("only a gcra limit delays")),
            "{spec}: {refused:?}"
        );
    }
}
