//! One configuration replayed request by request through the Worker's own request path
//! (`edgelimit_engine::Edge`: rule matching and identifiers, the lists and the isolate's memory of
//! their denials, the library's `Limiter` with the Worker's time mode and denial cache deciding
//! every limit of the matched rules together, all or nothing, the Worker's ruling and its
//! settlement) — then tallied per rule and per limit.
//!
//! The sim models one isolate: one denial cache, one fallback limiter (under `wrangler dev` there
//! is one; in production each isolate has its own). Its clock is the trace's time — for the
//! Worker's own log lines, the logged `local_ms` — and the store decides at the logged store
//! time under `time = "server"`.

use std::sync::Arc;

use edgelimit::{Algorithm, Identifier, ManualClock, Reason};
use edgelimit_engine::plan::Refusal;
use edgelimit_engine::{AfterResponse, Config, Edge};

use super::against::LogCheck;
use super::decisions::{DecisionLog, DecisionsReport, RequestRow};
use super::denial_spans::DenialSpans;
use super::extract::{Extracted, Replayed};
use super::global::GlobalReplay;
use super::outage::Outages;
use super::overrides::{AppliedOverrides, Assigned, Overrides};
use super::ready::ready;
use super::report::{GlobalReport, OutageReport, RuleReport};
use super::series::Series;
use super::store::ReplayStore;
use super::tally::{status_slot, tally_rule, LimitTally, RuleTally, Totals, TotalsReport};
use super::truth::{Boundary, BoundaryPart, LimitTruth};
use super::whatif::Answered;
use crate::due::Due;
use crate::error::SimError;
use crate::readers::Request;
use crate::regions::Rtt;

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
    /// The work requests leave for when they land (their concurrency leases released, their
    /// settled costs committed): the Worker's work after the response, due at the request's
    /// time plus its duration.
    landings: Due<AfterResponse>,
    extracted: Extracted,
    /// `--overrides`: applied to the store at the first request (then kept for the report).
    overrides: Option<Overrides>,
    /// The limits and identifiers `--overrides` gave a tier or an override: left out of the
    /// exact truths, whose reference is the limit's own policy.
    assigned: Assigned,
    /// `--decisions`: every limit's decision, written as it is tallied.
    decisions: Option<DecisionLog>,
    /// The configuration's regions by index (`Request::region`), when it has a global section.
    region_names: Vec<String>,
    /// The latencies between the regions and the home (`--rtt`), when it has one.
    rtt: Option<Rtt>,
    /// The configuration decided in its regions, beside this replay (the exact reference),
    /// when it has a global section.
    global: Option<GlobalReplay>,
    /// The place in the trace of the next request stepped (counted from 0).
    next_place: u64,
    /// The denials its denial cache kept, counted when the replay is one share of a trace's
    /// requests ([`EdgeReplay::count_denials`]).
    denial_spans: Option<DenialSpans>,
}

/// What one replay of a share of a trace's requests (those of some identifiers) counted, to be
/// merged with the other shares' into what one replay of them all reports.
#[derive(Debug)]
pub(super) struct Share {
    pub(super) totals: Totals,
    pub(super) rules: Vec<RuleTally>,
    /// Per rule, per limit: the identifiers it denied most, named.
    pub(super) tops: Vec<Vec<Vec<(Identifier, u64)>>>,
    /// Per limit name: its boundary metrics over the share.
    pub(super) boundaries: Vec<(Arc<str>, BoundaryPart)>,
    pub(super) series: Series,
    pub(super) denial_spans: Option<DenialSpans>,
}

/// How many requests ahead of its step a request is best prepared ([`EdgeReplay::prepare`]):
/// far enough for its memory to arrive, near enough to stay in cache.
pub const PREPARE_AHEAD: usize = 16;

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
        // A `soft` limit is always decided in the shadow check too (a staged one in either,
        // by identifier: its shadow check is told by its other items, if any).
        let shadow_limits = config
            .rules
            .iter()
            .flat_map(|r| {
                r.limits
                    .iter()
                    .filter(move |l| r.shadow || l.exceed == edgelimit_engine::Exceed::Soft)
                    .map(|l| l.limit.name.clone())
            })
            .collect();
        let clock = Arc::new(ManualClock::at(0));
        // Remembered request ids, tiers, overrides, lists and blocks live in the library's
        // `MemoryStore` alone (the replay's table keeps states only).
        let remembering = config
            .rules
            .iter()
            .flat_map(|r| &r.limits)
            .any(|l| l.idempotent || l.limit.block_ms > 0)
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
            .without_responses()
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
            extracted,
            overrides,
            assigned,
            decisions: None,
            region_names: Vec::new(),
            rtt: None,
            global: None,
            next_place: 0,
            denial_spans: None,
        })
    }

    /// Writes every limit's decision to `log` from the next request on (`--decisions`).
    pub fn write_decisions(&mut self, log: DecisionLog) {
        self.decisions = Some(log);
    }

    /// Flushes the decisions file, if one is written: what it holds.
    pub fn finish_decisions(&mut self) -> Result<Option<DecisionsReport>, SimError> {
        self.decisions.take().map(DecisionLog::finish).transpose()
    }

    /// Names the regions requests are placed in (`Request::region` indexes `names`, the
    /// configuration's `global.regions` in order) and how far each is from the home; with a
    /// `global` section, each request is then also decided in its region (`GlobalStore`s over
    /// one home), compared with this replay's, and `--decisions` writes the regions' rows.
    pub fn set_regions(&mut self, names: Vec<String>, rtt: Rtt) -> Result<(), SimError> {
        if self.edge.config().global.is_some() {
            self.global = Some(GlobalReplay::new(self.edge.config(), &rtt, &self.clock)?);
        }
        self.region_names = names;
        self.rtt = Some(rtt);
        Ok(())
    }

    /// The configuration decided in its regions against this replay, with a global section.
    pub fn global_report(&self) -> Option<GlobalReport> {
        self.global.as_ref().map(GlobalReplay::report)
    }

    /// The regions' names, by index; empty without a global section.
    pub fn region_names(&self) -> &[String] {
        &self.region_names
    }

    /// The latencies between the regions and the home, with a global section.
    pub fn rtt(&self) -> Option<&Rtt> {
        self.rtt.as_ref()
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

    /// Runs, in time order, the work the requests that landed by `now_ms` left for after
    /// their response — as the Worker does in `waitUntil` (`Edge::run_after_response`), on the
    /// store, at the landing time. A landing at the very millisecond of the next request comes
    /// first. While the store is down the settlement fails, as the Worker's would, and its
    /// leases are left to their timeout.
    fn land_until(&mut self, now_ms: u64) -> Result<(), SimError> {
        while let Some((at, work)) = self.landings.pop_due(now_ms) {
            self.clock.set(at);
            let store = self.edge.store_mut();
            store.set_times(at, at);
            store.set_down(self.outages.down_at(at));
            let done = ready(self.edge.run_after_response(work, at))?;
            self.totals.settled += done.committed as u64;
            self.totals.settle_failed += done.failed.len() as u64;
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
        if let Some(nearer) = extracted.prepared_hashes(PREPARE_AHEAD / 2) {
            for &hashed in nearer {
                store.prefetch_states(hashed);
            }
        }
    }

    /// Counts the denials its denial cache keeps, per span of the cache's time (see
    /// `DenialSpans`): for a replay of one share of a trace's requests.
    pub(super) fn count_denials(&mut self) {
        let config = self.edge.config();
        if config.denial_cache > 0 && config.denial_cache_ms > 0 {
            self.denial_spans = Some(DenialSpans::new(config.denial_cache_ms));
        }
    }

    /// Starts the charts' series at `start_ms`, the first time a whole replay of the trace
    /// counts (see `Series::starting_at`).
    pub(super) fn start_series_at(&mut self, start_ms: u64) {
        self.series = Series::starting_at(self.edge.config().rules.len(), start_ms);
    }

    /// Rows written to the decisions file so far, when one is written.
    pub(super) fn decision_rows(&self) -> Option<u64> {
        self.decisions.as_ref().map(DecisionLog::rows)
    }

    /// Replays the request at `place` in the trace (counted from 0): a replay of a share of
    /// the trace's requests steps each at its place in the whole, so that of equal windows the
    /// one a whole replay reports is found (see `LimitTruth::at_request`).
    pub(super) fn step_at(
        &mut self,
        place: u64,
        request: &Request,
        answered: &mut Answered,
    ) -> Result<(), SimError> {
        self.next_place = place;
        self.step(request, answered)
    }

    /// What this replay of a share counted, its decisions file flushed.
    pub(super) fn into_share(mut self) -> Result<Share, SimError> {
        self.finish_decisions()?;
        let ids = self.edge.limiter().store().identifiers();
        let boundaries = self
            .truths
            .iter_mut()
            .map(|(name, truth)| (name.clone(), truth.finish_part(&ids)))
            .collect();
        let tops = self
            .rules
            .iter()
            .map(|rule| rule.limits.iter().map(|l| l.top_named(&ids)).collect())
            .collect();
        drop(ids);
        Ok(Share {
            totals: std::mem::take(&mut self.totals),
            rules: std::mem::take(&mut self.rules),
            tops,
            boundaries,
            series: self.series.clone(),
            denial_spans: self.denial_spans.take(),
        })
    }

    /// Replays one request; `answered` receives what was answered (for `--baseline`).
    pub fn step(&mut self, request: &Request, answered: &mut Answered) -> Result<(), SimError> {
        let local_ms = request.time_ms;
        let place = self.next_place;
        self.next_place += 1;
        for (_, truth) in &mut self.truths {
            truth.at_request(place);
        }
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
            extracted,
            assigned,
            decisions,
            region_names,
            global,
            denial_spans,
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
        totals.ambiguous += u64::from(matches!(
            plan.refusal(),
            Some(Refusal::Repeated(_) | Refusal::Unreadable(_))
        ));
        totals.shadow_would_deny += u64::from(!outcome.shadow_denied.is_empty());
        totals.soft_tagged += u64::from(forwarded && !outcome.soft_exceeded.is_empty());
        totals.staged_shadow_denied += u64::from(!outcome.staged_denied.is_empty());
        if forwarded && outcome.delay_ms > 0 {
            totals.waits_ms.push(outcome.delay_ms);
        }
        totals.blocked += u64::from(
            !forwarded
                && handled.decided().any(|d| {
                    !d.shadow
                        && d.verdict
                            .decisions
                            .iter()
                            .any(|x| x.reason == Reason::Blocked)
                }),
        );
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
                // What the limiter keeps in its denial cache (`Limiter::remember`).
                if let Some(spans) = denial_spans.as_mut() {
                    if decision.reason == Reason::OverLimit
                        && decision.retry_after_ms > 0
                        && item.limit.policy.algorithm() != Algorithm::Concurrency
                    {
                        spans.add(local_ms, &item.limit.name, &item.identifier);
                    }
                }
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
        // The request lands after its duration; the Worker runs its work after the response
        // then (a request without a duration keeps its leases until they time out). A trace
        // holds no response to read a cost or a status from: the estimates stand.
        if let Some(duration) = duration {
            let work = handled.after_response(None);
            if !work.is_empty() {
                landings.push(local_ms.saturating_add(duration), work);
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
        let row = RequestRow {
            time_ms: local_ms,
            region: request
                .region
                .and_then(|r| region_names.get(r as usize))
                .map_or("", String::as_str),
            status,
            exact_status: None,
        };
        for rule in &plan.rules {
            let Some(index) = config.rules.iter().position(|r| std::ptr::eq(r, *rule)) else {
                continue;
            };
            answered.rules.push(index);
            // In regions, the rows are the regions' decisions.
            let rows = decisions
                .as_mut()
                .filter(|_| global.is_none())
                .map(|log| (log, row));
            let denied = tally_rule(
                &mut rules[index],
                rule,
                &handled,
                config,
                &replayed,
                &mut ids,
                rows,
            );
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
        if let Some(global) = global.as_mut() {
            let region = request.region.map_or(0, |r| r as usize);
            let rows = decisions.as_mut().map(|log| (log, row));
            global.step(&replayed, region, local_ms, &handled, &mut ids, rows)?;
        }
        if let Some(log) = decisions.as_mut() {
            log.check()?;
        }
        Ok(())
    }

    /// The rules' reports, in configuration order.
    pub fn rule_reports(&mut self) -> Vec<RuleReport> {
        let ids = self.edge.limiter().store().identifiers();
        let boundaries: Vec<(Arc<str>, Boundary)> = self
            .truths
            .iter_mut()
            .map(|(name, truth)| (name.clone(), truth.finish(&ids)))
            .collect();
        self.edge
            .config()
            .rules
            .iter()
            .zip(&self.rules)
            .map(|(rule, tally)| {
                let limits = rule
                    .limits
                    .iter()
                    .zip(&tally.limits)
                    .map(|(applied, t)| t.report(applied, &ids, &boundaries))
                    .collect();
                tally.report(rule, limits)
            })
            .collect()
    }

    /// Request-level counts: requests, admitted, denied, unmatched, statuses, missing
    /// identifiers, shadow denials.
    pub fn totals(&self) -> TotalsReport {
        self.totals.report()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::report::WaitsReport;
    use crate::config::testing::{mixed_requests, request};

    /// Steps `requests` through a fresh replay, calling `prepare(i, replay)` before the step of
    /// request `i`; the statuses answered and the reports as JSON.
    fn replayed(
        requests: &[Request],
        mut prepare: impl FnMut(usize, &mut EdgeReplay),
    ) -> (Vec<u16>, String) {
        let config = edgelimit_engine::config::file::parse(
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
        let config = edgelimit_engine::config::file::parse(
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

    #[test]
    fn soft_and_staged_limits_are_told_apart_from_enforced_ones() {
        let config = edgelimit_engine::config::file::parse(
            r#"
[[rules]]
name = "api"
path_prefix = "/api/"
limits = [
  { name = "staged", policy = "fixed 1/1m", identifier = "ip", enforce = "50%" },
  { name = "soft", policy = "fixed 2/1m", identifier = "ip", exceed = "soft" },
]
"#,
            "test",
        )
        .unwrap();
        let enforce: edgelimit_engine::Enforce = "50%".parse().unwrap();
        let mut replay = EdgeReplay::new(config, Outages::default(), false).unwrap();
        let mut answered = Answered::default();
        let t = 1_700_000_000_000;
        let (mut enforced, mut refused) = (0, 0);
        // 100 clients, three requests each within the minute.
        for client in 0..100 {
            let ip = format!("192.0.2.{client}");
            enforced += u64::from(enforce.enforces("staged", ip.as_bytes()));
            for n in 0..3 {
                replay.step(&request(&ip, t + n), &mut answered).unwrap();
                refused += u64::from(answered.status == 429);
            }
        }
        // An enforced client: its 2nd and 3rd refused; `soft`, decided in the shadow check on
        // its own, over on the 3rd (not forwarded: not tagged). Another client: all forwarded,
        // `staged` over in shadow on the 2nd and 3rd — and, the shadow check being all or
        // nothing, `soft` then charged nothing, so never over.
        assert_eq!(refused, 2 * enforced);
        let limits = &replay.rule_reports()[0].limits;
        assert_eq!(limits[0].staged_enforced, 2 * enforced);
        assert_eq!(limits[0].staged_shadow, 2 * (100 - enforced));
        assert_eq!(
            limits[0].denied,
            2 * enforced,
            "shadow denials refuse nothing"
        );
        assert_eq!(limits[1].soft_exceeded, enforced);
        assert_eq!(limits[1].denied, 0);
        let totals = replay.totals();
        let exceeding = totals.exceeding.expect("soft and staged limits decided");
        assert_eq!(exceeding.soft_tagged, 0, "tagged only when forwarded");
        assert_eq!(exceeding.staged_shadow_denied, 2 * (100 - enforced));
        assert!(enforced > 30 && enforced < 70, "{enforced}");
    }

    #[test]
    fn a_block_refuses_beyond_the_limits_own_rule_and_is_counted() {
        let config = edgelimit_engine::config::file::parse(
            r#"
denial_cache = 0
[[rules]]
name = "api"
path_prefix = "/api/"
limits = [
  { name = "login", policy = "fixed 2/1s", identifier = "ip", block_for = "5s" },
]
"#,
            "test",
        )
        .unwrap();
        let mut replay = EdgeReplay::new(config, Outages::default(), false).unwrap();
        let mut answered = Answered::default();
        let t = 1_700_000_000_000;
        let mut statuses = Vec::new();
        // One request every 400 ms for 8 s: the third (at 800 ms) is over, which blocks the
        // client until 5,800 ms; the windows that turn meanwhile admit nothing. (No denial
        // cache: it would answer the blocked requests itself, as `cached_denial`, the denial
        // having told the block's end.)
        for n in 0..20 {
            replay
                .step(&request("192.0.2.1", t + n * 400), &mut answered)
                .unwrap();
            statuses.push(answered.status);
        }
        let refused: Vec<u64> = (0..20).filter(|&n| statuses[n as usize] == 429).collect();
        // Denied at 800 ms (over the limit), then 1,200 … 5,600 ms (blocked); at 6,000 and
        // 6,400 ms a fresh window admits again, the third of it (6,800) is over and blocks anew.
        let expected: Vec<u64> = (2..=14).chain(17..=19).collect();
        assert_eq!(refused, expected, "{statuses:?}");
        let limits = &replay.rule_reports()[0].limits;
        assert_eq!(limits[0].denied_by.get("over_limit"), Some(&2));
        assert_eq!(limits[0].denied_by.get("blocked"), Some(&14));
        let exceeding = replay.totals().exceeding.expect("a block refused requests");
        assert_eq!(exceeding.blocked, 14);
    }

    #[test]
    fn waits_are_summarised_by_nearest_rank() {
        assert_eq!(WaitsReport::of(Vec::new()), None);
        let waits = WaitsReport::of((1..=100).rev().collect()).unwrap();
        assert_eq!(
            (waits.p50, waits.p90, waits.p99, waits.max, waits.mean),
            (50, 90, 99, 100, 50.5)
        );
    }
}
