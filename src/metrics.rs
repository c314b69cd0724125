//! Counters an operator can watch: decisions per limit, store failures by class and a
//! store-latency histogram, rendered as Prometheus text by [`MetricsSnapshot::to_prometheus`]
//! (the gateway serves it on `/metrics`; the Worker logs samples), or registered in a
//! `prometheus-client` `Registry` with [`LimiterCollector`] (native); and the store failures'
//! rate-limited log ([`FailureLog`]). Plain atomics and mutexes, so it works unchanged on wasm32.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::decision::{Decision, Reason};
use crate::store::{Check, FailureClass, Verdict};

#[cfg(all(feature = "prometheus", not(target_arch = "wasm32")))]
mod collector;
mod failure_log;
#[cfg(all(feature = "prometheus", not(target_arch = "wasm32")))]
pub use collector::LimiterCollector;
pub use failure_log::{FailureLine, FailureLog, DEFAULT_FAILURE_LOG_INTERVAL_MS, STORE_FAILURE};

/// How many [`FailureClass`]es there are: one counter each.
const CLASSES: usize = FailureClass::ALL.len();

/// Upper bounds (ms) of the store-latency histogram's buckets; the last bucket is unbounded.
pub const LATENCY_BUCKETS_MS: [f64; 11] = [
    0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0,
];

/// The `Content-Type` of every edgelimit metrics page (the Worker's and tower's `metrics_path`,
/// the gateway's `/metrics`): the Prometheus text format, version 0.0.4, which every Prometheus
/// and OpenTelemetry collector reads.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A decision counts as near the limit when at most this share of the limit remains (80% used).
pub const NEAR_LIMIT_REMAINING: f64 = 0.2;

/// Decisions for one limit (or, summed, for all: [`MetricsSnapshot::totals`]), by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitCounts {
    /// Admitted by the store.
    pub allowed: u64,
    /// Denied by the store (over the limit, or a cost above capacity).
    pub denied: u64,
    /// Denied from the in-process denial cache, with no round trip.
    pub cache_hits: u64,
    /// Admitted because the store failed and the limit fails open: down (`fail`) or refusing
    /// the limiter (`fail_misconfigured`; which, [`MetricsSnapshot::store_errors_by_class`]
    /// tells).
    pub failed_open: u64,
    /// Denied because the store failed and the limit fails closed, down or refusing.
    pub failed_closed: u64,
    /// Decided by the local fallback while the store failed, down or refusing.
    pub fallback: u64,
    /// Admitted with at most 20% of the limit left.
    pub near_limit: u64,
}

impl LimitCounts {
    fn add(&mut self, other: &LimitCounts) {
        self.allowed += other.allowed;
        self.denied += other.denied;
        self.cache_hits += other.cache_hits;
        self.failed_open += other.failed_open;
        self.failed_closed += other.failed_closed;
        self.fallback += other.fallback;
        self.near_limit += other.near_limit;
    }

    /// The decision counts labelled by outcome, as every exporter names them.
    pub fn by_outcome(&self) -> [(&'static str, u64); 6] {
        [
            ("allowed", self.allowed),
            ("denied", self.denied),
            ("cache_hit", self.cache_hits),
            ("failed_open", self.failed_open),
            ("failed_closed", self.failed_closed),
            ("fallback", self.fallback),
        ]
    }
}

/// A store-latency histogram: counts per bucket of [`LATENCY_BUCKETS_MS`] plus the overflow.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LatencyHistogram {
    /// Count per bucket, non-cumulative; one more entry than `LATENCY_BUCKETS_MS` (+Inf).
    pub buckets: Vec<u64>,
    /// Total observed latency, ms.
    pub sum_ms: f64,
    /// Observations.
    pub count: u64,
}

/// Everything counted so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsSnapshot {
    /// Checks (requests, whatever their number of limits) admitted.
    pub checks_allowed: u64,
    /// Checks denied: by the store, from the denial cache, or by failing closed.
    pub checks_denied: u64,
    /// Per limit name.
    pub limits: BTreeMap<String, LimitCounts>,
    /// Round trips to the store and how long they took.
    pub store_latency: LatencyHistogram,
    /// Store calls that failed: the sum of [`MetricsSnapshot::store_errors_by_class`].
    pub store_errors: u64,
    /// Store calls that failed, by class, in the order of [`FailureClass::ALL`].
    pub store_errors_by_class: [u64; CLASSES],
}

/// The live counters behind a [`MetricsSnapshot`].
#[derive(Debug)]
pub struct Metrics {
    checks: [AtomicU64; 2],
    // Per limit, in order of first decision: a configuration has a handful of limits, each
    // item's name is the configuration's own `Arc`, so a scan by pointer finds it without the
    // string comparisons of a map (the snapshot sorts them by name).
    limits: Mutex<Vec<(Arc<str>, LimitCounts)>>,
    latency_buckets: [AtomicU64; LATENCY_BUCKETS_MS.len() + 1],
    latency_sum_us: AtomicU64,
    store_errors: [AtomicU64; CLASSES],
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            checks: [AtomicU64::new(0), AtomicU64::new(0)],
            limits: Mutex::new(Vec::new()),
            latency_buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            latency_sum_us: AtomicU64::new(0),
            store_errors: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Metrics {
    /// Counts one check's verdict: the check, and each limit's decision.
    pub fn record_check(&self, check: &Check, verdict: &Verdict) {
        self.record_checks(std::slice::from_ref(check), std::slice::from_ref(verdict));
    }

    /// Counts a batch's verdicts, one per check in order, as [`Metrics::record_check`] does each
    /// (the per-limit map is locked once for the batch).
    pub fn record_checks(&self, checks: &[Check], verdicts: &[Verdict]) {
        let mut limits = None;
        for (check, verdict) in checks.iter().zip(verdicts) {
            self.checks[usize::from(verdict.allowed)].fetch_add(1, Ordering::Relaxed);
            for (item, decision) in check.items().iter().zip(&verdict.decisions) {
                // A limit that was never consulted decided nothing.
                if decision.reason == Reason::Skipped {
                    continue;
                }
                let limits = limits
                    .get_or_insert_with(|| self.limits.lock().unwrap_or_else(|e| e.into_inner()));
                let name = &item.limit.name;
                let at = limits
                    .iter()
                    .position(|(known, _)| Arc::ptr_eq(known, name))
                    .or_else(|| limits.iter().position(|(known, _)| known == name))
                    .unwrap_or_else(|| {
                        limits.push((name.clone(), LimitCounts::default()));
                        limits.len() - 1
                    });
                count(&mut limits[at].1, decision);
            }
        }
    }

    /// Counts one store round trip that took `ms`.
    pub fn observe_store_latency(&self, ms: f64) {
        let bucket = LATENCY_BUCKETS_MS
            .iter()
            .position(|&bound| ms <= bound)
            .unwrap_or(LATENCY_BUCKETS_MS.len());
        self.latency_buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us
            .fetch_add((ms * 1000.0).round() as u64, Ordering::Relaxed);
    }

    /// Counts one failed store call of `class`.
    pub fn store_error(&self, class: FailureClass) {
        self.store_errors[class.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// A consistent-enough copy of every counter.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let limits = self.limits.lock().unwrap_or_else(|e| e.into_inner());
        let buckets: Vec<u64> = self
            .latency_buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        MetricsSnapshot {
            checks_allowed: self.checks[1].load(Ordering::Relaxed),
            checks_denied: self.checks[0].load(Ordering::Relaxed),
            limits: limits.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            store_latency: LatencyHistogram {
                count: buckets.iter().sum(),
                buckets,
                sum_ms: self.latency_sum_us.load(Ordering::Relaxed) as f64 / 1000.0,
            },
            store_errors: self
                .store_errors
                .iter()
                .map(|n| n.load(Ordering::Relaxed))
                .sum(),
            store_errors_by_class: std::array::from_fn(|i| {
                self.store_errors[i].load(Ordering::Relaxed)
            }),
        }
    }
}

fn count(counts: &mut LimitCounts, decision: &Decision) {
    match decision.reason {
        // A list's answer is a decision like any other here; which list said so is in the
        // verdict (`Verdict::listed`).
        Reason::Admitted | Reason::Allowlisted | Reason::Leased | Reason::Delayed => {
            counts.allowed += 1
        }
        Reason::OverLimit | Reason::CostExceedsCapacity | Reason::Denylisted | Reason::Blocked => {
            counts.denied += 1
        }
        Reason::CachedDenial => counts.cache_hits += 1,
        Reason::FailedOpen | Reason::MisconfiguredOpen => counts.failed_open += 1,
        Reason::FailedClosed | Reason::MisconfiguredClosed => counts.failed_closed += 1,
        Reason::Fallback | Reason::MisconfiguredFallback => counts.fallback += 1,
        Reason::Skipped => {}
    }
    if decision.allowed
        && decision.reason == Reason::Admitted
        && (decision.remaining as f64) <= decision.limit as f64 * NEAR_LIMIT_REMAINING
    {
        counts.near_limit += 1;
    }
}

/// Escapes a Prometheus label value.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl MetricsSnapshot {
    /// Store calls that failed, by class: every class, counted or not.
    pub fn store_errors_by_class(&self) -> [(FailureClass, u64); CLASSES] {
        std::array::from_fn(|i| (FailureClass::ALL[i], self.store_errors_by_class[i]))
    }

    /// Every limit's counts summed.
    pub fn totals(&self) -> LimitCounts {
        let mut totals = LimitCounts::default();
        for counts in self.limits.values() {
            totals.add(counts);
        }
        totals
    }

    /// The Prometheus text exposition format (version 0.0.4).
    pub fn to_prometheus(&self) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP edgelimit_checks_total Requests decided, by outcome.\n\
             # TYPE edgelimit_checks_total counter\n",
        );
        for (outcome, n) in [
            ("allowed", self.checks_allowed),
            ("denied", self.checks_denied),
        ] {
            let _ = writeln!(out, "edgelimit_checks_total{{outcome=\"{outcome}\"}} {n}");
        }
        out.push_str(
            "# HELP edgelimit_decisions_total Limit decisions by outcome.\n\
             # TYPE edgelimit_decisions_total counter\n",
        );
        for (name, c) in &self.limits {
            for (outcome, n) in c.by_outcome() {
                let _ = writeln!(
                    out,
                    "edgelimit_decisions_total{{limit=\"{}\",outcome=\"{outcome}\"}} {n}",
                    label(name)
                );
            }
        }
        out.push_str(
            "# HELP edgelimit_near_limit_total Admissions with at most 20% of the limit left.\n\
             # TYPE edgelimit_near_limit_total counter\n",
        );
        for (name, c) in &self.limits {
            let _ = writeln!(
                out,
                "edgelimit_near_limit_total{{limit=\"{}\"}} {}",
                label(name),
                c.near_limit
            );
        }
        out.push_str(
            "# HELP edgelimit_store_errors_total Store calls that failed, by class.\n\
             # TYPE edgelimit_store_errors_total counter\n",
        );
        for (class, n) in self.store_errors_by_class() {
            let _ = writeln!(out, "edgelimit_store_errors_total{{class=\"{class}\"}} {n}");
        }
        out.push_str(
            "# HELP edgelimit_store_latency_seconds Store round-trip latency.\n\
             # TYPE edgelimit_store_latency_seconds histogram\n",
        );
        let mut cumulative = 0;
        for (i, n) in self.store_latency.buckets.iter().enumerate() {
            cumulative += n;
            let le = LATENCY_BUCKETS_MS
                .get(i)
                .map_or("+Inf".to_string(), |ms| format!("{}", ms / 1000.0));
            let _ = writeln!(
                out,
                "edgelimit_store_latency_seconds_bucket{{le=\"{le}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "edgelimit_store_latency_seconds_sum {}",
            self.store_latency.sum_ms / 1000.0
        );
        let _ = writeln!(
            out,
            "edgelimit_store_latency_seconds_count {}",
            self.store_latency.count
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Limit;

    fn decided(allowed: bool, reason: Reason) -> Decision {
        Decision {
            allowed,
            limit: 10,
            remaining: 5,
            reset_at_ms: 0,
            retry_after_ms: 0,
            reason,
        }
    }

    #[test]
    fn limits_of_one_name_count_together_and_are_reported_by_name() {
        let policy: crate::Policy = "fixed 10/1s".parse().expect("a policy");
        // Two limits named alike but built apart (two `Arc`s), and one named otherwise.
        let (b, also_b, a) = (
            Limit::new("b", policy),
            Limit::new(String::from("b"), policy),
            Limit::new("a", policy),
        );
        let metrics = Metrics::default();
        let mut check = Check::single(&b, "x", 1);
        check.add_item(crate::store::CheckItem::new(&a, "x", 1));
        let verdict = |reasons: &[(bool, Reason)]| Verdict {
            allowed: reasons.iter().all(|(allowed, _)| *allowed),
            decisions: reasons.iter().map(|&(a, r)| decided(a, r)).collect(),
            atomic: true,
            decided_at_ms: 0,
            listed: Vec::new(),
        };
        metrics.record_check(
            &check,
            &verdict(&[(true, Reason::Admitted), (true, Reason::Admitted)]),
        );
        metrics.record_check(
            &Check::single(&also_b, "y", 1),
            &verdict(&[(false, Reason::OverLimit)]),
        );
        metrics.record_check(
            &Check::single(&b, "z", 1),
            &verdict(&[(false, Reason::CachedDenial)]),
        );
        let snapshot = metrics.snapshot();
        let names: Vec<&str> = snapshot.limits.keys().map(String::as_str).collect();
        assert_eq!(names, ["a", "b"]);
        let b = snapshot.limits["b"];
        assert_eq!((b.allowed, b.denied, b.cache_hits), (1, 1, 1));
        assert_eq!(snapshot.limits["a"].allowed, 1);
        assert_eq!((snapshot.checks_allowed, snapshot.checks_denied), (1, 2));
    }
}
