//! What a request settles once its response is known (docs/design.md §4): every concurrency
//! lease released, every limit whose cost the response states (`cost = { reserve = N, from = … }`)
//! charged its real cost in place of the estimate, and every limit that counts only some
//! statuses (`count_status`) refunded when the response's status is not one of them. Owned, so
//! it outlives the request: it goes with the request's work after the response
//! ([`crate::after_response`]), which a host runs once it has answered.

use edgelimit::{Algorithm, Check, CheckItem, Reservation, Verdict};

use crate::plan::Plan;
use crate::rules::{CostSource, StatusSet, STATUS_FIELD};

/// The checks that settle one request, ready to send: part of its work after the response
/// ([`crate::AfterResponse`], run by [`crate::Edge::run_after_response`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settlement {
    commits: Vec<Check>,
}

impl Settlement {
    /// The commits, each one check through the store (empty ones left out).
    pub fn commits(&self) -> &[Check] {
        &self.commits
    }

    /// The commits, owned.
    pub fn into_commits(self) -> Vec<Check> {
        self.commits
    }

    /// Whether there is nothing to settle.
    pub fn is_empty(&self) -> bool {
        self.commits.is_empty()
    }
}

impl Plan<'_> {
    /// Whether a limit of the rules this request matched settles after the response: its cost
    /// read from the response, or a concurrency lease to release.
    pub fn settles(&self) -> bool {
        self.rules.iter().flat_map(|r| &r.limits).any(|l| {
            l.settle.is_some()
                || l.count_status.is_some()
                || l.limit.policy.algorithm() == Algorithm::Concurrency
        })
    }

    /// What to settle after the response, given the verdicts for [`Plan::checks`] and the
    /// response's header fields by lower-case name, its status as the pseudo-field
    /// [`STATUS_FIELD`] (`None` for every field when the origin failed: the estimates stand,
    /// the leases are released all the same). `None` when no admitted check holds a lease or a
    /// cost to settle. The commits carry the request's own id ([`Plan::own_id`]), never one a
    /// client sent: a plan made without one (outside an [`crate::Edge`]) settles nothing.
    pub fn settlement(
        &self,
        verdicts: &[Verdict],
        header: impl Fn(&str) -> Option<String>,
    ) -> Option<Settlement> {
        let id = self.own_id?.identifier();
        let sources: Vec<(&str, Option<&CostSource>, Option<&StatusSet>)> = self
            .rules
            .iter()
            .flat_map(|r| &r.limits)
            .filter(|l| l.settle.is_some() || l.count_status.is_some())
            .map(|l| {
                (
                    &*l.limit.name,
                    l.settle.as_ref().map(|s| &s.from),
                    l.count_status.as_ref(),
                )
            })
            .collect();
        let commits: Vec<Check> = self
            .decided(verdicts)
            .filter_map(|d| Reservation::new(d.check, d.verdict, id.clone()))
            .filter(|r| {
                r.items().iter().any(|i| {
                    i.lease_ms.is_some()
                        || sources.iter().any(|(n, _, _)| *n == &*i.item.limit.name)
                })
            })
            .map(|r| {
                r.commit_with(|item: &CheckItem| {
                    let (_, from, statuses) = sources
                        .iter()
                        .find(|(name, _, _)| *name == &*item.limit.name)?;
                    if let Some(statuses) = statuses {
                        // No status (the origin failed): the estimate stands.
                        let status: u16 = header(STATUS_FIELD)?.trim().parse().ok()?;
                        if !statuses.contains(status) {
                            return Some(0);
                        }
                    }
                    from.and_then(|from| from.read(&header))
                })
            })
            .filter(|c| !c.items().is_empty())
            .collect();
        (!commits.is_empty()).then_some(Settlement { commits })
    }
}
