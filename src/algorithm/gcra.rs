//! GCRA, the generic cell rate algorithm: a leaky bucket kept as one theoretical arrival time.
//!
//! **Semantics** (docs/design.md §2). Emission interval `T = W/L`; keep the theoretical arrival time `TAT`
//! (initially −∞). A request of cost `c` at `t` is admitted iff `max(TAT, t) + c·T − t ≤ B·T`;
//! then `TAT ← max(TAT, t) + c·T`. With `B = L` it admits `L` at once, then one every `T`.
//! `T` is rarely a whole number of ms, so `TAT` is held exactly as `tat_ms + tat_rem/L` with
//! `0 ≤ tat_rem < L`, and `T` and `B·T` likewise (precomputed in the [`Policy`]): all arithmetic
//! stays in integers, bit for bit equal in the Lua twin. `reset_at = max(ceil(TAT), t)`; a denied
//! request's retry time is `ceil(TAT + c·T − B·T)`, the exact first millisecond it fits.
//! Everything but `remaining` is additions with a carry: one division per decision.
//!
//! **Guarantee**: decides exactly as [`super::token_bucket`] with the same `L`, `W`, `B` — the
//! token deficit is `(TAT − t)·L` — proven by a property test on random sequences, though the two
//! share no code. **Worst case**: `B + ⌊L·(W−1)/W⌋` admitted within any `W` ms (a burst of `B`,
//! then one per `T`).
//!
//! **Delays** (`step_delaying`, docs/design.md §2, "Delays"): a limit with a longest wait `D`
//! admits while `max(TAT, t) + c·T − t ≤ B·T + D`, the request waiting until the first
//! millisecond the plain rule admits it; `TAT` moving on is its reserved place, so later
//! requests queue behind it and the forwarded costs stay below `B + L·Δ/W` in any `Δ` ms.
//!
//! Besides `TAT` the state keeps the last time seen, so a clock that steps back counts as no time
//! passed, exactly as in the token bucket.
//!
//! **Policy changes** (docs/design.md §2): `TAT` is a time, so the debt `TAT − t` carries over as
//! a time, capped at the new tolerance `B'·T'` (`max(TAT, t)` is read as at most `t + B'·T'`,
//! which never binds under an unchanged policy). The sub-millisecond remainder, in units of
//! `1/L`, is read in the new limit's units, capped below `L'`: less than a millisecond either way.

use super::outcome::{admitted, delayed, over_limit, too_costly, Cost, StepOutcome, MAX_TIME_MS};
use super::words::word_state;
use crate::policy::{Fraction, Policy};

word_state! {
    /// The theoretical arrival time of one (policy, identifier). `Default` is "no state yet"
    /// (a `TAT` in the past behaves as −∞).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
    pub struct GcraState {
        /// Whole milliseconds of the theoretical arrival time (epoch ms).
        pub tat_ms: u64,
        /// The fraction of a millisecond, in units of `1/L` ms: `0 ≤ tat_rem < L`.
        pub tat_rem: u64,
        /// The latest time (epoch ms) at which the state was written.
        pub seen_ms: u64,
    }
}

/// `a + b`, both fractions of `1/limit` ms.
fn add(a: Fraction, b: Fraction, limit: u64) -> Fraction {
    let rem = a.rem + b.rem;
    if rem >= limit {
        Fraction {
            whole: a.whole.saturating_add(b.whole).saturating_add(1),
            rem: rem - limit,
        }
    } else {
        Fraction {
            whole: a.whole.saturating_add(b.whole),
            rem,
        }
    }
}

/// `a − b` for `a ≥ b`.
fn sub(a: Fraction, b: Fraction, limit: u64) -> Fraction {
    if a.rem >= b.rem {
        Fraction {
            whole: a.whole - b.whole,
            rem: a.rem - b.rem,
        }
    } else {
        Fraction {
            whole: a.whole - b.whole - 1,
            rem: a.rem + limit - b.rem,
        }
    }
}

/// `n·T` for `n ≤ B` (so `n·W ≤ 2^50`).
fn times(n: u64, interval: Fraction, limit: u64) -> Fraction {
    if n == 1 {
        return interval;
    }
    let rem = n * interval.rem;
    Fraction {
        whole: n * interval.whole + rem / limit,
        rem: rem % limit,
    }
}

fn ceil(f: Fraction) -> u64 {
    f.whole.saturating_add((f.rem > 0) as u64)
}

/// Applies one request of `cost` at `now_ms` to `state` in place (untouched unless `changed`).
pub fn step(policy: &Policy, state: &mut GcraState, now_ms: u64, cost: i64) -> StepOutcome {
    step_delaying(policy, state, now_ms, cost, 0)
}

/// [`step`] for a limit that delays a request rather than deny it while the wait is at most
/// `max_delay_ms` (`D`, docs/design.md §2, "Delays"): a request of cost `c` is admitted iff
/// `max(TAT, t) + c·T − t ≤ τ + D`, and `TAT` moves on as for any admission, so the requests
/// after it queue behind its reserved place. Its wait is `w = ⌈max(TAT, t) + c·T − τ⌉ − t`
/// when positive — the first millisecond at which [`step`] would admit it — and it is then
/// [`delayed`] with `retry_after_ms = w`; beyond `D` it is denied with [`step`]'s retry (when
/// it is admitted without a wait). The policy-change cap reads `max(TAT, t)` as at most
/// `t + τ + D`, which never forgives a queue. `D = 0` is [`step`].
pub(crate) fn step_delaying(
    policy: &Policy,
    state: &mut GcraState,
    now_ms: u64,
    cost: i64,
    max_delay_ms: u64,
) -> StepOutcome {
    let (limit, w) = (policy.limit(), policy.window_ms());
    let t = now_ms.min(MAX_TIME_MS).max(state.seen_ms);
    let now = Fraction { whole: t, rem: 0 };
    let tat = Fraction {
        whole: state.tat_ms,
        rem: state.tat_rem.min(limit - 1),
    };
    // max(TAT, t): TAT < t exactly when its whole part is below t.
    let base = if tat.whole >= t { tat } else { now };
    let tolerance = policy.tolerance();
    // The latest TAT an admission may leave: the tolerance, plus the longest wait.
    let limit_at = add(
        add(now, tolerance, limit),
        Fraction {
            whole: max_delay_ms,
            rem: 0,
        },
        limit,
    );
    // A debt beyond that (the policy changed to a smaller one under a live key) is a full
    // debt: it never outlasts the new policy's own worst case, nor forgives a queue.
    let base = base.min(limit_at);
    // Tokens left at `at` once TAT is `tat` ≥ t: floor((B·W − (TAT − t)·L) / W).
    let remaining = |tat: Fraction| {
        let deficit = sub(tat, now, limit);
        let scaled = deficit
            .whole
            .saturating_mul(limit)
            .saturating_add(deficit.rem);
        (policy.burst() * w).saturating_sub(scaled) / w
    };
    let reset_at = |tat: Fraction| ceil(tat).max(t);
    let mut write = None;
    let decision = match Cost::of(cost) {
        Cost::Take(c) if c > policy.burst() => too_costly(policy, remaining(base), reset_at(base)),
        Cost::Take(c) => {
            let next = add(base, times(c, policy.interval(), limit), limit);
            if next <= limit_at {
                write = Some(next);
                if next <= add(now, tolerance, limit) {
                    admitted(policy, remaining(next), reset_at(next))
                } else {
                    // Fits the plain rule from ⌈TAT' − τ⌉ on (TAT' = next > t + τ).
                    let wait = ceil(sub(next, tolerance, limit)) - t;
                    delayed(policy, remaining(next), reset_at(next), wait)
                }
            } else {
                // Denied only while TAT is ahead of t; it fits once t' ≥ TAT + c·T − B·T.
                let retry_at = ceil(sub(next, tolerance, limit));
                over_limit(policy, remaining(base), reset_at(base), retry_at - t)
            }
        }
        Cost::Peek => admitted(policy, remaining(base), reset_at(base)),
        Cost::Refund(r) | Cost::Release { count: r, .. } => {
            let back = times(r.min(policy.burst()), policy.interval(), limit);
            let earlier = if base >= add(now, back, limit) {
                sub(base, back, limit)
            } else {
                now
            };
            if earlier != base {
                write = Some(earlier);
            }
            admitted(policy, remaining(earlier), reset_at(earlier))
        }
    };
    if let Some(tat) = write {
        *state = GcraState {
            tat_ms: tat.whole,
            tat_rem: tat.rem,
            seen_ms: t,
        };
    }
    StepOutcome {
        decision,
        changed: write.is_some(),
        expire_at_ms: decision.reset_at_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::Reason;
    use crate::policy::Algorithm;
    use proptest::prelude::*;

    const T0: u64 = 1_000_000;

    fn gcra(limit: u64, window_ms: u64, burst: u64) -> Policy {
        Policy::new(Algorithm::Gcra, limit, window_ms, Some(burst)).unwrap()
    }

    /// `gcra 10/1s burst 2` (T = 100 ms, τ = 200 ms) delaying up to 500 ms: a burst of two, then
    /// five requests queued 100 ms apart, then a denial.
    #[test]
    fn a_queue_of_requests_waits_one_interval_each_until_the_longest_wait() {
        let policy = gcra(10, 1000, 2);
        let mut state = GcraState::default();
        let mut waits = Vec::new();
        for _ in 0..8 {
            let d = step_delaying(&policy, &mut state, T0, 1, 500).decision;
            waits.push((d.allowed, d.reason, d.retry_after_ms, d.reset_at_ms));
        }
        let admitted = |wait, reset| (true, Reason::Admitted, wait, T0 + reset);
        let delayed = |wait, reset| (true, Reason::Delayed, wait, T0 + reset);
        assert_eq!(
            waits,
            vec![
                admitted(0, 100),
                admitted(0, 200),
                delayed(100, 300),
                delayed(200, 400),
                delayed(300, 500),
                delayed(400, 600),
                delayed(500, 700),
                // Beyond the longest wait: denied, retrying when it is admitted without a wait
                // (as a plain limit answers), the queue unchanged.
                (false, Reason::OverLimit, 600, T0 + 700),
            ]
        );
        assert_eq!((state.tat_ms, state.seen_ms), (T0 + 700, T0));
        // A delayed admission leaves nothing of the tolerance.
        let mut probe = state;
        assert_eq!(
            step_delaying(&policy, &mut probe, T0, 0, 500)
                .decision
                .remaining,
            0
        );
    }

    proptest! {
        /// A delayed request's wait is exact: the plain step on the state it found admits the
        /// same request `w` ms later and denies it one ms earlier; with no wait the plain step
        /// admits it now. A denial's retry counts to when the plain step admits it, past the
        /// longest wait.
        #[test]
        fn a_wait_is_the_first_millisecond_the_plain_rule_admits(
            limit in 1u64..50,
            window_ms in 1u64..5_000,
            burst_extra in 0u64..5,
            max_delay_ms in 1u64..10_000,
            steps in proptest::collection::vec((0u64..400, 1u64..4), 1..40),
        ) {
            let burst = (limit / 3).max(1) + burst_extra;
            let policy = gcra(limit, window_ms, burst);
            let mut state = GcraState::default();
            let mut now = T0;
            for (gap, cost) in steps {
                now += gap;
                let cost = cost.min(burst) as i64;
                let before = state;
                let d = step_delaying(&policy, &mut state, now, cost, max_delay_ms).decision;
                let plain_at = |at: u64| step(&policy, &mut before.clone(), at, cost).decision;
                match d.reason {
                    Reason::Admitted => {
                        prop_assert_eq!(plain_at(now), d);
                    }
                    Reason::Delayed => {
                        let w = d.retry_after_ms;
                        prop_assert!(w >= 1 && w <= max_delay_ms, "{d:?}");
                        prop_assert!(plain_at(now + w).allowed);
                        prop_assert!(!plain_at(now + w - 1).allowed);
                        prop_assert!(!plain_at(now).allowed);
                    }
                    _ => {
                        prop_assert_eq!(d.reason, Reason::OverLimit);
                        prop_assert_eq!(state, before);
                        let retry = d.retry_after_ms;
                        prop_assert!(retry > max_delay_ms, "{d:?}");
                        prop_assert!(plain_at(now + retry).allowed);
                        prop_assert!(!plain_at(now + retry - 1).allowed);
                    }
                }
            }
        }

        /// Waiting requests never take the limit over: the costs forwarded (each request at
        /// `t + w`) in any `Δ` ms stay below `B + L·Δ/W` — GCRA's own bound (`B + ⌊L·(W−1)/W⌋`
        /// in any `W` ms for `L ≤ W`), forwarding times rounded up to whole ms included — and
        /// forwarding times never go back, so requests leave in the order they came.
        #[test]
        fn forwarded_requests_stay_within_the_limit(
            limit in 1u64..50,
            window_ms in 1u64..5_000,
            burst_extra in 0u64..5,
            max_delay_ms in 1u64..10_000,
            steps in proptest::collection::vec((0u64..300, 1u64..4), 1..60),
        ) {
            let burst = (limit / 3).max(1) + burst_extra;
            let policy = gcra(limit, window_ms, burst);
            let mut state = GcraState::default();
            let mut now = T0;
            let mut forwarded: Vec<(u64, u64)> = Vec::new();
            for (gap, cost) in steps {
                now += gap;
                let cost = cost.min(burst);
                let d = step_delaying(&policy, &mut state, now, cost as i64, max_delay_ms)
                    .decision;
                if d.allowed {
                    forwarded.push((now + d.retry_after_ms, cost));
                }
            }
            for pair in forwarded.windows(2) {
                prop_assert!(pair[0].0 <= pair[1].0, "{forwarded:?}");
            }
            for i in 0..forwarded.len() {
                let mut sum = 0u128;
                for j in i..forwarded.len() {
                    sum += forwarded[j].1 as u128;
                    let span = (forwarded[j].0 - forwarded[i].0 + 1) as u128;
                    let allowed = (burst * window_ms) as u128 + limit as u128 * span;
                    prop_assert!(
                        sum * (window_ms as u128) < allowed,
                        "{sum} forwarded in {span} ms: {forwarded:?}"
                    );
                }
            }
        }
    }

    /// Charges of a delaying limit never forgive its queue: a refund moves `TAT` back by its own
    /// cost only, a redeploy with the same policy keeps the queue, and a larger tolerance lets
    /// the next request queue behind it.
    #[test]
    fn the_queue_survives_refunds_and_policy_changes() {
        let policy = gcra(10, 1000, 2);
        let queued = || {
            let mut state = GcraState::default();
            for _ in 0..7 {
                assert!(
                    step_delaying(&policy, &mut state, T0, 1, 500)
                        .decision
                        .allowed
                );
            }
            assert_eq!(state.tat_ms, T0 + 700);
            state
        };
        let mut refunded = queued();
        let d = step_delaying(&policy, &mut refunded, T0, -1, 500).decision;
        assert_eq!((refunded.tat_ms, d.reset_at_ms), (T0 + 600, T0 + 600));
        // The plain cap (t + τ) would have forgiven all but the tolerance.
        let mut forgiven = queued();
        step(&policy, &mut forgiven, T0, -1);
        assert_eq!(forgiven.tat_ms, T0 + 100);

        let mut same = queued();
        let d = step_delaying(&policy, &mut same, T0 + 10, 1, 500).decision;
        assert_eq!((d.reason, d.retry_after_ms), (Reason::OverLimit, 590));
        assert_eq!(same, queued());

        // Burst 3 (τ = 300 ms): the cap is t + 800, so one more request queues at 1700 + 100.
        let wider = gcra(10, 1000, 3);
        let mut state = queued();
        let d = step_delaying(&wider, &mut state, T0, 1, 500).decision;
        assert_eq!((d.reason, d.retry_after_ms), (Reason::Delayed, 500));
        assert_eq!(state.tat_ms, T0 + 800);
    }

    /// One ms either side of a fractional interval (`T = 1000/3` ms): the wait rounds up to the
    /// first whole millisecond, and the reservations keep their exact fractions.
    #[test]
    fn fractional_intervals_round_each_wait_up_and_keep_the_fraction() {
        let policy = gcra(3, 1000, 1);
        let mut state = GcraState::default();
        let waits: Vec<u64> = (0..4)
            .map(|_| {
                let d = step_delaying(&policy, &mut state, T0, 1, 1000).decision;
                assert!(d.allowed);
                d.retry_after_ms
            })
            .collect();
        assert_eq!(waits, vec![0, 334, 667, 1000]);
        assert_eq!((state.tat_ms, state.tat_rem), (T0 + 1333, 1));
        let d = step_delaying(&policy, &mut state, T0, 1, 1000).decision;
        assert_eq!((d.allowed, d.retry_after_ms), (false, 1334));
    }
}
