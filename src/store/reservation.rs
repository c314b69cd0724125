//! Costs settled after the response: a [`Reservation`] is what an admitted check took, and its
//! commit is the one check that settles it — the difference between the real and the reserved
//! cost of each item, and the release of each concurrency lease (docs/design.md §3).
//!
//! The commit goes through the store like any check (one script call, so many isolates may
//! commit at once), charged as [`Charge::Settle`] — an excess is never denied, since the work is
//! done — and carries the request id `<reservation id>/commit`, remembered for the limit's window:
//! a commit sent twice (a retry after a lost answer, a duplicated `waitUntil`) is charged once.
//!
//! A reservation that is never committed (the isolate died, the origin never answered, the store
//! was down) stays charged at its estimate, and its leases end at their timeout. That is the safe
//! side: the estimate was admitted against the quota, so the limit still holds — a client is at
//! worst throttled by its estimate, never let through for free — and nothing needs cleaning up.

use super::check::{Check, CheckItem, Identifier, Verdict};
use crate::algorithm::Charge;
use crate::policy::Algorithm;

/// What an admitted check took: per item its reserved cost, and for a concurrency limit the end
/// of the leases it holds (their name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    id: Identifier,
    items: Vec<Reserved>,
}

/// One item of a [`Reservation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserved {
    /// The item as reserved (limit, identifier, reserved cost).
    pub item: CheckItem,
    /// For a concurrency limit, the end of the leases taken (the admitting decision's
    /// `reset_at_ms`).
    pub lease_ms: Option<u64>,
    /// Whether the cost was taken from the item's capacity lease rather than its state
    /// ([`crate::Reason::Leased`], docs/design.md §9): what the commit gives back goes back to
    /// the lease.
    pub leased: bool,
}

impl Reservation {
    /// The reservation `check` made if `verdict` admitted it (`None` for a denial, which took
    /// nothing), named `id` (e.g. the request's `cf-ray`): its commit is remembered under
    /// `<id>/commit`.
    pub fn new(check: &Check, verdict: &Verdict, id: impl Into<Identifier>) -> Option<Reservation> {
        // Only what the store admitted was taken there (not a fail-open or fallback decision).
        let stored = verdict.decisions.iter().all(|d| {
            matches!(
                d.reason,
                crate::Reason::Admitted | crate::Reason::Leased | crate::Reason::Delayed
            )
        });
        if !verdict.allowed || !stored || verdict.decisions.len() != check.items().len() {
            return None;
        }
        let items = check
            .items()
            .iter()
            .zip(&verdict.decisions)
            .filter(|(item, _)| item.charge == Charge::Request && item.cost > 0)
            .map(|(item, decision)| Reserved {
                item: item.clone(),
                lease_ms: (item.limit.policy.algorithm() == Algorithm::Concurrency)
                    .then_some(decision.reset_at_ms),
                leased: decision.reason == crate::Reason::Leased,
            })
            .collect();
        Some(Reservation {
            id: id.into(),
            items,
        })
    }

    /// The reserved items.
    pub fn items(&self) -> &[Reserved] {
        &self.items
    }

    /// The check that settles the reservation: every concurrency lease released, and every other
    /// item for which `actual` knows the real cost settled by the difference (a refund when it
    /// was less than reserved, a charge when more); items `actual` says nothing about stay
    /// charged at their estimate. Empty when there is nothing to settle. An item its capacity
    /// lease paid for gets a smaller real cost back in its lease (a credit ending at 0: to a
    /// lease still live, never past its end), and a larger one charged to its state as any.
    pub fn commit_with(&self, actual: impl Fn(&CheckItem) -> Option<u64>) -> Check {
        let id = {
            let mut id = self.id.as_bytes().to_vec();
            id.extend_from_slice(b"/commit");
            Identifier::from(id)
        };
        let mut commit = Check::new();
        for reserved in &self.items {
            let item = &reserved.item;
            let settled = match reserved.lease_ms {
                Some(lease_ms) => {
                    CheckItem::new(item.limit.clone(), item.identifier.clone(), item.cost)
                        .charged(Charge::Release { lease_ms })
                }
                None => {
                    let Some(actual) = actual(item) else { continue };
                    let delta = i64::try_from(actual)
                        .unwrap_or(i64::MAX)
                        .saturating_sub(item.cost);
                    if delta == 0 {
                        continue;
                    }
                    let (cost, charge) = if reserved.leased && delta < 0 {
                        (-delta, Charge::LeaseCredit { until_ms: 0 })
                    } else {
                        (delta, Charge::Settle)
                    };
                    CheckItem::new(item.limit.clone(), item.identifier.clone(), cost)
                        .charged(charge)
                }
            };
            commit = commit.with_item(settled.with_request_id(id.clone()));
        }
        commit
    }

    /// [`Reservation::commit_with`] the same real cost for every item.
    pub fn commit(&self, actual: u64) -> Check {
        self.commit_with(|_| Some(actual))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Limit, MemoryStore};
    use crate::Policy;

    fn limit(name: &str, spec: &str) -> Limit {
        Limit::new(name, spec.parse::<Policy>().unwrap())
    }

    #[test]
    fn a_commit_settles_the_difference_once_and_releases_the_lease() {
        let tokens = limit("tokens", "fixed 10000/1m");
        let inflight = limit("inflight", "concurrency 1 timeout 30s");
        let store = MemoryStore::new();
        let check = Check::new()
            .with(&tokens, "k", 1000)
            .with(&inflight, "k", 1);
        let t = 1_700_000_000_000;
        let verdict = store
            .direct()
            .check(std::slice::from_ref(&check), t)
            .remove(0);
        let reservation = Reservation::new(&check, &verdict, "ray-1").unwrap();
        assert_eq!(reservation.items()[1].lease_ms, Some(t + 30_000));
        let commit =
            reservation.commit_with(|item| (&*item.limit.name == "tokens").then_some(4000));
        let settled = store
            .direct()
            .check(std::slice::from_ref(&commit), t + 5)
            .remove(0);
        // 4,000 used: 3,000 more than reserved, charged; the lease is free again.
        assert_eq!(settled.decisions[0].remaining, 6000);
        assert_eq!(settled.decisions[1].remaining, 1);
        // Sent twice, charged once: the repeat answers the first commit's decisions.
        assert_eq!(store.direct().check(&[commit], t + 9).remove(0), settled);
        let after = store
            .direct()
            .check(&[Check::single(&tokens, "k", 0)], t + 10)
            .remove(0);
        assert_eq!(after.decisions[0].remaining, 6000);
    }

    #[test]
    fn a_denial_reserves_nothing() {
        let l = limit("one", "fixed 1/1m");
        let store = MemoryStore::new();
        let check = Check::single(&l, "k", 1);
        store.direct().check(std::slice::from_ref(&check), 0);
        let denied = store
            .direct()
            .check(std::slice::from_ref(&check), 1)
            .remove(0);
        assert!(Reservation::new(&check, &denied, "r").is_none());
    }
}
