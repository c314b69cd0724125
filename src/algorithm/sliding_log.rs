//! Sliding window log: the exact limit, from a log of admitted costs.
//!
//! **Semantics** (docs/design.md §2). A request of cost `c` at `t` is admitted iff the cost admitted at
//! times `s` with `t − W < s ≤ t`, plus `c`, is at most `L`. A request exactly `W` ms old no longer
//! counts. `reset_at` is when the newest logged request leaves the window; a denied request's
//! retry time is when enough of the oldest requests have left it.
//!
//! **Guarantee**: at most `L` admitted in *every* window of `W` ms, aligned or not — the worst
//! case equals the limit, exactly (proven by the property tests against a brute-force count).
//! **Cost**: memory O(L) per key (one entry per distinct admitted millisecond), which is why the
//! other algorithms exist.
//!
//! **State**: the entries, their total, and the last time the state was written. A clock that steps
//! back before that time counts as no time passed. Entries that left the window are dropped only
//! when the state is written (never on a denial or a look), so dropping them can never change a
//! later decision, and a store that writes nothing on a denial agrees with one that does.

use std::collections::VecDeque;

use super::outcome::{admitted, over_limit, too_costly, Cost, StepOutcome, MAX_TIME_MS};
use crate::policy::Policy;

/// The log of one (policy, identifier): admitted cost per millisecond, oldest first.
/// `Default` is "no state yet".
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct SlidingLogState {
    entries: VecDeque<(u64, u64)>,
    total: u64,
    seen_ms: u64,
}

impl SlidingLogState {
    /// Builds a log last written at `seen_ms` from `(time_ms, cost)` entries, which must be in
    /// strictly increasing time, not after `seen_ms`, with non-zero costs; returns `None`
    /// otherwise (a store read back something it did not write).
    pub fn from_entries(
        seen_ms: u64,
        entries: impl IntoIterator<Item = (u64, u64)>,
    ) -> Option<SlidingLogState> {
        let mut state = SlidingLogState {
            seen_ms,
            ..SlidingLogState::default()
        };
        for (time, cost) in entries {
            if time > seen_ms {
                return None;
            }
            if cost == 0 || state.entries.back().is_some_and(|&(last, _)| last >= time) {
                return None;
            }
            state.total = state.total.checked_add(cost)?;
            state.entries.push_back((time, cost));
        }
        Some(state)
    }

    /// The logged `(time_ms, cost)` entries, oldest first (some may be outside the window).
    /// Inline, as the accessors below: the simulator reads them around every step, from
    /// another crate.
    #[inline]
    pub fn entries(&self) -> impl ExactSizeIterator<Item = (u64, u64)> + '_ {
        self.entries.iter().copied()
    }

    /// The time of the newest entry, if any.
    #[inline]
    pub fn newest_ms(&self) -> Option<u64> {
        self.entries.back().map(|&(t, _)| t)
    }

    /// The last time (epoch ms) the state was written.
    #[inline]
    pub fn seen_ms(&self) -> u64 {
        self.seen_ms
    }

    /// How many leading entries, and how much cost, are at or before `cutoff` (out of the window).
    fn expired(&self, cutoff: Option<u64>) -> (usize, u64) {
        let Some(cutoff) = cutoff else { return (0, 0) };
        let mut count = 0;
        let mut cost = 0;
        for &(time, logged) in &self.entries {
            if time > cutoff {
                break;
            }
            count += 1;
            cost += logged;
        }
        (count, cost)
    }

    /// Drops the leading `count` entries (called only when writing).
    fn drop_front(&mut self, count: usize, cost: u64) {
        self.entries.drain(..count);
        self.total -= cost;
    }

    fn reset_at(&self, t: u64, window: u64, live: bool) -> u64 {
        match self.newest_ms() {
            Some(n) if live => n.saturating_add(window),
            _ => t,
        }
    }
}

/// Applies one request of `cost` at `now_ms` to `state` in place (untouched unless `changed`).
pub fn step(policy: &Policy, state: &mut SlidingLogState, now_ms: u64, cost: i64) -> StepOutcome {
    let (limit, window) = (policy.limit(), policy.window_ms());
    let t = now_ms.min(MAX_TIME_MS).max(state.seen_ms);
    let (expired, expired_cost) = state.expired(t.checked_sub(window));
    let used = state.total - expired_cost;
    let standing = |state: &SlidingLogState| state.reset_at(t, window, used > 0);
    let mut changed = false;
    let decision = match Cost::of(cost) {
        Cost::Take(c) if c > limit => {
            too_costly(policy, limit.saturating_sub(used), standing(state))
        }
        Cost::Take(c) if used + c <= limit => {
            state.drop_front(expired, expired_cost);
            state.seen_ms = t;
            match state.entries.back_mut() {
                Some((time, logged)) if *time == t => *logged += c,
                _ => state.entries.push_back((t, c)),
            }
            state.total += c;
            changed = true;
            admitted(
                policy,
                limit.saturating_sub(state.total),
                t.saturating_add(window),
            )
        }
        Cost::Take(c) => {
            // The request fits once enough of the oldest entries have left the window.
            let mut left = used;
            let mut retry_at = t;
            for &(time, logged) in state.entries.iter().skip(expired) {
                left -= logged;
                if left + c <= limit {
                    retry_at = time.saturating_add(window);
                    break;
                }
            }
            over_limit(
                policy,
                limit.saturating_sub(used),
                standing(state),
                retry_at - t,
            )
        }
        Cost::Peek => admitted(policy, limit.saturating_sub(used), standing(state)),
        Cost::Refund(r) | Cost::Release { count: r, .. } => {
            // Give back the newest cost first: the most recent admissions are undone. Only
            // cost still in the window can be given back.
            let given = r.min(used);
            if given > 0 {
                changed = true;
                state.drop_front(expired, expired_cost);
                state.seen_ms = t;
            }
            let mut r = given;
            while let (true, Some((_, logged))) = (r > 0, state.entries.back_mut()) {
                let take = r.min(*logged);
                *logged -= take;
                state.total -= take;
                r -= take;
                if *logged == 0 {
                    state.entries.pop_back();
                }
            }
            let left = used - given;
            admitted(
                policy,
                limit.saturating_sub(left),
                state.reset_at(t, window, left > 0),
            )
        }
    };
    let expire_at_ms = if changed {
        state.reset_at(t, window, state.total > 0)
    } else {
        standing(state)
    };
    StepOutcome {
        decision,
        changed,
        expire_at_ms,
    }
}
