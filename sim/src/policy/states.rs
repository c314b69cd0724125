//! Stepping one client's state in one slot with its algorithm's own library `step` — the code
//! `State::apply` (and so `MemoryStore` and the Worker) runs, minus the enum dispatch — and what
//! a state takes in memory.

use std::mem::size_of;

use edgelimit::algorithm::{
    fixed_window, gcra, sliding_counter, sliding_log, token_bucket, FixedWindowState, GcraState,
    SlidingCounterState, SlidingLogState, StepOutcome, TokenBucketState, Words,
};
use edgelimit::{Decision, Policy};

use super::layout::Slot;

/// What replay reads of a decision. Copying the whole `Decision` a step returns (48 bytes,
/// written field by field) with wide loads defeats store-to-load forwarding and stalls every
/// step; scalar loads do not (hence `used` rather than `limit` beside `remaining`, which the
/// compiler would load together).
#[derive(Debug, Clone, Copy)]
pub(super) struct Verdict {
    pub(super) allowed: bool,
    pub(super) remaining: u64,
    /// `limit − remaining`: the quota the policy counts as used after the decision.
    pub(super) used: u64,
}

impl Verdict {
    #[inline]
    pub(super) fn of(decision: &Decision) -> Verdict {
        Verdict {
            allowed: decision.allowed,
            remaining: decision.remaining,
            used: decision.limit.saturating_sub(decision.remaining),
        }
    }
}

/// A sliding log, on a cache line of its own.
#[derive(Debug, Clone, Default)]
#[repr(align(64))]
pub(super) struct LogCell(pub(super) SlidingLogState);

/// Steps the state in `slot` of a client whose record is `words` and sliding logs `logs`.
#[inline]
pub(super) fn step(
    slot: Slot,
    policy: &Policy,
    words: &mut [u64],
    logs: &mut [LogCell],
    now_ms: u64,
    cost: i64,
) -> Verdict {
    match slot {
        Slot::Fixed(o) => step_words(fixed_window::step, policy, &mut words[o..], now_ms, cost),
        Slot::Counter(o) => {
            step_words(sliding_counter::step, policy, &mut words[o..], now_ms, cost)
        }
        Slot::Bucket(o) => step_words(token_bucket::step, policy, &mut words[o..], now_ms, cost),
        Slot::Gcra(o) => step_words(gcra::step, policy, &mut words[o..], now_ms, cost),
        Slot::Log(l) => {
            Verdict::of(&sliding_log::step(policy, &mut logs[l].0, now_ms, cost).decision)
        }
    }
}

/// Steps a fixed-size state kept in its word form.
#[inline(always)]
fn step_words<S: Words>(
    step: fn(&Policy, &mut S, u64, i64) -> StepOutcome,
    policy: &Policy,
    words: &mut [u64],
    now_ms: u64,
    cost: i64,
) -> Verdict {
    let mut state = S::from_words(words);
    let outcome = step(policy, &mut state, now_ms, cost);
    if outcome.changed {
        state.to_words(words);
    }
    Verdict::of(&outcome.decision)
}

/// Whether the state in `slot` is still "no state yet", and the bytes it takes in process (the
/// algorithm's own struct, not the `State` enum around it; a sliding log's entries included).
pub(super) fn footprint(slot: Slot, words: &[u64], logs: &[LogCell]) -> (bool, usize) {
    match slot {
        Slot::Fixed(o) => words_footprint::<FixedWindowState>(&words[o..]),
        Slot::Counter(o) => words_footprint::<SlidingCounterState>(&words[o..]),
        Slot::Bucket(o) => words_footprint::<TokenBucketState>(&words[o..]),
        Slot::Gcra(o) => words_footprint::<GcraState>(&words[o..]),
        Slot::Log(l) => {
            let log = &logs[l].0;
            (
                *log == SlidingLogState::default(),
                log_bytes(log.entries().len()),
            )
        }
    }
}

fn words_footprint<S: Words>(words: &[u64]) -> (bool, usize) {
    (S::from_words(words) == S::default(), size_of::<S>())
}

/// The most bytes one key's state in `slot` took, given the longest its log grew.
pub(super) fn largest(slot: Slot, max_log_entries: usize) -> usize {
    match slot {
        Slot::Log(_) => log_bytes(max_log_entries),
        Slot::Fixed(_) => size_of::<FixedWindowState>(),
        Slot::Counter(_) => size_of::<SlidingCounterState>(),
        Slot::Bucket(_) => size_of::<TokenBucketState>(),
        Slot::Gcra(_) => size_of::<GcraState>(),
    }
}

/// The bytes one sliding log's state takes in memory with `entries` entries.
fn log_bytes(entries: usize) -> usize {
    size_of::<SlidingLogState>() + entries * size_of::<(u64, u64)>()
}
