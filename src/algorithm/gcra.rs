//! GCRA, the generic cell rate algorithm: a leaky bucket kept as one theoretical arrival time.
//!
//! **Semantics** (DESIGN §2). Emission interval `T = W/L`; keep the theoretical arrival time `TAT`
//! (initially −∞). A request of cost `c` at `t` is admitted iff `max(TAT, t) + c·T − t ≤ B·T`;
//! then `TAT ← max(TAT, t) + c·T`. With `B = L` it admits `L` at once, then one every `T`.
//! `T` is rarely a whole number of ms, so `TAT` is held exactly as `tat_ms + tat_rem/L` with
//! `0 ≤ tat_rem < L`: all arithmetic stays in integers, bit for bit equal in the Lua twin.
//! `reset_at = ceil(TAT)`; a denied request's retry time is the exact first millisecond at which
//! `max(TAT, t') + c·T − t' ≤ B·T` holds.
//!
//! **Guarantee**: decides exactly as [`super::token_bucket`] with the same `L`, `W`, `B` — the
//! token deficit is `(TAT − t)·L` — proven by a property test on random sequences.
//! **Worst case**: `B + L` in any span of `W` ms (a burst of `B`, then one per `T`).
//!
//! Besides `TAT` the state keeps the last time seen, so a clock that steps back counts as no time
//! passed, exactly as in the token bucket.

use super::outcome::{Outcome, MAX_TIME_MS};
use super::token_bucket::decide;
use crate::policy::Policy;

/// The theoretical arrival time of one (policy, identifier). `Default` is "no state yet"
/// (a `TAT` in the past behaves as −∞).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct GcraState {
    /// Whole milliseconds of the theoretical arrival time (epoch ms).
    pub tat_ms: u64,
    /// The fraction of a millisecond, in units of `1/L` ms: `0 ≤ tat_rem < L`.
    pub tat_rem: u64,
    /// The latest time (epoch ms) at which the state was written.
    pub seen_ms: u64,
}

/// Applies one request of `cost` at `now_ms` to `state` in place (untouched unless `changed`).
pub fn step(policy: &Policy, state: &mut GcraState, now_ms: u64, cost: i64) -> Outcome {
    let limit = policy.limit();
    let t = now_ms.min(MAX_TIME_MS).max(state.seen_ms);
    // (TAT − t)·L, the bucket's deficit; zero once TAT has passed.
    let deficit = if state.tat_ms >= t {
        (state.tat_ms - t)
            .saturating_mul(limit)
            .saturating_add(state.tat_rem)
    } else {
        0
    };
    let (decision, after) = decide(policy, deficit, t, cost);
    let changed = after != deficit;
    if changed {
        *state = GcraState {
            tat_ms: t.saturating_add(after / limit),
            tat_rem: after % limit,
            seen_ms: t,
        };
    }
    Outcome {
        decision,
        changed,
        expire_at_ms: decision.reset_at_ms,
    }
}
