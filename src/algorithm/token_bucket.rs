//! Token bucket: capacity `B` (the burst), refilled continuously at `L` tokens per `W` ms.
//!
//! **Semantics** (docs/design.md §2). `tokens(t) = min(B, tokens + (t − last)·L/W)`; a request of cost
//! `c` is admitted iff `tokens(t) ≥ c`, and takes `c` tokens. To stay exact in integers the state
//! holds the *deficit* `(B − tokens)·W` — tokens missing, scaled by `W` — which refills by `L`
//! per millisecond: no fraction is ever rounded, so the Lua twin agrees bit for bit.
//! `remaining = floor(tokens)`; `reset_at` is when the bucket is full again; a denied request's
//! retry time is `ceil((c·W − tokens·W) / L)` ms away.
//!
//! **Guarantee**: decides exactly as [`super::gcra`] with the same `L`, `W`, `B` (a property test
//! runs both on the same random sequences). **Worst case**: `B + L` admitted in any span of `W`
//! ms (more precisely `B + ⌊L·(W−1)/W⌋` within `W` ms of integer time): a full bucket's burst,
//! then the refill.
//!
//! A clock that steps back counts as no time passed.
//!
//! **Policy changes** (docs/design.md §2): the state records the capacity `B·W` its deficit is
//! scaled to. Read under a policy of another capacity, the deficit is rescaled to the same share
//! of the new capacity, rounded up — `ceil(deficit · B'W' / BW)` — before it refills at the new
//! rate: an upgrade does not punish, a downgrade cannot over-admit. A state written before the
//! capacity was recorded (`capacity` 0) is read at the policy's own capacity.

use super::outcome::{admitted, over_limit, too_costly, Cost, StepOutcome, MAX_TIME_MS};
use super::words::word_state;
use crate::policy::Policy;

word_state! {
    /// The bucket of one (policy, identifier). `Default` (no deficit) is a full bucket: no state yet.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
    pub struct TokenBucketState {
        /// The latest time (epoch ms) at which the state was written.
        pub seen_ms: u64,
        /// Tokens missing at `seen_ms`, scaled by the window: `(B − tokens)·W`, in `0..=B·W`.
        pub deficit: u64,
        /// The capacity `B·W` the deficit was written under (0: not recorded, the policy's).
        pub capacity: u64,
    }
}

/// `deficit`, written at capacity `from`, as the same share of capacity `to`, rounded up (a
/// debt is never forgiven by rounding). `from` 0 means `to`.
pub(crate) fn rescale(deficit: u64, from: u64, to: u64) -> u64 {
    if from == 0 || from == to {
        return deficit;
    }
    let share = u128::from(deficit.min(from)) * u128::from(to);
    share.div_ceil(u128::from(from)) as u64
}

/// The deficit `elapsed` ms after it stood at `deficit`, refilling `limit` per ms.
pub(crate) fn refill(deficit: u64, elapsed: u64, limit: u64) -> u64 {
    // Refilled to full iff elapsed·L ≥ deficit, i.e. elapsed ≥ ceil(deficit / L). The product
    // saturates instead of overflowing (it only needs to reach the deficit, at most 2^50); the
    // Lua twin, whose doubles are exact only below 2^53, compares with the division instead.
    match elapsed.saturating_mul(limit) {
        refilled if refilled >= deficit => 0,
        refilled => deficit - refilled,
    }
}

/// The decision for a bucket with `deficit` at `t` (after refill), and the deficit afterwards.
/// Shared with [`super::gcra`], which keeps the same quantity as a theoretical arrival time.
pub(crate) fn decide(policy: &Policy, deficit: u64, t: u64, cost: i64) -> (super::Decision, u64) {
    let (limit, w, burst) = (policy.limit(), policy.window_ms(), policy.burst());
    let capacity = burst * w;
    // A stored deficit above capacity (the burst was lowered under a live key) is a full debt.
    let deficit = deficit.min(capacity);
    let remaining = |d: u64| (capacity - d) / w;
    let full_at = |d: u64| t.saturating_add(d.div_ceil(limit));
    match Cost::of(cost) {
        Cost::Take(c) if c > burst => (
            too_costly(policy, remaining(deficit), full_at(deficit)),
            deficit,
        ),
        Cost::Take(c) if deficit + c * w <= capacity => {
            let d = deficit + c * w;
            (admitted(policy, remaining(d), full_at(d)), d)
        }
        Cost::Take(c) => {
            let wait = (deficit + c * w - capacity).div_ceil(limit);
            (
                over_limit(policy, remaining(deficit), full_at(deficit), wait),
                deficit,
            )
        }
        Cost::Peek => (
            admitted(policy, remaining(deficit), full_at(deficit)),
            deficit,
        ),
        Cost::Refund(r) | Cost::Release { count: r, .. } => {
            let d = deficit - deficit.min(r.min(burst) * w);
            (admitted(policy, remaining(d), full_at(d)), d)
        }
    }
}

/// Applies one request of `cost` at `now_ms` to `state` in place (untouched unless `changed`).
pub fn step(policy: &Policy, state: &mut TokenBucketState, now_ms: u64, cost: i64) -> StepOutcome {
    let t = now_ms.min(MAX_TIME_MS).max(state.seen_ms);
    let capacity = policy.burst() * policy.window_ms();
    let stored = rescale(state.deficit, state.capacity, capacity);
    let deficit = refill(stored, t - state.seen_ms, policy.limit());
    let (decision, after) = decide(policy, deficit, t, cost);
    let changed = after != deficit;
    if changed {
        *state = TokenBucketState {
            seen_ms: t,
            deficit: after,
            capacity,
        };
    }
    StepOutcome {
        decision,
        changed,
        expire_at_ms: decision.reset_at_ms,
    }
}
