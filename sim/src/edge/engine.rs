//! One configuration replayed request by request through the Worker's own request path
//! (`edgelimit_worker::Edge`: rule matching and identifiers, the lists and the isolate's memory of
//! their denials, the library's `Limiter` with the Worker's time mode and denial cache deciding
//! every limit of the matched rules together, all or nothing, the Worker's ruling and its
//! settlement) — then tallied per rule and per limit.
//!
//! The sim models one isolate: one denial cache, one fallback limiter (under `wrangler dev` there
//! is one; in production each isolate has its own). Its clock is the trace's time — for the
//! Worker's own log lines, the logged `local_ms` — and the store decides at the logged store
//! time under `time = "server"`.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use edgelimit::{Algorithm, Identifier, ManualClock, Reason};
use edgelimit_worker::lists;
use edgelimit_worker::plan::MatchedRules;
use edgelimit_worker::{
    Config, Edge, Handled, IdentifierSource, Incoming, LogLine, Missing, RequestView, Rule,
    RuleLimit, Settlement,
};
use rustc_hash::FxBuildHasher;
use smallvec::SmallVec;

use super::against::LogCheck;
use super::identifiers::{self, Identifiers};
use super::model::{LimitReport, OutageReport, RuleReport, TopIdentifier};
use super::names::display_identifier;
use super::outage::Outages;
use super::overrides::{AppliedOverrides, Assigned, Overrides};
use super::series::Series;
use super::store::ReplayStore;
use super::truth::{Boundary, LimitTruth};
use super::whatif::Answered;
use crate::error::SimError;
use crate::readers::Request;
use crate::replay::due::Due;

/// Tallies of one limit of one rule.
#[derive(Debug, Default)]
struct LimitTally {
    checked: u64,
    denied: u64,
    over_limit: u64,
    cached_denial: u64,
    failed_closed: u64,
    fallback_denied: u64,
    refused: u64,
    answered: u64,
    missing: u64,
    skipped: u64,
    failed_open: u64,
    fallback_admitted: u64,
    /// Denials by dense identifier id (see `Identifiers`).
    top: Vec<u64>,
}

/// Tallies of one rule.
#[derive(Debug, Default)]
struct RuleTally {
    matched: u64,
    admitted: u64,
    denied: u64,
    /// Matched requests a deny list refused (403; for a shadow rule, would have).
    listed: u64,
    /// Matched requests an allow list exempted from the rule's limits.
    allowlisted: u64,
    limits: Vec<LimitTally>,
}

/// Request-level counts.
#[derive(Debug, Default)]
struct Totals {
    requests: u64,
    /// By status: 200, 400, 403, 429, 503, other.
    statuses: [u64; 6],
    unmatched: u64,
    missing: u64,
    shadow_would_deny: u64,
    outage_requests: u64,
    outage_failed_open: u64,
    outage_fallback: u64,
    settled: u64,
    settle_failed: u64,
}

fn status_slot(status: u16) -> usize {
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

/// A configuration under replay.
#[derive(Debug)]
pub struct EdgeReplay {
    /// The Worker's request path over the replay store.
    edge: Edge<ReplayStore>,
    clock: Arc<ManualClock>,
    outages: Outages,
    rules: Vec<RuleTally>,
    /// The exact truth per limit name (limits sharing a name share state).
    truths: Vec<(Arc<str>, LimitTruth)>,
    totals: Totals,
    series: Series,
    log_check: Option<LogCheck>,
    /// What requests settle when they land (their concurrency leases released, their settled
    /// costs committed): the Worker's settlement, due at the request's time plus its duration.
    landings: Due<Settlement>,
    landed: u64,
    extracted: Extracted,
    /// `--overrides`: applied to the store at the first request (then kept for the report).
    overrides: Option<Overrides>,
    /// The limits and identifiers `--overrides` gave a tier or an override: left out of the
    /// exact truths, whose reference is the limit's own policy.
    assigned: Assigned,
}

/// How many requests ahead of its step a request is best prepared ([`EdgeReplay::prepare`]):
/// far enough for its memory to arrive, near enough to stay in cache.
pub const PREPARE_AHEAD: usize = 16;

/// Polls a future that must be ready at once: the replay store never waits.
pub(super) fn ready<F: Future>(future: F) -> Result<F::Output, SimError> {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(out) => Ok(out),
        Poll::Pending => Err(SimError::Store(
            "the replay's in-memory store did not answer at once".into(),
        )),
    }
}

/// A limit's identifier for one request: for the Worker's own log lines, the identifier it
/// logged for the limit of that name (then the request's own parts, which hold the path);
/// otherwise the limit's source, as the Worker extracts it.
fn identify(
    logged: Option<&LogLine>,
    applied: &RuleLimit,
    request: &Request,
) -> Option<Identifier> {
    if let Some(logged) = logged {
        if logged.limits.iter().any(|l| *l.name == *applied.limit.name) {
            return logged.identifier(&applied.limit.name);
        }
    }
    applied.source.extract(request)
}

/// The identifiers one request offers, by source: limits keyed alike (`ip` for several) share
/// one extraction (an `api-key:` source hashes the key) and one `Identifier`.
#[derive(Debug, Default)]
struct Extracted {
    /// The configuration's distinct sources.
    sources: Vec<IdentifierSource>,
    /// Each configured limit (by address) with its source's place in `sources`: found by a
    /// pointer's comparison, not by comparing sources.
    limits: Vec<(usize, usize)>,
    /// This request's value per source, once extracted.
    values: Vec<Option<Option<Identifier>>>,
    /// The rules this request matches (by index), when it was prepared: not matched again.
    rules: Option<SmallVec<[u32; 4]>>,
    /// The values of the requests prepared ahead (`EdgeReplay::prepare`), oldest first.
    prepared: VecDeque<Prepared>,
    /// Emptied value buffers, kept to be filled again.
    spare: Vec<Vec<Option<Option<Identifier>>>>,
    /// Per source that hashes its values (`api-key:`), the identifiers made of its latest
    /// values: a trace repeats its keys, and a SHA-256 costs more than the rest of a request's
    /// replay. Empty for the other sources.
    hashed: Vec<HashedValues>,
}

/// The identifiers one hashing source made of its values, up to [`HASHED_VALUES`] of them (then
/// forgotten all at once: a cache, bounded).
type HashedValues = HashMap<Box<str>, Identifier, FxBuildHasher>;

/// How many values a hashing source remembers the identifiers of (a few MiB each).
const HASHED_VALUES: usize = 1 << 17;

/// A request's identifiers, extracted ahead of its step.
#[derive(Debug)]
struct Prepared {
    /// Which request: its time and size (a step whose request differs extracts for itself).
    request: (u64, usize),
    values: Vec<Option<Option<Identifier>>>,
    /// The rules it matches, by index in the configuration.
    rules: SmallVec<[u32; 4]>,
    /// The identifiers' hashes (`identifiers::hash`), to fetch what they will read.
    hashes: SmallVec<[u64; 4]>,
}

/// Where a configured limit lives: it identifies the limit while the configuration is held.
fn address(applied: &RuleLimit) -> usize {
    std::ptr::from_ref(applied) as usize
}

impl Extracted {
    fn new(config: &Config) -> Extracted {
        let mut sources: Vec<IdentifierSource> = Vec::new();
        let mut limits = Vec::new();
        for applied in config.rules.iter().flat_map(|r| &r.limits) {
            let slot = match sources.iter().position(|s| *s == applied.source) {
                Some(slot) => slot,
                None => {
                    sources.push(applied.source.clone());
                    sources.len() - 1
                }
            };
            limits.push((address(applied), slot));
        }
        Extracted {
            values: vec![None; sources.len()],
            hashed: sources.iter().map(|_| HashedValues::default()).collect(),
            sources,
            limits,
            ..Extracted::default()
        }
    }

    /// The identifier the source in `slot` gives `request`: `IdentifierSource::extract`, with
    /// what a hashing source made of a value it met lately taken as it was.
    fn extract(&mut self, slot: usize, request: &Request) -> Option<Identifier> {
        let source = &self.sources[slot];
        if !source.hashes() {
            return source.extract(request);
        }
        let value = source.value(request)?;
        let hashed = &mut self.hashed[slot];
        if let Some(identifier) = hashed.get(&*value) {
            return Some(identifier.clone());
        }
        if hashed.len() >= HASHED_VALUES {
            hashed.clear();
        }
        let identifier = source.identifier_of(&value);
        hashed.insert(value.into(), identifier.clone());
        Some(identifier)
    }

    /// Where the value of `applied`'s source sits in a request's values.
    fn slot(&self, applied: &RuleLimit) -> Option<usize> {
        let at = address(applied);
        match self.limits.iter().find(|(limit, _)| *limit == at) {
            Some(&(_, slot)) => Some(slot),
            // Not a limit of the configuration this was built from (none in practice).
            None => self.sources.iter().position(|s| *s == applied.source),
        }
    }

    /// Keeps a request's emptied values to be filled again.
    fn recycle(&mut self, mut values: Vec<Option<Option<Identifier>>>) {
        values.clear();
        self.spare.push(values);
    }

    /// An empty value per source.
    fn fresh_values(&mut self) -> Vec<Option<Option<Identifier>>> {
        let mut values = self.spare.pop().unwrap_or_default();
        values.resize(self.sources.len(), None);
        values
    }

    /// Extracts, for `request`, the sources of the limits of the rules it matches, to be used
    /// by its step (when it is the next one stepped); returns the hashes of the identifiers.
    fn prepare(&mut self, config: &Config, request: &Request) -> &[u64] {
        let mut values = self.fresh_values();
        let mut rules = SmallVec::new();
        for (index, rule) in (0u32..).zip(&config.rules) {
            if !rule.matches(request) {
                continue;
            }
            rules.push(index);
            for applied in &rule.limits {
                if let Some(slot) = self.slot(applied) {
                    if values[slot].is_none() {
                        values[slot] = Some(self.extract(slot, request));
                    }
                }
            }
        }
        let hashes = values
            .iter()
            .flatten()
            .flatten()
            .map(|identifier| identifiers::hash(identifier.as_bytes()))
            .collect();
        self.prepared.push_back(Prepared {
            request: (request.time_ms, request.size()),
            values,
            rules,
            hashes,
        });
        &self.prepared.back().expect("just pushed").hashes
    }

    /// Forgets the last request's values and takes the next one's: as prepared, or, for a
    /// request not prepared (or not in the order prepared: what was prepared is dropped),
    /// extracted now. The Worker's own lines name each limit's identifier: nothing to extract.
    fn next_request(&mut self, config: &Config, request: &Request) {
        let prepared = matches!(
            self.prepared.front(),
            Some(p) if p.request == (request.time_ms, request.size())
        );
        if !prepared {
            while let Some(p) = self.prepared.pop_front() {
                self.recycle(p.values);
            }
            if request.logged.is_none() {
                self.prepare(config, request);
            }
        }
        let done = match self.prepared.pop_front() {
            Some(next) => {
                self.rules = Some(next.rules);
                std::mem::replace(&mut self.values, next.values)
            }
            None => {
                self.rules = None;
                let fresh = self.fresh_values();
                std::mem::replace(&mut self.values, fresh)
            }
        };
        self.recycle(done);
    }
}

/// A trace's request as the Worker's request path takes it: its identifiers as the replay
/// extracted them ahead (each source once), or as the Worker logged them, and its rules as
/// matched ahead.
struct Replayed<'a> {
    request: &'a Request,
    logged: Option<&'a LogLine>,
    extracted: &'a Extracted,
}

impl RequestView for Replayed<'_> {
    fn method(&self) -> &str {
        self.request.method()
    }
    fn host(&self) -> &str {
        self.request.host()
    }
    fn path(&self) -> &str {
        self.request.path()
    }
    fn query(&self, name: &str) -> Option<String> {
        self.request.query(name)
    }
    fn header(&self, name: &str) -> Option<String> {
        self.request.header(name)
    }
    fn header_ref(&self, name: &str) -> Option<std::borrow::Cow<'_, str>> {
        self.request.header_ref(name)
    }
    fn country(&self) -> Option<String> {
        self.request.country()
    }
}

impl Incoming for Replayed<'_> {
    fn identifier(&self, applied: &RuleLimit) -> Option<Identifier> {
        let extracted = self.extracted;
        match (self.logged, extracted.slot(applied)) {
            (None, Some(slot)) => match &extracted.values[slot] {
                Some(value) => value.clone(),
                None => applied.source.extract(self.request),
            },
            _ => identify(self.logged, applied, self.request),
        }
    }

    fn matching<'c>(&self, config: &'c Config) -> MatchedRules<'c> {
        match &self.extracted.rules {
            Some(rules) => rules.iter().map(|&i| &config.rules[i as usize]).collect(),
            None => config.matching(self.request),
        }
    }
}

impl EdgeReplay {
    /// A replay of `config` on the replay store (`ReplayStore`: the library's all-or-nothing
    /// rule over states indexed by identifier, or `MemoryStore` itself when a limit is
    /// idempotent), the store down during `outages`; `compare_log` checks each request of a
    /// `--format edgelimit` trace against its line.
    pub fn new(
        config: Config,
        outages: Outages,
        compare_log: bool,
    ) -> Result<EdgeReplay, SimError> {
        EdgeReplay::with_overrides(config, outages, compare_log, None)
    }

    /// [`EdgeReplay::new`] with the tiers, overrides and lists of an `--overrides` file (checked
    /// against this `config`), written to the store at the first request. With them the replay
    /// decides on the library's `MemoryStore`, which keeps assignments and lists exactly as the
    /// Redis scripts do, and the dynamic lists are consulted as `config` says (as at the edge,
    /// with the isolate's memory of their denials).
    pub fn with_overrides(
        mut config: Config,
        outages: Outages,
        compare_log: bool,
        overrides: Option<Overrides>,
    ) -> Result<EdgeReplay, SimError> {
        if overrides.is_none() {
            // The replay store then holds no dynamic deny/allow list (they live in the
            // deployment's Redis), so asking it would decide nothing differently and only cost
            // time: the configuration's static lists still apply in the plan, as at the edge.
            config.dynamic_lists = false;
        }
        let assigned = overrides
            .as_ref()
            .map(Overrides::assigned)
            .unwrap_or_default();
        let shadow_limits = config
            .rules
            .iter()
            .filter(|r| r.shadow)
            .flat_map(|r| r.limits.iter().map(|l| l.limit.name.clone()))
            .collect();
        let clock = Arc::new(ManualClock::at(0));
        let remembering = config
            .rules
            .iter()
            .flat_map(|r| &r.limits)
            .any(|l| l.idempotent)
            || overrides.is_some();
        let mut slots: Vec<(Arc<str>, Algorithm)> = Vec::new();
        for applied in config.rules.iter().flat_map(|r| &r.limits) {
            let slot = (applied.limit.name.clone(), applied.limit.policy.algorithm());
            if !slots.contains(&slot) {
                slots.push(slot);
            }
        }
        let mut truths: Vec<(Arc<str>, LimitTruth)> = Vec::new();
        for applied in config.rules.iter().flat_map(|r| &r.limits) {
            if !truths.iter().any(|(n, _)| *n == applied.limit.name) {
                truths.push((
                    applied.limit.name.clone(),
                    LimitTruth::new(&applied.limit.policy)?,
                ));
            }
        }
        let rules = config
            .rules
            .iter()
            .map(|r| RuleTally {
                limits: r.limits.iter().map(|_| LimitTally::default()).collect(),
                ..RuleTally::default()
            })
            .collect();
        let extracted = Extracted::new(&config);
        let series = Series::new(config.rules.len());
        // Nobody reads the limiter's metrics here: the replay's tallies are the report.
        let edge = Edge::new(config, ReplayStore::new(slots, shadow_limits, remembering))
            .without_metrics()
            .with_clock(clock.clone());
        Ok(EdgeReplay {
            series,
            edge,
            clock,
            outages,
            rules,
            truths,
            totals: Totals::default(),
            log_check: compare_log.then(LogCheck::default),
            landings: Due::default(),
            landed: 0,
            extracted,
            overrides,
            assigned,
        })
    }

    /// What `--overrides` applied, when given.
    pub fn applied_overrides(&self) -> Option<&AppliedOverrides> {
        self.overrides.as_ref().map(Overrides::applied)
    }

    /// Writes the `--overrides` operations to the store at `now_ms` (the first request's time),
    /// once.
    fn apply_overrides(&mut self, now_ms: u64) -> Result<(), SimError> {
        let Some(overrides) = self.overrides.as_mut() else {
            return Ok(());
        };
        if overrides.applied().applied_at_ms.is_some() {
            return Ok(());
        }
        let memory = self
            .edge
            .limiter()
            .store()
            .memory()
            .expect("a replay with overrides decides on MemoryStore");
        overrides.apply(memory, now_ms)
    }

    /// Settles, in time order, what the requests that landed by `now_ms` reserved — as the
    /// Worker does after the response (`settle_after`): through the limiter's `settle`, on the
    /// store, at the landing time. A landing at the very millisecond of the next request comes
    /// first. While the store is down the settlement fails, as the Worker's would, and its
    /// leases are left to their timeout.
    fn land_until(&mut self, now_ms: u64) -> Result<(), SimError> {
        while let Some((at, commits)) = self.landings.pop_due(now_ms) {
            self.clock.set(at);
            let store = self.edge.limiter().store();
            store.set_times(at, at);
            store.set_down(self.outages.down_at(at));
            let settled = ready(self.edge.settle(commits))?;
            self.totals.settled += settled.committed as u64;
            self.totals.settle_failed += settled.failed.len() as u64;
        }
        for (_, truth) in &mut self.truths {
            truth.land_until(now_ms);
        }
        Ok(())
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        self.edge.config()
    }

    /// Extracts `request`'s identifiers ahead of its [`EdgeReplay::step`] and starts fetching
    /// into cache what deciding for them will read, so that the step finds it there rather than
    /// waiting on memory, as a replay of 100,000s of identifiers otherwise does for most of
    /// them. Prepare a few requests ahead ([`PREPARE_AHEAD`]) and step them in the order
    /// prepared: a step whose request is not the oldest prepared one drops what was prepared
    /// and extracts for itself, so no answer depends on preparing.
    pub fn prepare(&mut self, request: &Request) {
        if request.logged.is_some() {
            // The Worker's own lines name each limit's identifier: read as the step reads them.
            return;
        }
        let EdgeReplay {
            edge, extracted, ..
        } = self;
        // Two stages, each fetching what the next reads: the new request's table slots now,
        // and, for the request prepared half as far ahead, the keys and states those slots
        // name.
        let hashes = extracted.prepare(edge.config(), request);
        let store = edge.store_mut();
        for &hashed in hashes {
            store.prefetch_slot(hashed);
        }
        let halfway = extracted.prepared.len().checked_sub(1 + PREPARE_AHEAD / 2);
        if let Some(nearer) = halfway.and_then(|at| extracted.prepared.get(at)) {
            for &hashed in &nearer.hashes {
                store.prefetch_states(hashed);
            }
        }
    }

    /// Replays one request; `answered` receives what was answered (for `--baseline`).
    pub fn step(&mut self, request: &Request, answered: &mut Answered) -> Result<(), SimError> {
        let local_ms = request.time_ms;
        self.apply_overrides(local_ms)?;
        self.land_until(local_ms)?;
        let duration = request.duration_ms.map(u64::from);
        let logged = request.logged.as_deref();
        let (enforced_ms, shadow_ms) = match logged {
            Some(l) => (
                l.time_ms.unwrap_or(local_ms),
                l.shadow_time_ms.or(l.time_ms).unwrap_or(local_ms),
            ),
            None => (local_ms, local_ms),
        };
        let down = self.outages.down_at(local_ms);
        let EdgeReplay {
            edge,
            clock,
            rules,
            truths,
            totals,
            series,
            log_check,
            landings,
            landed,
            extracted,
            assigned,
            ..
        } = self;
        extracted.next_request(edge.config(), request);
        clock.set(local_ms);
        let store = edge.store_mut();
        store.set_times(enforced_ms, shadow_ms);
        store.set_down(down);
        store.identifiers_mut().next_request();
        let edge = &*edge;
        let replayed = Replayed {
            request,
            logged,
            extracted,
        };
        // What the Worker's request path answers, its store the replay's.
        let handled = ready(edge.handle(&replayed, local_ms))?;
        let outcome = handled.outcome();
        let plan = handled.plan();
        let forwarded = outcome.allowed();

        let status = outcome.status;
        totals.requests += 1;
        totals.statuses[status_slot(status)] += 1;
        totals.unmatched += u64::from(plan.rules.iter().all(|r| r.shadow));
        totals.missing += u64::from(!plan.absent.is_empty());
        totals.shadow_would_deny += u64::from(!outcome.shadow_denied.is_empty());
        if down {
            totals.outage_requests += 1;
        }
        let mut ids = edge.limiter().store().identifiers();
        for decided in handled.decided() {
            let verdict = decided.verdict;
            let admitted = if decided.shadow {
                verdict.allowed
            } else {
                forwarded
            };
            for (item, decision) in decided.check.items().iter().zip(&verdict.decisions) {
                if down {
                    totals.outage_failed_open += u64::from(decision.reason == Reason::FailedOpen);
                    totals.outage_fallback += u64::from(decision.reason == Reason::Fallback);
                }
                // A list settled this item, the limit decided nothing; and an identifier on a
                // tier or override is not held to the limit's own policy.
                if matches!(decision.reason, Reason::Denylisted | Reason::Allowlisted)
                    || (!assigned.is_empty()
                        && assigned
                            .get(&item.identifier)
                            .is_some_and(|limits| limits.iter().any(|l| **l == *item.limit.name)))
                {
                    continue;
                }
                // The item's name is the configuration's own `Arc` (pointer equal) unless two
                // limits share a name: compare pointers across all before comparing text.
                let name = &item.limit.name;
                let at = truths
                    .iter()
                    .position(|(n, _)| Arc::ptr_eq(n, name))
                    .or_else(|| truths.iter().position(|(n, _)| n == name));
                let truth = at.map(|i| &mut truths[i]);
                if let Some((_, truth)) = truth {
                    truth.record(
                        ids.id(&item.identifier),
                        item.cost,
                        decision,
                        verdict.decided_at_ms,
                        admitted,
                        duration,
                    );
                }
            }
        }
        // The request lands after its duration; the Worker settles it then (a request without
        // a duration keeps its leases until they time out).
        if let Some(duration) = duration {
            *landed += 1;
            let name = format!("sim-{landed}");
            if let Some(settlement) = handled.settlement(&name, |_| None) {
                landings.push(local_ms.saturating_add(duration), settlement);
            }
        }
        answered.status = status;
        answered.rules.clear();
        answered.binding = None;
        answered.listed = outcome
            .denied
            .as_ref()
            .map(|d| format!("{}: {}", d.list, d.entry));
        let config = edge.config();
        for rule in &plan.rules {
            let Some(index) = config.rules.iter().position(|r| std::ptr::eq(r, *rule)) else {
                continue;
            };
            answered.rules.push(index);
            let denied = tally_rule(&mut rules[index], rule, &handled, &replayed, &mut ids);
            let refused = if rule.shadow { denied } else { !forwarded };
            series.add(index, local_ms, refused);
        }
        // Only a refusal's binding limit is read (what-if labels a flip by the refusing side):
        // a forwarded request's would cost two reference counts taken and dropped.
        let binding = outcome.binding.as_ref().filter(|_| !forwarded);
        if let (Some(binding), Some(check)) = (binding, plan.enforced()) {
            answered.binding = check
                .items()
                .iter()
                .find(|i| i.limit.name == binding.name)
                .map(|i| (binding.name.clone(), i.identifier.clone()));
        }
        if let (Some(log_check), Some(logged)) = (log_check.as_mut(), logged) {
            // The Worker's own log line, set beside the one it logged.
            log_check.add(logged, &handled.log_line(request, None));
        }
        Ok(())
    }

    /// The rules' reports, in configuration order.
    pub fn rule_reports(&mut self) -> Vec<RuleReport> {
        let boundaries: Vec<(Arc<str>, Boundary)> = {
            let ids = self.edge.limiter().store().identifiers();
            self.truths
                .iter_mut()
                .map(|(name, truth)| (name.clone(), truth.finish(&ids)))
                .collect()
        };
        self.edge
            .config()
            .rules
            .iter()
            .zip(&self.rules)
            .map(|(rule, tally)| RuleReport {
                name: rule.name.clone(),
                shadow: rule.shadow,
                matched: tally.matched,
                admitted: tally.admitted,
                denied: tally.denied,
                listed: tally.listed,
                allowlisted: tally.allowlisted,
                limits: rule
                    .limits
                    .iter()
                    .zip(&tally.limits)
                    .map(|(applied, t)| self.limit_report(applied, t, &boundaries))
                    .collect(),
            })
            .collect()
    }

    fn limit_report(
        &self,
        applied: &RuleLimit,
        t: &LimitTally,
        boundaries: &[(Arc<str>, Boundary)],
    ) -> LimitReport {
        let ids = self.edge.limiter().store().identifiers();
        let mut top: Vec<(&Identifier, u64)> = (0u32..)
            .zip(&t.top)
            .filter(|(_, n)| **n > 0)
            .map(|(id, n)| (ids.name(id), *n))
            .collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
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
            checked: t.checked,
            denied: t.denied,
            denied_by: [
                ("over_limit", t.over_limit),
                ("cached_denial", t.cached_denial),
                ("failed_closed", t.failed_closed),
                ("fallback", t.fallback_denied),
                ("missing_identifier", t.refused),
            ]
            .into_iter()
            .collect(),
            answered: t.answered,
            missing: t.missing,
            skipped: t.skipped,
            failed_open: t.failed_open,
            fallback_admitted: t.fallback_admitted,
            top_identifiers: top
                .into_iter()
                .take(10)
                .map(|(id, denied)| TopIdentifier {
                    identifier: display_identifier(id),
                    denied,
                })
                .collect(),
            boundary,
        }
    }

    /// Request-level counts: requests, admitted, denied, unmatched, statuses, missing
    /// identifiers, shadow denials.
    pub fn totals(&self) -> TotalsReport {
        let t = &self.totals;
        let mut statuses: std::collections::BTreeMap<u16, u64> = STATUSES
            .iter()
            .zip(&t.statuses)
            .filter(|(_, n)| **n > 0)
            .map(|(s, n)| (*s, *n))
            .collect();
        if t.statuses[OTHER_STATUS] > 0 {
            statuses.insert(0, t.statuses[OTHER_STATUS]);
        }
        TotalsReport {
            requests: t.requests,
            admitted: t.statuses[0],
            denied: t.requests - t.statuses[0],
            unmatched: t.unmatched,
            statuses,
            missing_identifiers: t.missing,
            shadow_would_deny: t.shadow_would_deny,
            settled: t.settled,
            settle_failed: t.settle_failed,
        }
    }

    /// What the outages did, when there were any.
    pub fn outage_report(&self) -> OutageReport {
        OutageReport {
            spans: self.outages.spans(),
            requests: self.totals.outage_requests,
            failed_closed: self.totals.statuses[status_slot(503)],
            failed_open: self.totals.outage_failed_open,
            fallback_decisions: self.totals.outage_fallback,
        }
    }

    /// The comparison with the Worker's own lines (`--format edgelimit`).
    pub fn log_check(&self) -> Option<&LogCheck> {
        self.log_check.as_ref()
    }

    /// The charts' series.
    pub fn series(&self) -> &Series {
        &self.series
    }
}

/// Request-level counts of one replay.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    pub statuses: std::collections::BTreeMap<u16, u64>,
    /// Requests lacking some identifier.
    pub missing_identifiers: u64,
    /// Requests a shadow limit would have denied.
    pub shadow_would_deny: u64,
    /// Settlements applied when requests landed (leases released, costs committed).
    pub settled: u64,
    /// Settlements that failed (the store down when the request landed).
    pub settle_failed: u64,
}

/// A limit's identifier source as written in the configuration.
fn source_text(applied: &RuleLimit) -> String {
    use edgelimit_worker::IdentifierSource as S;
    fn text(s: &S) -> String {
        match s {
            S::ClientIp => "ip".into(),
            S::Header(h) => format!("header:{h}"),
            S::Query(q) => format!("query:{q}"),
            S::PathSegment(n) => format!("path:{n}"),
            S::ApiKey(inner) => format!("api-key:{}", text(inner)),
        }
    }
    text(&applied.source)
}

/// Tallies one matched rule; returns whether one of its limits refused (or would have).
fn tally_rule(
    tally: &mut RuleTally,
    rule: &Rule,
    handled: &Handled<'_>,
    request: &Replayed<'_>,
    ids: &mut Identifiers,
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
                    t.refused += 1;
                    t.denied += 1;
                    denied = true;
                    continue;
                }
                Missing::Allow => continue,
                Missing::Shared => {}
            }
        }
        let Some((check, verdict)) = check else {
            continue;
        };
        let items = check.items();
        let mut same_name = items
            .iter()
            .enumerate()
            .filter(|(_, i)| i.limit.name == applied.limit.name);
        let Some((mut index, _)) = same_name.next() else {
            continue;
        };
        // Two rules may apply one limit name to different identifiers: then look it up.
        if same_name.next().is_some() {
            let id = if absent {
                Identifier::from("")
            } else {
                request
                    .identifier(applied)
                    .unwrap_or_else(|| Identifier::from(""))
            };
            match items
                .iter()
                .position(|i| i.limit.name == applied.limit.name && i.identifier == id)
            {
                Some(i) => index = i,
                None => continue,
            }
        }
        let Some(decision) = verdict.decisions.get(index) else {
            continue;
        };
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
        denied = true;
        t.denied += 1;
        match decision.reason {
            Reason::CachedDenial => t.cached_denial += 1,
            Reason::FailedClosed => t.failed_closed += 1,
            Reason::Fallback => t.fallback_denied += 1,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn request(ip: &str, at_ms: u64) -> Request {
        let mut r = Request::default();
        r.time_ms = at_ms;
        r.set_method(b"GET");
        r.set_host(b"api.example.com");
        r.set_target(b"/api/items");
        r.set_client_ip(ip.as_bytes());
        r
    }

    /// Requests from a pool of clients and keys, some writes, some without a key; consecutive
    /// ones differ (in time or size) so a step never mistakes another's prepared values.
    fn mixed_requests(n: u64) -> Vec<Request> {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        (0..n)
            .map(|i| {
                let r = next();
                let mut request = request(&format!("198.51.100.{}", r % 40), i * 7 + r % 5);
                if r % 4 == 0 {
                    request.set_method(b"POST");
                    request.add_header(b"x-user", format!("u{}", r % 9).as_bytes());
                }
                if r % 5 != 0 {
                    request.add_header(b"authorization", format!("key-{}", r % 15).as_bytes());
                }
                request
            })
            .collect()
    }

    /// Steps `requests` through a fresh replay, calling `prepare(i, replay)` before the step of
    /// request `i`; the statuses answered and the reports as JSON.
    fn replayed(
        requests: &[Request],
        mut prepare: impl FnMut(usize, &mut EdgeReplay),
    ) -> (Vec<u16>, String) {
        let config = edgelimit_worker::config_file::parse(
            r#"
[[rules]]
name = "api"
path_prefix = "/api/"
limits = [
  { name = "per-ip", policy = "fixed 5/1s", identifier = "ip" },
  { name = "per-key", policy = "gcra 3/1s burst 2", identifier = "api-key:header:authorization" },
]

[[rules]]
name = "writes"
methods = ["POST"]
limits = [{ name = "write-user", policy = "sliding-log 2/1s", identifier = "header:x-user", missing = "allow" }]

[[rules]]
name = "watch"
shadow = true
limits = [{ name = "watch-ip", policy = "token-bucket 4/1s burst 4", identifier = "ip" }]
"#,
            "test",
        )
        .unwrap();
        let mut replay = EdgeReplay::new(config, Outages::default(), false).unwrap();
        let mut answered = Answered::default();
        let mut statuses = Vec::new();
        for (i, request) in requests.iter().enumerate() {
            prepare(i, &mut replay);
            replay.step(request, &mut answered).unwrap();
            statuses.push(answered.status);
        }
        let reports = serde_json::to_string(&replay.rule_reports()).unwrap();
        (statuses, reports)
    }

    /// A hashing source's identifiers, remembered per value, are the Worker's own extraction,
    /// and each distinct key is hashed once; the other sources are extracted as they are.
    #[test]
    fn hashed_keys_are_remembered_as_the_worker_makes_them() {
        let config = edgelimit_worker::config_file::parse(
            r#"
[[rules]]
name = "api"
limits = [
  { name = "per-key", policy = "fixed 5/1s", identifier = "api-key:header:authorization" },
  { name = "per-user", policy = "fixed 5/1s", identifier = "header:x-user", missing = "allow" },
]
"#,
            "test",
        )
        .unwrap();
        let mut extracted = Extracted::new(&config);
        let requests = mixed_requests(500);
        for request in &requests {
            for slot in 0..2 {
                let source = extracted.sources[slot].clone();
                assert_eq!(
                    extracted.extract(slot, request),
                    source.extract(request),
                    "{source:?}"
                );
            }
        }
        let keys: std::collections::HashSet<_> = requests
            .iter()
            .filter_map(|r| r.header_ref("authorization"))
            .collect();
        assert_eq!(extracted.hashed[0].len(), keys.len());
        assert!(extracted.hashed[1].is_empty());
    }

    #[test]
    fn preparing_ahead_changes_no_answer_even_out_of_order() {
        let requests = mixed_requests(3000);
        let plain = replayed(&requests, |_, _| {});
        assert!(plain.0.contains(&429) && plain.0.contains(&200));
        // As `sim replay` does: each request prepared `PREPARE_AHEAD` ahead of its step.
        let ahead = replayed(&requests, |i, replay| {
            if i == 0 {
                requests
                    .iter()
                    .take(PREPARE_AHEAD)
                    .for_each(|r| replay.prepare(r));
            }
            if let Some(r) = requests.get(i + PREPARE_AHEAD) {
                replay.prepare(r);
            }
        });
        assert_eq!(ahead, plain);
        // Prepared out of order (the next request's values sit where this one's should): each
        // step must see they are not its own and extract for itself.
        let skewed = replayed(&requests, |i, replay| {
            if let Some(r) = requests.get(i + 1) {
                replay.prepare(r);
            }
        });
        assert_eq!(skewed, plain);
    }

    #[test]
    fn the_most_limited_identifiers_are_counted_per_limit() {
        let config = edgelimit_worker::config_file::parse(
            r#"
[[rules]]
name = "api"
path_prefix = "/api/"
limits = [{ name = "per-ip", policy = "fixed 1/1m", identifier = "ip" }]
"#,
            "test",
        )
        .unwrap();
        let mut replay = EdgeReplay::new(config, Outages::default(), false).unwrap();
        let mut answered = Answered::default();
        // Within one minute: a 5 times, b 3 times, c once; one admitted each, the rest denied
        // (the denial cache answers some of them: denials all the same). b first, so order of
        // first sight is not what ranks them.
        let sent = [("b", 3), ("a", 5), ("c", 1)];
        let mut t = 1_700_000_000_000;
        for (who, n) in sent {
            for _ in 0..n {
                t += 1;
                replay
                    .step(
                        &request(&format!("192.0.2.{}", who.as_bytes()[0]), t),
                        &mut answered,
                    )
                    .unwrap();
            }
        }
        let limit = &replay.rule_reports()[0].limits[0];
        let top: Vec<(&str, u64)> = limit
            .top_identifiers
            .iter()
            .map(|t| (t.identifier.as_str(), t.denied))
            .collect();
        assert_eq!(top, [("192.0.2.97", 4), ("192.0.2.98", 2)]);
        assert_eq!(limit.denied, 6);
    }
}
