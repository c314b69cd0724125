//! Concurrency: at most `N` requests in flight, each holding a lease with its own end.
//!
//! **Semantics** (docs/design.md §2). Policy `concurrency N timeout D` (`limit = N`, `window_ms =
//! D`). A request of cost `c` at `t` takes `c` leases ending at `t + D`; it is admitted iff the
//! leases live at `t` plus `c` are at most `N`. A lease is live from its admission until its
//! release or its end, whichever comes first: a lease ending at `e` is over at `e` itself, so a
//! request arriving at the very millisecond a lease ends finds it released. `reset_at` of an
//! admitted acquisition is the end of the lease just taken — its name, which the release quotes;
//! otherwise the end of the last live lease (`t` if none). A denied request's retry time is the
//! end of the lease whose expiry first leaves room, exact absent releases.
//!
//! A release names a lease by its end (`lease_ms`): it frees up to `c` leases ending then if they
//! are still live, and is a no-op otherwise (a double release, or a release after the lease
//! ended, changes nothing). Leases ending at the same millisecond are interchangeable. A refund
//! (negative cost) frees the newest leases first.
//!
//! **Guarantee**: never more than `N` live leases at any instant; an isolate that dies mid-request
//! holds its lease at most `D` ms. **State**: `(end, count)` pairs in increasing end, and the last
//! time written; ended leases are dropped only when the state is written (never on a denial or a
//! look), as in the sliding log, so dropping them can never change a later decision. A clock that
//! steps back counts as no time passed.

use std::collections::VecDeque;

use super::outcome::{admitted, over_limit, too_costly, Cost, StepOutcome, MAX_TIME_MS};
use crate::policy::Policy;

/// The leases of one (policy, identifier): count per end time, earliest end first.
/// `Default` is "no state yet".
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ConcurrencyState {
    leases: VecDeque<(u64, u64)>,
    total: u64,
    seen_ms: u64,
}

impl ConcurrencyState {
    /// Builds the leases last written at `seen_ms` from `(end_ms, count)` pairs, which must be in
    /// strictly increasing end with non-zero counts; `None` otherwise (a store read back something
    /// it did not write).
    pub fn from_leases(
        seen_ms: u64,
        leases: impl IntoIterator<Item = (u64, u64)>,
    ) -> Option<ConcurrencyState> {
        let mut state = ConcurrencyState {
            seen_ms,
            ..ConcurrencyState::default()
        };
        for (end, count) in leases {
            if count == 0 || state.leases.back().is_some_and(|&(last, _)| last >= end) {
                return None;
            }
            state.total = state.total.checked_add(count)?;
            state.leases.push_back((end, count));
        }
        Some(state)
    }

    /// The `(end_ms, count)` pairs, earliest end first (some may have ended).
    pub fn leases(&self) -> impl ExactSizeIterator<Item = (u64, u64)> + '_ {
        self.leases.iter().copied()
    }

    /// The last time (epoch ms) the state was written.
    pub fn seen_ms(&self) -> u64 {
        self.seen_ms
    }

    /// The number of leases live at `now_ms` (those ending after it).
    pub fn live_at(&self, now_ms: u64) -> u64 {
        self.leases
            .iter()
            .filter(|&&(end, _)| end > now_ms)
            .map(|&(_, n)| n)
            .sum()
    }

    /// How many leading pairs, and how many leases, ended at or before `t`.
    fn ended(&self, t: u64) -> (usize, u64) {
        let mut pairs = 0;
        let mut count = 0;
        for &(end, n) in &self.leases {
            if end > t {
                break;
            }
            pairs += 1;
            count += n;
        }
        (pairs, count)
    }

    /// The end of the last live lease, or `t` when none is live.
    fn last_end(&self, t: u64, live: u64) -> u64 {
        match self.leases.back() {
            Some(&(end, _)) if live > 0 => end,
            _ => t,
        }
    }

    /// Drops the ended pairs and records the write time (called only when writing).
    fn prune(&mut self, t: u64) {
        let (pairs, count) = self.ended(t);
        self.leases.drain(..pairs);
        self.total -= count;
        self.seen_ms = t;
    }

    /// Adds `count` leases ending at `end`, keeping the ends in order (a lowered timeout can make
    /// a new lease end before older ones).
    fn add(&mut self, end: u64, count: u64) {
        let at = self.leases.partition_point(|&(e, _)| e < end);
        match self.leases.get_mut(at) {
            Some((e, n)) if *e == end => *n += count,
            _ => self.leases.insert(at, (end, count)),
        }
        self.total += count;
    }
}

/// Applies one request of `cost` at `now_ms` to `state` in place (untouched unless `changed`).
pub fn step(policy: &Policy, state: &mut ConcurrencyState, now_ms: u64, cost: i64) -> StepOutcome {
    apply(policy, state, now_ms, Cost::of(cost))
}

/// Releases up to `count` leases ending at `lease_ms`, if they are still live at `now_ms`.
pub fn release(
    policy: &Policy,
    state: &mut ConcurrencyState,
    now_ms: u64,
    lease_ms: u64,
    count: u64,
) -> StepOutcome {
    apply(policy, state, now_ms, Cost::Release { lease_ms, count })
}

pub(crate) fn apply(
    policy: &Policy,
    state: &mut ConcurrencyState,
    now_ms: u64,
    cost: Cost,
) -> StepOutcome {
    let (limit, timeout) = (policy.limit(), policy.window_ms());
    let t = now_ms.min(MAX_TIME_MS).max(state.seen_ms);
    let (_, ended) = state.ended(t);
    let live = state.total - ended;
    let standing = state.last_end(t, live);
    let mut changed = false;
    let decision = match cost {
        Cost::Take(c) if c > limit => too_costly(policy, limit.saturating_sub(live), standing),
        Cost::Take(c) if live + c <= limit => {
            let end = t.saturating_add(timeout);
            state.prune(t);
            state.add(end, c);
            changed = true;
            admitted(policy, limit - live - c, end)
        }
        Cost::Take(c) => {
            // Room appears as the earliest live leases end.
            let mut left = live;
            let mut retry_at = t;
            for &(end, n) in state.leases.iter().filter(|&&(end, _)| end > t) {
                left -= n;
                if left + c <= limit {
                    retry_at = end;
                    break;
                }
            }
            over_limit(policy, limit.saturating_sub(live), standing, retry_at - t)
        }
        Cost::Peek => admitted(policy, limit.saturating_sub(live), standing),
        Cost::Refund(r) => {
            // The newest leases first, as the sliding log gives back its newest cost.
            let mut r = r.min(live);
            if r > 0 {
                changed = true;
                state.prune(t);
            }
            while let (true, Some((_, n))) = (r > 0, state.leases.back_mut()) {
                let take = r.min(*n);
                *n -= take;
                state.total -= take;
                r -= take;
                if *n == 0 {
                    state.leases.pop_back();
                }
            }
            let now_live = live_after(state, changed, live);
            admitted(
                policy,
                limit.saturating_sub(now_live),
                state.last_end(t, now_live),
            )
        }
        Cost::Release { lease_ms, count } => {
            let found = (lease_ms > t)
                .then(|| state.leases.iter().position(|&(end, _)| end == lease_ms))
                .flatten();
            if let (Some(_), true) = (found, count > 0) {
                changed = true;
                state.prune(t);
                let i = state
                    .leases
                    .iter()
                    .position(|&(end, _)| end == lease_ms)
                    .expect("a live lease survives pruning");
                let freed = count.min(state.leases[i].1);
                state.leases[i].1 -= freed;
                state.total -= freed;
                if state.leases[i].1 == 0 {
                    state.leases.remove(i);
                }
            }
            let now_live = live_after(state, changed, live);
            admitted(
                policy,
                limit.saturating_sub(now_live),
                state.last_end(t, now_live),
            )
        }
    };
    let expire_at_ms = if changed {
        state.last_end(t, state.total)
    } else {
        standing
    };
    StepOutcome {
        decision,
        changed,
        expire_at_ms,
    }
}

/// Live leases after a write (the state was pruned, so all its leases are live) or, unchanged,
/// as counted before.
fn live_after(state: &ConcurrencyState, changed: bool, live: u64) -> u64 {
    if changed {
        state.total
    } else {
        live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(spec: &str) -> Policy {
        spec.parse().unwrap()
    }

    #[test]
    fn the_third_request_waits_for_the_first_lease_to_end() {
        let p = policy("concurrency 2 timeout 10s");
        let mut s = ConcurrencyState::default();
        let a = step(&p, &mut s, 1_000, 1);
        assert!(a.decision.allowed);
        assert_eq!((a.decision.remaining, a.decision.reset_at_ms), (1, 11_000));
        assert!(step(&p, &mut s, 2_000, 1).decision.allowed);
        let denied = step(&p, &mut s, 3_000, 1);
        assert!(!denied.decision.allowed);
        assert_eq!(denied.decision.retry_after_ms, 8_000);
        assert!(!denied.changed);
        // At the very millisecond the first lease ends it is released.
        assert!(step(&p, &mut s, 11_000, 1).decision.allowed);
    }

    #[test]
    fn a_release_frees_its_lease_once() {
        let p = policy("concurrency 1 timeout 10s");
        let mut s = ConcurrencyState::default();
        let lease = step(&p, &mut s, 0, 1).decision.reset_at_ms;
        assert!(!step(&p, &mut s, 5, 1).decision.allowed);
        let released = release(&p, &mut s, 6, lease, 1);
        assert!(released.changed);
        assert_eq!(released.decision.remaining, 1);
        assert!(
            !release(&p, &mut s, 7, lease, 1).changed,
            "a second release is a no-op"
        );
        assert!(step(&p, &mut s, 8, 1).decision.allowed);
        // A release after the lease ended changes nothing.
        let mut late = ConcurrencyState::default();
        let lease = step(&p, &mut late, 0, 1).decision.reset_at_ms;
        assert!(!release(&p, &mut late, lease, lease, 1).changed);
    }

    #[test]
    fn a_lowered_timeout_keeps_the_ends_in_order() {
        let mut s = ConcurrencyState::default();
        step(&policy("concurrency 3 timeout 1m"), &mut s, 0, 1);
        step(&policy("concurrency 3 timeout 1s"), &mut s, 10, 1);
        let ends: Vec<_> = s.leases().collect();
        assert_eq!(ends, [(1_010, 1), (60_000, 1)]);
    }
}
