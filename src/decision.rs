//! The answer to one limit check: everything the HTTP layer and the caller need, so nothing is
//! recomputed downstream.

use serde::{Deserialize, Serialize};

/// `retry_after_ms` of a request that can never be admitted: its cost exceeds the policy's
/// capacity, so waiting does not help.
pub const RETRY_NEVER: u64 = u64::MAX;

/// Why a decision came out as it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reason {
    /// Admitted within the limit (a refund or a zero-cost peek is admitted too).
    Admitted,
    /// Denied: admitting it would exceed the limit. `retry_after_ms` says when it would not.
    OverLimit,
    /// Denied for good: the cost exceeds what the policy can ever admit at once.
    CostExceedsCapacity,
    /// Denied by this process's cache of recent denials, without asking the store.
    CachedDenial,
    /// Admitted because the store failed and the limit fails open.
    FailedOpen,
    /// Denied because the store failed and the limit fails closed.
    FailedClosed,
    /// Decided by the in-process fallback limiter while the store is unreachable.
    Fallback,
    /// Admitted because the store refused the limiter — credentials, permissions, a script or
    /// an answer it cannot read (a misconfiguration, not an outage) — and the limit's
    /// `fail_misconfigured` is `open`.
    MisconfiguredOpen,
    /// Denied because the store refused the limiter (a misconfiguration, not an outage) and
    /// the limit's `fail_misconfigured` is `closed`, the default: "failed closed: store
    /// refused".
    MisconfiguredClosed,
    /// Decided by the in-process fallback limiter because the store refused the limiter (a
    /// misconfiguration) and the limit's `fail_misconfigured` is `fallback N%`.
    MisconfiguredFallback,
    /// Not decided: another limit of the same check was denied from the denial cache first, so
    /// this one was never consulted (and nothing was taken from it). Reported as admitted with
    /// its capacity, never counted, never advertised.
    Skipped,
    /// Denied because a deny list matched the request (docs/design.md §"Deny and allow lists"):
    /// nothing was charged on any limit of the check.
    Denylisted,
    /// Admitted because an allow list matched the request: not charged, not counted against
    /// the limit.
    Allowlisted,
    /// Admitted by a global limit's capacity lease once its own policy (the region's static
    /// share) denied (docs/design.md §9): the cost was taken from the lease, the share left as
    /// it was, and `remaining` is the lease's balance. Told apart from [`Reason::Admitted`] so
    /// that a store compensating a split check gives the cost back to the lease rather than to
    /// the share, a reservation's commit does the same, and a region can count what it spent
    /// of its leases (its refill's size) from its decisions alone.
    Leased,
    /// Denied because the limit blocked the identifier after an earlier denial (its
    /// `block_for`): nothing was charged, the block was not extended, and `retry_after_ms`
    /// counts to the block's end.
    Blocked,
    /// Admitted after a wait (the limit's `exceed = "delay …"`): the request's place was
    /// reserved `retry_after_ms` from the decision, and the host forwards it then.
    Delayed,
}

impl Reason {
    /// The name used in logs, problem bodies and metrics: `admitted`, `over_limit`, …
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::Admitted => "admitted",
            Reason::OverLimit => "over_limit",
            Reason::CostExceedsCapacity => "cost_exceeds_capacity",
            Reason::CachedDenial => "cached_denial",
            Reason::FailedOpen => "failed_open",
            Reason::FailedClosed => "failed_closed",
            Reason::Fallback => "fallback",
            Reason::MisconfiguredOpen => "misconfigured_open",
            Reason::MisconfiguredClosed => "misconfigured_closed",
            Reason::MisconfiguredFallback => "misconfigured_fallback",
            Reason::Skipped => "skipped",
            Reason::Denylisted => "denylisted",
            Reason::Allowlisted => "allowlisted",
            Reason::Leased => "leased",
            Reason::Blocked => "blocked",
            Reason::Delayed => "delayed",
        }
    }

    /// The name a client is told (a problem body's `reason`): what happened to its request, not
    /// how the limiter found out. A denial from the in-process cache or the fallback policy is
    /// `over_limit`, as the store's own would be, and an admission from a lease `admitted`; a
    /// store that refused the limiter is a failure like any other to a client (`failed_closed`,
    /// `failed_open`: whether the deployment's credentials work is not a client's to learn);
    /// logs and metrics keep [`Reason::as_str`].
    pub const fn public_name(self) -> &'static str {
        match self {
            Reason::CachedDenial | Reason::Fallback | Reason::MisconfiguredFallback => {
                Reason::OverLimit.as_str()
            }
            Reason::Leased => Reason::Admitted.as_str(),
            Reason::MisconfiguredClosed => Reason::FailedClosed.as_str(),
            Reason::MisconfiguredOpen => Reason::FailedOpen.as_str(),
            other => other.as_str(),
        }
    }
}

impl Reason {
    /// Whether the store failed and the limit's fail mode decided (`failed_open`,
    /// `failed_closed`, `fallback`, and the `misconfigured_*` three).
    pub const fn is_store_failure(self) -> bool {
        matches!(
            self,
            Reason::FailedOpen
                | Reason::FailedClosed
                | Reason::Fallback
                | Reason::MisconfiguredOpen
                | Reason::MisconfiguredClosed
                | Reason::MisconfiguredFallback
        )
    }

    /// Whether the store failed and the limit failed closed: an outage's
    /// [`Reason::FailedClosed`] or a refusal's [`Reason::MisconfiguredClosed`].
    pub const fn is_failed_closed(self) -> bool {
        matches!(self, Reason::FailedClosed | Reason::MisconfiguredClosed)
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One limit's verdict on one request.
///
/// Times are epoch milliseconds on the clock the check ran on (the caller's, or Redis's with
/// server time); `retry_after_ms` is a duration, like HTTP `Retry-After`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Decision {
    /// Whether the request is admitted.
    pub allowed: bool,
    /// The policy's capacity: the limit for the windows, the burst for the buckets.
    pub limit: u64,
    /// Cost that could still be admitted right now, after this decision.
    pub remaining: u64,
    /// When the quota is whole again if nothing more is admitted (epoch ms).
    pub reset_at_ms: u64,
    /// For a denial: how long until this same request would be admitted, absent other traffic —
    /// exact to the millisecond ([`RETRY_NEVER`] if never; for a limit that delays, admitted
    /// without a wait). Zero when admitted, except [`Reason::Delayed`]: the wait.
    pub retry_after_ms: u64,
    /// Why.
    pub reason: Reason,
}

impl Decision {
    /// Whether the request can never be admitted, whatever the wait.
    pub const fn is_permanent_denial(&self) -> bool {
        !self.allowed && self.retry_after_ms == RETRY_NEVER
    }

    /// The absolute time (epoch ms) at which this same request would be admitted, given the time
    /// the decision was made; `None` if never.
    pub const fn retry_at_ms(&self, decided_at_ms: u64) -> Option<u64> {
        if self.retry_after_ms == RETRY_NEVER {
            None
        } else {
            Some(decided_at_ms.saturating_add(self.retry_after_ms))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_names_are_the_serde_names() {
        for reason in [
            Reason::Admitted,
            Reason::OverLimit,
            Reason::CostExceedsCapacity,
            Reason::CachedDenial,
            Reason::FailedOpen,
            Reason::FailedClosed,
            Reason::Fallback,
            Reason::MisconfiguredOpen,
            Reason::MisconfiguredClosed,
            Reason::MisconfiguredFallback,
            Reason::Skipped,
            Reason::Denylisted,
            Reason::Allowlisted,
            Reason::Leased,
            Reason::Blocked,
            Reason::Delayed,
        ] {
            let json = serde_json::to_string(&reason).unwrap();
            assert_eq!(json, format!("\"{}\"", reason.as_str()));
        }
    }
}
