//! The configuration report: what `--config` measured, serialised as the JSON `--json` writes
//! (the schema is documented in docs/sim-reference.md, "The configuration report").

use std::collections::BTreeMap;

use super::decisions::DecisionsReport;
use super::outage::Span;
use super::overrides::AppliedOverrides;
use super::series::Series;
use super::truth::Boundary;
use super::whatif::WhatIf;
use crate::readers::ReadStats;
use crate::report::json;

/// One identifier and how often it was denied.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TopIdentifier {
    /// The identifier, as keyed (API keys hashed).
    pub identifier: String,
    /// Requests this limit denied it.
    pub denied: u64,
}

/// One limit of one rule.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LimitReport {
    /// The limit's name (limits sharing a name share state).
    pub name: String,
    /// Its policy.
    pub policy: String,
    /// Where its identifier comes from.
    pub identifier: String,
    /// Its `fail` mode.
    pub fail: String,
    /// Its `missing` setting.
    pub missing_setting: String,
    /// Requests of this rule on which the limit was decided (denial-cache skips, and requests a
    /// deny or allow list settled before any limit counted, excluded).
    pub checked: u64,
    /// Requests on which this limit alone would not have admitted: its own denials (any reason)
    /// and refusals for a missing identifier. A request two limits refuse counts for both.
    pub denied: u64,
    /// Denials by reason: `over_limit`, `cached_denial`, `failed_closed`, `fallback`, and
    /// `missing_identifier` (400s, or a shadow rule's would-be 400s).
    pub denied_by: BTreeMap<&'static str, u64>,
    /// Refused requests whose answer named this limit (the binding limit of a 429 or 503).
    pub answered: u64,
    /// Requests of this rule without this limit's identifier (handled per `missing_setting`).
    pub missing: u64,
    /// Decisions the denial cache skipped (another limit of the request was a cached denial).
    pub skipped: u64,
    /// Admissions while the store was down, by `fail = "open"`.
    pub failed_open: u64,
    /// Fallback decisions that admitted.
    pub fallback_admitted: u64,
    /// Requests admitted although this `soft` limit denied them (the origin told). Left out
    /// of the JSON when zero.
    #[serde(skip_serializing_if = "is_zero")]
    pub soft_exceeded: u64,
    /// Denials of this staged limit (`enforce`) for identifiers it enforces. Left out of the
    /// JSON when zero.
    #[serde(skip_serializing_if = "is_zero")]
    pub staged_enforced: u64,
    /// Denials of this staged limit for identifiers it leaves out (decided in shadow: would
    /// have denied). Left out of the JSON when zero.
    #[serde(skip_serializing_if = "is_zero")]
    pub staged_shadow: u64,
    /// The ten identifiers it denied most.
    pub top_identifiers: Vec<TopIdentifier>,
    /// Boundary metrics against the exact log (shared by every rule using this limit name).
    pub boundary: Boundary,
}

/// One rule.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RuleReport {
    /// Its name.
    pub name: String,
    /// Whether it is a shadow rule.
    pub shadow: bool,
    /// Requests it matched.
    pub matched: u64,
    /// For an enforced rule, matched requests forwarded; for a shadow rule, matched requests its
    /// limits would all have admitted.
    pub admitted: u64,
    /// For an enforced rule, matched requests refused (by any limit: see `limits[].denied` for
    /// which); for a shadow rule, matched requests one of its limits would have denied.
    /// `matched = admitted + denied`.
    pub denied: u64,
    /// Of `denied`, matched requests a deny list refused (403) before any limit counted (a
    /// shadow rule: its lists would have). Left out of the JSON when zero, so replays without
    /// lists read as before.
    #[serde(skip_serializing_if = "is_zero")]
    pub listed: u64,
    /// Matched requests an allow list exempted from the rule's limits (uncounted; forwarded
    /// unless another rule refused). Left out of the JSON when zero.
    #[serde(skip_serializing_if = "is_zero")]
    pub allowlisted: u64,
    /// Its limits, in configuration order.
    pub limits: Vec<LimitReport>,
}

/// Whether a count is zero (such counts are left out of the JSON).
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What replaying the Worker's own log lines through a configuration agreed with.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AgainstLog {
    /// Requests whose logged decision was compared.
    pub compared: u64,
    /// Requests whose replayed log line differs from the logged one in any decided field (the
    /// matched rules, status, every limit's identifier, cost, decision, remaining, reason, the
    /// shadow denials, the times).
    pub mismatches: u64,
    /// Of those, requests answered with another status.
    pub status_mismatches: u64,
    /// The first few differences.
    pub samples: Vec<String>,
}

/// The store's outages and what the fail modes did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OutageReport {
    /// The spans (UTC epoch ms).
    pub spans: Vec<Span>,
    /// Requests that arrived while the store was down.
    pub requests: u64,
    /// Answered 503 (a `fail = "closed"` limit).
    pub failed_closed: u64,
    /// Limit decisions that failed open.
    pub failed_open: u64,
    /// Limit decisions made by the in-isolate fallback.
    pub fallback_decisions: u64,
}

/// What the requests that landed settled (the Worker's work after the response): their
/// concurrency leases released, their settled costs committed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Settlements {
    /// Settlement checks applied.
    pub settled: u64,
    /// Settlement checks that failed (the store down when the request landed); their leases
    /// stayed until the timeout.
    pub failed: u64,
}

/// One region of a configuration with global limits.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RegionReport {
    /// Its name.
    pub name: String,
    /// Requests placed in it.
    pub requests: u64,
    /// One-way latency to the home (ms), as `--rtt` gave it or by default.
    pub home_one_way_ms: u64,
}

/// Where the requests of a configuration with global limits were placed, and the latencies the
/// replay carries.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RegionsReport {
    /// The regions, in configuration order.
    pub regions: Vec<RegionReport>,
    /// Requests by how their region was found: `region` (named by the trace), `colo`,
    /// `continent`, `assigned` (`--assign-regions`), `first` (nothing placed them).
    pub attributed_by: BTreeMap<&'static str, u64>,
    /// Requests whose country or continent is not one the table knows (`XX`, `T1`, a typo),
    /// placed as if the trace gave none.
    pub unknown_places: u64,
    /// One-way latency from a request to its own region's store (ms).
    pub local_one_way_ms: u64,
}

/// Added latency per request, from the round trips it waited for (ms).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Latency {
    /// Requests that asked a store (those refused before it add nothing).
    pub requests: u64,
    /// The median.
    pub p50_ms: u64,
    /// The 99th percentile (nearest rank).
    pub p99_ms: u64,
    /// The most.
    pub max_ms: u64,
}

/// One limit of a configuration with a `global` section: decided in the regions against the
/// exact reference (one store, no regions).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GlobalLimitReport {
    /// The limit's name (every rule applying it: one row).
    pub name: String,
    /// Its policy.
    pub policy: String,
    /// `global` (held across the regions by shares and leases) or `region` (counted in each).
    pub scope: &'static str,
    /// Requests that decided it (in the regions).
    pub requests: u64,
    /// Of those, admitted by it in the regions (it admitted, and so did the request).
    pub admitted: u64,
    /// Admitted by it in the exact reference.
    pub admitted_exact: u64,
    /// Admitted by the reference, denied by this limit in the regions.
    pub false_denied: u64,
    /// Admitted in the regions, denied by this limit in the reference (a denial earlier
    /// leaves capacity for later: the fixed window's bound is `max_admitted_in_window`).
    pub over_admitted: u64,
    /// Requests deciding it that waited for the home (a global limit's).
    pub waited: u64,
    /// `waited` over `requests`.
    pub waited_share: f64,
    /// A fixed window's limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// A fixed window's most units admitted for one identifier in one window, every region
    /// together: never above `limit` for a global limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_admitted_in_window: Option<u64>,
    /// A fixed window's windows (per identifier) that admitted more than `limit`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub windows_over_limit: Option<u64>,
}

/// One region of a configuration with a `global` section, against the exact reference.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GlobalRegionReport {
    /// Its name.
    pub name: String,
    /// Its round trip to the home (ms): twice `--rtt`'s one way.
    pub home_round_trip_ms: u64,
    /// Requests decided in it.
    pub requests: u64,
    /// Of those, forwarded (200).
    pub admitted: u64,
    /// Forwarded by the exact reference.
    pub admitted_exact: u64,
    /// Forwarded by the reference, refused in the region.
    pub false_denied: u64,
    /// Forwarded in the region, refused by the reference.
    pub over_admitted: u64,
    /// Requests that waited for the home.
    pub waited: u64,
    /// `waited` over `requests`.
    pub waited_share: f64,
    /// Round trips to the home: waiting requests' and refills'.
    pub home_round_trips: u64,
    /// `home_round_trips` over `requests`.
    pub home_round_trips_per_request: f64,
    /// Units the home granted it in leases.
    pub granted: u64,
    /// Units it admitted from leases.
    pub leased: u64,
    /// Script calls its requests and refills made, every store's (its own, the home's, the
    /// lenders'): on Upstash, one command each.
    pub script_calls: u64,
    /// `script_calls` over `requests`.
    pub script_calls_per_request: f64,
    /// The latency its requests' round trips add.
    pub latency: Latency,
}

/// A configuration with a `global` section, replayed in its regions beside the exact
/// reference (the same configuration on one store).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GlobalReport {
    /// The regions' static share of every global limit (parts per million).
    pub static_share_ppm: u64,
    /// A bucket's lease life (ms).
    pub lease_ms: u64,
    /// A request's round trip to its region's store (ms): twice `--rtt`'s `local`.
    pub local_round_trip_ms: u64,
    /// Requests replayed.
    pub requests: u64,
    /// Forwarded in the regions.
    pub admitted: u64,
    /// Forwarded by the exact reference.
    pub admitted_exact: u64,
    /// Forwarded by the reference, refused in the regions.
    pub false_denied: u64,
    /// Forwarded in the regions, refused by the reference.
    pub over_admitted: u64,
    /// Requests that waited for the home.
    pub waited: u64,
    /// `waited` over `requests`.
    pub waited_share: f64,
    /// Round trips to the home, every region's.
    pub home_round_trips: u64,
    /// `home_round_trips` over `requests`.
    pub home_round_trips_per_request: f64,
    /// Script calls of every store, every region's: on Upstash, one command each (one store
    /// deciding every request makes one a request).
    pub script_calls: u64,
    /// `script_calls` over `requests`.
    pub script_calls_per_request: f64,
    /// `script_calls` per million requests, rounded: the commands a deployment would be billed
    /// for a million requests like these.
    pub commands_per_million_requests: u64,
    /// The latency the round trips add: a local round trip for a request decided in its
    /// region, plus the home's round trip and a second local one for a request that waited.
    pub latency: Latency,
    /// Per limit, in configuration order.
    pub limits: Vec<GlobalLimitReport>,
    /// Per region, in configuration order.
    pub regions: Vec<GlobalRegionReport>,
}

/// One configuration's replay.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ConfigReport {
    /// `edgelimit-sim`.
    pub tool: &'static str,
    /// The simulator's version.
    pub version: &'static str,
    /// The configuration file.
    pub config: String,
    /// What was read.
    pub trace: ReadStats,
    /// Wall time of the replay (ms).
    pub elapsed_ms: u64,
    /// Requests replayed.
    pub requests: u64,
    /// Requests forwarded (status 200), requests no rule matched included.
    pub admitted: u64,
    /// Requests refused: 429, 503, 400 and 403 (`statuses` splits them).
    pub denied: u64,
    /// Requests no enforced rule matched.
    pub unmatched: u64,
    /// Requests by the status the Worker answers (200 stands for forwarded).
    pub statuses: BTreeMap<u16, u64>,
    /// Requests lacking an identifier for at least one limit of a matched rule.
    pub missing_identifiers: u64,
    /// Requests refused as ambiguous: a field an identifier is read from sent twice, or a path
    /// or host that cannot be read as the origin reads it (docs/security.md).
    #[serde(skip_serializing_if = "is_zero")]
    pub ambiguous_requests: u64,
    /// Requests a shadow limit would have denied.
    pub shadow_would_deny: u64,
    /// What the limits' `exceed` and `enforce` settings did, when any did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exceeding: Option<ExceedingReport>,
    /// With a global section: the requests' regions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regions: Option<RegionsReport>,
    /// With a global section: the configuration decided in its regions against the exact
    /// reference (the rest of the report is the reference's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub global: Option<GlobalReport>,
    /// `--decisions`: the file and its rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decisions: Option<DecisionsReport>,
    /// `--overrides`: what the file applied (and when), when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overrides: Option<AppliedOverrides>,
    /// Requests that landed (had a `duration_ms`) and what settling them did, when any did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settlements: Option<Settlements>,
    /// One object per configured rule, in order.
    pub rules: Vec<RuleReport>,
    /// Outages (`--outage`), if any were given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outage: Option<OutageReport>,
    /// For `--format edgelimit`: agreement with what the Worker decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub against_log: Option<AgainstLog>,
    /// For `--baseline`: what changes from the baseline configuration to this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whatif: Option<WhatIf>,
    /// Per rule, admitted and denied over time (the HTML charts).
    pub series: Series,
}

impl ConfigReport {
    /// The report of a replay of `config` over `trace` that took `elapsed_ms`, its counts from
    /// `totals`, with `rules` and `series`; the sections only some replays have (regions,
    /// global, decisions, overrides, outage, the Worker's log, what-if) start empty.
    pub(super) fn of_totals(
        config: String,
        trace: ReadStats,
        elapsed_ms: u64,
        totals: super::tally::TotalsReport,
        rules: Vec<RuleReport>,
        series: Series,
    ) -> ConfigReport {
        ConfigReport {
            tool: crate::report::json::TOOL,
            version: crate::report::json::VERSION,
            config,
            trace,
            elapsed_ms,
            requests: totals.requests,
            admitted: totals.admitted,
            denied: totals.denied,
            unmatched: totals.unmatched,
            statuses: totals.statuses,
            missing_identifiers: totals.missing_identifiers,
            ambiguous_requests: totals.ambiguous_requests,
            shadow_would_deny: totals.shadow_would_deny,
            exceeding: totals.exceeding,
            regions: None,
            global: None,
            decisions: None,
            overrides: None,
            settlements: (totals.settled + totals.settle_failed > 0).then_some(Settlements {
                settled: totals.settled,
                failed: totals.settle_failed,
            }),
            rules,
            outage: None,
            against_log: None,
            whatif: None,
            series,
        }
    }
}

impl ConfigReport {
    /// The JSON text.
    pub fn to_json(&self) -> String {
        json::to_json(self)
    }
}

/// What the limits' `exceed` and `enforce` settings did over a replay.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ExceedingReport {
    /// Forwarded requests a `soft` limit denied: tagged for the origin (`EdgeLimit-Exceeded`).
    pub soft_tagged: u64,
    /// Requests a staged limit denied in shadow (identifiers its `enforce` share leaves out).
    pub staged_shadow_denied: u64,
    /// Requests refused by a block (`block_for`): denied as `blocked` after an earlier denial,
    /// which the limit's own rule alone would have decided afresh.
    pub blocked: u64,
    /// Requests admitted after a wait (`exceed = "delay …"`), counted as admitted.
    pub delayed: u64,
    /// The waits of the delayed requests (ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waits_ms: Option<WaitsReport>,
}

/// The distribution of the delayed requests' waits (ms).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct WaitsReport {
    /// The mean wait.
    pub mean: f64,
    /// The median.
    pub p50: u64,
    /// The 90th percentile.
    pub p90: u64,
    /// The 99th percentile.
    pub p99: u64,
    /// The longest.
    pub max: u64,
}

impl WaitsReport {
    /// The distribution of `waits` (sorted here); `None` when empty.
    pub fn of(mut waits: Vec<u64>) -> Option<WaitsReport> {
        if waits.is_empty() {
            return None;
        }
        waits.sort_unstable();
        // Nearest rank: the smallest wait with at least that share at or below it.
        let rank =
            |p: f64| waits[((p * waits.len() as f64).ceil() as usize).clamp(1, waits.len()) - 1];
        Some(WaitsReport {
            mean: waits.iter().sum::<u64>() as f64 / waits.len() as f64,
            p50: rank(0.5),
            p90: rank(0.9),
            p99: rank(0.99),
            max: waits[waits.len() - 1],
        })
    }
}
