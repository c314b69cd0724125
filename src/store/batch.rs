//! The all-or-nothing rule for one check over in-memory states, shared by every store that runs
//! the Rust steps (and mirrored by the multi-limit Lua script).

use super::check::{Check, Verdict};
use crate::algorithm::{Outcome, State};

/// Decides `check` at `now_ms` over `states` (one per item, in order), all or nothing: the
/// states change only if every item admits. Returns the verdict and each item's outcome.
///
/// When the check is denied, items that would have admitted alone report a zero-cost look at
/// their unchanged state, since nothing was taken.
pub fn decide(check: &Check, states: &mut [State], now_ms: u64) -> (Verdict, Vec<Outcome>) {
    let items = check.items();
    debug_assert_eq!(items.len(), states.len());
    let single = items.len() == 1;
    let mut scratch: Vec<State> = Vec::new();
    let mut outcomes = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        // A single item needs no rollback: a denial never changes its state.
        let state = if single {
            &mut states[i]
        } else {
            scratch.push(states[i].clone());
            scratch.last_mut().expect("just pushed")
        };
        outcomes.push(state.apply_charge(&item.limit.policy, now_ms, item.cost, item.charge));
    }
    let allowed = outcomes.iter().all(|o| o.decision.allowed);
    if !single {
        if allowed {
            for (state, new) in states.iter_mut().zip(scratch) {
                *state = new;
            }
        } else {
            for ((item, state), outcome) in items.iter().zip(states.iter_mut()).zip(&mut outcomes) {
                if outcome.decision.allowed {
                    *outcome = state.clone().apply(&item.limit.policy, now_ms, 0);
                }
            }
        }
    }
    let verdict = Verdict {
        allowed,
        decisions: outcomes.iter().map(|o| o.decision).collect(),
        atomic: true,
        decided_at_ms: now_ms,
    };
    (verdict, outcomes)
}
