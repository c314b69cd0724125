//! Sliding window log: the exact limit, from a log of admitted costs.
//!
//! **Semantics** (DESIGN §2). A request of cost `c` at `t` is admitted iff the cost admitted at
//! times `s` with `t − W < s ≤ t`, plus `c`, is at most `L`. A request exactly `W` ms old no longer
//! counts. `reset_at` is when the newest logged request leaves the window; a denied request's
//! retry time is when enough of the oldest requests have left it.
//!
//! **Guarantee**: at most `L` admitted in *every* window of `W` ms, aligned or not — the worst
//! case equals the limit, exactly (proven by the property tests against a brute-force count).
//! **Cost**: memory O(L) per key (one entry per distinct admitted millisecond), which is why the
//! other algorithms exist.
//!
//! A clock that steps back before the newest entry counts as no time passed.

use std::collections::VecDeque;

use super::outcome::{admitted, over_limit, too_costly, Cost, Outcome};
use crate::policy::Policy;

/// The log of one (policy, identifier): admitted cost per millisecond, oldest first.
/// `Default` is "no state yet".
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SlidingLogState {
    entries: VecDeque<(u64, u64)>,
    total: u64,
}

impl SlidingLogState {
    /// Builds a log from `(time_ms, cost)` entries, which must be in strictly increasing time with
    /// non-zero costs; returns `None` otherwise (a store read back something it did not write).
    pub fn from_entries(entries: impl IntoIterator<Item = (u64, u64)>) -> Option<SlidingLogState> {
        let mut state = SlidingLogState::default();
        for (time, cost) in entries {
            if cost == 0 || state.entries.back().is_some_and(|&(last, _)| last >= time) {
                return None;
            }
            state.total = state.total.checked_add(cost)?;
            state.entries.push_back((time, cost));
        }
        Some(state)
    }

    /// The logged `(time_ms, cost)` entries, oldest first (some may be outside the window).
    pub fn entries(&self) -> impl ExactSizeIterator<Item = (u64, u64)> + '_ {
        self.entries.iter().copied()
    }

    /// The time of the newest entry, if any.
    pub fn newest_ms(&self) -> Option<u64> {
        self.entries.back().map(|&(t, _)| t)
    }

    fn forget_before(&mut self, cutoff_exclusive: u64) {
        while let Some(&(time, cost)) = self.entries.front() {
            if time > cutoff_exclusive {
                break;
            }
            self.total -= cost;
            self.entries.pop_front();
        }
    }

    fn reset_at(&self, t: u64, window: u64) -> u64 {
        self.newest_ms().map_or(t, |n| n.saturating_add(window))
    }
}

/// Applies one request of `cost` at `now_ms` to `state` in place. Entries that have left the
/// window are dropped on every call (invisible to decisions); otherwise the log is untouched
/// unless `changed`.
pub fn step(policy: &Policy, state: &mut SlidingLogState, now_ms: u64, cost: i64) -> Outcome {
    let (limit, window) = (policy.limit(), policy.window_ms());
    let t = state.newest_ms().map_or(now_ms, |n| now_ms.max(n));
    if let Some(cutoff) = t.checked_sub(window) {
        state.forget_before(cutoff);
    }
    let used = state.total;
    let mut changed = false;
    let decision = match Cost::of(cost) {
        Cost::Take(c) if c > limit => too_costly(
            policy,
            limit.saturating_sub(used),
            state.reset_at(t, window),
        ),
        Cost::Take(c) if used + c <= limit => {
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
            for &(time, logged) in &state.entries {
                left -= logged;
                if left + c <= limit {
                    retry_at = time.saturating_add(window);
                    break;
                }
            }
            over_limit(
                policy,
                limit.saturating_sub(used),
                state.reset_at(t, window),
                retry_at - t,
            )
        }
        Cost::Peek => admitted(
            policy,
            limit.saturating_sub(used),
            state.reset_at(t, window),
        ),
        Cost::Refund(r) => {
            // Give back the newest cost first: the most recent admissions are undone.
            let mut r = r.min(used);
            changed = r > 0;
            while r > 0 {
                let (_, logged) = state.entries.back_mut().expect("total > 0 has entries");
                let take = r.min(*logged);
                *logged -= take;
                state.total -= take;
                r -= take;
                if *logged == 0 {
                    state.entries.pop_back();
                }
            }
            admitted(
                policy,
                limit.saturating_sub(state.total),
                state.reset_at(t, window),
            )
        }
    };
    Outcome {
        decision,
        changed,
        expire_at_ms: state.reset_at(t, window),
    }
}
