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
//! Besides `TAT` the state keeps the last time seen, so a clock that steps back counts as no time
//! passed, exactly as in the token bucket.
//!
//! **Policy changes** (docs/design.md §2): `TAT` is a time, so the debt `TAT − t` carries over as
//! a time, capped at the new tolerance `B'·T'` (`max(TAT, t)` is read as at most `t + B'·T'`,
//! which never binds under an unchanged policy). The sub-millisecond remainder, in units of
//! `1/L`, is read in the new limit's units, capped below `L'`: less than a millisecond either way.

use super::outcome::{admitted, over_limit, too_costly, Cost, Outcome, MAX_TIME_MS};
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
pub fn step(policy: &Policy, state: &mut GcraState, now_ms: u64, cost: i64) -> Outcome {
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
    // A debt beyond the tolerance (the policy changed to a smaller one under a live key) is a
    // full debt: it never outlasts the new policy's own worst case.
    let base = base.min(add(now, tolerance, limit));
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
            let limit_at = add(now, tolerance, limit);
            if next <= limit_at {
                write = Some(next);
                admitted(policy, remaining(next), reset_at(next))
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
    Outcome {
        decision,
        changed: write.is_some(),
        expire_at_ms: decision.reset_at_ms,
    }
}
