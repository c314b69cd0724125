//! Per request: which limits apply with which identifiers (the [`Plan`]), and what to answer once
//! the store has decided (the [`Outcome`]). Pure, so the whole request → limits → headers path is
//! tested natively and under wasm32 without a runtime, and `sim` replays configurations through it.
//!
//! The checks are built once, when planning; the store's verdicts come back in their order; the
//! binding limit and `Retry-After` are found once, by [`Answer`].

use std::sync::Arc;

use edgelimit::control::list::{Candidates, Gate, ListProbe, Listed};
use edgelimit::http::{Answer, LimitReport, Problem, PROBLEM_CONTENT_TYPE};
use edgelimit::metrics::MetricsSnapshot;
use edgelimit::store::key::encode_identifier;
use edgelimit::{Check, CheckItem, Checked, Identifier, Policy, Reason, Reservation, Verdict};
use serde::Serialize;
use smallvec::SmallVec;

use crate::config::Config;
use crate::identify::RequestView;
use crate::lists::{self, Denial, Via};
use crate::rules::{CostSource, Missing, Rule, RuleLimit};

/// The header that reports shadow-mode decisions: `allow`, or `deny; policies="a, b"`.
pub const SHADOW_HEADER: &str = "X-EdgeLimit-Shadow";

/// `Cache-Control` of the answers the Worker gives itself (denials, missing identifiers).
pub const NO_STORE: &str = "no-store";

/// The rules a request matched, in configuration order.
pub type MatchedRules<'c> = SmallVec<[&'c Rule; 4]>;

/// A limit of a matched rule whose identifier the request lacks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Absent<'c> {
    /// The rule.
    pub rule: &'c Rule,
    /// The limit, with its `missing` setting.
    pub limit: &'c RuleLimit,
}

/// What one request is checked against: built once by [`Config::plan`], borrowed from the
/// configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan<'c> {
    /// The rules that matched, in configuration order (held inline up to four: no allocation
    /// per request for them).
    pub rules: MatchedRules<'c>,
    /// Every limit of a matched rule whose identifier the request lacks, whatever its `missing`
    /// setting (`allow` skipped it, `shared` counted it in the shared bucket, `deny` refused).
    pub absent: Vec<Absent<'c>>,
    /// The request id (the configured header, `cf-ray` by default), if the request has one.
    pub request_id: Option<String>,
    /// The rules whose limits a static allow entry exempted (configuration-wide or their own).
    pub allowed: Vec<&'c Rule>,
    // At most two checks (enforced, shadow), held inline: the first `sent` are sent, the others
    // are spares whatever they hold, kept for the next plan (`Plan::into_checks`), which empties
    // them. No vector is allocated per request for them.
    checks: [Check; 2],
    sent: usize,
    enforced: Option<usize>,
    shadow: Option<usize>,
    refused: Option<Absent<'c>>,
    /// A refusal by a deny list found before the store: a static entry, or a remembered answer.
    denied: Option<Denial>,
    /// Shadow rules a static deny entry matched: reported, never enforced.
    shadow_listed: Vec<(&'c Rule, Denial)>,
    /// What the request offers the lists (empty when no list applies): its candidates, built
    /// once, are shared with the gated checks, whose stores read them again.
    probe: ListProbe,
    /// Whether a matched rule has a limit settled after the response (else no limit has a
    /// unit to look up).
    settles: bool,
    /// The deny lists whose match refuses this request: `deny` and each matched enforced rule's.
    deny_scope: Vec<&'c str>,
}

/// What to settle once the response is known: the reservations of the admitted checks, and where
/// each limit's real cost is read.
#[derive(Debug, Clone)]
pub struct Settlement<'c> {
    reservations: Vec<Reservation>,
    sources: Vec<(&'c str, &'c CostSource)>,
}

impl Settlement<'_> {
    /// The checks that settle the request, given the response's header fields by lower-case name:
    /// every concurrency lease released, every `cost = { from = … }` limit charged its real cost
    /// (the estimate stands when the response states none). Empty checks are left out.
    pub fn commits(&self, header: impl Fn(&str) -> Option<String>) -> Vec<Check> {
        self.reservations
            .iter()
            .map(|r| {
                r.commit_with(|item: &CheckItem| {
                    let (_, source) = self
                        .sources
                        .iter()
                        .find(|(name, _)| *name == &*item.limit.name)?;
                    source.read(&header)
                })
            })
            .filter(|c| !c.items().is_empty())
            .collect()
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

/// What the Worker answers one request, decided before any header or body is written:
/// [`Plan::rule`]. [`Plan::decide`] writes the [`Outcome`] from it.
///
/// Its `Default` is a ruling not made yet (status 0), to be filled by [`Plan::rule_into`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ruling {
    /// The status: 200 (forwarded), 400 (a missing identifier refused), 429 or 503.
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
}

/// The answer for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Forward or answer.
    pub action: Action,
    /// Header fields to add to the response either way.
    pub headers: Vec<(&'static str, String)>,
    /// Shadow limits that would have denied.
    pub shadow_denied: Vec<Arc<str>>,
    /// The enforced limit the answer is about, if any was decided.
    pub binding: Option<Binding>,
    /// Whether all-or-nothing held for the enforced limits (false only across shards).
    pub atomic: bool,
    /// When the store decided (epoch ms, on the clock that decided), if it was asked.
    pub decided_at_ms: Option<u64>,
    /// The deny list that refused the request (status 403), if one did.
    pub denied: Option<Denial>,
    /// Deny lists of shadow rules that would have refused the request (reported only).
    pub shadow_listed: Vec<Denial>,
}

impl Config {
    /// The limits that apply to `request`, with their identifiers, as the checks to send.
    pub fn plan(&self, request: &dyn RequestView) -> Plan<'_> {
        self.plan_with(request, &mut |applied| applied.source.extract(request))
    }

    /// [`Config::plan`], with each limit's identifier given by `identify` instead of its source:
    /// `sim` replays the Worker's own log lines, which carry each limit's identifier as keyed,
    /// not the headers it came from. `None` is a missing identifier, handled as configured.
    pub fn plan_with(
        &self,
        request: &dyn RequestView,
        identify: &mut dyn FnMut(&RuleLimit) -> Option<Identifier>,
    ) -> Plan<'_> {
        self.plan_matched(
            self.matching(request),
            request,
            identify,
            Default::default(),
        )
    }

    /// The rules `request` matches, in configuration order.
    pub fn matching(&self, request: &dyn RequestView) -> MatchedRules<'_> {
        self.rules.iter().filter(|r| r.matches(request)).collect()
    }

    /// [`Config::plan_with`] for `rules`, which must be [`Config::matching`]'s answer for
    /// `request`: `sim` matches each request ahead of its step, to extract only the identifiers
    /// its rules need, and the rules are not matched a second time. The plan's checks are built
    /// in `spare` (emptied first): the last plan's [`Plan::into_checks`], so a caller planning
    /// request after request allocates no check, or `Default::default()`.
    pub fn plan_matched<'c>(
        &'c self,
        rules: MatchedRules<'c>,
        request: &dyn RequestView,
        identify: &mut dyn FnMut(&RuleLimit) -> Option<Identifier>,
        mut spare: [Check; 2],
    ) -> Plan<'c> {
        spare.iter_mut().for_each(Check::clear);
        let request_id = request
            .header(&self.request_id_header)
            .filter(|id| !id.is_empty());
        let settles = rules
            .iter()
            .any(|r| r.limits.iter().any(|l| l.settle.is_some()));
        let mut plan = Plan {
            rules,
            absent: Vec::new(),
            request_id,
            allowed: Vec::new(),
            checks: spare,
            sent: 0,
            enforced: None,
            shadow: None,
            refused: None,
            denied: None,
            shadow_listed: Vec::new(),
            probe: ListProbe::default(),
            settles,
            deny_scope: Vec::new(),
        };
        // What the request offers the lists, only when a list can apply: the dynamic ones are
        // consulted along with a check, so only for requests some rule matches.
        let dynamic = self.dynamic_lists && !plan.rules.is_empty();
        let statics = !self.deny.is_empty()
            || !self.allow.is_empty()
            || plan
                .rules
                .iter()
                .any(|r| !r.deny.is_empty() || !r.allow.is_empty());
        if !(dynamic || statics) {
            // No list applies: the plan is the rules' limits alone.
            self.add_checks(&mut plan, identify, None, false);
            return plan;
        }
        let probe = lists::probe(&self.probe_sources, request);
        let candidates = probe.candidates();
        // Static entries, in the isolate: deny beats allow, and the configuration-wide deny
        // refuses whatever rules matched.
        if let Some(entry) = self.deny.matching(candidates) {
            plan.denied = Some(Denial {
                list: lists::DENY.to_string(),
                entry: entry.to_string(),
                via: Via::Static,
            });
            plan.probe = probe;
            return plan;
        }
        for &rule in &plan.rules {
            let Some(entry) = rule.deny.matching(candidates) else {
                continue;
            };
            let denial = Denial {
                list: rule.deny_list.clone(),
                entry: entry.to_string(),
                via: Via::Static,
            };
            if rule.shadow {
                plan.shadow_listed.push((rule, denial));
            } else {
                plan.denied = Some(denial);
                plan.probe = probe;
                return plan;
            }
        }
        let allowed_everywhere = self.allow.matching(candidates).is_some();
        let gated = dynamic && !candidates.is_empty();
        plan.probe = probe;
        self.add_checks(&mut plan, identify, Some(allowed_everywhere), gated);
        plan
    }

    /// Adds the matched rules' checks to `plan`: `allowed_everywhere` is whether the
    /// configuration-wide static allow list matched (`None`: no list applies, nothing is looked
    /// up), `gated` whether the dynamic lists are consulted along with the checks.
    fn add_checks<'c>(
        &'c self,
        plan: &mut Plan<'c>,
        identify: &mut dyn FnMut(&RuleLimit) -> Option<Identifier>,
        allowed_everywhere: Option<bool>,
        gated: bool,
    ) {
        if gated {
            plan.deny_scope.push(lists::DENY);
        }
        // Each check given room for its rules' limits: at most one allocation each, none when
        // the spare check already has it.
        let limits = |shadow: bool| -> usize {
            plan.rules
                .iter()
                .filter(|r| r.shadow == shadow)
                .map(|r| r.limits.len())
                .sum()
        };
        let [mut enforced, mut shadow] = std::mem::take(&mut plan.checks);
        enforced.reserve(limits(false));
        shadow.reserve(limits(true));
        // Per check: the gates of its rules, and whether one is there only to look up the deny
        // lists of a statically allowed rule (deny beats allow, even with nothing to charge).
        let mut gates: [(Vec<Gate>, bool); 2] = [(Vec::new(), false), (Vec::new(), false)];
        let mut request_key: Option<Identifier> = None;
        for &rule in &plan.rules {
            if plan
                .shadow_listed
                .iter()
                .any(|(r, _)| std::ptr::eq(*r, rule))
            {
                continue;
            }
            let slot = usize::from(rule.shadow);
            let exempt = allowed_everywhere.is_some_and(|everywhere| {
                everywhere || rule.allow.matching(plan.probe.candidates()).is_some()
            });
            let gate = gated.then(|| {
                let (gates, lookup_only) = &mut gates[slot];
                gates.push(rule.gate.clone());
                *lookup_only |= exempt;
                gates.len() - 1
            });
            if gate.is_some() && !rule.shadow {
                plan.deny_scope.push(&rule.deny_list);
            }
            if exempt {
                plan.allowed.push(rule);
                continue;
            }
            for applied in &rule.limits {
                let identifier = match identify(applied) {
                    Some(id) => id,
                    None => {
                        let absent = Absent {
                            rule,
                            limit: applied,
                        };
                        plan.absent.push(absent);
                        match applied.missing {
                            Missing::Allow => continue,
                            Missing::Shared => Identifier::from(""),
                            Missing::Deny => {
                                if !rule.shadow {
                                    plan.refused.get_or_insert(absent);
                                }
                                continue;
                            }
                        }
                    }
                };
                let check = if rule.shadow {
                    &mut shadow
                } else {
                    &mut enforced
                };
                let mut item = CheckItem::new(applied.limit.clone(), identifier, applied.cost);
                if let (true, Some(id)) = (applied.idempotent, &plan.request_id) {
                    // One identifier for the request id, shared by its items.
                    let id = request_key.get_or_insert_with(|| Identifier::from(id.as_str()));
                    item = item.with_request_id(id.clone());
                }
                item.gate = gate;
                check.add_item(item);
            }
        }
        let [(enforced_gates, enforced_lookup), (shadow_gates, shadow_lookup)] = gates;
        let (enforced, shadow) = if plan.refused.is_some() {
            (Some(enforced), Some(shadow))
        } else {
            (
                plan.send(enforced, enforced_gates, enforced_lookup, false),
                plan.send(shadow, shadow_gates, shadow_lookup, true),
            )
        };
        // What was not sent waits behind what was, a spare for the next plan.
        let mut slot = plan.sent;
        if let Some(check) = enforced {
            plan.checks[slot] = check;
            slot += 1;
        }
        if let Some(check) = shadow {
            plan.checks[slot] = check;
        }
    }
}

impl<'c> Plan<'c> {
    /// The checks to send in one batch: the enforced limits first, then the shadow ones (each
    /// only when present). None when the request is refused for a missing identifier or by a
    /// deny list before the store.
    pub fn checks(&self) -> &[Check] {
        &self.checks[..self.sent]
    }

    /// The refusal by a deny list found before the store (a static entry, or one
    /// [`Plan::deny_remembered`] set), if any: the request is answered 403 with no store call.
    pub fn denied(&self) -> Option<&Denial> {
        self.denied.as_ref()
    }

    /// Every list member an entry matching this request could have (empty when no list applies).
    pub fn candidates(&self) -> &Candidates {
        self.probe.candidates()
    }

    /// The dynamic deny lists whose match refuses this request: `deny` and `deny:<rule>` of each
    /// matched enforced rule (empty when the dynamic lists are not consulted).
    pub fn deny_scope(&self) -> &[&'c str] {
        &self.deny_scope
    }

    /// Refuses the request by a dynamic denial `cache` remembers at `now_ms`, when no static
    /// entry refused it already and a dynamic deny list applies to it ([`Plan::deny_scope`]): as
    /// the Worker's isolate answers before the store, and `sim` replays it.
    pub fn deny_if_remembered(&mut self, cache: &mut lists::DenyCache, now_ms: u64) {
        if self.denied.is_some() || self.deny_scope.is_empty() {
            return;
        }
        if let Some(denial) = cache.lookup(&self.deny_scope, self.probe.candidates(), now_ms) {
            self.deny_remembered(denial);
        }
    }

    /// Refuses the request by `denial` (a dynamic denial this isolate remembers, see
    /// [`crate::lists::DenyCache`]) without asking the store: no check is sent.
    pub fn deny_remembered(&mut self, denial: Denial) {
        self.denied = Some(denial);
        self.sent = 0;
        self.enforced = None;
        self.shadow = None;
    }

    /// Adds `check` to the checks sent, behind `gates` (its rules' gates, none unless the dynamic
    /// lists are consulted), unless it has neither an item nor a deny list to look up
    /// (`lookup_only`): then it is given back.
    fn send(
        &mut self,
        check: Check,
        gates: Vec<Gate>,
        lookup_only: bool,
        shadow: bool,
    ) -> Option<Check> {
        if check.items().is_empty() && !lookup_only {
            return Some(check);
        }
        let check = if !gates.is_empty() {
            check.gated(self.probe.clone(), gates)
        } else {
            check
        };
        let index = self.sent;
        self.checks[index] = check;
        self.sent += 1;
        if shadow {
            self.shadow = Some(index);
        } else {
            self.enforced = Some(index);
        }
        None
    }

    /// The plan's checks, sent or not (not emptied), for the next [`Config::plan_matched`] to
    /// empty and build its own in.
    pub fn into_checks(self) -> [Check; 2] {
        self.checks
    }

    /// The unit of a limit whose cost is settled after the response, for `qu`.
    fn unit_of(&self, name: &str) -> Option<&'c str> {
        if !self.settles {
            return None;
        }
        self.rules
            .iter()
            .flat_map(|r| &r.limits)
            .find(|l| &*l.limit.name == name)
            .and_then(|l| l.settle.as_ref())
            .map(|s| s.unit.as_str())
    }

    /// What to settle after the response, given the verdicts: `None` when no admitted check
    /// holds a lease or a cost to settle. `fallback_id` names the reservation when the request
    /// has no request id.
    pub fn settlement(&self, verdicts: &[Verdict], fallback_id: &str) -> Option<Settlement<'c>> {
        let id = self.request_id.as_deref().unwrap_or(fallback_id);
        let mut sources = Vec::new();
        for limit in self.rules.iter().flat_map(|r| &r.limits) {
            if let Some(settle) = &limit.settle {
                sources.push((&*limit.limit.name, &settle.from));
            }
        }
        let reservations: Vec<Reservation> = [self.enforced, self.shadow]
            .into_iter()
            .filter_map(|slot| self.decided(slot, verdicts))
            .filter_map(|(check, verdict)| Reservation::new(check, verdict, id))
            .filter(|r| {
                r.items().iter().any(|i| {
                    i.lease_ms.is_some() || sources.iter().any(|(n, _)| *n == &*i.item.limit.name)
                })
            })
            .collect();
        (!reservations.is_empty()).then_some(Settlement {
            reservations,
            sources,
        })
    }

    /// The enforced limits' check, if any applies.
    pub fn enforced(&self) -> Option<&Check> {
        self.enforced.map(|i| &self.checks[i])
    }

    /// The shadow limits' check, if any applies.
    pub fn shadow(&self) -> Option<&Check> {
        self.shadow.map(|i| &self.checks[i])
    }

    /// The enforced limit whose identifier is missing and whose setting says deny: the request
    /// is refused with 400 without asking the store.
    pub fn refused(&self) -> Option<Absent<'c>> {
        self.refused
    }

    /// Shadow limits whose identifier is missing and whose setting says deny (reported only).
    fn shadow_refusals(&self) -> impl Iterator<Item = &'c RuleLimit> + '_ {
        self.absent
            .iter()
            .filter(|a| a.rule.shadow && a.limit.missing == Missing::Deny)
            .map(|a| a.limit)
    }

    /// The check at `slot` with its verdict, when both exist.
    fn decided<'v>(
        &self,
        slot: Option<usize>,
        verdicts: &'v [Verdict],
    ) -> Option<(&Check, &'v Verdict)> {
        let i = slot?;
        Some((&self.checks[i], verdicts.get(i)?))
    }

    /// What the Worker answers, given the verdicts for [`Plan::checks`] (in order), without
    /// writing a header or a body: what [`Plan::decide`] writes its answer from.
    pub fn rule(&self, verdicts: &[Verdict]) -> Ruling {
        let mut ruling = Ruling::default();
        self.rule_into(verdicts, &mut ruling);
        ruling
    }

    /// [`Plan::rule`] into `ruling`, whatever it held, reusing its buffers: a caller ruling
    /// request after request (a replay) keeps one.
    pub fn rule_into(&self, verdicts: &[Verdict], ruling: &mut Ruling) {
        self.judge(verdicts, None, ruling);
    }

    /// The answer, given the verdicts for [`Plan::checks`] (in order) and the request path.
    /// Headers are computed at the time the store decided.
    pub fn decide(&self, verdicts: &[Verdict], path: &str) -> Outcome {
        let mut ruling = Ruling::default();
        let written = self.judge(verdicts, Some(path), &mut ruling);
        let Written {
            mut headers,
            problem,
        } = written.unwrap_or_default();
        let mut action = Action::Forward;
        if let Some(problem) = problem {
            // A denial is about this client at this moment: no cache may replay it.
            headers.push(("Cache-Control", NO_STORE.to_string()));
            action = Action::Respond {
                status: problem.status,
                body: problem.to_json(),
                content_type: PROBLEM_CONTENT_TYPE,
            };
        }
        let shadow_decided = self.refused.is_none()
            && ruling.denied.is_none()
            && (self.shadow.is_some_and(|i| i < verdicts.len())
                || self.shadow_refusals().next().is_some()
                || !ruling.shadow_listed.is_empty());
        if shadow_decided {
            let value = if ruling.shadow_denied.is_empty() {
                "allow".to_string()
            } else {
                let names: Vec<&str> = ruling.shadow_denied.iter().map(|n| &**n).collect();
                format!("deny; policies=\"{}\"", names.join(", "))
            };
            headers.push((SHADOW_HEADER, value));
        }
        Outcome {
            action,
            headers,
            shadow_denied: ruling.shadow_denied,
            binding: ruling.binding,
            atomic: ruling.atomic,
            decided_at_ms: ruling.decided_at_ms,
            denied: ruling.denied,
            shadow_listed: ruling.shadow_listed,
        }
    }

    /// The ruling, written over whatever `ruling` held, and with a path the enforced limits'
    /// headers and problem body too (the reports and the binding limit are found once for both).
    fn judge(
        &self,
        verdicts: &[Verdict],
        path: Option<&str>,
        ruling: &mut Ruling,
    ) -> Option<Written> {
        // Every field reset, the vectors keeping their buffers: destructured, so that a field
        // added to `Ruling` cannot be left holding the last request's value.
        let Ruling {
            status,
            binding,
            shadow_denied,
            atomic,
            decided_at_ms,
            denied,
            shadow_listed,
        } = ruling;
        *status = 200;
        *binding = None;
        shadow_denied.clear();
        *atomic = true;
        *decided_at_ms = None;
        *denied = None;
        shadow_listed.clear();
        shadow_listed.extend(self.shadow_listed.iter().map(|(_, d)| d.clone()));
        // Refused before the store (a static entry, a remembered answer) or by its answer: the
        // enforced check's deny match, or the configuration-wide list in the shadow check (a
        // shadow rule's own list only reports).
        let listed = self.denied.clone().or_else(|| {
            let store_denial = |slot, global_only: bool| {
                let (_, verdict) = self.decided(slot, verdicts)?;
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
            store_denial(self.enforced, false).or_else(|| store_denial(self.shadow, true))
        });
        if let Some(denial) = listed {
            ruling.status = 403;
            if let Some((_, verdict)) = self.decided(self.enforced, verdicts) {
                ruling.decided_at_ms = Some(verdict.decided_at_ms);
            }
            let written = path.map(|path| Written {
                headers: Vec::new(),
                problem: Some(Problem::denied(&denial.list, path)),
            });
            ruling.denied = Some(denial);
            return written;
        }
        if let Some(refused) = self.refused {
            ruling.status = 400;
            let written = path.map(|path| Written {
                headers: Vec::new(),
                problem: Some(Problem::missing_identifier(
                    &refused.rule.name,
                    &refused.limit.limit.name,
                    &refused.limit.source.describe(),
                    path,
                )),
            });
            return written;
        }
        let mut written = path.map(|_| Written::default());
        if let Some((check, verdict)) = self.decided(self.enforced, verdicts) {
            ruling.atomic = verdict.atomic;
            ruling.decided_at_ms = Some(verdict.decided_at_ms);
            // A limit the denial cache never consulted decided nothing, and an allow-listed one
            // counted nothing: neither is advertised.
            let decided = || {
                check
                    .items()
                    .iter()
                    .zip(&verdict.decisions)
                    .filter(|(_, d)| !matches!(d.reason, Reason::Skipped | Reason::Allowlisted))
            };
            // The policies advertised at another capacity than the configuration's (an
            // override): rare, so usually empty and never allocated.
            let rescaled: Vec<Policy> = decided()
                .filter(|(item, decision)| item.limit.configured_policy(decision).is_none())
                .map(|(item, decision)| item.limit.advertised_policy(decision))
                .collect();
            let mut rescaled_policies = rescaled.iter();
            let reports: SmallVec<[LimitReport<'_>; 4]> = decided()
                .map(|(item, decision)| LimitReport {
                    name: &item.limit.name,
                    policy: item
                        .limit
                        .configured_policy(decision)
                        .or_else(|| rescaled_policies.next())
                        .expect("one rescaled policy per decision without a configured one"),
                    decision,
                    unit: self.unit_of(&item.limit.name),
                })
                .collect();
            let answer = Answer::new(&reports);
            ruling.status = answer.status().unwrap_or(200);
            if let (Some(written), Some(path)) = (written.as_mut(), path) {
                written.headers = answer.headers(verdict.decided_at_ms);
                written.problem = answer.problem(Some(path));
            }
            ruling.binding = answer.binding().map(|b| Binding {
                name: check
                    .items()
                    .iter()
                    .find(|i| &*i.limit.name == b.name)
                    .map_or_else(|| Arc::from(b.name), |i| i.limit.name.clone()),
                reason: b.decision.reason,
                remaining: b.decision.remaining,
            });
        }
        ruling
            .shadow_denied
            .extend(self.shadow_refusals().map(|l| l.limit.name.clone()));
        for (rule, _) in &self.shadow_listed {
            ruling
                .shadow_denied
                .extend(rule.limits.iter().map(|l| l.limit.name.clone()));
        }
        if let Some((check, verdict)) = self.decided(self.shadow, verdicts) {
            ruling.decided_at_ms.get_or_insert(verdict.decided_at_ms);
            for (item, decision) in check.items().iter().zip(&verdict.decisions) {
                if !decision.allowed {
                    ruling.shadow_denied.push(item.limit.name.clone());
                }
            }
            for listed in &verdict.listed {
                if let Listed::Denied { list, entry } = listed {
                    ruling.shadow_listed.push(Denial {
                        list: list.clone(),
                        entry: entry.clone(),
                        via: Via::Store,
                    });
                }
            }
        }
        written
    }
}

/// What [`Plan::judge`] writes besides the ruling.
#[derive(Debug, Default)]
struct Written {
    headers: Vec<(&'static str, String)>,
    problem: Option<Problem>,
}

/// One limit's decision in the log line: enough to replay the request (`sim replay --format
/// edgelimit`).
#[derive(Debug, Serialize)]
struct LimitLine<'a> {
    name: &'a str,
    /// The identifier as keyed in Redis (escaped, or hashed when long).
    identifier: String,
    cost: i64,
    allowed: bool,
    remaining: u64,
    reason: &'static str,
    shadow: bool,
}

/// The isolate's counters in the log line.
#[derive(Debug, Serialize)]
struct IsolateLine {
    allowed: u64,
    denied: u64,
    cache_hits: u64,
    failed_open: u64,
    failed_closed: u64,
    fallback: u64,
    store_errors: u64,
}

impl Outcome {
    /// Whether the request is admitted.
    pub fn allowed(&self) -> bool {
        self.action == Action::Forward
    }

    /// The response status the Worker gives (200 stands for "forwarded").
    pub fn status(&self) -> u16 {
        match &self.action {
            Action::Forward => 200,
            Action::Respond { status, .. } => *status,
        }
    }

    /// The log line for this request (one JSON object): the request, the time the store decided
    /// at and the isolate's clock (`local_ms`, what its denial cache used), every decided limit
    /// with its identifier as keyed, its cost, decision and reason — what a replay needs — and,
    /// when known, the store's latency and the isolate's counters.
    pub fn log_line(
        &self,
        plan: &Plan<'_>,
        checked: &Checked,
        request: &dyn RequestView,
        isolate: Option<&MetricsSnapshot>,
    ) -> String {
        #[derive(Serialize)]
        struct Line<'a> {
            edgelimit: &'static str,
            #[serde(skip_serializing_if = "Option::is_none")]
            time_ms: Option<u64>,
            /// The shadow check's own time: a second script in the same pipeline reads Redis
            /// `TIME` again, and may read the next millisecond.
            #[serde(skip_serializing_if = "Option::is_none")]
            shadow_time_ms: Option<u64>,
            local_ms: u64,
            method: &'a str,
            host: &'a str,
            path: &'a str,
            rules: Vec<&'a str>,
            allowed: bool,
            status: u16,
            /// `denied` when a deny list refused the request.
            #[serde(skip_serializing_if = "Option::is_none")]
            reason: Option<&'static str>,
            /// The deny list that refused it (entries are not logged: one may be a secret).
            #[serde(skip_serializing_if = "Option::is_none")]
            list: Option<&'a str>,
            /// How the match was found: `static`, `cache` or `store`.
            #[serde(skip_serializing_if = "Option::is_none")]
            via: Option<&'static str>,
            /// Rules whose limits a static allow entry exempted.
            #[serde(skip_serializing_if = "Vec::is_empty")]
            allowed_rules: Vec<&'a str>,
            /// Deny lists of shadow rules that would have refused the request.
            #[serde(skip_serializing_if = "Vec::is_empty")]
            shadow_lists: Vec<&'a str>,
            limits: Vec<LimitLine<'a>>,
            shadow_denied: Vec<&'a str>,
            atomic: bool,
            #[serde(skip_serializing_if = "Option::is_none")]
            store_ms: Option<f64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            isolate: Option<IsolateLine>,
        }
        let mut limits = Vec::new();
        for (slot, shadow) in [(plan.enforced, false), (plan.shadow, true)] {
            if let Some((check, verdict)) = plan.decided(slot, &checked.verdicts) {
                for (item, d) in check.items().iter().zip(&verdict.decisions) {
                    limits.push(LimitLine {
                        name: &item.limit.name,
                        identifier: encode_identifier(&item.identifier),
                        cost: item.cost,
                        allowed: d.allowed,
                        remaining: d.remaining,
                        reason: d.reason.as_str(),
                        shadow,
                    });
                }
            }
        }
        let line = Line {
            edgelimit: "decision",
            time_ms: self.decided_at_ms,
            shadow_time_ms: plan
                .decided(plan.shadow, &checked.verdicts)
                .map(|(_, verdict)| verdict.decided_at_ms),
            local_ms: checked.local_ms,
            method: request.method(),
            host: request.host(),
            path: request.path(),
            rules: plan.rules.iter().map(|r| r.name.as_str()).collect(),
            allowed: self.allowed(),
            status: self.status(),
            reason: self.denied.as_ref().map(|_| "denied"),
            list: self.denied.as_ref().map(|d| d.list.as_str()),
            via: self.denied.as_ref().map(|d| d.via.as_str()),
            allowed_rules: plan.allowed.iter().map(|r| r.name.as_str()).collect(),
            shadow_lists: self.shadow_listed.iter().map(|d| d.list.as_str()).collect(),
            limits,
            shadow_denied: self.shadow_denied.iter().map(|n| &**n).collect(),
            atomic: self.atomic,
            store_ms: checked.store_ms,
            isolate: isolate.map(|m| {
                let totals = m.totals();
                IsolateLine {
                    allowed: m.checks_allowed,
                    denied: m.checks_denied,
                    cache_hits: totals.cache_hits,
                    failed_open: totals.failed_open,
                    failed_closed: totals.failed_closed,
                    fallback: totals.fallback,
                    store_errors: m.store_errors,
                }
            }),
        };
        serde_json::to_string(&line).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identify::OwnedRequest;
    use edgelimit::MemoryStore;
    use serde_json::json;

    fn config() -> Config {
        Config::from_value(json!({
            "rules": [
                { "name": "api", "path_prefix": "/api/", "limits": [
                    { "name": "per-ip", "policy": "fixed 3/1m", "identifier": "ip" },
                    { "name": "per-key", "policy": "gcra 2/1s burst 2",
                      "identifier": "api-key:header:x-api-key", "missing": "deny" }
                ]},
                { "name": "watch", "shadow": true, "limits": [
                    { "name": "shadow-ip", "policy": "fixed 1/1m", "identifier": "ip" }
                ]},
                { "name": "writes", "methods": ["POST"], "limits": [
                    { "name": "per-user", "policy": "fixed 1/1h", "identifier": "header:x-user", "missing": "allow" }
                ]}
            ]
        }))
        .unwrap()
    }

    fn run(config: &Config, store: &MemoryStore, request: &OwnedRequest, now: u64) -> Outcome {
        let plan = config.plan(request);
        let verdicts = store.check_now(plan.checks(), now);
        let outcome = plan.decide(&verdicts, request.path());
        // The ruling is what the answer is written from: they never disagree.
        let ruling = plan.rule(&verdicts);
        assert_eq!(
            (ruling.status, &ruling.binding, &ruling.shadow_denied),
            (outcome.status(), &outcome.binding, &outcome.shadow_denied)
        );
        assert_eq!(
            (ruling.atomic, ruling.decided_at_ms),
            (outcome.atomic, outcome.decided_at_ms)
        );
        outcome
    }

    fn names(plan: &Plan<'_>) -> Vec<String> {
        plan.rules.iter().map(|r| r.name.clone()).collect()
    }

    fn header<'a>(outcome: &'a Outcome, name: &str) -> Option<&'a str> {
        outcome
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn rules_apply_by_path_and_method() {
        let c = config();
        let req = OwnedRequest::get("h", "/api/x")
            .with_header("cf-connecting-ip", "1.1.1.1")
            .with_header("x-api-key", "k");
        let plan = c.plan(&req);
        assert_eq!(names(&plan), ["api", "watch"]);
        assert_eq!(plan.enforced().unwrap().items().len(), 2);
        assert_eq!(plan.shadow().unwrap().items().len(), 1);
        assert_eq!(plan.checks().len(), 2);
        let post = OwnedRequest::new("POST", "h", "/other").with_header("x-user", "u");
        assert_eq!(names(&c.plan(&post)), ["watch", "writes"]);
    }

    #[test]
    fn plan_with_takes_each_identifier_from_the_caller() {
        let c = config();
        // No header at all: the identifiers come from the caller (a replayed log line).
        let req = OwnedRequest::get("h", "/api/x");
        let plan = c.plan_with(&req, &mut |_| Some(Identifier::from("given")));
        let items = plan.enforced().unwrap().items();
        assert_eq!(items.len(), 2);
        assert!(items
            .iter()
            .all(|i| i.identifier == Identifier::from("given")));
        // `None` is a missing identifier, handled by the limit's `missing` setting.
        let plan = c.plan_with(&req, &mut |l| {
            (&*l.limit.name != "per-key").then(|| Identifier::from("given"))
        });
        assert_eq!(&*plan.refused().unwrap().limit.limit.name, "per-key");
        assert_eq!(
            c.plan(&req),
            c.plan_with(&req, &mut |l| l.source.extract(&req))
        );
    }

    #[test]
    fn a_missing_identifier_is_handled_as_configured() {
        let c = config();
        let store = MemoryStore::new();
        let no_key = OwnedRequest::get("h", "/api/x").with_header("cf-connecting-ip", "1.1.1.1");
        let outcome = run(&c, &store, &no_key, 0);
        match &outcome.action {
            Action::Respond { status, body, .. } => {
                assert_eq!(*status, 400);
                assert_eq!(header(&outcome, "Cache-Control"), Some("no-store"));
                assert!(body.contains("x-api-key"), "{body}");
            }
            other => panic!("expected a 400, got {other:?}"),
        }
        let post = OwnedRequest::new("POST", "h", "/other");
        let plan = c.plan(&post);
        assert!(plan.enforced().is_none(), "missing = allow skips the limit");
        assert_eq!(plan.absent.len(), 2, "both absent identifiers are recorded");
        let no_ip = OwnedRequest::get("h", "/other");
        assert_eq!(
            c.plan(&no_ip).shadow().unwrap().items()[0].identifier,
            Identifier::from("")
        );
    }

    #[test]
    fn denials_answer_429_with_headers_and_a_problem_naming_the_policy() {
        let c = config();
        let store = MemoryStore::new();
        let req = OwnedRequest::get("h", "/api/x")
            .with_header("cf-connecting-ip", "1.1.1.1")
            .with_header("x-api-key", "k");
        let status = |out: &Outcome| match &out.action {
            Action::Forward => 200,
            Action::Respond { status, .. } => *status,
        };
        // One request a second: the key's GCRA (2/s) keeps up, per-ip (3/min) runs out.
        let spaced: Vec<Outcome> = (0..4)
            .map(|i| run(&c, &store, &req, 60_000 + i * 1_000))
            .collect();
        assert_eq!(
            spaced.iter().map(status).collect::<Vec<_>>(),
            [200, 200, 200, 429]
        );
        let out = &spaced[3];
        let Action::Respond {
            body, content_type, ..
        } = &out.action
        else {
            unreachable!()
        };
        assert_eq!(*content_type, PROBLEM_CONTENT_TYPE);
        let problem: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(problem["policy"], "per-ip");
        assert_eq!(problem["instance"], "/api/x");
        // The window ends at 120 000; the request came at 63 000.
        assert_eq!(header(out, "Retry-After"), Some("57"));
        assert_eq!(header(out, "X-RateLimit-Remaining"), Some("0"));
        assert_eq!(header(out, "Cache-Control"), Some("no-store"));
        assert_eq!(
            header(&spaced[0], "Cache-Control"),
            None,
            "the origin decides for admitted requests"
        );
        assert!(header(out, "RateLimit")
            .unwrap()
            .contains("\"per-ip\";r=0;t=57"));
        assert!(header(&spaced[0], "RateLimit-Policy")
            .unwrap()
            .contains("\"per-key\";q=2;w=1"));

        // A burst from another client: the key's GCRA denies the third at once.
        let other = OwnedRequest::get("h", "/api/x")
            .with_header("cf-connecting-ip", "2.2.2.2")
            .with_header("x-api-key", "k2");
        let burst: Vec<u16> = (0..3)
            .map(|i| status(&run(&c, &store, &other, 200_000 + i)))
            .collect();
        assert_eq!(burst, [200, 200, 429]);
    }

    #[test]
    fn shadow_rules_report_but_never_block() {
        let c = config();
        let store = MemoryStore::new();
        let req = OwnedRequest::get("h", "/public").with_header("cf-connecting-ip", "9.9.9.9");
        let first = run(&c, &store, &req, 0);
        assert!(first.allowed());
        assert_eq!(header(&first, SHADOW_HEADER), Some("allow"));
        let plan = c.plan(&req);
        let verdicts = store.check_now(plan.checks(), 1);
        let second = plan.decide(&verdicts, req.path());
        assert!(second.allowed(), "shadow mode must never block");
        assert_eq!(
            header(&second, SHADOW_HEADER),
            Some("deny; policies=\"shadow-ip\"")
        );
        assert_eq!(&*second.shadow_denied[0], "shadow-ip");
        assert!(
            header(&second, "RateLimit").is_none(),
            "shadow limits are not advertised"
        );
        let checked = Checked {
            verdicts,
            local_ms: 1,
            store_ms: Some(1.5),
        };
        let line: serde_json::Value =
            serde_json::from_str(&second.log_line(&plan, &checked, &req, None)).unwrap();
        assert_eq!(line["shadow_denied"][0], "shadow-ip");
        assert_eq!(line["shadow_time_ms"], 1, "the shadow check's own time");
        assert_eq!(line["allowed"], true);
        assert_eq!(line["limits"][0]["shadow"], true);
        assert_eq!(line["limits"][0]["reason"], "over_limit");
    }

    #[test]
    fn the_log_line_carries_what_a_replay_needs() {
        let c = config();
        let store = MemoryStore::new();
        let req = OwnedRequest::get("api.example.com", "/api/items")
            .with_header("cf-connecting-ip", "2001:db8::7")
            .with_header("x-api-key", "secret");
        let plan = c.plan(&req);
        let verdicts = store.check_now(plan.checks(), 1_700_000_000_123);
        let outcome = plan.decide(&verdicts, req.path());
        let metrics = edgelimit::metrics::Metrics::default().snapshot();
        let checked = Checked {
            verdicts,
            local_ms: 1_700_000_000_100,
            store_ms: Some(2.0),
        };
        let line: serde_json::Value =
            serde_json::from_str(&outcome.log_line(&plan, &checked, &req, Some(&metrics))).unwrap();
        assert_eq!(line["time_ms"], 1_700_000_000_123u64);
        assert_eq!(line["local_ms"], 1_700_000_000_100u64);
        assert_eq!(
            (&line["method"], &line["host"], &line["path"]),
            (
                &json!("GET"),
                &json!("api.example.com"),
                &json!("/api/items")
            )
        );
        assert_eq!(line["rules"], json!(["api", "watch"]));
        let limits = line["limits"].as_array().unwrap();
        assert_eq!(limits.len(), 3);
        assert_eq!(limits[0]["name"], "per-ip");
        assert_eq!(
            limits[0]["identifier"], "2001%3Adb8%3A%3A7",
            "as keyed in Redis"
        );
        assert_eq!(limits[0]["cost"], 1);
        assert_eq!(limits[0]["reason"], "admitted");
        let key = limits[1]["identifier"].as_str().unwrap();
        assert_eq!(key.len(), 64, "API keys are logged hashed: {key}");
        assert!(!key.contains("secret"));
        assert_eq!(limits[2]["shadow"], true);
        assert_eq!(line["isolate"]["allowed"], 0);
        assert_eq!(line["store_ms"], 2.0);
    }

    /// Polls a future that must be ready at once (the memory store never waits).
    fn ready<F: std::future::Future>(future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        let waker = std::task::Waker::noop();
        match future
            .as_mut()
            .poll(&mut std::task::Context::from_waker(waker))
        {
            std::task::Poll::Ready(out) => out,
            std::task::Poll::Pending => panic!("the memory store did not answer at once"),
        }
    }

    fn listed_config() -> Config {
        Config::from_value(json!({
            "deny": ["ip 192.0.2.0/24"],
            "allow": ["header:x-partner-key s3cret"],
            "rules": [
                { "name": "api", "path_prefix": "/api/",
                  "deny": ["country KP"], "allow": ["header:x-user friend"],
                  "limits": [
                    { "name": "per-user", "policy": "fixed 2/1m", "identifier": "header:x-user" }
                ]},
                { "name": "watch", "shadow": true, "deny": ["country CN"], "limits": [
                    { "name": "shadow-user", "policy": "fixed 100/1m", "identifier": "header:x-user" }
                ]}
            ]
        }))
        .unwrap()
    }

    fn add(store: &MemoryStore, list: &str, entry: &str) {
        use edgelimit::Store;
        let entry: edgelimit::control::list::ListEntry = entry.parse().unwrap();
        ready(store.list_add(list, &entry, None, 0)).unwrap();
    }

    fn problem_of(outcome: &Outcome) -> serde_json::Value {
        match &outcome.action {
            Action::Respond { body, .. } => serde_json::from_str(body).unwrap(),
            Action::Forward => panic!("forwarded, not answered"),
        }
    }

    fn from(ip: &str, user: &str) -> OwnedRequest {
        OwnedRequest::get("h", "/api/x")
            .with_header("cf-connecting-ip", ip)
            .with_header("x-user", user)
    }

    /// Plans built in the last plan's checks (`plan_matched` with `into_checks`) are the plans
    /// built afresh, whatever the last one sent: both checks, one, none (refused for a missing
    /// key, denied by a static entry, exempted by a static allow entry); and a ruling kept from
    /// request to request (`rule_into`) is the ruling made afresh.
    #[test]
    fn a_plan_built_in_the_last_ones_checks_is_the_plan_built_afresh() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for c in [config(), listed_config()] {
            let mut spare: [Check; 2] = Default::default();
            let mut sent = [0usize; 3];
            let store = MemoryStore::new();
            let mut kept = Ruling::default();
            let (mut refused, mut shadow_denied) = (0, 0);
            for i in 0..400 {
                let method = if next(3) == 0 { "POST" } else { "GET" };
                let path = if next(4) == 0 {
                    "/static/a.css"
                } else {
                    "/api/x"
                };
                let mut request = OwnedRequest::new(method, "h", path)
                    .with_header("cf-connecting-ip", &format!("192.0.{}.9", next(3)))
                    .with_country(["KP", "CN", "SE"][next(3) as usize]);
                for (name, values) in [
                    ("x-api-key", ["k1", "k2"]),
                    ("x-user", ["friend", "u"]),
                    ("x-partner-key", ["s3cret", "other"]),
                ] {
                    if next(2) == 0 {
                        request = request.with_header(name, values[next(2) as usize]);
                    }
                }
                let fresh = c.plan(&request);
                let reused = c.plan_matched(
                    c.matching(&request),
                    &request,
                    &mut |applied| applied.source.extract(&request),
                    spare,
                );
                assert_eq!(reused.checks(), fresh.checks(), "request {i}: {request:?}");
                assert_eq!(reused.denied(), fresh.denied(), "request {i}");
                assert_eq!(reused.rule(&[]), fresh.rule(&[]), "request {i}");
                // One ruling kept across requests rules as a fresh one, on the store's verdicts.
                let verdicts = store.check_now(fresh.checks(), i * 50);
                reused.rule_into(&verdicts, &mut kept);
                assert_eq!(kept, fresh.rule(&verdicts), "request {i}");
                refused += u64::from(kept.status == 429);
                shadow_denied += u64::from(!kept.shadow_denied.is_empty());
                sent[fresh.checks().len()] += 1;
                spare = reused.into_checks();
            }
            assert!(
                sent.iter().all(|&n| n > 0),
                "{sent:?} plans of 0, 1, 2 checks"
            );
            assert!(
                refused > 0 && shadow_denied > 0,
                "{refused} 429s, {shadow_denied} shadow denials"
            );
        }
    }

    #[test]
    fn a_static_deny_is_a_403_without_any_check() {
        let c = listed_config();
        let plan = c.plan(&from("192.0.2.9", "u"));
        assert!(plan.checks().is_empty(), "no store call");
        let denial = plan.denied().unwrap();
        assert_eq!(
            (denial.list.as_str(), denial.entry.as_str(), denial.via),
            ("deny", "ip 192.0.2.0/24", Via::Static)
        );
        let outcome = plan.decide(&[], "/api/x");
        assert_eq!(outcome.status(), 403);
        assert_eq!(header(&outcome, "Cache-Control"), Some("no-store"));
        let problem = problem_of(&outcome);
        assert_eq!(
            (problem["reason"].as_str(), problem["list"].as_str()),
            (Some("denied"), Some("deny"))
        );
        assert_eq!(plan.rule(&[]).denied.unwrap().list, "deny");
        // A rule's own static entry, by country: that rule's list.
        let from_kp = from("203.0.113.1", "u").with_country("KP");
        let outcome = c.plan(&from_kp).decide(&[], "/api/x");
        assert_eq!(problem_of(&outcome)["list"], "deny:api");
        // The log line says why.
        let plan = c.plan(&from_kp);
        let checked = Checked {
            verdicts: Vec::new(),
            local_ms: 0,
            store_ms: None,
        };
        let line: serde_json::Value = serde_json::from_str(
            &plan
                .decide(&[], "/api/x")
                .log_line(&plan, &checked, &from_kp, None),
        )
        .unwrap();
        assert_eq!(
            (line["status"].as_u64(), line["reason"].as_str()),
            (Some(403), Some("denied"))
        );
        assert_eq!(
            (line["list"].as_str(), line["via"].as_str()),
            (Some("deny:api"), Some("static"))
        );
    }

    #[test]
    fn a_shadow_rules_static_deny_only_reports() {
        let c = listed_config();
        let store = MemoryStore::new();
        let req = from("203.0.113.1", "u").with_country("CN");
        let plan = c.plan(&req);
        assert!(plan.denied().is_none());
        assert!(
            plan.shadow().is_none(),
            "the shadow rule's limits are not charged"
        );
        let outcome = run(&c, &store, &req, 0);
        assert!(outcome.allowed());
        assert_eq!(outcome.shadow_listed[0].list, "deny:watch");
        assert_eq!(&*outcome.shadow_denied[0], "shadow-user");
        assert_eq!(
            header(&outcome, SHADOW_HEADER),
            Some("deny; policies=\"shadow-user\"")
        );
    }

    #[test]
    fn a_static_allow_exempts_its_rules_limits_but_not_from_deny_lookups() {
        let c = listed_config();
        let store = MemoryStore::new();
        let partner = from("203.0.113.1", "p").with_header("x-partner-key", "s3cret");
        for now in 0..5 {
            let outcome = run(&c, &store, &partner, now);
            assert!(outcome.allowed());
            assert!(header(&outcome, "RateLimit").is_none(), "not advertised");
        }
        let plan = c.plan(&partner);
        assert_eq!(
            plan.allowed.len(),
            2,
            "both rules, by the configuration-wide allow"
        );
        let enforced = plan.enforced().expect("a check looks up the deny lists");
        assert!(enforced.items().is_empty() && enforced.is_gated());
        // A rule's own allow entry exempts that rule only.
        let friend = from("203.0.113.1", "friend");
        let plan = c.plan(&friend);
        assert_eq!(plan.allowed.len(), 1);
        assert_eq!(plan.shadow().unwrap().items().len(), 1);
        // Deny beats allow: a listed partner is refused.
        add(&store, "deny", "ip 203.0.113.1");
        assert_eq!(run(&c, &store, &partner, 10).status(), 403);
        // Without the dynamic lists, an exempted request asks nothing.
        let mut off = listed_config();
        off.dynamic_lists = false;
        assert!(off.plan(&partner).checks().is_empty());
    }

    #[test]
    fn dynamic_lists_are_gates_of_the_check() {
        let c = listed_config();
        let plan = c.plan(&from("203.0.113.1", "u"));
        let enforced = plan.enforced().unwrap();
        assert_eq!(
            enforced.gates(),
            [Gate::new(
                vec!["deny".to_string(), "deny:api".to_string()],
                vec!["allow".to_string(), "allow:api".to_string()],
            )]
        );
        assert_eq!(enforced.items()[0].gate, Some(0));
        assert_eq!(
            plan.deny_scope(),
            ["deny", "deny:api"],
            "not the shadow rule's"
        );
        assert!(plan.candidates().contains("ip 203.0.113.0/24"));
        assert!(plan.candidates().contains("header:x-user u"));
        let mut off = listed_config();
        off.dynamic_lists = false;
        let plan = off.plan(&from("203.0.113.1", "u"));
        assert!(!plan.enforced().unwrap().is_gated());
        assert!(plan.deny_scope().is_empty());
        // No rule matched: nothing is looked up.
        let only_api = Config::from_value(json!({"rules": [{"name": "api", "path_prefix": "/api/",
            "limits": [{"name": "l", "policy": "fixed 1/1m", "identifier": "ip"}]}]}))
        .unwrap();
        let plan =
            only_api.plan(&OwnedRequest::get("h", "/x").with_header("cf-connecting-ip", "1.2.3.4"));
        assert!(plan.checks().is_empty() && plan.candidates().is_empty());
    }

    #[test]
    fn a_dynamic_deny_is_a_403_and_can_be_remembered() {
        let c = listed_config();
        let store = MemoryStore::new();
        let req = from("198.51.100.7", "m");
        assert!(run(&c, &store, &req, 0).allowed());
        add(&store, "deny", "ip 198.51.100.0/24");
        let outcome = run(&c, &store, &req, 1);
        assert_eq!(outcome.status(), 403);
        let denial = outcome.denied.clone().unwrap();
        assert_eq!(
            (denial.list.as_str(), denial.entry.as_str(), denial.via),
            ("deny", "ip 198.51.100.0/24", Via::Store)
        );
        assert_eq!(problem_of(&outcome)["list"], "deny");
        // Remembered by the isolate: the next request from the range asks nothing.
        let mut cache = lists::DenyCache::new(10_000);
        cache.remember_denial(&denial, 1);
        let next = from("198.51.100.99", "n");
        let mut plan = c.plan(&next);
        plan.deny_if_remembered(&mut cache, 2);
        assert!(plan.checks().is_empty());
        assert_eq!(plan.decide(&[], "/api/x").denied.unwrap().via, Via::Cache);
        // Nothing was charged while denied: once unlisted, `m` has one of two left.
        let entry: edgelimit::control::list::ListEntry = "ip 198.51.100.0/24".parse().unwrap();
        assert!(ready(edgelimit::Store::list_remove(&store, "deny", &entry)).unwrap());
        assert_eq!(run(&c, &store, &req, 2).status(), 200);
        assert_eq!(run(&c, &store, &req, 3).status(), 429);
    }

    #[test]
    fn a_dynamic_allow_is_forwarded_uncounted_and_unadvertised() {
        let c = listed_config();
        let store = MemoryStore::new();
        add(&store, "allow:api", "header:x-user vip");
        let vip = from("203.0.113.1", "vip");
        for now in 0..5 {
            let outcome = run(&c, &store, &vip, now);
            assert!(outcome.allowed(), "{now}");
            assert!(header(&outcome, "RateLimit").is_none());
        }
        // The configuration-wide deny list refuses even a request only shadow rules limit.
        add(&store, "deny", "country RU");
        let shadow_only = OwnedRequest::get("h", "/other")
            .with_header("x-user", "z")
            .with_country("ru");
        let outcome = run(&c, &store, &shadow_only, 10);
        assert_eq!(outcome.status(), 403);
        assert_eq!(outcome.denied.unwrap().list, "deny");
    }

    #[test]
    fn tiers_decide_from_the_store_and_the_deciding_policy_is_advertised() {
        use edgelimit::control::Assignment;
        use edgelimit::Store;
        let c = Config::from_value(json!({"rules": [{"name": "api", "limits": [{
            "name": "per-user", "policy": "fixed 2/1m", "identifier": "header:x-user",
            "tiers": {"pro": "fixed 5/1m"}
        }]}]}))
        .unwrap();
        let store = MemoryStore::new();
        let limit = &c.rules[0].limits[0].limit;
        let user = |u: &str| OwnedRequest::get("h", "/x").with_header("x-user", u);
        let pro = Assignment::Tier(Arc::from("pro"));
        ready(store.assign(limit, &Identifier::from("p"), Some(&pro), None)).unwrap();
        let outcomes: Vec<Outcome> = (0..6).map(|i| run(&c, &store, &user("p"), i)).collect();
        let statuses: Vec<u16> = outcomes.iter().map(Outcome::status).collect();
        assert_eq!(statuses, [200, 200, 200, 200, 200, 429]);
        assert!(header(&outcomes[0], "RateLimit-Policy")
            .unwrap()
            .contains("\"per-user\";q=5;w=60"));
        let free = run(&c, &store, &user("f"), 10);
        assert!(header(&free, "RateLimit-Policy")
            .unwrap()
            .contains("\"per-user\";q=2;w=60"));
        // An override: advertised with its capacity.
        let strict = Assignment::Override("fixed 1/1m".parse().unwrap());
        ready(store.assign(limit, &Identifier::from("o"), Some(&strict), None)).unwrap();
        let first = run(&c, &store, &user("o"), 20);
        assert!(header(&first, "RateLimit-Policy")
            .unwrap()
            .contains("\"per-user\";q=1;w=60"));
        assert_eq!(run(&c, &store, &user("o"), 21).status(), 429);
    }
}
