//! A configuration with a `global` section, replayed as it would be deployed (docs/design.md
//! §9): each request decided in its region — one Worker request path per region, over a
//! `GlobalStore` of the region's own store and the home's, shared by every region — at the
//! request's time, each region's refills reaching the home one round trip (`--rtt`) after they
//! were asked for. Compared request by request with the exact reference (the same
//! configuration on one store, no regions: the replay's own `EdgeReplay`), it gives what the
//! scheme costs before deploy: false denials, admissions beyond the reference, the bound per
//! fixed window, the home round trips and the latency they add.

use std::collections::BTreeMap;
use std::sync::Arc;

use edgelimit::global::{GlobalStats, GlobalStore, Granted};
use edgelimit::{Algorithm, Identifier, ManualClock, MemoryStore, Reason};
use edgelimit_engine::{Config, Edge, Handled, Scope};
use rustc_hash::FxHashMap;

use super::decisions::{DecisionLog, RequestRow};
use super::extract::Replayed;
use super::identifiers::Identifiers;
use super::ready::ready;
use super::report::{GlobalLimitReport, GlobalRegionReport, GlobalReport, Latency};
use super::tally::{tally_rule, LimitTally, RuleTally};
use crate::error::SimError;
use crate::regions::Rtt;

/// A region's store: its own states, the home's pools through the shared home store, and the
/// other regions' stores, whose unused static shares it may borrow.
type RegionStore = GlobalStore<Arc<MemoryStore>, Arc<MemoryStore>>;

/// What is compared for one limit, one region, or every request.
#[derive(Debug, Default, Clone)]
struct Compared {
    requests: u64,
    admitted: u64,
    admitted_exact: u64,
    false_denied: u64,
    over_admitted: u64,
    waited: u64,
}

/// One limit of the configuration (limits sharing a name share state: one entry).
#[derive(Debug)]
struct LimitCount {
    name: Arc<str>,
    policy: String,
    global: bool,
    /// The window of a fixed window (ms), whose admissions per window are bounded.
    window_ms: Option<u64>,
    limit: u64,
    compared: Compared,
    /// The most units admitted in one window for one identifier, across the regions.
    max_in_window: u64,
    /// Windows (per identifier) that admitted more than the limit.
    windows_over: u64,
}

/// One region's request path and counts.
#[derive(Debug)]
struct RegionReplay {
    name: String,
    /// The region's store, held here as well as by its request path: the replay reads its
    /// counts, and sends and credits its refills on the replay's clock.
    store: Arc<RegionStore>,
    edge: Edge<Arc<RegionStore>>,
    home_round_trip_ms: u64,
    compared: Compared,
    /// Added latency (ms) of each request that asked a store: count by value.
    latency: BTreeMap<u64, u64>,
    /// Refills the home has granted, each to be credited when it is back (epoch ms), oldest
    /// first.
    refilling: Vec<(u64, Granted)>,
}

/// Sends a region's queued refills at `now_ms`, as the Worker's work after the response does
/// (`Store::upkeep`), the response taken as immediate: the home decides them beside the requests
/// that reach it as late (a waiting request's ask and a refill travel the same way), and the
/// region (`store`) holds the lease `home_round_trip_ms` later (in `refilling`). Split in two
/// halves, which the Worker sends back to back, for the round trip between them.
fn send_refills(
    store: &RegionStore,
    refilling: &mut Vec<(u64, Granted)>,
    home_round_trip_ms: u64,
    now_ms: u64,
) -> Result<(), SimError> {
    if store.refill_due_since().is_none() {
        return Ok(());
    }
    let granted = ready(store.ask_refills(now_ms))?
        .map_err(|e| SimError::Usage(format!("a refill failed in memory: {e}")))?;
    let back = now_ms.saturating_add(home_round_trip_ms);
    let at = refilling.partition_point(|(at, _)| *at <= back);
    refilling.insert(at, (back, granted));
    Ok(())
}

/// The configuration replayed in its regions, beside the exact reference.
#[derive(Debug)]
pub(super) struct GlobalReplay {
    regions: Vec<RegionReplay>,
    static_share: u64,
    lease_ms: u64,
    local_round_trip_ms: u64,
    limits: Vec<LimitCount>,
    /// Per limit (its index in `limits`) and identifier: the window and the units admitted in
    /// it so far.
    windows: FxHashMap<(u32, Identifier), (u64, u64)>,
    /// The rules as the regions decided them: only for `--decisions`' rows.
    rules: Vec<RuleTally>,
    total: Compared,
    latency: BTreeMap<u64, u64>,
}

/// One item of a decided check, as compared.
struct Item<'a> {
    shadow: bool,
    name: &'a Arc<str>,
    identifier: &'a Identifier,
    cost: u64,
    /// The limit's own decision admitted it.
    allowed: bool,
    /// It was counted: admitted, and its request (or shadow check) admitted as a whole.
    admitted: bool,
}

/// The items `handled` decided (lists' and skipped decisions left out: no limit counted them).
fn items<'a>(handled: &'a Handled<'_>) -> Vec<Item<'a>> {
    let forwarded = handled.outcome().allowed();
    let mut out = Vec::new();
    for decided in handled.decided() {
        let whole = if decided.shadow {
            decided.verdict.allowed
        } else {
            forwarded
        };
        for (item, decision) in decided.check.items().iter().zip(&decided.verdict.decisions) {
            if matches!(
                decision.reason,
                Reason::Denylisted | Reason::Allowlisted | Reason::Skipped
            ) {
                continue;
            }
            out.push(Item {
                shadow: decided.shadow,
                name: &item.limit.name,
                identifier: &item.identifier,
                cost: item.cost.max(0) as u64,
                allowed: decision.allowed,
                admitted: whole && decision.allowed,
            });
        }
    }
    out
}

impl GlobalReplay {
    /// `config` (with a `global` section) in each of its regions, `rtt` apart from the home;
    /// `clock` the replay's (the regions decide at the request's time).
    pub(super) fn new(
        config: &Config,
        rtt: &Rtt,
        clock: &Arc<ManualClock>,
    ) -> Result<GlobalReplay, SimError> {
        let global = config
            .global
            .as_ref()
            .ok_or_else(|| SimError::Usage("the configuration has no `global` section".into()))?;
        let home = Arc::new(MemoryStore::with_capacity(usize::MAX >> 1));
        let own: Vec<Arc<MemoryStore>> = global
            .regions
            .iter()
            .map(|_| Arc::new(MemoryStore::with_capacity(usize::MAX >> 1)))
            .collect();
        let mut regions = Vec::with_capacity(global.regions.len());
        for (index, region) in global.regions.iter().enumerate() {
            let limits = config
                .regional_limits(index)
                .map_err(|e| SimError::Usage(e.to_string()))?;
            let home_round_trip_ms = rtt.home_round_trip_ms(index);
            let peers = (0..own.len())
                .filter(|&other| other != index)
                .map(|other| (other, own[other].clone()))
                .collect();
            let store = Arc::new(
                GlobalStore::new(
                    own[index].clone(),
                    home.clone(),
                    limits,
                    global.regions.len(),
                    global.lease_ms,
                )
                .with_peers(peers)
                .with_clock(clock.clone())
                .with_home_rtt_ms(home_round_trip_ms),
            );
            regions.push(RegionReplay {
                name: region.name.clone(),
                edge: Edge::new(config.clone(), store.clone())
                    .without_metrics()
                    .without_responses()
                    .with_clock(clock.clone()),
                store,
                home_round_trip_ms,
                compared: Compared::default(),
                latency: BTreeMap::new(),
                refilling: Vec::new(),
            });
        }
        let mut limits: Vec<LimitCount> = Vec::new();
        for applied in config.rules.iter().flat_map(|r| &r.limits) {
            if limits.iter().any(|l| l.name == applied.limit.name) {
                continue;
            }
            let policy = &applied.limit.policy;
            limits.push(LimitCount {
                name: applied.limit.name.clone(),
                policy: policy.to_string(),
                global: applied.scope == Scope::Global,
                window_ms: (policy.algorithm() == Algorithm::FixedWindow)
                    .then(|| policy.window_ms()),
                limit: policy.limit(),
                compared: Compared::default(),
                max_in_window: 0,
                windows_over: 0,
            });
        }
        Ok(GlobalReplay {
            regions,
            static_share: global.static_share,
            lease_ms: global.lease_ms,
            local_round_trip_ms: 2 * rtt.local_one_way_ms(),
            limits,
            windows: FxHashMap::default(),
            rules: config
                .rules
                .iter()
                .map(|r| RuleTally {
                    limits: r.limits.iter().map(|_| LimitTally::default()).collect(),
                    ..RuleTally::default()
                })
                .collect(),
            total: Compared::default(),
            latency: BTreeMap::new(),
        })
    }

    /// Credits every region's refills back by `now_ms`, oldest first.
    fn credit_until(&mut self, now_ms: u64) -> Result<(), SimError> {
        for region in &mut self.regions {
            let back = region.refilling.partition_point(|(at, _)| *at <= now_ms);
            for (_, granted) in region.refilling.drain(..back) {
                // The home and the regions' stores are in memory: a credit cannot fail.
                let _ = ready(region.store.credit_refills(granted))?;
            }
        }
        Ok(())
    }

    /// Decides `replayed` at `now_ms` in region `region`, compares it with the reference's
    /// `exact` answer, and writes its rows to `rows` (the status the regions answered, the
    /// reference's beside it).
    pub(super) fn step(
        &mut self,
        replayed: &Replayed<'_>,
        region: usize,
        now_ms: u64,
        exact: &Handled<'_>,
        ids: &mut Identifiers,
        rows: Option<(&mut DecisionLog, RequestRow<'_>)>,
    ) -> Result<(), SimError> {
        self.credit_until(now_ms)?;
        let region = region.min(self.regions.len() - 1);
        let r = &mut self.regions[region];
        let before: GlobalStats = r.store.stats();
        let handled = ready(r.edge.handle(replayed, now_ms))?;
        let after: GlobalStats = r.store.stats();
        let waited = after.waited > before.waited;
        // Borrowing from other regions' shares is one more round trip, taken here to be as far
        // as the home's.
        let borrowed = after.peer_round_trips > before.peer_round_trips;
        send_refills(&r.store, &mut r.refilling, r.home_round_trip_ms, now_ms)?;
        // A request the denial cache answered asked no store: it adds nothing.
        let asked = handled.decided().any(|d| {
            d.verdict
                .decisions
                .iter()
                .any(|x| !matches!(x.reason, Reason::CachedDenial | Reason::Skipped))
        });
        let forwarded = handled.outcome().allowed();
        let exact_forwarded = exact.outcome().allowed();

        for compared in [&mut r.compared, &mut self.total] {
            compared.requests += 1;
            compared.admitted += u64::from(forwarded);
            compared.admitted_exact += u64::from(exact_forwarded);
            compared.false_denied += u64::from(exact_forwarded && !forwarded);
            compared.over_admitted += u64::from(forwarded && !exact_forwarded);
            compared.waited += u64::from(waited);
        }
        if asked {
            let mut added = self.local_round_trip_ms;
            if waited {
                added += r.home_round_trip_ms + self.local_round_trip_ms;
            }
            if borrowed {
                added += r.home_round_trip_ms;
            }
            *r.latency.entry(added).or_default() += 1;
            *self.latency.entry(added).or_default() += 1;
        }

        let exact_items = items(exact);
        for item in items(&handled) {
            let Some(at) = self
                .limits
                .iter()
                .position(|l| Arc::ptr_eq(&l.name, item.name))
                .or_else(|| self.limits.iter().position(|l| l.name == *item.name))
            else {
                continue;
            };
            let reference = exact_items.iter().find(|e| {
                e.shadow == item.shadow && e.name == item.name && e.identifier == item.identifier
            });
            let (exact_admitted, exact_allowed) =
                reference.map_or((false, false), |e| (e.admitted, e.allowed));
            let limit = &mut self.limits[at];
            let c = &mut limit.compared;
            c.requests += 1;
            c.admitted += u64::from(item.admitted);
            c.admitted_exact += u64::from(exact_admitted);
            c.false_denied += u64::from(exact_admitted && !item.admitted && !item.allowed);
            c.over_admitted += u64::from(item.admitted && !exact_admitted && !exact_allowed);
            c.waited += u64::from(waited && limit.global);
            if let (Some(window_ms), true) = (limit.window_ms, item.admitted && item.cost > 0) {
                let window = now_ms / window_ms.max(1);
                let slot = self
                    .windows
                    .entry((at as u32, item.identifier.clone()))
                    .or_insert((window, 0));
                if slot.0 != window {
                    *slot = (window, 0);
                }
                slot.1 += item.cost;
                if slot.1 > limit.max_in_window {
                    limit.max_in_window = slot.1;
                }
                if slot.1 > limit.limit && slot.1 - item.cost <= limit.limit {
                    limit.windows_over += 1;
                }
            }
        }

        if let Some((log, row)) = rows {
            let row = RequestRow {
                status: handled.outcome().status,
                exact_status: Some(exact.outcome().status),
                ..row
            };
            let config = r.edge.config();
            for rule in &handled.plan().rules {
                let Some(index) = config.rules.iter().position(|c| std::ptr::eq(c, *rule)) else {
                    continue;
                };
                tally_rule(
                    &mut self.rules[index],
                    rule,
                    &handled,
                    config,
                    replayed,
                    ids,
                    Some((&mut *log, row)),
                );
            }
        }
        Ok(())
    }

    /// What the regions cost against the reference.
    pub(super) fn report(&self) -> GlobalReport {
        let stats: Vec<GlobalStats> = self.regions.iter().map(|r| r.store.stats()).collect();
        // Round trips beyond the region: to the home, and to other regions' stores to borrow.
        let beyond = |s: &GlobalStats| s.home_round_trips + s.peer_round_trips;
        let trips: u64 = stats.iter().map(beyond).sum();
        let calls: u64 = stats.iter().map(GlobalStats::script_calls).sum();
        GlobalReport {
            static_share_ppm: self.static_share,
            lease_ms: self.lease_ms,
            local_round_trip_ms: self.local_round_trip_ms,
            requests: self.total.requests,
            admitted: self.total.admitted,
            admitted_exact: self.total.admitted_exact,
            false_denied: self.total.false_denied,
            over_admitted: self.total.over_admitted,
            waited: self.total.waited,
            waited_share: share(self.total.waited, self.total.requests),
            home_round_trips: trips,
            home_round_trips_per_request: share(trips, self.total.requests),
            script_calls: calls,
            script_calls_per_request: share(calls, self.total.requests),
            commands_per_million_requests: (share(calls, self.total.requests) * 1e6).round() as u64,
            latency: latency(&self.latency),
            limits: self
                .limits
                .iter()
                .map(|l| GlobalLimitReport {
                    name: l.name.to_string(),
                    policy: l.policy.clone(),
                    scope: if l.global { "global" } else { "region" },
                    requests: l.compared.requests,
                    admitted: l.compared.admitted,
                    admitted_exact: l.compared.admitted_exact,
                    false_denied: l.compared.false_denied,
                    over_admitted: l.compared.over_admitted,
                    waited: l.compared.waited,
                    waited_share: share(l.compared.waited, l.compared.requests),
                    limit: l.window_ms.map(|_| l.limit),
                    max_admitted_in_window: l.window_ms.map(|_| l.max_in_window),
                    windows_over_limit: l.window_ms.map(|_| l.windows_over),
                })
                .collect(),
            regions: self
                .regions
                .iter()
                .zip(&stats)
                .map(|(r, s)| GlobalRegionReport {
                    name: r.name.clone(),
                    home_round_trip_ms: r.home_round_trip_ms,
                    requests: r.compared.requests,
                    admitted: r.compared.admitted,
                    admitted_exact: r.compared.admitted_exact,
                    false_denied: r.compared.false_denied,
                    over_admitted: r.compared.over_admitted,
                    waited: r.compared.waited,
                    waited_share: share(r.compared.waited, r.compared.requests),
                    home_round_trips: beyond(s),
                    home_round_trips_per_request: share(beyond(s), r.compared.requests),
                    granted: s.granted,
                    leased: s.leased,
                    script_calls: s.script_calls(),
                    script_calls_per_request: share(s.script_calls(), r.compared.requests),
                    latency: latency(&r.latency),
                })
                .collect(),
        }
    }
}

/// `part` over `whole`, 0 of nothing.
fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// The median and 99th percentile (nearest rank) of the latencies counted in `counts`.
fn latency(counts: &BTreeMap<u64, u64>) -> Latency {
    let n: u64 = counts.values().sum();
    let rank = |p: u64| {
        // The smallest value with at least ⌈p·n/100⌉ values at or below it.
        let want = (p * n).div_ceil(100).max(1);
        let mut seen = 0;
        for (&ms, &count) in counts {
            seen += count;
            if seen >= want {
                return ms;
            }
        }
        0
    };
    Latency {
        requests: n,
        p50_ms: rank(50),
        p99_ms: rank(99),
        max_ms: counts.keys().next_back().copied().unwrap_or(0),
    }
}
