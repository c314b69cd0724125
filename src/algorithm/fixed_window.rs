//! Fixed window: one counter per window, windows aligned to the epoch.
//!
//! **Semantics** (docs/design.md §2). With limit `L`, window `W` ms and a request of cost `c` at `t`:
//! the window is `k = floor(t / W)`; the request is admitted iff the cost already admitted in
//! window `k` plus `c` is at most `L`. `reset_at = (k+1)·W`; a denied request's retry time is the
//! start of the next window.
//!
//! **Guarantee**: at most `L` admitted in any one aligned window.
//! **Worst case**: `2·L` admitted within `W` ms straddling a boundary — `L` in the last
//! millisecond of window `k` and `L` more in the first of window `k+1`, two milliseconds apart.
//! The simulator shows this on real traffic; prefer a sliding window or GCRA when it matters.
//!
//! **State**: the last time seen and the count of that time's window (two integers). A clock that
//! steps back before `seen_ms` counts as no time passed.

use super::outcome::{admitted, over_limit, too_costly, Cost, Outcome, MAX_TIME_MS};
use super::words::word_state;
use crate::policy::Policy;

word_state! {
    /// The fixed window state of one (policy, identifier). `Default` is "no state yet".
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
    pub struct FixedWindowState {
        /// The latest time (epoch ms) at which the state was written.
        pub seen_ms: u64,
        /// Cost admitted in the window that contains `seen_ms`.
        pub count: u64,
    }
}

/// Applies one request of `cost` at `now_ms` to `state` in place (untouched unless `changed`).
pub fn step(policy: &Policy, state: &mut FixedWindowState, now_ms: u64, cost: i64) -> Outcome {
    let (limit, window) = (policy.limit(), policy.window_ms());
    let t = now_ms.min(MAX_TIME_MS).max(state.seen_ms);
    let start = t - t % window;
    let end = start.saturating_add(window);
    let used = if state.seen_ms >= start {
        state.count
    } else {
        0
    };
    let (decision, new_count) = match Cost::of(cost) {
        Cost::Take(c) if c > limit => (too_costly(policy, limit.saturating_sub(used), end), None),
        Cost::Take(c) if used + c <= limit => {
            (admitted(policy, limit - used - c, end), Some(used + c))
        }
        Cost::Take(_) => (
            over_limit(policy, limit.saturating_sub(used), end, end - t),
            None,
        ),
        Cost::Peek => (admitted(policy, limit.saturating_sub(used), end), None),
        Cost::Refund(r) | Cost::Release { count: r, .. } => {
            let left = used - used.min(r);
            (
                admitted(policy, limit.saturating_sub(left), end),
                (left != used).then_some(left),
            )
        }
    };
    if let Some(count) = new_count {
        *state = FixedWindowState { seen_ms: t, count };
    }
    Outcome {
        decision,
        changed: new_count.is_some(),
        expire_at_ms: end,
    }
}
