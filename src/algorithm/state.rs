//! The algorithm-independent form: one `State` enum and the functional `step` of docs/design.md §2.

use super::concurrency::{self, ConcurrencyState};
use super::fixed_window::{self, FixedWindowState};
use super::gcra::{self, GcraState};
use super::outcome::{Cost, StepOutcome};
use super::sliding_counter::{self, SlidingCounterState};
use super::sliding_log::{self, SlidingLogState};
use super::token_bucket::{self, TokenBucketState};
use crate::decision::Decision;
use crate::policy::{Algorithm, Policy};

/// The stored state of one (policy, identifier), whichever the algorithm. Serializable, for a
/// store that keeps its in-memory states elsewhere too (see [`crate::store::Saved`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// See [`fixed_window`].
    FixedWindow(FixedWindowState),
    /// See [`sliding_log`]. Boxed: the log is the one large state, and keeping it out of line
    /// halves the size of every other algorithm's state in a map of millions.
    SlidingLog(Box<SlidingLogState>),
    /// See [`sliding_counter`].
    SlidingCounter(SlidingCounterState),
    /// See [`token_bucket`].
    TokenBucket(TokenBucketState),
    /// See [`gcra`].
    Gcra(GcraState),
    /// See [`concurrency`]. Boxed for the same reason as the log.
    Concurrency(Box<ConcurrencyState>),
}

/// How an item's cost applies to its state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Charge {
    /// A request: a positive cost takes quota and is denied if it does not fit, zero looks, a
    /// negative cost refunds.
    #[default]
    Request,
    /// A cost settled after the response (the work is done): a positive cost is charged even if
    /// it does not fit — never denied — but only down to an empty quota (the excess beyond empty
    /// is forgiven, which keeps every state within its bounds and every Lua number exact); a
    /// negative cost refunds.
    Settle,
    /// The release of concurrency leases: frees up to `cost` leases ending at `lease_ms` if they
    /// are still live (a no-op otherwise, so releasing twice frees once). For a rate algorithm,
    /// which names no lease, it refunds `cost`.
    Release {
        /// The end of the leases, as the admitting decision's `reset_at_ms` gave it.
        lease_ms: u64,
    },
    /// A credit to the item's capacity lease (a global limit's units granted by its home,
    /// docs/design.md §9): `cost` units, live until `until_ms`, added to a live lease (keeping
    /// the later end) or replacing an ended one. Never denied; the state is untouched (to the
    /// state's step it is a look), and a rate algorithm only: a concurrency limit holds no
    /// capacity lease. See [`super::capacity_lease`].
    LeaseCredit {
        /// When the credited units end (epoch ms): over at this very millisecond.
        until_ms: u64,
    },
}

impl State {
    /// The state of a key that has none yet.
    pub fn fresh(algorithm: Algorithm) -> State {
        match algorithm {
            Algorithm::FixedWindow => State::FixedWindow(FixedWindowState::default()),
            Algorithm::SlidingLog => State::SlidingLog(Box::default()),
            Algorithm::SlidingCounter => State::SlidingCounter(SlidingCounterState::default()),
            Algorithm::TokenBucket => State::TokenBucket(TokenBucketState::default()),
            Algorithm::Gcra => State::Gcra(GcraState::default()),
            Algorithm::Concurrency => State::Concurrency(Box::default()),
        }
    }

    /// The algorithm this state belongs to.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            State::FixedWindow(_) => Algorithm::FixedWindow,
            State::SlidingLog(_) => Algorithm::SlidingLog,
            State::SlidingCounter(_) => Algorithm::SlidingCounter,
            State::TokenBucket(_) => Algorithm::TokenBucket,
            State::Gcra(_) => Algorithm::Gcra,
            State::Concurrency(_) => Algorithm::Concurrency,
        }
    }

    /// Applies one request in place. A state of another algorithm than the policy's (the policy
    /// was changed under a live key) is replaced by a fresh one first: the old counts mean nothing
    /// to the new algorithm.
    pub fn apply(&mut self, policy: &Policy, now_ms: u64, cost: i64) -> StepOutcome {
        self.apply_charge(policy, now_ms, cost, Charge::Request)
    }

    /// Applies one item of `cost` charged as `charge` in place (see [`Charge`]), its capacity
    /// lease aside (see [`super::capacity_lease::apply`]). A settlement's
    /// positive cost is the same as a request for what is left of the quota, at most the cost,
    /// and is a look when nothing is left: decided as such by every algorithm's own step, and
    /// so by its Lua twin.
    pub fn apply_charge(
        &mut self,
        policy: &Policy,
        now_ms: u64,
        cost: i64,
        charge: Charge,
    ) -> StepOutcome {
        self.apply_charge_delaying(policy, now_ms, cost, charge, 0)
    }

    /// [`State::apply_charge`] for a limit delaying requests up to `max_delay_ms`
    /// (docs/design.md §2, "Delays"): a GCRA state decides every charge with the longest wait
    /// (a request may queue, and no charge forgives a queue); the other algorithms never delay
    /// and ignore it.
    pub(crate) fn apply_charge_delaying(
        &mut self,
        policy: &Policy,
        now_ms: u64,
        cost: i64,
        charge: Charge,
        max_delay_ms: u64,
    ) -> StepOutcome {
        if self.algorithm() != policy.algorithm() {
            *self = State::fresh(policy.algorithm());
        }
        match charge {
            Charge::Request => self.step(policy, now_ms, max_delay_ms, Cost::of(cost)),
            Charge::Settle if cost > 0 => {
                let left = self
                    .step(policy, now_ms, max_delay_ms, Cost::Peek)
                    .decision
                    .remaining;
                match (cost as u64).min(left) {
                    0 => self.step(policy, now_ms, max_delay_ms, Cost::Peek),
                    take => self.step(policy, now_ms, max_delay_ms, Cost::Take(take)),
                }
            }
            Charge::Settle => self.step(policy, now_ms, max_delay_ms, Cost::of(cost)),
            Charge::Release { lease_ms } if cost > 0 => self.step(
                policy,
                now_ms,
                max_delay_ms,
                Cost::Release {
                    lease_ms,
                    count: cost as u64,
                },
            ),
            Charge::Release { .. } => self.step(policy, now_ms, max_delay_ms, Cost::Peek),
            // The credit is the lease's (`capacity_lease::apply`); the state only looks.
            Charge::LeaseCredit { .. } => self.step(policy, now_ms, max_delay_ms, Cost::Peek),
        }
    }

    fn step(&mut self, policy: &Policy, now_ms: u64, max_delay_ms: u64, cost: Cost) -> StepOutcome {
        if let State::Concurrency(s) = self {
            return concurrency::apply(policy, s, now_ms, cost);
        }
        let cost = match cost {
            Cost::Take(c) => c as i64,
            Cost::Peek => 0,
            Cost::Refund(r) | Cost::Release { count: r, .. } => -(r.min(i64::MAX as u64) as i64),
        };
        match self {
            State::FixedWindow(s) => fixed_window::step(policy, s, now_ms, cost),
            State::SlidingLog(s) => sliding_log::step(policy, s, now_ms, cost),
            State::SlidingCounter(s) => sliding_counter::step(policy, s, now_ms, cost),
            State::TokenBucket(s) => token_bucket::step(policy, s, now_ms, cost),
            State::Gcra(s) => gcra::step_delaying(policy, s, now_ms, cost, max_delay_ms),
            State::Concurrency(s) => concurrency::step(policy, s, now_ms, cost),
        }
    }
}

/// The result of [`step`]: the decision, the state afterwards, and when it stops mattering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The verdict.
    pub decision: Decision,
    /// The state to keep afterwards; `None` while the key has no state (nothing to write).
    pub state: Option<State>,
    /// Whether `state` differs from the state passed in (a store writes only then).
    pub changed: bool,
    /// When the state stops mattering (epoch ms); see [`StepOutcome::expire_at_ms`].
    pub expire_at_ms: u64,
}

/// The pure step of docs/design.md §2: `step(policy, state, now_ms, cost) -> (decision, state,
/// expire_at_ms)`. No clock, no I/O; `now_ms` is epoch milliseconds on whatever clock the caller
/// chose, and a negative `cost` refunds.
pub fn step(policy: &Policy, state: Option<State>, now_ms: u64, cost: i64) -> Step {
    let had_state = state.is_some();
    let mut state = state.unwrap_or_else(|| State::fresh(policy.algorithm()));
    let outcome = state.apply(policy, now_ms, cost);
    Step {
        decision: outcome.decision,
        state: (had_state || outcome.changed).then_some(state),
        changed: outcome.changed,
        expire_at_ms: outcome.expire_at_ms,
    }
}
