//! What the metrics page ([`crate::Edge::metrics_text`]) says besides the counters: its content
//! type, the same in every host, and the configuration's bounds an alert compares the counters
//! against (docs/observability.md).

use std::fmt::Write as _;

use crate::config::Config;

/// The `Content-Type` of every host's metrics page (the Worker's and tower's `metrics_path`,
/// the gateway's `/metrics`): the Prometheus text format, version 0.0.4
/// ([`edgelimit::metrics::PROMETHEUS_CONTENT_TYPE`]).
pub const METRICS_CONTENT_TYPE: &str = edgelimit::metrics::PROMETHEUS_CONTENT_TYPE;

/// The configuration's bounds as gauges: the store's time budget per request
/// (`edgelimit_store_timeout_seconds`), which the store-latency alert compares its quantiles
/// with.
pub fn configuration_gauges(config: &Config) -> String {
    let mut out = String::from(
        "# HELP edgelimit_store_timeout_seconds The store's time budget per request (timeout_ms): past it, each limit follows its fail mode.\n\
         # TYPE edgelimit_store_timeout_seconds gauge\n",
    );
    let _ = writeln!(
        out,
        "edgelimit_store_timeout_seconds {}",
        config.timeout.as_secs_f64()
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_is_written_in_seconds() {
        let config = Config::from_value(serde_json::json!({
            "timeout_ms": 75,
            "rules": [{ "name": "api", "limits": [
                { "name": "per-ip", "policy": "fixed 3/1m", "identifier": "ip" }
            ]}]
        }))
        .unwrap();
        let text = configuration_gauges(&config);
        assert!(
            text.lines()
                .any(|l| l == "edgelimit_store_timeout_seconds 0.075"),
            "{text}"
        );
    }
}
