//! What one step returns besides the mutated state.

use crate::decision::{Decision, Reason, RETRY_NEVER};
use crate::policy::Policy;

/// The last instant the algorithms tell apart: later times read as this one (as "no time
/// passed"). It leaves 2^52 ms of headroom, more than any policy's reset or retry time can reach
/// (`burst × window ≤ 2^50`), so no step ever overflows or saturates a stored time.
pub const MAX_TIME_MS: u64 = u64::MAX - (1 << 52);

/// The result of applying one request to one state in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepOutcome {
    /// The verdict.
    pub decision: Decision,
    /// Whether the state changed in a way that must be persisted. Denials and zero-cost peeks
    /// never change it; a store writes only when this is true.
    pub changed: bool,
    /// When the state stops mattering (epoch ms): from then on it decides exactly as no state.
    /// Stores use it only to collect garbage (a Redis TTL somewhat longer than this).
    pub expire_at_ms: u64,
}

/// The cost of a request split into what the algorithms do with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cost {
    /// Take this much quota (> 0).
    Take(u64),
    /// Look without taking (cost 0).
    Peek,
    /// Give this much back (a negative cost), never more than was taken.
    Refund(u64),
    /// Free up to `count` concurrency leases ending at `lease_ms` (a refund of `count` for the
    /// rate algorithms, which name no lease).
    Release {
        /// The end of the leases to free: their name.
        lease_ms: u64,
        /// How many.
        count: u64,
    },
}

impl Cost {
    pub(crate) fn of(cost: i64) -> Cost {
        match cost {
            0 => Cost::Peek,
            c if c > 0 => Cost::Take(c as u64),
            c => Cost::Refund(c.unsigned_abs()),
        }
    }
}

pub(crate) fn admitted(policy: &Policy, remaining: u64, reset_at_ms: u64) -> Decision {
    Decision {
        allowed: true,
        limit: policy.capacity(),
        remaining,
        reset_at_ms,
        retry_after_ms: 0,
        reason: Reason::Admitted,
    }
}

/// Admitted after a wait of `retry_after_ms` (docs/design.md §2, "Delays").
pub(crate) fn delayed(
    policy: &Policy,
    remaining: u64,
    reset_at_ms: u64,
    retry_after_ms: u64,
) -> Decision {
    Decision {
        allowed: true,
        limit: policy.capacity(),
        remaining,
        reset_at_ms,
        retry_after_ms,
        reason: Reason::Delayed,
    }
}

pub(crate) fn over_limit(
    policy: &Policy,
    remaining: u64,
    reset_at_ms: u64,
    retry_after_ms: u64,
) -> Decision {
    Decision {
        allowed: false,
        limit: policy.capacity(),
        remaining,
        reset_at_ms,
        retry_after_ms,
        reason: Reason::OverLimit,
    }
}

pub(crate) fn too_costly(policy: &Policy, remaining: u64, reset_at_ms: u64) -> Decision {
    Decision {
        allowed: false,
        limit: policy.capacity(),
        remaining,
        reset_at_ms,
        retry_after_ms: RETRY_NEVER,
        reason: Reason::CostExceedsCapacity,
    }
}
