//! The same counters as a `prometheus-client` [`Collector`], for native services that already
//! serve a `Registry` (an axum `/metrics` route, say): register once, every scrape reads the
//! limiter's live counters. Native only; the Worker keeps the dependency-free text renderer.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;

use super::{MetricsSnapshot, LATENCY_BUCKETS_MS};

/// A [`Collector`] over anything that can take a [`MetricsSnapshot`], such as a shared
/// [`crate::Limiter`]:
///
/// ```
/// use std::sync::Arc;
/// use edgelimit::metrics::LimiterCollector;
/// use edgelimit::{Limiter, MemoryStore};
/// use prometheus_client::registry::Registry;
///
/// let limiter = Arc::new(Limiter::new(MemoryStore::new()));
/// let mut registry = Registry::default();
/// let source = limiter.clone();
/// registry.register_collector(Box::new(LimiterCollector::new(move || source.metrics())));
/// let mut text = String::new();
/// prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
/// assert!(text.contains("edgelimit_store_latency_seconds"));
/// ```
pub struct LimiterCollector {
    snapshot: Box<dyn Fn() -> MetricsSnapshot + Send + Sync>,
}

impl LimiterCollector {
    /// A collector reading `snapshot` on every scrape.
    pub fn new(snapshot: impl Fn() -> MetricsSnapshot + Send + Sync + 'static) -> LimiterCollector {
        LimiterCollector {
            snapshot: Box::new(snapshot),
        }
    }
}

impl fmt::Debug for LimiterCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LimiterCollector")
    }
}

impl Collector for LimiterCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let snapshot = (self.snapshot)();
        {
            let mut checks = encoder.encode_descriptor(
                "edgelimit_checks",
                "Requests decided, by outcome.",
                None,
                MetricType::Counter,
            )?;
            for (outcome, n) in [
                ("allowed", snapshot.checks_allowed),
                ("denied", snapshot.checks_denied),
            ] {
                ConstCounter::new(n).encode(checks.encode_family(&[("outcome", outcome)])?)?;
            }
        }
        {
            let mut decisions = encoder.encode_descriptor(
                "edgelimit_decisions",
                "Limit decisions by outcome.",
                None,
                MetricType::Counter,
            )?;
            for (limit, c) in &snapshot.limits {
                for (outcome, n) in c.by_outcome() {
                    let labels = [("limit", limit.as_str()), ("outcome", outcome)];
                    ConstCounter::new(n).encode(decisions.encode_family(&labels)?)?;
                }
            }
        }
        {
            let mut near = encoder.encode_descriptor(
                "edgelimit_near_limit",
                "Admissions with at most 20% of the limit left.",
                None,
                MetricType::Counter,
            )?;
            for (limit, c) in &snapshot.limits {
                let labels = [("limit", limit.as_str())];
                ConstCounter::new(c.near_limit).encode(near.encode_family(&labels)?)?;
            }
        }
        {
            let mut errors = encoder.encode_descriptor(
                "edgelimit_store_errors",
                "Store calls that failed, by class.",
                None,
                MetricType::Counter,
            )?;
            for (class, n) in snapshot.store_errors_by_class() {
                let labels = [("class", class.as_str())];
                ConstCounter::new(n).encode(errors.encode_family(&labels)?)?;
            }
        }
        let latency = &snapshot.store_latency;
        let bounds = LATENCY_BUCKETS_MS
            .iter()
            .map(|ms| ms / 1000.0)
            .chain([f64::INFINITY]);
        let buckets: Vec<(f64, u64)> = bounds.zip(latency.buckets.iter().copied()).collect();
        encoder
            .encode_descriptor(
                "edgelimit_store_latency_seconds",
                "Store round-trip latency.",
                None,
                MetricType::Histogram,
            )?
            .encode_histogram::<NoLabelSet>(
                latency.sum_ms / 1000.0,
                latency.count,
                &buckets,
                None,
            )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use prometheus_client::registry::Registry;

    use super::*;
    use crate::decision::{Decision, Reason};
    use crate::metrics::Metrics;
    use crate::store::{Check, FailureClass, Limit, Verdict};
    use crate::Policy;

    fn value(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no `{series}` in\n{text}"))
    }

    #[test]
    fn a_scrape_reads_the_live_counters() {
        let metrics = Arc::new(Metrics::default());
        let mut registry = Registry::default();
        let source = metrics.clone();
        registry.register_collector(Box::new(LimiterCollector::new(move || source.snapshot())));
        let decision = |allowed, remaining, reason| Decision {
            allowed,
            limit: 10,
            remaining,
            reset_at_ms: 0,
            retry_after_ms: 0,
            reason,
        };
        let check = Check::single(
            Limit::new("per-ip", "fixed 10/1s".parse::<Policy>().unwrap()),
            "x",
            1,
        );
        let record = |d: Decision| {
            let verdict = Verdict {
                allowed: d.allowed,
                decisions: vec![d],
                atomic: true,
                decided_at_ms: 0,
                listed: Vec::new(),
            };
            metrics.record_check(&check, &verdict);
        };
        for _ in 0..3 {
            record(decision(true, 5, Reason::Admitted));
        }
        record(decision(true, 1, Reason::Admitted));
        record(decision(false, 0, Reason::OverLimit));
        record(decision(false, 0, Reason::CachedDenial));
        metrics.observe_store_latency(0.3);
        metrics.observe_store_latency(7.0);
        metrics.store_error(FailureClass::RefusedAuth);
        metrics.store_error(FailureClass::Timeout);
        metrics.store_error(FailureClass::RefusedAuth);

        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let d = |outcome: &str| {
            value(
                &text,
                &format!("edgelimit_decisions_total{{limit=\"per-ip\",outcome=\"{outcome}\"}}"),
            )
        };
        assert_eq!((d("allowed"), d("denied"), d("cache_hit")), (4.0, 1.0, 1.0));
        assert_eq!(
            value(&text, "edgelimit_checks_total{outcome=\"allowed\"}"),
            4.0
        );
        assert_eq!(
            value(&text, "edgelimit_checks_total{outcome=\"denied\"}"),
            2.0
        );
        assert_eq!(
            value(&text, "edgelimit_near_limit_total{limit=\"per-ip\"}"),
            1.0
        );
        let errors = |class: &str| {
            value(
                &text,
                &format!("edgelimit_store_errors_total{{class=\"{class}\"}}"),
            )
        };
        assert_eq!(
            (
                errors("refused_auth"),
                errors("timeout"),
                errors("unreachable")
            ),
            (2.0, 1.0, 0.0)
        );
        assert_eq!(value(&text, "edgelimit_store_latency_seconds_count"), 2.0);
        assert_eq!(
            value(
                &text,
                "edgelimit_store_latency_seconds_bucket{le=\"0.0005\"}"
            ),
            1.0
        );
        assert_eq!(
            value(&text, "edgelimit_store_latency_seconds_bucket{le=\"+Inf\"}"),
            2.0
        );

        // Live: the next scrape sees the next decision.
        record(decision(true, 5, Reason::Admitted));
        let mut again = String::new();
        prometheus_client::encoding::text::encode(&mut again, &registry).unwrap();
        assert_eq!(
            value(
                &again,
                "edgelimit_decisions_total{limit=\"per-ip\",outcome=\"allowed\"}"
            ),
            5.0
        );
    }
}
