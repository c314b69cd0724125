//! What the Worker answers one request, once the store has decided: the [`Outcome`] (the
//! ruling: status, the limit it is about, shadow reports, list refusals), made by
//! [`Plan::rule`]; and, only when someone sends it, the [`Response`] written from it — header
//! fields and, for an answer the Worker gives itself, its problem body. Pure.
//!
//! The binding limit and `Retry-After` are found once, by the library's [`Answer`], from the
//! same reports for the ruling and for the header fields.

use std::sync::Arc;

use edgelimit::control::list::Listed;
use edgelimit::http::{Answer, HeaderFields, LimitReport, Problem, PROBLEM_CONTENT_TYPE};
use edgelimit::{Check, Policy, Reason, Verdict};
use smallvec::SmallVec;

use crate::lists::{self, Denial, Via};
use crate::plan::Plan;
use crate::rules::Unenforced;

/// The header that reports shadow-mode decisions, when the configuration asks for it
/// (`shadow_header = true`, for debugging): `allow`, or `deny; policies="a, b"`.
pub const SHADOW_HEADER: &str = "X-EdgeLimit-Shadow";

/// The request header that tells the origin which `soft` limits the request exceeded: a
/// structured-field list of their names as strings (RFC 8941), e.g. `"per-key", "per-ip"`
/// ([`Outcome::exceeded_header`]).
pub const EXCEEDED_HEADER: &str = "EdgeLimit-Exceeded";

/// `Cache-Control` of the answers the Worker gives itself (denials, missing identifiers).
pub const NO_STORE: &str = "no-store";

/// The limit an answer is about (see [`Answer::binding`]), for logs and analytics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The limit's name.
    pub name: Arc<str>,
    /// Why it decided as it did.
    pub reason: Reason,
    /// Its remaining quota.
    pub remaining: u64,
}

/// What the Worker answers one request, decided before any header or body is written
/// ([`Plan::rule`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The status: 200 (forwarded), 400 (a missing identifier refused), 403 (a deny list
    /// refused), 429 or 503.
    pub status: u16,
    /// The enforced limit the answer is about, if any was decided.
    pub binding: Option<Binding>,
    /// Shadow limits that would have denied.
    pub shadow_denied: Vec<Arc<str>>,
    /// Whether all-or-nothing held for the enforced limits (false only across shards).
    pub atomic: bool,
    /// When the store decided (epoch ms, on the clock that decided), if it was asked.
    pub decided_at_ms: Option<u64>,
    /// The deny list that refused the request (status 403), if one did.
    pub denied: Option<Denial>,
    /// Deny lists of shadow rules that would have refused the request (reported only).
    pub shadow_listed: Vec<Denial>,
    /// `soft` limits that denied: the request is admitted all the same and the origin told
    /// ([`EXCEEDED_HEADER`]).
    pub soft_exceeded: Vec<Arc<str>>,
    /// Limits with staged enforcement (`enforce`) that denied an identifier they leave out:
    /// decided in shadow, reported only.
    pub staged_denied: Vec<Arc<str>>,
    /// How long (ms) the host waits before forwarding an admitted request: the longest wait
    /// of the enforced limits that admitted it after a wait ([`Reason::Delayed`],
    /// `exceed = "delay …"`). 0: forward at once.
    pub delay_ms: u64,
}

impl Outcome {
    /// Whether the request is admitted (forwarded to the origin).
    pub fn allowed(&self) -> bool {
        self.status == 200
    }

    /// The value of [`EXCEEDED_HEADER`] for the forwarded request: the `soft` limits that
    /// denied, as a structured-field list of strings; `None` when none did.
    pub fn exceeded_header(&self) -> Option<String> {
        if self.soft_exceeded.is_empty() || !self.allowed() {
            return None;
        }
        let mut value = String::new();
        for (i, name) in self.soft_exceeded.iter().enumerate() {
            if i > 0 {
                value.push_str(", ");
            }
            // Limit names are `A-Za-z0-9-_.`: nothing to escape in an sf-string.
            value.push('"');
            value.push_str(name);
            value.push('"');
        }
        Some(value)
    }
}

/// What to do with the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Admit it: forward to the origin (or the configured response).
    Forward,
    /// Answer it here.
    Respond {
        /// The status.
        status: u16,
        /// The body.
        body: String,
        /// Its `Content-Type`.
        content_type: &'static str,
    },
}

/// The response the Worker gives, as written from an [`Outcome`]: forward with these header
/// fields, or answer here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Forward or answer.
    pub action: Action,
    /// Header fields to add to the response either way, written into one buffer.
    pub headers: HeaderFields,
}

impl Response {
    /// The response status the Worker gives (200 stands for "forwarded").
    pub fn status(&self) -> u16 {
        match &self.action {
            Action::Forward => 200,
            Action::Respond { status, .. } => *status,
        }
    }

    /// A header field's value, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)
    }
}

/// What a response takes from the enforced limits' [`Answer`]: its header fields and, for a
/// denial, its problem body.
#[derive(Debug)]
pub(crate) struct Written {
    headers: HeaderFields,
    /// Boxed: written only for a denial, and moved along with the headers on every request.
    problem: Option<Box<Problem>>,
}

/// The enforced limits' reports, as the HTTP layer reads them: every limit the store decided
/// (a limit the denial cache never consulted decided nothing, an allow-listed one counted
/// nothing: neither is reported), each with the policy it decided with.
struct Reports<'p> {
    check: &'p Check,
    verdict: &'p Verdict,
    /// The policies advertised at another capacity than the configuration's (an override):
    /// rare, so usually empty and never allocated.
    rescaled: Vec<Policy>,
}

impl<'p> Reports<'p> {
    fn new(check: &'p Check, verdict: &'p Verdict) -> Reports<'p> {
        let mut reports = Reports {
            check,
            verdict,
            rescaled: Vec::new(),
        };
        reports.rescaled = reports
            .decided()
            .filter(|(item, decision)| item.limit.configured_policy(decision).is_none())
            .map(|(item, decision)| item.limit.advertised_policy(decision))
            .collect();
        reports
    }

    fn decided(&self) -> impl Iterator<Item = (&'p edgelimit::CheckItem, &'p edgelimit::Decision)> {
        self.check
            .items()
            .iter()
            .zip(&self.verdict.decisions)
            .filter(|(_, d)| !matches!(d.reason, Reason::Skipped | Reason::Allowlisted))
    }

    fn reports<'r>(&'r self, plan: &'r Plan<'_>) -> SmallVec<[LimitReport<'r>; 4]> {
        let mut rescaled = self.rescaled.iter();
        self.decided()
            .map(|(item, decision)| LimitReport {
                name: &item.limit.name,
                policy: item
                    .limit
                    .configured_policy(decision)
                    .or_else(|| rescaled.next())
                    .expect("one rescaled policy per decision without a configured one"),
                decision,
                unit: plan.unit_of(&item.limit.name),
            })
            .collect()
    }
}

impl<'c> Plan<'c> {
    /// What the Worker answers, given the verdicts for [`Plan::checks`] (in order), without
    /// writing a header or a body.
    pub fn rule(&self, verdicts: &[Verdict]) -> Outcome {
        let mut outcome = Outcome::default();
        self.rule_into(verdicts, &mut outcome, None);
        outcome
    }

    /// [`Plan::rule`], written over whatever `outcome` held, in its buffers: the pipeline keeps
    /// one from request to request. Given the request's `path`, it also writes, from the same
    /// [`Answer`], what the response takes from it ([`Plan::respond`] finishes the response);
    /// `None` when not asked, or when no limit decided the answer.
    pub(crate) fn rule_into(
        &self,
        verdicts: &[Verdict],
        outcome: &mut Outcome,
        path: Option<&str>,
    ) -> Option<Written> {
        // Every field reset, the vectors keeping their buffers: destructured, so that a field
        // added to `Outcome` cannot be left holding the last request's value.
        let Outcome {
            status,
            binding,
            shadow_denied,
            atomic,
            decided_at_ms,
            denied,
            shadow_listed,
            soft_exceeded,
            staged_denied,
            delay_ms,
        } = outcome;
        *status = 200;
        *binding = None;
        shadow_denied.clear();
        *atomic = true;
        *decided_at_ms = None;
        *denied = None;
        shadow_listed.clear();
        soft_exceeded.clear();
        staged_denied.clear();
        *delay_ms = 0;
        shadow_listed.extend(self.shadow_listed.iter().map(|(_, d)| d.clone()));
        if let Some(denial) = self.listed_denial(verdicts) {
            outcome.status = 403;
            outcome.decided_at_ms = self
                .enforced_decided(verdicts)
                .map(|(_, v)| v.decided_at_ms);
            outcome.denied = Some(denial);
            return None;
        }
        if self.refused.is_some() {
            outcome.status = 400;
            return None;
        }
        let mut written = None;
        if let Some((check, verdict)) = self.enforced_decided(verdicts) {
            outcome.atomic = verdict.atomic;
            outcome.decided_at_ms = Some(verdict.decided_at_ms);
            let reports = Reports::new(check, verdict);
            let reports = reports.reports(self);
            let answer = Answer::new(&reports).with_fields(self.headers);
            outcome.status = answer.status().unwrap_or(200);
            if outcome.status == 200 {
                outcome.delay_ms = verdict
                    .decisions
                    .iter()
                    .filter(|d| d.allowed && d.reason == Reason::Delayed)
                    .map(|d| d.retry_after_ms)
                    .max()
                    .unwrap_or(0);
            }
            outcome.binding = answer.binding().map(|b| Binding {
                name: check
                    .items()
                    .iter()
                    .find(|i| &*i.limit.name == b.name)
                    .map_or_else(|| Arc::from(b.name), |i| i.limit.name.clone()),
                reason: b.decision.reason,
                remaining: b.decision.remaining,
            });
            written = path.map(|path| Written {
                headers: answer.header_fields(verdict.decided_at_ms),
                problem: answer.problem(Some(path)).map(Box::new),
            });
        }
        outcome
            .shadow_denied
            .extend(self.shadow_refusals().map(|l| l.limit.name.clone()));
        for (rule, _) in &self.shadow_listed {
            outcome
                .shadow_denied
                .extend(rule.limits.iter().map(|l| l.limit.name.clone()));
        }
        if let Some((check, verdict)) = self.shadow_decided(verdicts) {
            outcome.decided_at_ms.get_or_insert(verdict.decided_at_ms);
            for (i, (item, decision)) in check.items().iter().zip(&verdict.decisions).enumerate() {
                if !decision.allowed {
                    let name = item.limit.name.clone();
                    match self.unenforced(i) {
                        None => outcome.shadow_denied.push(name),
                        // A list refused the shadow check: the limit itself decided nothing.
                        Some(_) if decision.reason == Reason::Denylisted => {}
                        Some(Unenforced::Soft) => outcome.soft_exceeded.push(name),
                        Some(Unenforced::Staged) => outcome.staged_denied.push(name),
                    }
                }
            }
            for listed in &verdict.listed {
                if let Listed::Denied { list, entry } = listed {
                    outcome.shadow_listed.push(Denial {
                        list: list.clone(),
                        entry: entry.clone(),
                        via: Via::Store,
                    });
                }
            }
        }
        written
    }

    /// The refusal by a deny list: before the store (a static entry, a remembered answer) or
    /// by its answer — the enforced check's deny match, or the configuration-wide list in the
    /// shadow check (a shadow rule's own list only reports).
    fn listed_denial(&self, verdicts: &[Verdict]) -> Option<Denial> {
        self.denied.clone().or_else(|| {
            let store_denial = |decided: Option<(&Check, &Verdict)>, global_only: bool| {
                let (_, verdict) = decided?;
                verdict.listed.iter().find_map(|listed| match listed {
                    Listed::Denied { list, entry } if !global_only || list == lists::DENY => {
                        Some(Denial {
                            list: list.clone(),
                            entry: entry.clone(),
                            via: Via::Store,
                        })
                    }
                    _ => None,
                })
            };
            store_denial(self.enforced_decided(verdicts), false)
                .or_else(|| store_denial(self.shadow_decided(verdicts), true))
        })
    }

    /// The response written from `outcome` (this plan's [`Plan::rule`] of `verdicts`) for a
    /// request to `path`: the enforced limits' `RateLimit` fields at the time the store decided,
    /// and for an answer the Worker gives itself its problem body; [`SHADOW_HEADER`] when the
    /// configuration asks for it (a debugging aid: it tells every client what shadow rules
    /// decided).
    pub fn response(&self, verdicts: &[Verdict], outcome: &Outcome, path: &str) -> Response {
        let written = match self.enforced_decided(verdicts) {
            Some((check, verdict)) if outcome.denied.is_none() && self.refused.is_none() => {
                let reports = Reports::new(check, verdict);
                let reports = reports.reports(self);
                let answer = Answer::new(&reports).with_fields(self.headers);
                Some(Written {
                    headers: answer.header_fields(verdict.decided_at_ms),
                    problem: answer.problem(Some(path)).map(Box::new),
                })
            }
            _ => None,
        };
        self.respond(verdicts, outcome, path, written)
    }

    /// [`Plan::response`], from what the ruling wrote of it (`Plan::rule_into` given the path).
    pub(crate) fn respond(
        &self,
        verdicts: &[Verdict],
        outcome: &Outcome,
        path: &str,
        written: Option<Written>,
    ) -> Response {
        let mut headers = HeaderFields::new();
        let problem = if let Some(denial) = &outcome.denied {
            Some(Problem::denied(&denial.list, path))
        } else if let Some(refused) = &self.refused {
            Some(refused.problem(path))
        } else if let Some(written) = written {
            headers = written.headers;
            written.problem.map(|problem| *problem)
        } else {
            None
        };
        let mut action = Action::Forward;
        if let Some(problem) = problem {
            // A denial is about this client at this moment: no cache may replay it.
            headers.push("Cache-Control", NO_STORE);
            action = Action::Respond {
                status: problem.status,
                body: problem.to_json(),
                content_type: PROBLEM_CONTENT_TYPE,
            };
        }
        let shadow_decided = self.refused.is_none()
            && outcome.denied.is_none()
            // A shadow check of `soft` and staged limits alone decided no shadow rule.
            && ((self.shadow_decided(verdicts).is_some()
                && self.shadow_kinds.iter().any(Option::is_none))
                || self.shadow_refusals().next().is_some()
                || !outcome.shadow_listed.is_empty());
        if self.shadow_header && shadow_decided {
            if outcome.shadow_denied.is_empty() {
                headers.push(SHADOW_HEADER, "allow");
            } else {
                let names: Vec<&str> = outcome.shadow_denied.iter().map(|n| &**n).collect();
                headers.push(
                    SHADOW_HEADER,
                    &format!("deny; policies=\"{}\"", names.join(", ")),
                );
            }
        }
        Response { action, headers }
    }
}
