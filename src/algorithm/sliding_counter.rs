//! Sliding window counter: two fixed windows, the previous one weighted by how much of it still
//! overlaps the sliding window — the approximation Cloudflare and Upstash use.
//!
//! **Semantics** (docs/design.md §2). With `k = floor(t / W)`, `e = t − k·W`, and `p`, `q` the cost
//! admitted in windows `k−1` and `k`, a request of cost `c` is admitted iff
//! `p·(W − e) + (q + c)·W ≤ L·W` — integer arithmetic, no rounding anywhere.
//! `remaining = floor((L·W − p·(W − e) − q·W) / W)`. `reset_at` is when the weighted count reaches
//! zero: the end of window `k+1` if `q > 0`, else the end of window `k` if `p > 0`. A denied
//! request's retry time is solved exactly from the same inequality (still in window `k` as `p`'s
//! weight decays, or in window `k+1`).
//!
//! **Guarantee**: at most `L` admitted in any aligned window; the estimate assumes the previous
//! window's traffic was spread evenly over it. **Worst case**: when it was not, the estimate errs
//! both ways. Adversarially, `L` admitted in the last millisecond of window `k−1` still lets window
//! `k` climb to `⌊L·(W−2)/W⌋` by its second-to-last millisecond: `L + ⌊L·(W−2)/W⌋ ≈ 2·L` inside one
//! span of `W` ms. Conversely, traffic bunched at the start of a window makes it deny early. On
//! Cloudflare's real traffic 0.003% of requests were wrongly allowed; `sim` measures it on yours.
//!
//! **State**: the last time seen and two counters. A clock that steps back counts as no time
//! passed.

use super::outcome::{admitted, over_limit, too_costly, Cost, StepOutcome, MAX_TIME_MS};
use super::words::word_state;
use crate::policy::Policy;

word_state! {
    /// The two-window state of one (policy, identifier). `Default` is "no state yet".
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
    pub struct SlidingCounterState {
        /// The latest time (epoch ms) at which the state was written.
        pub seen_ms: u64,
        /// Cost admitted in the window before the one containing `seen_ms`.
        pub previous: u64,
        /// Cost admitted in the window containing `seen_ms`.
        pub current: u64,
    }
}

/// Applies one request of `cost` at `now_ms` to `state` in place (untouched unless `changed`).
pub fn step(
    policy: &Policy,
    state: &mut SlidingCounterState,
    now_ms: u64,
    cost: i64,
) -> StepOutcome {
    let (limit, w) = (policy.limit(), policy.window_ms());
    let t = now_ms.min(MAX_TIME_MS).max(state.seen_ms);
    let e = t % w;
    let start = t - e;
    let seen_start = state.seen_ms - state.seen_ms % w;
    let (p, q) = if seen_start == start {
        (state.previous, state.current)
    } else if seen_start.checked_add(w) == Some(start) {
        (state.current, 0)
    } else {
        (0, 0)
    };
    // Counts above the limit only arise when the limit was lowered under a live key; capping them
    // keeps every product within L·W and changes no decision (such a key is full either way).
    let (p, q) = (p.min(limit), q.min(limit));
    // Every product below is at most L·W ≤ 2^50 (Policy bounds it), so nothing overflows here
    // or loses precision in the Lua twin.
    let budget = limit * w;
    let used = p * (w - e) + q * w;
    let remaining = |used: u64| (budget - used.min(budget)) / w;
    let reset_at = |p: u64, q: u64| {
        if q > 0 {
            start.saturating_add(2 * w)
        } else if p > 0 {
            start.saturating_add(w)
        } else {
            t
        }
    };
    let mut write = None;
    let decision = match Cost::of(cost) {
        Cost::Take(c) if c > limit => too_costly(policy, remaining(used), reset_at(p, q)),
        Cost::Take(c) if used + c * w <= budget => {
            write = Some((p, q + c));
            admitted(policy, remaining(used + c * w), reset_at(p, q + c))
        }
        Cost::Take(c) => {
            let retry_at = retry_at(p, q, c, limit, w, e, start);
            over_limit(policy, remaining(used), reset_at(p, q), retry_at - t)
        }
        Cost::Peek => admitted(policy, remaining(used), reset_at(p, q)),
        Cost::Refund(r) | Cost::Release { count: r, .. } => {
            // Give back the current window's cost first, then the previous window's.
            let from_q = r.min(q);
            let from_p = (r - from_q).min(p);
            let (p2, q2) = (p - from_p, q - from_q);
            if from_p + from_q > 0 {
                write = Some((p2, q2));
            }
            admitted(policy, remaining(p2 * (w - e) + q2 * w), reset_at(p2, q2))
        }
    };
    let (p, q) = write.unwrap_or((p, q));
    if let Some((previous, current)) = write {
        *state = SlidingCounterState {
            seen_ms: t,
            previous,
            current,
        };
    }
    StepOutcome {
        decision,
        changed: write.is_some(),
        expire_at_ms: reset_at(p, q),
    }
}

/// The earliest time a denied request of cost `c` (≤ L) fits, given `p`, `q` at offset `e` of
/// the window starting at `start`.
fn retry_at(p: u64, q: u64, c: u64, limit: u64, w: u64, e: u64, start: u64) -> u64 {
    // Still in this window: p·(W − e') ≤ (L − q − c)·W, with p's weight shrinking as e' grows.
    if p > 0 && q + c <= limit {
        let slack = (limit - q - c) * w / p;
        if slack >= 1 {
            // e' = W − slack is the first offset where it fits (after e, since it is denied at
            // e), and it lies in this window.
            return start + (w - slack.min(w)).max(e + 1);
        }
    }
    // In the next window q becomes the previous count: q·(W − e') ≤ (L − c)·W.
    let next = start.saturating_add(w);
    if q == 0 {
        return next;
    }
    let slack = (limit - c) * w / q;
    next.saturating_add(w - slack.min(w))
}
