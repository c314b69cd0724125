//! What a configuration's replay counts — per request, per rule and per limit of each rule — and
//! those counts as the report's rules, limits and totals.

use std::collections::BTreeMap;
use std::sync::Arc;

use edgelimit::{Identifier, Reason};
use edgelimit_engine::lists;
use edgelimit_engine::{Config, Exceed, Handled, Incoming, Missing, Rule, RuleLimit, Unenforced};

use super::decisions::{DecisionLog, RequestRow, MISSING_IDENTIFIER};
use super::extract::Replayed;
use super::identifiers::Identifiers;
use super::names::display_identifier;
use super::report::{ExceedingReport, LimitReport, TopIdentifier, WaitsReport};
use super::truth::Boundary;

/// Tallies of one limit of one rule.
#[derive(Debug, Default)]
pub(super) struct LimitTally {
    pub(super) checked: u64,
    pub(super) denied: u64,
    pub(super) over_limit: u64,
    pub(super) cached_denial: u64,
    pub(super) failed_closed: u64,
    pub(super) fallback_denied: u64,
    pub(super) refused: u64,
    pub(super) answered: u64,
    pub(super) missing: u64,
    pub(super) skipped: u64,
    pub(super) failed_open: u64,
    pub(super) fallback_admitted: u64,
    /// Requests admitted although this `soft` limit denied them.
    pub(super) soft_exceeded: u64,
    /// Denials of this staged limit for identifiers it leaves out (reported only).
    pub(super) staged_shadow_denied: u64,
    /// Denials of this staged limit for identifiers it enforces.
    pub(super) staged_enforced_denied: u64,
    /// Denials while the identifier was blocked after an earlier denial (`block_for`): what
    /// the block refused beyond the limit's own rule.
    pub(super) blocked: u64,
    /// Denials by dense identifier id (see `Identifiers`).
    pub(super) top: Vec<u64>,
}

/// Tallies of one rule.
#[derive(Debug, Default)]
pub(super) struct RuleTally {
    pub(super) matched: u64,
    pub(super) admitted: u64,
    pub(super) denied: u64,
    /// Matched requests a deny list refused (403; for a shadow rule, would have).
    pub(super) listed: u64,
    /// Matched requests an allow list exempted from the rule's limits.
    pub(super) allowlisted: u64,
    pub(super) limits: Vec<LimitTally>,
}

impl RuleTally {
    /// What `rule` did, as reported, with its limits' reports `limits` (in its limits' order).
    pub(super) fn report(
        &self,
        rule: &Rule,
        limits: Vec<super::report::LimitReport>,
    ) -> super::report::RuleReport {
        super::report::RuleReport {
            name: rule.name.clone(),
            shadow: rule.shadow,
            matched: self.matched,
            admitted: self.admitted,
            denied: self.denied,
            listed: self.listed,
            allowlisted: self.allowlisted,
            limits,
        }
    }
}

/// Request-level counts.
#[derive(Debug, Default)]
pub(super) struct Totals {
    pub(super) requests: u64,
    /// By status: 200, 400, 403, 429, 503, other.
    pub(super) statuses: [u64; 6],
    pub(super) unmatched: u64,
    pub(super) missing: u64,
    /// Requests refused as ambiguous: a field read twice, or a path or host that cannot be read.
    pub(super) ambiguous: u64,
    pub(super) shadow_would_deny: u64,
    pub(super) outage_requests: u64,
    pub(super) outage_failed_open: u64,
    pub(super) outage_fallback: u64,
    pub(super) settled: u64,
    pub(super) settle_failed: u64,
    /// Forwarded requests a `soft` limit denied.
    pub(super) soft_tagged: u64,
    /// Requests a staged limit denied in shadow.
    pub(super) staged_shadow_denied: u64,
    /// The wait (ms) of each request admitted after one.
    pub(super) waits_ms: Vec<u64>,
    /// Requests refused by a block (`block_for`): a limit denied them as `blocked`.
    pub(super) blocked: u64,
}

/// Where `status` is counted in `Totals::statuses`.
pub(super) fn status_slot(status: u16) -> usize {
    match status {
        200 => 0,
        400 => 1,
        403 => 2,
        429 => 3,
        503 => 4,
        _ => OTHER_STATUS,
    }
}

/// The statuses the Worker answers, in their slots; anything else is counted under 0.
const STATUSES: [u16; 5] = [200, 400, 403, 429, 503];

/// The slot of a status the Worker never answers (kept so one would show, not vanish).
const OTHER_STATUS: usize = STATUSES.len();

impl LimitTally {
    /// The identifiers this limit denied most (up to 10), most denied first, ties by
    /// identifier: named by `ids`, so that shares of a replay holding distinct identifiers can
    /// be merged (the whole's ten are among the shares' tens).
    pub(super) fn top_named(&self, ids: &Identifiers) -> Vec<(Identifier, u64)> {
        let mut top: Vec<(&Identifier, u64)> = (0u32..)
            .zip(&self.top)
            .filter(|(_, n)| **n > 0)
            .map(|(id, n)| (ids.name(id), *n))
            .collect();
        sort_top(&mut top);
        top.into_iter()
            .take(TOP)
            .map(|(id, n)| (id.clone(), n))
            .collect()
    }

    /// Adds another share's counts (not its identifiers: see [`LimitTally::top_named`]).
    pub(super) fn add_counts(&mut self, other: &LimitTally) {
        self.checked += other.checked;
        self.denied += other.denied;
        self.over_limit += other.over_limit;
        self.cached_denial += other.cached_denial;
        self.failed_closed += other.failed_closed;
        self.fallback_denied += other.fallback_denied;
        self.refused += other.refused;
        self.answered += other.answered;
        self.missing += other.missing;
        self.skipped += other.skipped;
        self.failed_open += other.failed_open;
        self.fallback_admitted += other.fallback_admitted;
        self.soft_exceeded += other.soft_exceeded;
        self.staged_shadow_denied += other.staged_shadow_denied;
        self.staged_enforced_denied += other.staged_enforced_denied;
        self.blocked += other.blocked;
    }

    /// The report of `applied` from this tally, its identifiers named by `ids` and its boundary
    /// metrics found in `boundaries` by the limit's name.
    pub(super) fn report(
        &self,
        applied: &RuleLimit,
        ids: &Identifiers,
        boundaries: &[(Arc<str>, Boundary)],
    ) -> LimitReport {
        self.report_with(applied, self.top_named(ids), boundaries)
    }

    /// The report of `applied` from these counts, `top` the identifiers it denied most (up to
    /// 10, most denied first) and its boundary metrics found in `boundaries` by the limit's
    /// name.
    pub(super) fn report_with(
        &self,
        applied: &RuleLimit,
        top: Vec<(Identifier, u64)>,
        boundaries: &[(Arc<str>, Boundary)],
    ) -> LimitReport {
        let boundary = boundaries
            .iter()
            .find(|(n, _)| *n == applied.limit.name)
            .map(|(_, boundary)| boundary.clone())
            .expect("a truth per limit name");
        LimitReport {
            name: applied.limit.name.to_string(),
            policy: applied.limit.policy.to_string(),
            identifier: source_text(applied),
            fail: applied.limit.fail_mode.to_string(),
            missing_setting: applied.missing.to_string(),
            checked: self.checked,
            denied: self.denied,
            denied_by: [
                ("over_limit", self.over_limit),
                ("cached_denial", self.cached_denial),
                ("failed_closed", self.failed_closed),
                ("fallback", self.fallback_denied),
                ("blocked", self.blocked),
                (MISSING_IDENTIFIER, self.refused),
            ]
            .into_iter()
            .collect(),
            answered: self.answered,
            missing: self.missing,
            skipped: self.skipped,
            failed_open: self.failed_open,
            fallback_admitted: self.fallback_admitted,
            soft_exceeded: self.soft_exceeded,
            staged_enforced: self.staged_enforced_denied,
            staged_shadow: self.staged_shadow_denied,
            top_identifiers: top
                .into_iter()
                .map(|(id, denied)| TopIdentifier {
                    identifier: display_identifier(&id),
                    denied,
                })
                .collect(),
            boundary,
        }
    }
}

/// How many of a limit's most denied identifiers are reported.
const TOP: usize = 10;

/// Most denied first, then by identifier.
fn sort_top<I: Ord>(top: &mut [(I, u64)]) {
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
}

/// The most denied identifiers (up to 10) of shares of a limit's tally holding distinct
/// identifiers, each share's as [`LimitTally::top_named`] gives them.
pub(super) fn merged_top(
    shares: impl IntoIterator<Item = Vec<(Identifier, u64)>>,
) -> Vec<(Identifier, u64)> {
    let mut top: Vec<(Identifier, u64)> = shares.into_iter().flatten().collect();
    sort_top(&mut top);
    top.truncate(TOP);
    top
}

impl RuleTally {
    /// Adds another share's counts, its limits' too (not their identifiers).
    pub(super) fn add_counts(&mut self, other: &RuleTally) {
        self.matched += other.matched;
        self.admitted += other.admitted;
        self.denied += other.denied;
        self.listed += other.listed;
        self.allowlisted += other.allowlisted;
        for (mine, theirs) in self.limits.iter_mut().zip(&other.limits) {
            mine.add_counts(theirs);
        }
    }
}

impl Totals {
    /// Adds another share's counts.
    pub(super) fn add(&mut self, other: Totals) {
        self.requests += other.requests;
        for (mine, theirs) in self.statuses.iter_mut().zip(other.statuses) {
            *mine += theirs;
        }
        self.unmatched += other.unmatched;
        self.missing += other.missing;
        self.ambiguous += other.ambiguous;
        self.shadow_would_deny += other.shadow_would_deny;
        self.outage_requests += other.outage_requests;
        self.outage_failed_open += other.outage_failed_open;
        self.outage_fallback += other.outage_fallback;
        self.settled += other.settled;
        self.settle_failed += other.settle_failed;
        self.soft_tagged += other.soft_tagged;
        self.staged_shadow_denied += other.staged_shadow_denied;
        self.waits_ms.extend(other.waits_ms);
        self.blocked += other.blocked;
    }

    /// The counts as reported.
    pub(super) fn report(&self) -> TotalsReport {
        let mut statuses: BTreeMap<u16, u64> = STATUSES
            .iter()
            .zip(&self.statuses)
            .filter(|(_, n)| **n > 0)
            .map(|(s, n)| (*s, *n))
            .collect();
        if self.statuses[OTHER_STATUS] > 0 {
            statuses.insert(0, self.statuses[OTHER_STATUS]);
        }
        TotalsReport {
            requests: self.requests,
            admitted: self.statuses[0],
            denied: self.requests - self.statuses[0],
            unmatched: self.unmatched,
            statuses,
            missing_identifiers: self.missing,
            ambiguous_requests: self.ambiguous,
            shadow_would_deny: self.shadow_would_deny,
            settled: self.settled,
            settle_failed: self.settle_failed,
            exceeding: (self.soft_tagged + self.staged_shadow_denied + self.blocked > 0
                || !self.waits_ms.is_empty())
            .then(|| ExceedingReport {
                soft_tagged: self.soft_tagged,
                staged_shadow_denied: self.staged_shadow_denied,
                blocked: self.blocked,
                delayed: self.waits_ms.len() as u64,
                waits_ms: WaitsReport::of(self.waits_ms.clone()),
            }),
        }
    }
}

/// Request-level counts of one replay.
#[derive(Debug, Clone, PartialEq)]
pub struct TotalsReport {
    /// Requests replayed.
    pub requests: u64,
    /// Forwarded.
    pub admitted: u64,
    /// Refused (429, 503, 400, 403).
    pub denied: u64,
    /// No enforced rule matched.
    pub unmatched: u64,
    /// By status.
    pub statuses: BTreeMap<u16, u64>,
    /// Requests lacking some identifier.
    pub missing_identifiers: u64,
    /// Requests refused as ambiguous (a field sent twice, a path or host that cannot be read).
    pub ambiguous_requests: u64,
    /// Requests a shadow limit would have denied.
    pub shadow_would_deny: u64,
    /// Settlements applied when requests landed (leases released, costs committed).
    pub settled: u64,
    /// Settlements that failed (the store down when the request landed).
    pub settle_failed: u64,
    /// What the limits' `exceed` and `enforce` settings did, when any did.
    pub exceeding: Option<ExceedingReport>,
}

/// A limit's identifier source as written in the configuration.
fn source_text(applied: &RuleLimit) -> String {
    applied.source.spec()
}

/// Tallies one matched rule; returns whether one of its limits refused (or would have). With
/// `rows`, writes each limit's decision there as it is counted.
pub(super) fn tally_rule(
    tally: &mut RuleTally,
    rule: &Rule,
    handled: &Handled<'_>,
    config: &Config,
    request: &Replayed<'_>,
    ids: &mut Identifiers,
    mut rows: Option<(&mut DecisionLog, RequestRow<'_>)>,
) -> bool {
    let (plan, ruling) = (handled.plan(), handled.outcome());
    tally.matched += 1;
    let check = handled
        .decided()
        .find(|d| d.shadow == rule.shadow)
        .map(|d| (d.check, d.verdict));
    // Refused by a deny list (403) before any limit counted: the configuration-wide list
    // refuses the whole request, a rule's own list only its rule (a shadow rule's: would have).
    let listed = if rule.shadow {
        ruling
            .denied
            .as_ref()
            .is_some_and(|d| d.list == lists::DENY)
            || ruling
                .shadow_listed
                .iter()
                .any(|d| d.list == rule.deny_list)
    } else {
        ruling.denied.is_some()
    };
    tally.listed += u64::from(listed);
    let mut allowlisted = plan.allowed.iter().any(|r| std::ptr::eq(*r, rule));
    let mut denied = listed;
    for (applied, t) in rule.limits.iter().zip(&mut tally.limits) {
        let absent = plan
            .absent
            .iter()
            .any(|a| std::ptr::eq(a.rule, rule) && std::ptr::eq(a.limit, applied));
        if absent {
            t.missing += 1;
            match applied.missing {
                Missing::Deny => {
                    if let Some((log, row)) = rows.as_mut() {
                        log.push(
                            *row,
                            &rule.name,
                            &applied.limit.name,
                            None,
                            MISSING_IDENTIFIER,
                        );
                    }
                    t.refused += 1;
                    t.denied += 1;
                    denied = true;
                    continue;
                }
                Missing::Allow => continue,
                Missing::Shared | Missing::Address => {}
            }
        }
        // A limit of an enforced rule decided in shadow (`soft`, or an identifier its staged
        // enforcement leaves out) is in the shadow check.
        let found = check
            .and_then(|(check, verdict)| {
                Some((
                    check,
                    verdict,
                    find_item(check, applied, absent, config, request, |_| true)?,
                ))
            })
            .or_else(|| {
                if rule.shadow || (applied.exceed != Exceed::Soft && applied.enforce.is_none()) {
                    return None;
                }
                let d = handled.decided().find(|d| d.shadow)?;
                let index = find_item(d.check, applied, absent, config, request, |i| {
                    plan.unenforced(i).is_some()
                })?;
                Some((d.check, d.verdict, index))
            });
        let Some((check, verdict, index)) = found else {
            continue;
        };
        let items = check.items();
        let unenforced = if check_is_shadow(handled, check) && !rule.shadow {
            plan.unenforced(index)
        } else {
            None
        };
        let Some(decision) = verdict.decisions.get(index) else {
            continue;
        };
        if let Some((log, row)) = rows.as_mut() {
            log.push(
                *row,
                &rule.name,
                &applied.limit.name,
                Some(&items[index].identifier),
                decision.reason.as_str(),
            );
        }
        match decision.reason {
            Reason::Skipped => {
                t.skipped += 1;
                continue;
            }
            // A list settled the request: the limit decided (and counted) nothing.
            Reason::Denylisted => continue,
            Reason::Allowlisted => {
                allowlisted = true;
                continue;
            }
            Reason::FailedOpen => t.failed_open += 1,
            Reason::Fallback if decision.allowed => t.fallback_admitted += 1,
            _ => {}
        }
        t.checked += 1;
        if decision.allowed {
            continue;
        }
        match unenforced {
            Some(Unenforced::Soft) => {
                t.soft_exceeded += 1;
                continue;
            }
            Some(Unenforced::Staged) => {
                t.staged_shadow_denied += 1;
                continue;
            }
            None => {}
        }
        if applied.enforce.is_some() && !rule.shadow {
            t.staged_enforced_denied += 1;
        }
        denied = true;
        t.denied += 1;
        match decision.reason {
            Reason::CachedDenial => t.cached_denial += 1,
            Reason::FailedClosed => t.failed_closed += 1,
            Reason::Fallback => t.fallback_denied += 1,
            Reason::Blocked => t.blocked += 1,
            _ => t.over_limit += 1,
        }
        let identifier = &items[index].identifier;
        let id = ids.id(identifier) as usize;
        if t.top.len() <= id {
            t.top.resize(id + 1, 0);
        }
        t.top[id] += 1;
        if !rule.shadow
            && ruling
                .binding
                .as_ref()
                .is_some_and(|b| b.name == applied.limit.name)
        {
            t.answered += 1;
        }
    }
    tally.allowlisted += u64::from(allowlisted && !listed);
    if rule.shadow {
        if denied {
            tally.denied += 1;
        } else {
            tally.admitted += 1;
        }
    } else if ruling.status == 200 {
        tally.admitted += 1;
    } else {
        tally.denied += 1;
    }
    denied
}

/// The index of `applied`'s item in `check` among those `eligible` (by index) admits: by name,
/// and by identifier when two rules apply one limit name to different identifiers.
fn find_item(
    check: &edgelimit::Check,
    applied: &edgelimit_engine::RuleLimit,
    absent: bool,
    config: &Config,
    request: &Replayed<'_>,
    eligible: impl Fn(usize) -> bool,
) -> Option<usize> {
    let items = check.items();
    let mut same_name = items
        .iter()
        .enumerate()
        .filter(|(i, item)| item.limit.name == applied.limit.name && eligible(*i));
    let (index, _) = same_name.next()?;
    if same_name.next().is_none() {
        return Some(index);
    }
    let id = if absent {
        Identifier::from("")
    } else {
        request
            .identifier(applied, &config.reading(request))
            .unwrap_or_else(|| Identifier::from(""))
    };
    items.iter().enumerate().position(|(i, item)| {
        item.limit.name == applied.limit.name && item.identifier == id && eligible(i)
    })
}

/// Whether `check` is the request's shadow check.
fn check_is_shadow(handled: &Handled<'_>, check: &edgelimit::Check) -> bool {
    handled
        .plan()
        .shadow()
        .is_some_and(|shadow| std::ptr::eq(shadow, check))
}
