//! What the metrics page ([`crate::Edge::metrics_text`]) says besides the counters: its content
//! type, the same in every host, and the configuration's bounds an alert compares the counters
//! against (docs/observability.md).

use std::fmt::Write as _;

use edgelimit::Store;

use crate::config::{Config, RouteToken};
use crate::pipeline::Edge;
use crate::route_answer::RouteAnswer;
use crate::route_guard::RouteGuard;

/// The `Content-Type` of every host's metrics page (the Worker's and tower's `metrics_path`,
/// the gateway's `/metrics`): the Prometheus text format, version 0.0.4
/// ([`edgelimit::metrics::PROMETHEUS_CONTENT_TYPE`]).
pub const METRICS_CONTENT_TYPE: &str = edgelimit::metrics::PROMETHEUS_CONTENT_TYPE;

impl<S: Store> Edge<S> {
    /// The `metrics_path` page as a host answers it ([`Edge::metrics_text`] as
    /// [`METRICS_CONTENT_TYPE`]): behind `guard` with `token` unless the page is public (`None`),
    /// the request coming from `client` with its `authorization` header at `now_ms` (a 401 or a
    /// 429 instead, as [`RouteGuard::admit`] answers).
    pub fn metrics_page(
        &self,
        guard: &RouteGuard,
        token: Option<&RouteToken>,
        client: Option<&str>,
        authorization: Option<&str>,
        now_ms: u64,
    ) -> RouteAnswer {
        if let Some(token) = token {
            if let Err(refused) = guard.admit(token, client, authorization, now_ms) {
                return refused;
            }
        }
        RouteAnswer::metrics(self.metrics_text())
    }
}

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

    #[test]
    fn the_page_is_the_counters_behind_the_door_unless_public() {
        let config = Config::from_value(serde_json::json!({
            "metrics_path": "/metrics",
            "rules": [{ "name": "api", "limits": [
                { "name": "per-ip", "policy": "fixed 3/1m", "identifier": "ip" }
            ]}]
        }))
        .unwrap();
        let edge = Edge::new(config, edgelimit::MemoryStore::new());
        let guard = RouteGuard::new();
        let secret = "s".repeat(crate::config::MIN_TOKEN_BYTES);
        let token = RouteToken::new("EDGELIMIT_METRICS_TOKEN", &secret).unwrap();
        let bearer = format!("Bearer {secret}");

        let public = edge.metrics_page(&guard, None, Some("192.0.2.1"), None, 0);
        assert_eq!(public.status, 200);
        assert_eq!(public.content_type, METRICS_CONTENT_TYPE);
        assert!(public.body.contains("edgelimit_store_timeout_seconds"));

        let refused = edge.metrics_page(&guard, Some(&token), Some("192.0.2.1"), None, 0);
        assert_eq!(refused.status, 401);
        assert!(!refused.body.contains("edgelimit_"), "{}", refused.body);
        let wrong = edge.metrics_page(&guard, Some(&token), Some("192.0.2.1"), Some("Bearer x"), 0);
        assert_eq!(wrong.status, 401);

        let admitted = edge.metrics_page(&guard, Some(&token), Some("192.0.2.1"), Some(&bearer), 0);
        assert_eq!(admitted.status, 200);
        assert_eq!(admitted.body, edge.metrics_text());
    }
}
