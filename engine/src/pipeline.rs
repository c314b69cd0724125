//! The request path, written once: [`Edge::handle`] takes a request through rule matching, the
//! lists and the isolate's memory of their denials, the plan, one store call (the library's
//! [`Limiter`]: denial cache, fail modes, timeout), and the ruling; the [`Handled`] request then
//! gives the response (headers, problem body), the log line, the analytics point and, once the
//! origin has answered, the work left for after the response ([`Handled::after_response`], run
//! by [`Edge::run_after_response`]). Pure and generic over the store: the
//! Worker's glue (`edge.rs`) only converts the JS request and response and does the I/O around
//! it, and `sim replay --config` drives this same path over its replay store, so the simulator
//! predicts the Worker by construction (docs/design.md §4).

use std::borrow::Cow;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use edgelimit::metrics::MetricsSnapshot;
use edgelimit::{Check, Checked, Clock, Limiter, Store};

use crate::after_response::{AfterResponse, AfterResponseDone, ResponseView};
use crate::config::Config;
use crate::exceed_counters::ExceedCounters;
use crate::identify::RequestView;
use crate::lists::{DenyCache, ListCounters, ProbeCache, Via};
use crate::log_line::LogLine;
use crate::metrics_page::configuration_gauges;
use crate::own_id::OwnIds;
use crate::plan::{Decided, Incoming, Plan};
use crate::request_decision::RequestDecision;
use crate::rules::STATUS_FIELD;
use crate::ruling::{Outcome, Response};
use crate::settlement::Settlement;
use crate::trace::{self, TraceIdentifiers, Tracing};

/// What an isolate keeps between requests besides its limiter: the deny lists' answers it
/// remembers, and their counters.
#[derive(Debug)]
struct Isolate {
    deny_cache: DenyCache,
    list_counters: ListCounters,
    exceed_counters: ExceedCounters,
}

/// One request's buffers, kept between requests so that a pipeline deciding request after
/// request (a replay) allocates none of them.
#[derive(Debug, Default)]
struct Buffers {
    checks: [Check; 2],
    checked: Checked,
    outcome: Outcome,
}

/// One isolate's request path: the configuration, the limiter over its store, and what the
/// isolate remembers between requests. Shared by every request the isolate serves (`handle`
/// takes `&self`; requests may interleave at the store call).
#[derive(Debug)]
pub struct Edge<S> {
    config: Config,
    limiter: Limiter<S>,
    isolate: Mutex<Isolate>,
    spare: Mutex<Vec<Buffers>>,
    /// What the clients served lately offered the lists (the configuration's lists apply).
    probes: Mutex<ProbeCache>,
    /// Whether each request's response is written along with its ruling, from the one
    /// [`edgelimit::http::Answer`]: a host that answers requests wants it; a replay, which
    /// never answers, does not ([`Edge::without_responses`]).
    responds: bool,
    /// Whether a limit has staged enforcement (its enforced denials are counted apart).
    staged: bool,
    /// [`Config::tells_origin`], found once.
    tells_origin: bool,
    /// The ids this isolate gives its requests ([`crate::own_id`]).
    ids: OwnIds,
    /// How its spans are written ([`crate::trace`]; nothing without the `tracing` feature).
    tracing: Tracing,
}

/// At most this many requests' buffers are kept for reuse (the requests an isolate has in
/// flight at once, typically).
const SPARE_BUFFERS: usize = 16;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing held under these locks can be left half-changed by a panic.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<S: Store> Edge<S> {
    /// The request path of `config` over `store`: the limiter takes the configuration's time
    /// mode and denial cache.
    pub fn new(config: Config, store: S) -> Edge<S> {
        let limiter = Limiter::new(store)
            .with_time_mode(config.time)
            .with_denial_cache(config.denial_cache)
            .with_denial_cache_ms(config.denial_cache_ms);
        Edge {
            isolate: Mutex::new(Isolate {
                deny_cache: DenyCache::new(config.list_cache_ms),
                list_counters: ListCounters::default(),
                exceed_counters: ExceedCounters::default(),
            }),
            tells_origin: config.tells_origin(),
            staged: config
                .rules
                .iter()
                .flat_map(|r| &r.limits)
                .any(|l| l.enforce.is_some()),
            spare: Mutex::new(Vec::new()),
            probes: Mutex::new(ProbeCache::default()),
            responds: true,
            ids: OwnIds::random(edgelimit::clock::SystemClock.now_ms()),
            tracing: Tracing::new(),
            config,
            limiter,
        }
    }

    /// The same path giving its requests ids under `seed` (a random number from the host): for a
    /// runtime whose standard library has no randomness of its own (wasm32), so that two isolates
    /// never give one id ([`crate::own_id`]).
    pub fn with_id_seed(mut self, seed: u64) -> Edge<S> {
        self.ids = OwnIds::seeded(seed);
        self
    }

    /// The same path writing the identifier of the limit an answer is about into its spans as
    /// `identifiers` says (hashed by default; [`crate::trace`]). Without the `tracing` feature
    /// there are no spans, and this changes nothing.
    pub fn with_trace_identifiers(mut self, identifiers: TraceIdentifiers) -> Edge<S> {
        self.tracing = self.tracing.with_identifiers(identifiers);
        self
    }

    /// The same path on another clock (the limiter's "now": a replay's virtual time).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Edge<S> {
        self.limiter = self.limiter.with_clock(clock);
        self
    }

    /// The same path counting no metrics (nobody reads them in a replay).
    pub fn without_metrics(mut self) -> Edge<S> {
        self.limiter = self.limiter.without_metrics();
        self
    }

    /// The same path writing no response along with each ruling: for a host that never answers
    /// (a replay). [`Handled::response`] still writes one when asked, from the ruling.
    pub fn without_responses(mut self) -> Edge<S> {
        self.responds = false;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Whether the configuration has a `soft` limit ([`Config::tells_origin`]): then a host
    /// sets the forwarded request's [`crate::EXCEEDED_HEADER`] itself
    /// ([`Handled::exceeded_header`]), removing any the client sent.
    pub fn tells_origin(&self) -> bool {
        self.tells_origin
    }

    /// The limiter, for its store and metrics.
    pub fn limiter(&self) -> &Limiter<S> {
        &self.limiter
    }

    /// The store, to change between requests (a replay's clock and outages).
    pub fn store_mut(&mut self) -> &mut S {
        self.limiter.store_mut()
    }

    /// Which of the host's routes a request with `method` and `path` takes.
    pub fn route(&self, method: &str, path: &str) -> Route {
        if self.config.admin_path.as_deref() == Some(path) {
            Route::Admin
        } else if method == "GET" && self.config.metrics_path.as_deref() == Some(path) {
            Route::Metrics
        } else {
            Route::Limited
        }
    }

    /// Takes `request` down the path at `now_ms` (the isolate's clock, what its memory of list
    /// denials uses): the plan, one store call, the ruling. What it answers is in the
    /// [`Handled`] request. With the `tracing` feature, inside an `edgelimit.decide` span
    /// ([`crate::trace`]).
    pub async fn handle<R: Incoming + ?Sized>(&self, request: &R, now_ms: u64) -> Handled<'_> {
        // Not entered, so the request's future is not wrapped in it: an untraced request pays
        // a level check and a pointer. The store call's span names it as its parent.
        let mut span = trace::decide_span();
        let Buffers {
            checks,
            mut checked,
            mut outcome,
        } = lock(&self.spare).pop().unwrap_or_default();
        let own_id = self.ids.next();
        let mut plan = self
            .config
            .plan_in(request, Some(own_id), checks, Some(&self.probes));
        if !plan.deny_scope().is_empty() && plan.denied().is_none() {
            plan.deny_if_remembered(&mut lock(&self.isolate).deny_cache, now_ms);
        }
        // A request refused before the store has no check: no store call.
        trace::open_store(&mut span, plan.checks().len());
        self.limiter
            .check_all_into(plan.checks(), &mut checked)
            .await;
        trace::close_store(&mut span);
        let responds = self.responds;
        let written = plan.rule_into(
            &checked.verdicts,
            &mut outcome,
            responds.then(|| request.path()),
        );
        if outcome.denied.is_some() || !outcome.shadow_listed.is_empty() {
            let mut isolate = lock(&self.isolate);
            if let Some(denial) = &outcome.denied {
                isolate.list_counters.denied(denial);
                isolate.deny_cache.remember_denial(denial, now_ms);
            }
            if !outcome.shadow_listed.is_empty() {
                isolate.list_counters.shadow_denied();
            }
        }
        let staged_enforced =
            self.staged
                .then(|| plan.enforced_decided(&checked.verdicts))
                .flatten()
                .filter(|(_, verdict)| !verdict.allowed)
                .map(|(check, verdict)| {
                    check
                        .items()
                        .iter()
                        .zip(&verdict.decisions)
                        .filter(|(item, d)| {
                            !d.allowed
                                && d.reason != edgelimit::Reason::Denylisted
                                && plan.rules.iter().flat_map(|r| &r.limits).any(|l| {
                                    l.enforce.is_some() && Arc::ptr_eq(&l.limit, &item.limit)
                                })
                        })
                        .map(|(item, _)| &item.limit.name)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
        if !outcome.soft_exceeded.is_empty()
            || !outcome.staged_denied.is_empty()
            || !staged_enforced.is_empty()
            || outcome.delay_ms > 0
        {
            lock(&self.isolate).exceed_counters.count(
                &outcome.soft_exceeded,
                &outcome.staged_denied,
                staged_enforced,
                outcome.delay_ms,
            );
        }
        let response =
            responds.then(|| plan.respond(&checked.verdicts, &outcome, request.path(), written));
        let handled = Handled {
            plan,
            checked,
            outcome,
            response: Mutex::new(response),
            spare: &self.spare,
            upkeep_due: self.limiter.store().upkeep_due(),
        };
        self.tracing.record(&span, &handled);
        handled
    }

    /// Does the work a request left for after its response ([`Handled::after_response`]) at
    /// `now_ms` (the host's clock, epoch ms): each settlement commit one store call, then the
    /// store's upkeep. Off the request path: the Worker runs it in `waitUntil`, the tower layer
    /// in a task of its own, `sim` when the request lands. Each failure is in the answer, for
    /// the host to log.
    pub async fn run_after_response(&self, work: AfterResponse, now_ms: u64) -> AfterResponseDone {
        let (settlement, upkeep) = work.into_parts();
        let mut done = AfterResponseDone::default();
        for commit in settlement.map(Settlement::into_commits).unwrap_or_default() {
            match self.limiter.settle(commit).await {
                Ok(_) => done.committed += 1,
                Err(e) => done.failed.push(e),
            }
        }
        if upkeep {
            done.upkeep_failed = self.limiter.store().upkeep(now_ms).await.err();
        }
        done
    }

    /// Sends `settlement` alone ([`Handled::settlement`]): what [`Edge::run_after_response`]
    /// does with a request's, for a caller holding a settlement it read itself.
    pub async fn settle(&self, settlement: Settlement) -> AfterResponseDone {
        self.run_after_response(AfterResponse::new(Some(settlement), false), 0)
            .await
    }

    /// The isolate's counters as Prometheus text: the limiter's decisions and store latency,
    /// its cache hits, the lists' refusals, and the store's timeout (the configuration's
    /// `metrics_path` page, served as [`crate::metrics_page::METRICS_CONTENT_TYPE`]).
    pub fn metrics_text(&self) -> String {
        let metrics = self.limiter.metrics();
        let isolate = lock(&self.isolate);
        format!(
            "{}# HELP edgelimit_isolate_cache_hits_total Denials answered from this isolate's cache.\n# TYPE edgelimit_isolate_cache_hits_total counter\nedgelimit_isolate_cache_hits_total {}\n{}{}{}",
            metrics.to_prometheus(),
            metrics.totals().cache_hits,
            isolate.list_counters.to_prometheus(),
            isolate.exceed_counters.to_prometheus(),
            configuration_gauges(&self.config)
        )
    }
}

/// What a request to a host running the path asks for: one of the limiter's own pages (each
/// answered by the host with what the [`Edge`] gives it), or the request path itself. Decided
/// here once for every host, before anything else is read from the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// A `GET` of the configuration's `metrics_path`: [`Edge::metrics_text`], as
    /// [`crate::metrics_page::METRICS_CONTENT_TYPE`].
    Metrics,
    /// The configuration's `admin_path` (any method: the route answers a wrong one itself):
    /// [`Edge::admin`].
    Admin,
    /// Everything else: [`Edge::handle`].
    Limited,
}

/// One request as the path handled it: its plan, the store's verdicts and the ruling. The
/// response, the log line and the settlement are written from it on demand.
#[derive(Debug)]
pub struct Handled<'e> {
    plan: Plan<'e>,
    checked: Checked,
    outcome: Outcome,
    /// The response, when written along with the ruling (see `Edge::responds`).
    response: Mutex<Option<Response>>,
    spare: &'e Mutex<Vec<Buffers>>,
    /// Whether the store had upkeep due once the request was decided
    /// ([`edgelimit::Store::upkeep_due`]: a global store's refills the request queued).
    upkeep_due: bool,
}

impl<'e> Handled<'e> {
    /// The ruling: status, binding limit, shadow reports, list refusals.
    pub fn outcome(&self) -> &Outcome {
        &self.outcome
    }

    /// The plan: the rules that matched, absent identifiers, exempted rules, the checks sent.
    pub fn plan(&self) -> &Plan<'e> {
        &self.plan
    }

    /// The store's verdicts, with the limiter's clock and the store's latency.
    pub fn checked(&self) -> &Checked {
        &self.checked
    }

    /// Every check the store decided, with its verdict — the enforced one first.
    pub fn decided(&self) -> impl Iterator<Item = Decided<'_>> {
        self.plan.decided(&self.checked.verdicts)
    }

    /// The response for this request (`request` is the one handled): its header fields, and
    /// for an answer the Worker gives itself (429, 503, 400, 403) the status and problem body.
    /// Written along with the ruling unless the path was made [`Edge::without_responses`].
    pub fn response(&self, request: &(impl RequestView + ?Sized)) -> Response {
        if let Some(response) = lock(&self.response).take() {
            return response;
        }
        self.plan
            .response(&self.checked.verdicts, &self.outcome, request.path())
    }

    /// Whether this request's line is logged: when `sampled` (the configuration's
    /// `log_sample`), and always for news — a refusal the store's lists just answered (repeats
    /// from the isolate's memory and static entries are sampled like everything else) — and
    /// for a shadow rule's denial, which is what shadow mode is for.
    pub fn is_logged(&self, sampled: bool) -> bool {
        let news = self
            .outcome
            .denied
            .as_ref()
            .is_some_and(|d| d.via == Via::Store);
        sampled
            || news
            || !self.outcome.shadow_denied.is_empty()
            || !self.outcome.soft_exceeded.is_empty()
            || !self.outcome.staged_denied.is_empty()
    }

    /// How long (ms) the host waits before forwarding this admitted request: the longest wait
    /// of the enforced limits that admitted it after one (`exceed = "delay …"`); 0 for none.
    /// The Worker waits in wall time (no CPU), the tower layer in a timer.
    pub fn delay_ms(&self) -> u64 {
        self.outcome.delay_ms
    }

    /// The value of [`crate::EXCEEDED_HEADER`] for the forwarded request (the `soft` limits it
    /// exceeded), when any; a host whose configuration has a `soft` limit
    /// ([`Config::tells_origin`]) removes the client's own field of that name first.
    pub fn exceeded_header(&self) -> Option<String> {
        self.outcome.exceeded_header()
    }

    /// The log line for this request, with the isolate's counters when given.
    pub fn log_line(
        &self,
        request: &(impl RequestView + ?Sized),
        isolate: Option<&MetricsSnapshot>,
    ) -> LogLine {
        LogLine::of(&self.plan, &self.checked, &self.outcome, request, isolate)
    }

    /// What the path decided, in the words every host writes ([`RequestDecision`]).
    pub fn decision(&self) -> RequestDecision {
        RequestDecision::of(&self.outcome)
    }

    /// The request's analytics data point (Workers Analytics Engine).
    pub fn analytics(&self) -> AnalyticsPoint {
        let binding = self.outcome.binding.as_ref();
        let limit = binding.map_or("", |b| &*b.name).to_string();
        let rules: Vec<&str> = self.plan.rules.iter().map(|r| r.name.as_str()).collect();
        let shadow_denied: Vec<&str> = self.outcome.shadow_denied.iter().map(|n| &**n).collect();
        let reason = match &self.outcome.denied {
            Some(_) => "denied",
            None => binding.map_or("", |b| b.reason.as_str()),
        };
        AnalyticsPoint {
            blobs: [
                rules.join(","),
                limit.clone(),
                if self.outcome.allowed() {
                    "allowed"
                } else {
                    "denied"
                }
                .to_string(),
                reason.to_string(),
                shadow_denied.join(","),
                self.decision().as_str().to_string(),
            ],
            index: limit,
            doubles: [
                1.0,
                binding.map_or(0.0, |b| b.remaining as f64),
                self.checked.store_ms.unwrap_or(0.0),
            ],
        }
    }

    /// The work this request leaves for after `response` (`None` when the origin failed or
    /// the host answered itself: the estimates stand, the leases are released all the same):
    /// its settlement and the store's upkeep, one value a host runs with
    /// [`Edge::run_after_response`] once it has answered. Empty when there is nothing to do;
    /// the response is read only when a limit settles from it.
    pub fn after_response(&self, response: Option<&dyn ResponseView>) -> AfterResponse {
        let settlement = self
            .plan
            .settles()
            .then(|| {
                self.plan.settlement(&self.checked.verdicts, |field| {
                    let response = response?;
                    if field == STATUS_FIELD {
                        return Some(response.status().to_string());
                    }
                    response.header(field).map(Cow::into_owned)
                })
            })
            .flatten();
        AfterResponse::new(settlement, self.upkeep_due)
    }

    /// What this request settles once its response is known, alone: `header` reads the
    /// response's fields by lower-case name, its status as [`STATUS_FIELD`] (always `None` when
    /// the origin failed). `None` when nothing needs settling. Its commits carry the request's
    /// own id ([`crate::own_id`]). A host takes [`Handled::after_response`], which holds it.
    pub fn settlement(&self, header: impl Fn(&str) -> Option<String>) -> Option<Settlement> {
        self.plan.settlement(&self.checked.verdicts, header)
    }
}

impl Drop for Handled<'_> {
    fn drop(&mut self) {
        let buffers = Buffers {
            checks: self.plan.take_checks(),
            checked: std::mem::take(&mut self.checked),
            outcome: std::mem::take(&mut self.outcome),
        };
        let mut spare = lock(self.spare);
        if spare.len() < SPARE_BUFFERS {
            spare.push(buffers);
        }
    }
}

/// A request's data point for Workers Analytics Engine: indexed by the binding limit, with the
/// matched rules, the limit, `allowed`/`denied`, the reason, the shadow denials and the
/// decision ([`RequestDecision`]) as blobs, and the count, the remaining quota and the store's
/// latency (ms) as doubles (docs/observability.md, "The Analytics Engine point").
#[derive(Debug, Clone, PartialEq)]
pub struct AnalyticsPoint {
    /// The index: the binding limit's name (empty when none).
    pub index: String,
    /// The blobs: `blob1` to `blob6` in Analytics Engine's SQL.
    pub blobs: [String; 6],
    /// The doubles.
    pub doubles: [f64; 3],
}

#[cfg(test)]
mod tests;
