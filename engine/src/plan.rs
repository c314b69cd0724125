//! Per request: which limits apply with which identifiers — the [`Plan`], built once by
//! [`Config::plan`] and borrowed from the configuration — and, once the store has answered,
//! which check each verdict belongs to ([`Plan::decided`]). Pure.
//!
//! A plan holds at most two checks, the enforced limits' and the shadow limits', sent in one
//! batch: the store answers them in order.

use std::sync::{Mutex, PoisonError};

use edgelimit::control::list::{Candidates, Gate, ListProbe};
use edgelimit::http::{FieldSets, Problem};
use edgelimit::net::AddressGrouping;
use edgelimit::{Check, CheckItem, Identifier, Verdict};
use smallvec::SmallVec;

use crate::config::Config;
use crate::identify::IdentifierSource;
use crate::identify::{OwnedRequest, RequestView};
use crate::lists::{self, Denial, ProbeCache, Via};
use crate::own_id::OwnId;
use crate::read_ahead::ReadAhead;
use crate::reading::{Reading, RepeatedField, Unreadable};
use crate::rules::{is_preflight, Missing, Rule, RuleLimit, Unenforced, ADDRESS_FALLBACK};

/// A request as the pipeline plans it: what it offers ([`RequestView`]), where each limit's
/// identifier comes from, and which rules it matches. The defaults read both from the request as
/// the path reads it (`read`: [`Reading`]), as the Worker does; a replay of the Worker's own log
/// lines gives the identifiers it logged, and a replay that matched a request's rules ahead of its
/// turn gives those.
pub trait Incoming: RequestView {
    /// The identifier `limit` takes from this request, read as `read`; `None` when the request
    /// has none (then the limit's `missing` setting applies).
    fn identifier(&self, limit: &RuleLimit, read: &Reading<'_, Self>) -> Option<Identifier> {
        limit.source.extract(read)
    }

    /// How the engine read this request ahead of the request path, when a host had it read
    /// ([`ReadAhead::read`]): then the path takes that reading and those rules rather than
    /// reading and matching again.
    fn read_ahead(&self) -> Option<&ReadAhead> {
        None
    }

    /// The rules of `config` this request (read as `read`) matches, in configuration order;
    /// those read ahead, when it was ([`Incoming::read_ahead`]).
    fn matching<'c>(&self, config: &'c Config, read: &Reading<'_, Self>) -> MatchedRules<'c> {
        match self.read_ahead() {
            Some(ahead) => ahead.matching(config),
            None => config.matching(read),
        }
    }
}

/// `request` as the request path reads it ([`Config::reading`]), or as it was read ahead.
fn reading_of<'r, R: Incoming + ?Sized>(config: &Config, request: &'r R) -> Reading<'r, R> {
    match request.read_ahead() {
        Some(ahead) => ahead.reading(config, request),
        None => config.reading(request),
    }
}

/// Plans as the Worker does: identifiers and rules read from the request.
impl Incoming for OwnedRequest {}

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

/// Why a request is refused with 400 before any limit is decided: the limiter cannot tell, the
/// way the origin will, who is asking or what is asked.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal<'c> {
    /// An enforced limit's identifier is missing and its `missing` setting says deny.
    Missing(Absent<'c>),
    /// A field the configuration reads is sent more than once (`duplicates = "refuse"`).
    Repeated(RepeatedField),
    /// The path or host cannot be read the way the origin reads it (docs/configuration.md,
    /// "How a request's path and host are read").
    Unreadable(Unreadable),
}

impl Refusal<'_> {
    /// The problem body answering the refused request to `path`.
    pub fn problem(&self, path: &str) -> Problem {
        match self {
            Refusal::Missing(absent) => Problem::missing_identifier(
                &absent.rule.name,
                &absent.limit.limit.name,
                &absent.limit.source.describe(),
                path,
            ),
            Refusal::Repeated(field) => Problem::ambiguous(
                &format!("it sends {field} more than once, and the limiter reads one value"),
                path,
            ),
            Refusal::Unreadable(why) => Problem::ambiguous(&why.to_string(), path),
        }
    }
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
    /// The trusted request id header's value ([`Config::request_id_header`]), when configured
    /// and sent: what `idempotent` limits remember this request under, in place of
    /// [`Plan::own_id`].
    pub request_id: Option<Identifier>,
    /// The path's own id for this request, unique per request and never chosen by the client
    /// (given by [`crate::Edge::handle`]): what `idempotent` limits remember it under without a
    /// trusted header, and what its settlement commits under.
    pub own_id: Option<OwnId>,
    /// The rules whose limits a static allow entry exempted (configuration-wide or their own).
    pub allowed: Vec<&'c Rule>,
    // At most two checks (enforced, shadow), held inline: the first `sent` are sent, the others
    // are spares whatever they hold, kept for the next plan (`Plan::take_checks`), which empties
    // them. No vector is allocated per request for them.
    checks: [Check; 2],
    sent: usize,
    enforced: Option<usize>,
    shadow: Option<usize>,
    pub(crate) refused: Option<Refusal<'c>>,
    /// A refusal by a deny list found before the store: a static entry, or a remembered answer.
    pub(crate) denied: Option<Denial>,
    /// Shadow rules a static deny entry matched: reported, never enforced.
    pub(crate) shadow_listed: Vec<(&'c Rule, Denial)>,
    /// What the request offers the lists (empty when no list applies), until the first gated
    /// check takes it ([`Plan::probe`] finds it there): its candidates, built once, are shared
    /// with the gated checks, whose stores read them again.
    probe: ListProbe,
    /// Whether a matched rule has a limit settled after the response (else no limit has a
    /// unit to look up).
    settles: bool,
    /// The deny lists whose match refuses this request: `deny` and each matched enforced rule's
    /// (held inline up to four: no allocation per request).
    deny_scope: SmallVec<[&'c str; 4]>,
    /// Whether responses carry `X-EdgeLimit-Shadow` (the configuration's `shadow_header`).
    pub(crate) shadow_header: bool,
    /// The rate-limit header fields responses carry (the configuration's `headers`).
    pub(crate) headers: FieldSets,
    /// Per item of the shadow check, in order: why a limit of an enforced rule is decided
    /// there (`soft`, or left out by its staged enforcement), `None` for a shadow rule's limit.
    /// Held inline up to four: no allocation per request.
    pub(crate) shadow_kinds: SmallVec<[Option<Unenforced>; 4]>,
}

impl Config {
    /// The limits that apply to `request`, with their identifiers: the checks to send.
    pub fn plan<R: Incoming + ?Sized>(&self, request: &R) -> Plan<'_> {
        self.plan_in(request, None, Default::default(), None)
    }

    /// The identifier a limit counts `request` by when the request lacks the limit's own and
    /// its `missing` setting is `ip` ([`Missing::Address`]): the client address, grouped as the
    /// `ip` source groups it, after [`ADDRESS_FALLBACK`] — so no identifier a client sends can
    /// name the bucket. `None` when the request has no address either.
    pub fn address_fallback<R: RequestView + ?Sized>(&self, request: &R) -> Option<Identifier> {
        let grouping = AddressGrouping::new(self.ipv6_prefix).unwrap_or_default();
        let address = IdentifierSource::ClientIp(grouping).extract(request)?;
        let mut marked = Vec::with_capacity(address.as_bytes().len() + 1);
        marked.push(ADDRESS_FALLBACK);
        marked.extend_from_slice(address.as_bytes());
        Some(Identifier::from(marked))
    }

    /// The rules `request` (read as [`Config::reading`] reads it) matches, in configuration
    /// order.
    pub fn matching<R: RequestView + ?Sized>(&self, request: &R) -> MatchedRules<'_> {
        self.matched_places(request)
            .into_iter()
            .map(|place| &self.rules[place])
            .collect()
    }

    /// Where in [`Config::rules`] the rules `request` matches are ([`Config::matching`]): a CORS
    /// preflight matches only the preflight rule when the configuration has one
    /// (`preflight_limit`), every other request the rules it meets.
    pub fn matched_places<R: RequestView + ?Sized>(&self, request: &R) -> SmallVec<[usize; 4]> {
        let preflights_apart = self.rules.last().is_some_and(|r| r.preflight);
        if preflights_apart && is_preflight(request) {
            return smallvec::smallvec![self.rules.len() - 1];
        }
        self.rules
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.preflight && r.matches(request))
            .map(|(place, _)| place)
            .collect()
    }

    /// [`Config::plan`], its checks built in `spare` (emptied first): the last plan's checks
    /// ([`Plan::take_checks`]), so a pipeline planning request after request allocates no check;
    /// what the request offers the lists taken from `probes` when given (the isolate's);
    /// `own_id` the path's own id for the request ([`Plan::own_id`]).
    pub(crate) fn plan_in<'c, R: Incoming + ?Sized>(
        &'c self,
        request: &R,
        own_id: Option<OwnId>,
        spare: [Check; 2],
        probes: Option<&Mutex<ProbeCache>>,
    ) -> Plan<'c> {
        let read = reading_of(self, request);
        if let Some(why) = read.unreadable() {
            // No rule can be matched with certainty: none is, and nothing is charged.
            let mut plan = Plan::empty(own_id, spare, self);
            plan.refuse(Refusal::Unreadable(why));
            return plan;
        }
        let mut plan = self.plan_read(request, &read, own_id, spare, probes);
        if let Some(field) = read.repeated() {
            plan.refuse(Refusal::Repeated(field));
        }
        plan
    }

    /// [`Config::plan_in`] of `request` as `read` reads it.
    fn plan_read<'c, R: Incoming + ?Sized>(
        &'c self,
        request: &R,
        read: &Reading<'_, R>,
        own_id: Option<OwnId>,
        spare: [Check; 2],
        probes: Option<&Mutex<ProbeCache>>,
    ) -> Plan<'c> {
        let rules = request.matching(self, read);
        let identify = &mut |applied: &RuleLimit| request.identifier(applied, read);
        let fallback = &mut || self.address_fallback(read);
        // A trusted header's id, as the proxy that set it sent it (not read as a field a
        // client may repeat: the proxy replaces whatever the client sent).
        let request_id = self
            .request_id_header
            .as_deref()
            .and_then(|name| request.header(name))
            .filter(|id| !id.is_empty())
            .map(|id| Identifier::from(id.as_str()));
        let settles = rules
            .iter()
            .any(|r| r.limits.iter().any(|l| l.settle.is_some()));
        let mut plan = Plan::empty(own_id, spare, self);
        plan.rules = rules;
        plan.request_id = request_id;
        plan.settles = settles;
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
            self.add_checks(&mut plan, identify, fallback, None, false);
            return plan;
        }
        let probe = match probes {
            Some(probes) => probes
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .probe(&self.probe_sources, read),
            None => lists::probe(&self.probe_sources, read),
        };
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
        self.add_checks(
            &mut plan,
            identify,
            fallback,
            Some(allowed_everywhere),
            gated,
        );
        plan
    }

    /// Adds the matched rules' checks to `plan`: `allowed_everywhere` is whether the
    /// configuration-wide static allow list matched (`None`: no list applies, nothing is looked
    /// up), `gated` whether the dynamic lists are consulted along with the checks.
    fn add_checks<'c>(
        &'c self,
        plan: &mut Plan<'c>,
        identify: &mut dyn FnMut(&RuleLimit) -> Option<Identifier>,
        fallback: &mut dyn FnMut() -> Option<Identifier>,
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
        // The client address a limit without its identifier counts by, found once.
        let mut address: Option<Option<Identifier>> = None;
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
            // The rule's gate in the shadow check, for its limits decided there.
            let mut moved_gate: Option<usize> = None;
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
                            Missing::Address => address
                                .get_or_insert_with(&mut *fallback)
                                .clone()
                                .unwrap_or_else(|| Identifier::from("")),
                            Missing::Deny => {
                                if !rule.shadow {
                                    plan.refused.get_or_insert(Refusal::Missing(absent));
                                }
                                continue;
                            }
                        }
                    }
                };
                let unenforced = if rule.shadow {
                    None
                } else {
                    applied.unenforced(identifier.as_bytes())
                };
                let (check, gate) = if rule.shadow {
                    plan.shadow_kinds.push(None);
                    (&mut shadow, gate)
                } else if let Some(kind) = unenforced {
                    plan.shadow_kinds.push(Some(kind));
                    // Decided in shadow behind its rule's gate there; the enforced check still
                    // looks up the rule's deny lists, whose match refuses the request.
                    let moved = gate.map(|_| {
                        *moved_gate.get_or_insert_with(|| {
                            gates[0].1 = true;
                            let (shadow_gates, _) = &mut gates[1];
                            shadow_gates.push(rule.gate.clone());
                            shadow_gates.len() - 1
                        })
                    });
                    (&mut shadow, moved)
                } else {
                    (&mut enforced, gate)
                };
                let mut item = CheckItem::new(applied.limit.clone(), identifier, applied.cost);
                if applied.idempotent {
                    // One identifier for the request, shared by its items: the trusted
                    // header's, else the path's own.
                    if request_key.is_none() {
                        request_key = plan
                            .request_id
                            .clone()
                            .or_else(|| plan.own_id.map(|id| id.identifier()));
                    }
                    if let Some(id) = &request_key {
                        item = item.with_request_id(id.clone());
                    }
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
    /// A plan of `config` matching no rule, its checks to be built in `checks` (emptied).
    fn empty(own_id: Option<OwnId>, mut checks: [Check; 2], config: &Config) -> Plan<'c> {
        checks.iter_mut().for_each(Check::clear);
        Plan {
            rules: SmallVec::new(),
            absent: Vec::new(),
            request_id: None,
            own_id,
            allowed: Vec::new(),
            checks,
            sent: 0,
            enforced: None,
            shadow: None,
            refused: None,
            denied: None,
            shadow_listed: Vec::new(),
            probe: ListProbe::default(),
            settles: false,
            deny_scope: SmallVec::new(),
            shadow_header: config.shadow_header,
            headers: config.headers,
            shadow_kinds: SmallVec::new(),
        }
    }

    /// The checks to send in one batch: the enforced limits first, then the shadow ones (each
    /// only when present). None when the request is refused for a missing identifier or by a
    /// deny list before the store.
    pub fn checks(&self) -> &[Check] {
        &self.checks[..self.sent]
    }

    /// The refusal by a deny list found before the store (a static entry, or one
    /// `Plan::deny_remembered` set), if any: the request is answered 403 with no store call.
    pub fn denied(&self) -> Option<&Denial> {
        self.denied.as_ref()
    }

    /// Every list member an entry matching this request could have (empty when no list applies).
    pub fn candidates(&self) -> &Candidates {
        self.probe().candidates()
    }

    /// What the request offers the lists: the plan's own, or the one its first gated check
    /// took.
    fn probe(&self) -> &ListProbe {
        if !self.probe.is_empty() {
            return &self.probe;
        }
        // A check not sent (a request the isolate refused after planning) still holds it; the
        // spares were emptied when the plan was made.
        self.checks
            .iter()
            .map(Check::probe)
            .find(|probe| !probe.is_empty())
            .unwrap_or(&self.probe)
    }

    /// The dynamic deny lists whose match refuses this request: `deny` and `deny:<rule>` of each
    /// matched enforced rule (empty when the dynamic lists are not consulted).
    pub fn deny_scope(&self) -> &[&'c str] {
        &self.deny_scope
    }

    /// Refuses the request by a dynamic denial `cache` remembers at `now_ms`, when no static
    /// entry refused it already and a dynamic deny list applies to it ([`Plan::deny_scope`]): the
    /// isolate answers it before the store.
    pub(crate) fn deny_if_remembered(&mut self, cache: &mut lists::DenyCache, now_ms: u64) {
        if self.denied.is_some() || self.deny_scope.is_empty() {
            return;
        }
        if let Some(denial) = cache.lookup(&self.deny_scope, self.probe().candidates(), now_ms) {
            self.deny_remembered(denial);
        }
    }

    /// Refuses the request with 400 for `refusal`: no check is sent.
    fn refuse(&mut self, refusal: Refusal<'c>) {
        self.refused = Some(refusal);
        self.sent = 0;
        self.enforced = None;
        self.shadow = None;
    }

    /// Refuses the request by `denial` (a dynamic denial this isolate remembers, see
    /// [`crate::lists::DenyCache`]) without asking the store: no check is sent.
    fn deny_remembered(&mut self, denial: Denial) {
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
            // The first gated check takes the plan's probe, a second a copy of it (their
            // candidates shared either way).
            let probe = if self.probe.is_empty() {
                self.probe().clone()
            } else {
                std::mem::take(&mut self.probe)
            };
            check.gated(probe, gates)
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

    /// The plan's checks, sent or not (not emptied), for the next [`Config::plan_in`] to empty
    /// and build its own in; the plan is left with none.
    pub(crate) fn take_checks(&mut self) -> [Check; 2] {
        self.sent = 0;
        self.enforced = None;
        self.shadow = None;
        std::mem::take(&mut self.checks)
    }

    /// The unit of a limit whose cost is settled after the response, for `qu`.
    pub(crate) fn unit_of(&self, name: &str) -> Option<&'c str> {
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

    /// Why the shadow check's item at `index` is decided in shadow when its rule is enforced
    /// (`soft`, or staged enforcement leaving its identifier out); `None` for a shadow rule's
    /// limit.
    pub fn unenforced(&self, index: usize) -> Option<Unenforced> {
        self.shadow_kinds.get(index).copied().flatten()
    }

    /// The enforced limits' check, if any applies.
    pub fn enforced(&self) -> Option<&Check> {
        self.enforced.map(|i| &self.checks[i])
    }

    /// The shadow limits' check, if any applies.
    pub fn shadow(&self) -> Option<&Check> {
        self.shadow.map(|i| &self.checks[i])
    }

    /// Why the request is refused with 400 without asking the store, if it is: an enforced
    /// limit's identifier missing where its setting says deny, or a field sent twice.
    pub fn refusal(&self) -> Option<&Refusal<'c>> {
        self.refused.as_ref()
    }

    /// Shadow limits whose identifier is missing and whose setting says deny (reported only).
    pub(crate) fn shadow_refusals(&self) -> impl Iterator<Item = &'c RuleLimit> + '_ {
        self.absent
            .iter()
            .filter(|a| a.rule.shadow && a.limit.missing == Missing::Deny)
            .map(|a| a.limit)
    }

    /// Every check the store decided, with its verdict — the enforced one first — given the
    /// verdicts for [`Plan::checks`] (in order): what the log line and `sim`'s tallies read.
    pub fn decided<'p>(&'p self, verdicts: &'p [Verdict]) -> impl Iterator<Item = Decided<'p>> {
        let enforced = self
            .enforced_decided(verdicts)
            .map(|(check, verdict)| Decided {
                check,
                verdict,
                shadow: false,
            });
        let shadow = self
            .shadow_decided(verdicts)
            .map(|(check, verdict)| Decided {
                check,
                verdict,
                shadow: true,
            });
        enforced.into_iter().chain(shadow)
    }

    /// The enforced check with its verdict, when both exist.
    pub(crate) fn enforced_decided<'v>(
        &self,
        verdicts: &'v [Verdict],
    ) -> Option<(&Check, &'v Verdict)> {
        let i = self.enforced?;
        Some((&self.checks[i], verdicts.get(i)?))
    }

    /// The shadow check with its verdict, when both exist.
    pub(crate) fn shadow_decided<'v>(
        &self,
        verdicts: &'v [Verdict],
    ) -> Option<(&Check, &'v Verdict)> {
        let i = self.shadow?;
        Some((&self.checks[i], verdicts.get(i)?))
    }
}

/// A check the store decided, with its verdict ([`Plan::decided`]).
#[derive(Debug, Clone, Copy)]
pub struct Decided<'p> {
    /// The check: the enforced limits' or the shadow limits'.
    pub check: &'p Check,
    /// The store's verdict on it.
    pub verdict: &'p Verdict,
    /// Whether it is the shadow limits' check.
    pub shadow: bool,
}
