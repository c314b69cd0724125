//! `MemoryStore` and `Limiter`: all-or-nothing checks, independent identifiers, bounded memory,
//! the denial cache and the failure modes.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use edgelimit::algorithm::State;
use edgelimit::control::Assignment;
use edgelimit::limiter::ASSIGNED_POLICY_MS;
use edgelimit::metrics::MetricsSnapshot;
use edgelimit::Control;
use edgelimit::{
    Check, CheckItem, Checked, FailMode, Limit, Limiter, ManualClock, MemoryStore, Policy, Reason,
    Store, StoreError, TimeSource, Verdict,
};
use edgelimit_testkit::rng::Rng;
use futures::executor::block_on;
use proptest::prelude::*;

fn limit(name: &str, spec: &str) -> Limit {
    Limit::new(name, spec.parse::<Policy>().unwrap())
}

#[test]
fn a_denial_by_one_limit_consumes_nothing_from_the_others() {
    let store = MemoryStore::new();
    let burst = limit("burst", "fixed 5/1s");
    let daily = limit("daily", "sliding-log 2/day");
    let check = Check::new().with(&burst, "ip", 1).with(&daily, "ip", 1);
    let verdicts = store
        .direct()
        .check(&[check.clone(), check.clone(), check.clone()], 1_000);
    assert_eq!(
        verdicts.iter().map(|v| v.allowed).collect::<Vec<_>>(),
        [true, true, false]
    );
    let denied = &verdicts[2];
    assert!(!denied.decisions[1].allowed);
    // The burst limit would have admitted; it reports its standing quota, untouched.
    assert!(denied.decisions[0].allowed);
    assert_eq!(denied.decisions[0].remaining, 3);
    assert_eq!(denied.denial(), Some(&denied.decisions[1]));
    let look = store
        .direct()
        .check(&[Check::single(&burst, "ip", 0)], 1_000);
    assert_eq!(look[0].decisions[0].remaining, 3);
}

#[test]
fn identifiers_and_limit_names_never_share_state() {
    let store = MemoryStore::new();
    let a = limit("a", "fixed 1/1s");
    let b = limit("b", "fixed 1/1s");
    let checks = [
        Check::single(&a, "x", 1),
        Check::single(&a, "y", 1),
        Check::single(&b, "x", 1),
        Check::single(&a, "x", 1),
    ];
    let verdicts = store.direct().check(&checks, 0);
    assert_eq!(
        verdicts.iter().map(|v| v.allowed).collect::<Vec<_>>(),
        [true, true, true, false]
    );
}

#[test]
fn memory_is_bounded_and_expired_state_is_dropped() {
    let store = MemoryStore::with_capacity(100);
    let l = limit("l", "gcra 1/1s");
    for i in 0..1_000 {
        store
            .direct()
            .check(&[Check::single(&l, format!("id-{i}"), 1)], i);
        assert!(store.len() <= 100);
    }
    // A peek or a denial at a fresh key stores nothing.
    store
        .direct()
        .check(&[Check::single(&l, "looker", 0)], 1_000);
    assert!(store.len() <= 100);
    // Long after every state stopped mattering (plus the GC grace), all are gone.
    store.direct().check(&[], 10_000_000);
    assert_eq!(store.len(), 0);
}

#[test]
fn when_full_the_soonest_expiring_state_is_evicted() {
    let store = MemoryStore::with_capacity(2);
    let short = limit("short", "fixed 1/1s");
    let long = limit("long", "fixed 1/1h");
    store.direct().check(&[Check::single(&long, "keep", 1)], 0);
    store
        .direct()
        .check(&[Check::single(&short, "evict", 1)], 0);
    store.direct().check(&[Check::single(&long, "new", 1)], 0);
    let v = store.direct().check(
        &[
            Check::single(&long, "keep", 1),
            Check::single(&short, "evict", 1),
        ],
        1,
    );
    assert!(!v[0].allowed, "the long-lived state was kept");
    assert!(
        v[1].allowed,
        "the soonest-expiring state was the one evicted"
    );
}

fn spec_strategy() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "fixed 3/10ms",
        "sliding-log 3/10ms",
        "sliding-counter 4/10ms",
        "token-bucket 2/10ms burst 3",
        "gcra 3/10ms burst 2",
    ])
    .prop_map(str::to_string)
}

proptest! {
    /// Any sequence of multi-limit checks through the store decides exactly as applying the pure
    /// steps to per-(limit, identifier) states by hand, all or nothing.
    #[test]
    fn the_store_is_the_pure_steps_all_or_nothing(
        specs in prop::collection::vec(spec_strategy(), 3),
        ops in prop::collection::vec((0u64..6, prop::collection::vec((0usize..3, 0usize..3, -1i64..3), 1..4)), 1..60),
    ) {
        let limits: Vec<Limit> = specs.iter().enumerate().map(|(i, s)| limit(&format!("l{i}"), s)).collect();
        let store = MemoryStore::new();
        let mut states: std::collections::HashMap<(usize, usize), State> = Default::default();
        let mut now = 0;
        for (dt, items) in ops {
            now += dt;
            let mut check = Check::new();
            for &(l, id, cost) in &items {
                check = check.with(&limits[l], format!("id{id}"), cost);
            }
            let verdict = store.direct().check(std::slice::from_ref(&check), now).remove(0);
            // Reference: try every item on copies; commit only if all admit.
            let mut trial: Vec<((usize, usize), State)> = Vec::new();
            let mut all = true;
            let mut expected = Vec::new();
            for item in check.items() {
                let l: usize = item.limit.name[1..].parse().unwrap();
                let id: usize = String::from_utf8_lossy(item.identifier.as_bytes())[2..].parse().unwrap();
                let mut s = states.get(&(l, id)).cloned().unwrap_or_else(|| State::fresh(item.limit.policy.algorithm()));
                let d = s.apply(&item.limit.policy, now, item.cost).decision;
                all &= d.allowed;
                expected.push(d);
                trial.push(((l, id), s));
            }
            if all {
                states.extend(trial);
            } else {
                for (d, item) in expected.iter_mut().zip(check.items()) {
                    if d.allowed {
                        let l: usize = item.limit.name[1..].parse().unwrap();
                        let id: usize = String::from_utf8_lossy(item.identifier.as_bytes())[2..].parse().unwrap();
                        let mut s = states.get(&(l, id)).cloned().unwrap_or_else(|| State::fresh(item.limit.policy.algorithm()));
                        *d = s.apply(&item.limit.policy, now, 0).decision;
                    }
                }
            }
            prop_assert_eq!(verdict.allowed, all);
            prop_assert_eq!(verdict.decisions, expected);
        }
    }
}

/// A store that fails while `down` is set and counts calls.
#[derive(Debug, Default)]
struct FlakyStore {
    inner: MemoryStore,
    down: AtomicBool,
    calls: AtomicUsize,
}

#[async_trait]
impl Store for FlakyStore {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::Unreachable("connection refused".into()));
        }
        self.inner.check(checks, time).await
    }
}

/// A [`FlakyStore`] that answers into the caller's buffer as in-process stores do, each verdict
/// refilled in place (`Verdict::reuse`).
#[derive(Debug, Default)]
struct RefillingStore(FlakyStore);

#[async_trait]
impl Store for RefillingStore {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        self.0.check(checks, time).await
    }

    async fn check_into(
        &self,
        checks: &[Check],
        time: TimeSource,
        verdicts: &mut Vec<Verdict>,
    ) -> Result<(), StoreError> {
        let answers = match self.0.check(checks, time).await {
            Ok(answers) => answers,
            Err(e) => {
                verdicts.clear();
                return Err(e);
            }
        };
        for (at, answer) in answers.iter().enumerate() {
            let verdict = Verdict::reuse(verdicts, at);
            verdict.allowed = answer.allowed;
            verdict.decisions.extend_from_slice(&answer.decisions);
            verdict.atomic = answer.atomic;
            verdict.decided_at_ms = answer.decided_at_ms;
            verdict.listed.extend_from_slice(&answer.listed);
        }
        verdicts.truncate(answers.len());
        Ok(())
    }
}

/// Three limits of different algorithms, one failing closed: what the batch tests mix.
fn mixed_limits() -> [Limit; 3] {
    [
        limit("a", "fixed 2/100ms"),
        limit("b", "sliding-log 3/200ms"),
        limit("c", "token-bucket 1/50ms burst 2").with_fail_mode(FailMode::Closed),
    ]
}

/// One `Checked` buffer answered into batch after batch (of 0 to 3 checks, some answered by the
/// denial cache, some while the store is down) holds exactly what fresh answers hold.
#[test]
fn answering_into_one_buffer_decides_as_fresh_answers() {
    let clock = Arc::new(ManualClock::at(0));
    let fresh = Limiter::new(FlakyStore::default()).with_clock(clock.clone());
    let reused = Limiter::new(RefillingStore::default()).with_clock(clock.clone());
    let limits = mixed_limits();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: u64| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (seed >> 33) % n
    };
    let mut checked = Checked::default();
    let (mut cached, mut failed) = (0, 0);
    for round in 0..3_000 {
        clock.advance(next(20));
        let down = next(25) == 0;
        fresh.store().down.store(down, Ordering::SeqCst);
        reused.store().0.down.store(down, Ordering::SeqCst);
        let checks: Vec<Check> = (0..next(4))
            .map(|_| {
                let mut check = Check::new();
                for _ in 0..1 + next(3) {
                    let l = &limits[next(3) as usize];
                    check = check.with_item(CheckItem::new(l, format!("id{}", next(3)), 1));
                }
                check
            })
            .collect();
        let expected = block_on(fresh.check_all(&checks));
        block_on(reused.check_all_into(&checks, &mut checked));
        assert_eq!(checked, expected, "round {round}");
        for decision in expected.verdicts.iter().flat_map(|v| &v.decisions) {
            cached += u64::from(decision.reason == Reason::CachedDenial);
            failed += u64::from(decision.reason == Reason::FailedClosed);
        }
    }
    assert!(
        cached > 50 && failed > 10,
        "{cached} cached, {failed} failed"
    );
}

/// A batch in which the denial cache answers some checks and the store the rest — before,
/// between and after one another, or all of them — answers each check as the check alone would
/// have been answered, in its place. Each place has its own identifiers, so a twin limiter
/// deciding the checks one by one is the reference.
#[test]
fn cached_and_stored_verdicts_keep_their_checks_places() {
    let clock = Arc::new(ManualClock::at(0));
    let batched = Limiter::new(RefillingStore::default()).with_clock(clock.clone());
    let one_by_one = Limiter::new(FlakyStore::default()).with_clock(clock.clone());
    let limits = mixed_limits();
    let mut rng = Rng::new(0x2545_f491_4f6c_dd1d);
    let mut next = move |n: u64| rng.next_u64() % n;
    let mut checked = Checked::default();
    let (mut mixed, mut cached_split, mut stored_split) = (0, 0, 0);
    for round in 0..4_000 {
        clock.advance(next(15));
        let down = next(30) == 0;
        batched.store().0.down.store(down, Ordering::SeqCst);
        one_by_one.store().down.store(down, Ordering::SeqCst);
        let checks: Vec<Check> = (0..next(5))
            .map(|place| {
                let mut check = Check::new();
                for _ in 0..1 + next(2) {
                    let l = &limits[next(3) as usize];
                    let who = format!("place{place}-id{}", next(2));
                    check = check.with_item(CheckItem::new(l, who, 1));
                }
                check
            })
            .collect();
        block_on(batched.check_all_into(&checks, &mut checked));
        let alone: Vec<Verdict> = checks
            .iter()
            .map(|check| block_on(one_by_one.check(check)))
            .collect();
        assert_eq!(checked.verdicts, alone, "round {round}");
        let from_cache: Vec<bool> = alone
            .iter()
            .map(|v| v.decisions.iter().any(|d| d.reason == Reason::CachedDenial))
            .collect();
        if from_cache.contains(&true) && from_cache.contains(&false) {
            mixed += 1;
            // Answers of one kind on both sides of one of the other: cached ones around stored
            // ones (the store asked for a slice of the batch), or stored ones around cached ones
            // (for a copy of the checks between).
            let between = |kind: bool| {
                let first = from_cache.iter().position(|&c| c == kind).unwrap();
                let last = from_cache.iter().rposition(|&c| c == kind).unwrap();
                u64::from(from_cache[first..last].contains(&!kind))
            };
            cached_split += between(true);
            stored_split += between(false);
        }
    }
    assert!(
        mixed > 200 && cached_split > 20 && stored_split > 20,
        "{mixed} mixed, {cached_split} cached around stored, {stored_split} stored around cached"
    );
}

#[test]
fn repeat_offenders_are_denied_from_the_cache_with_no_round_trip() {
    let clock = Arc::new(ManualClock::at(10_000));
    let limiter = Limiter::new(FlakyStore::default()).with_clock(clock.clone());
    let l = limit("l", "fixed 2/1s");
    let check = Check::single(&l, "bot", 1);
    for _ in 0..2 {
        assert!(block_on(limiter.check(&check)).allowed);
    }
    let first_denial = block_on(limiter.check(&check));
    assert_eq!(first_denial.decisions[0].reason, Reason::OverLimit);
    let calls = limiter.store().calls.load(Ordering::SeqCst);
    for _ in 0..5 {
        let v = block_on(limiter.check(&check));
        assert!(!v.allowed);
        assert_eq!(v.decisions[0].reason, Reason::CachedDenial);
        assert_eq!(v.decisions[0].retry_after_ms, 1_000);
    }
    assert_eq!(
        limiter.store().calls.load(Ordering::SeqCst),
        calls,
        "no round trip"
    );
    assert_eq!(limiter.metrics().totals().cache_hits, 5);
    // At the retry time the cache lets the request through to the store, which admits it.
    clock.advance(1_000);
    assert!(block_on(limiter.check(&check)).allowed);
    // Another identifier is never answered from the cache.
    assert!(block_on(limiter.check(&Check::single(&l, "human", 1))).allowed);
}

#[test]
fn each_limit_follows_its_fail_mode_and_the_store_takes_over_again() {
    let clock = Arc::new(ManualClock::at(0));
    let limiter = Limiter::new(FlakyStore::default()).with_clock(clock.clone());
    let open = limit("open", "fixed 1/1s");
    let closed = limit("closed", "fixed 1/1s").with_fail_mode(FailMode::Closed);
    let local = limit("local", "fixed 10/1s").with_fail_mode(FailMode::Fallback { per_mille: 200 });
    limiter.store().down.store(true, Ordering::SeqCst);

    let v = block_on(limiter.check(&Check::single(&open, "x", 1)));
    assert!(v.allowed);
    assert_eq!(v.decisions[0].reason, Reason::FailedOpen);
    let v = block_on(limiter.check(&Check::single(&closed, "x", 1)));
    assert!(!v.allowed);
    assert_eq!(v.decisions[0].reason, Reason::FailedClosed);
    // The fallback admits 20% of 10 per window, locally.
    let admitted = (0..5)
        .filter(|_| block_on(limiter.check(&Check::single(&local, "x", 1))).allowed)
        .count();
    assert_eq!(admitted, 2);
    let v = block_on(limiter.check(&Check::single(&local, "x", 1)));
    assert_eq!(v.decisions[0].reason, Reason::Fallback);
    let metrics = limiter.metrics();
    let totals = metrics.totals();
    assert_eq!(
        (totals.failed_open, totals.failed_closed, totals.fallback),
        (1, 1, 6)
    );
    assert_eq!(metrics.store_errors, 8);
    assert_eq!((metrics.checks_allowed, metrics.checks_denied), (3, 5));

    limiter.store().down.store(false, Ordering::SeqCst);
    clock.advance(5_000);
    let v = block_on(limiter.check(&Check::single(&closed, "x", 1)));
    assert!(v.allowed);
    assert_eq!(v.decisions[0].reason, Reason::Admitted);
}

#[test]
fn the_fallback_keeps_the_tier_or_override_the_store_last_decided_with() {
    let clock = Arc::new(ManualClock::at(0));
    let limiter = Limiter::new(FlakyStore::default()).with_clock(clock.clone());
    let local = limit("local", "fixed 10/1s")
        .with_tiers([("pro", "fixed 40/1s".parse::<Policy>().unwrap())])
        .unwrap()
        .with_fail_mode(FailMode::Fallback { per_mille: 500 });
    let inner = &limiter.store().inner;
    inner.direct().assign(
        &local,
        &"pro-client".into(),
        Some(&Assignment::Tier("pro".into())),
        None,
    );
    inner.direct().assign(
        &local,
        &"overridden".into(),
        Some(&Assignment::Override("fixed 6/1s".parse().unwrap())),
        None,
    );
    // The store decides each once: the tier's capacity, the override's, the limit's own.
    for (who, capacity) in [("pro-client", 40), ("overridden", 6), ("free-client", 10)] {
        let v = block_on(limiter.check(&Check::single(&local, who, 1)));
        assert_eq!((v.allowed, v.decisions[0].limit), (true, capacity), "{who}");
    }
    // Then it goes down: each is decided in process at half the policy it was last decided
    // with, in a window of its own.
    limiter.store().down.store(true, Ordering::SeqCst);
    clock.advance(1_000);
    let admitted = |who: &str| {
        (0..30)
            .map(|_| block_on(limiter.check(&Check::single(&local, who, 1))))
            .inspect(|v| assert_eq!(v.decisions[0].reason, Reason::Fallback))
            .filter(|v| v.allowed)
            .count()
    };
    assert_eq!(admitted("pro-client"), 20);
    assert_eq!(admitted("overridden"), 3);
    assert_eq!(admitted("free-client"), 5);
    assert_eq!(admitted("never-seen"), 5);

    // Once the store decides the client with the limit's own policy again (the tier lapsed),
    // the fallback does too.
    limiter.store().down.store(false, Ordering::SeqCst);
    inner
        .direct()
        .assign(&local, &"pro-client".into(), None, None);
    clock.advance(1_000);
    let v = block_on(limiter.check(&Check::single(&local, "pro-client", 1)));
    assert_eq!(v.decisions[0].limit, 10);
    limiter.store().down.store(true, Ordering::SeqCst);
    clock.advance(1_000);
    assert_eq!(admitted("pro-client"), 5);
    // And a remembered policy is forgotten after `ASSIGNED_POLICY_MS`.
    clock.advance(ASSIGNED_POLICY_MS);
    assert_eq!(admitted("overridden"), 5);
}

#[test]
fn a_limiter_without_metrics_decides_alike_and_counts_nothing() {
    let counted = Limiter::new(FlakyStore::default()).with_clock(Arc::new(ManualClock::at(0)));
    let silent = Limiter::new(FlakyStore::default())
        .with_clock(Arc::new(ManualClock::at(0)))
        .without_metrics();
    let api = limit("api", "fixed 2/1s");
    for limiter in [&counted, &silent] {
        let allowed: Vec<bool> = (0..4)
            .map(|_| block_on(limiter.check(&Check::single(&api, "k", 1))).allowed)
            .collect();
        assert_eq!(allowed, [true, true, false, false]);
        limiter.store().down.store(true, Ordering::SeqCst);
        block_on(limiter.check(&Check::single(&api, "other", 1)));
    }
    let m = counted.metrics();
    assert_eq!(
        (m.checks_allowed, m.checks_denied, m.store_errors),
        (3, 2, 1)
    );
    assert_eq!(silent.metrics(), MetricsSnapshot::default());
}

#[test]
fn decisions_are_counted_per_limit_and_rendered_for_prometheus() {
    let clock = Arc::new(ManualClock::at(0));
    let limiter = Limiter::new(FlakyStore::default()).with_clock(clock.clone());
    let api = limit("api", "fixed 5/1s");
    let strict = limit("strict\"name", "fixed 1/1s").with_fail_mode(FailMode::Closed);
    for _ in 0..7 {
        block_on(limiter.check(&Check::single(&api, "k", 1)));
    }
    limiter.store().down.store(true, Ordering::SeqCst);
    block_on(limiter.check(&Check::single(&strict, "k", 1)));
    let m = limiter.metrics();
    let api_counts = m.limits["api"];
    // 5 admitted (the 4th and 5th with ≤ 20% left), 1 denied by the store, 1 from the cache.
    assert_eq!(
        (
            api_counts.allowed,
            api_counts.denied,
            api_counts.cache_hits,
            api_counts.near_limit
        ),
        (5, 1, 1, 2)
    );
    assert_eq!(m.limits["strict\"name"].failed_closed, 1);
    assert_eq!(m.store_errors, 1);
    assert_eq!(
        m.store_latency.count, 7,
        "six store calls for api, one failed for strict"
    );
    let text = m.to_prometheus();
    assert!(text.contains("edgelimit_decisions_total{limit=\"api\",outcome=\"allowed\"} 5\n"));
    assert!(text.contains(
        "edgelimit_decisions_total{limit=\"strict\\\"name\",outcome=\"failed_closed\"} 1\n"
    ));
    assert!(text.contains("edgelimit_store_latency_seconds_bucket{le=\"+Inf\"} 7\n"));
    assert!(text.contains("edgelimit_near_limit_total{limit=\"api\"} 2\n"));
}

#[test]
fn limits_skipped_by_a_cached_denial_are_reported_and_never_counted() {
    let clock = Arc::new(ManualClock::at(0));
    let limiter = Limiter::new(MemoryStore::new()).with_clock(clock.clone());
    let tight = limit("tight", "fixed 1/1s");
    let loose = limit("loose", "fixed 10/1s");
    let check = Check::new().with(&tight, "u", 1).with(&loose, "u", 1);
    assert!(block_on(limiter.check(&check)).allowed);
    let by_store = block_on(limiter.check(&check));
    assert_eq!(
        (by_store.decisions[0].reason, by_store.decisions[1].reason),
        (Reason::OverLimit, Reason::Admitted)
    );
    let by_cache = block_on(limiter.check(&check));
    assert!(!by_cache.allowed);
    assert_eq!(
        (by_cache.decisions[0].reason, by_cache.decisions[1].reason),
        (Reason::CachedDenial, Reason::Skipped)
    );
    assert_eq!(by_cache.decided_at_ms, 0);
    let m = limiter.metrics();
    // `loose` decided twice (admitted, then a look for the denied check); the skip is not counted.
    assert_eq!(m.limits["loose"].allowed, 2);
    assert_eq!(m.limits["loose"].cache_hits, 0);
    assert_eq!(m.limits["tight"].cache_hits, 1);
    assert_eq!((m.checks_allowed, m.checks_denied), (1, 2));
    // Only the uncached checks went to the store.
    assert_eq!(m.store_latency.count, 2);
}

#[test]
fn a_forgotten_identifier_is_asked_of_the_store_again() {
    let clock = Arc::new(ManualClock::at(0));
    let limiter = Limiter::new(MemoryStore::new()).with_clock(clock.clone());
    let tight = limit("tight", "fixed 1/1m");
    let check = |who: &str| Check::single(&tight, who, 1);
    assert!(block_on(limiter.check(&check("u"))).allowed);
    assert!(block_on(limiter.check(&check("v"))).allowed);
    for who in ["u", "v"] {
        let denied = block_on(limiter.check(&check(who)));
        assert_eq!(denied.decisions[0].reason, Reason::OverLimit);
        let cached = block_on(limiter.check(&check(who)));
        assert_eq!(cached.decisions[0].reason, Reason::CachedDenial);
    }
    // Both reset in the store; only `u` forgotten by the process.
    for who in ["u", "v"] {
        assert!(limiter.store().direct().reset(&tight, who.as_bytes()));
    }
    limiter.forget(&tight, &edgelimit::Identifier::from("u"));
    assert!(block_on(limiter.check(&check("u"))).allowed, "asked again");
    assert_eq!(
        block_on(limiter.check(&check("v"))).decisions[0].reason,
        Reason::CachedDenial,
        "still remembered"
    );
}

#[test]
fn a_denial_is_cached_for_the_cache_time_at_most_so_a_reset_reaches_the_process() {
    // An hourly quota: its retry time is an hour away, but a reset written to the store must
    // reach this process within the cache's time.
    let hourly = limit("hourly", "fixed 1/1h");
    let check = Check::new().with(&hourly, "u", 1);
    for (keep_ms, default) in [
        (5_000, false),
        (edgelimit::limiter::DEFAULT_DENIAL_CACHE_MS, true),
    ] {
        let clock = Arc::new(ManualClock::at(0));
        let mut limiter = Limiter::new(MemoryStore::new()).with_clock(clock.clone());
        if !default {
            limiter = limiter.with_denial_cache_ms(keep_ms);
        }
        assert!(block_on(limiter.check(&check)).allowed);
        let denied = block_on(limiter.check(&check));
        assert_eq!(denied.decisions[0].reason, Reason::OverLimit);
        block_on(limiter.store().reset(&hourly, &"u".into())).unwrap();
        clock.set(keep_ms - 1);
        let cached = block_on(limiter.check(&check));
        assert_eq!(cached.decisions[0].reason, Reason::CachedDenial);
        // Still the store's retry time, not the cache's.
        assert_eq!(
            cached.decisions[0].retry_after_ms,
            3_600_000 - (keep_ms - 1)
        );
        clock.set(keep_ms);
        let after = block_on(limiter.check(&check));
        assert!(after.allowed, "{keep_ms}: {after:?}");
        assert_eq!(after.decisions[0].reason, Reason::Admitted);
    }
    // Zero keeps nothing: every check asks the store.
    let limiter = Limiter::new(MemoryStore::new())
        .with_clock(Arc::new(ManualClock::at(0)))
        .with_denial_cache_ms(0)
        .with_denial_cache(100);
    assert!(block_on(limiter.check(&check)).allowed);
    for _ in 0..2 {
        let denied = block_on(limiter.check(&check));
        assert_eq!(denied.decisions[0].reason, Reason::OverLimit);
    }
}
