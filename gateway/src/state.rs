//! What every handler shares: the configuration, Redis, script rewrites and the counters.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use redis::Value;
use tracing::Instrument;

use crate::command::{Command, Scripts};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::redis_exec::{Lane, RedisExec};
use crate::respond::error;
use crate::telemetry;

/// The state behind every route.
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) redis: RedisExec,
    pub(crate) scripts: Scripts,
    /// Present only when the metrics page is on: a gateway without it counts nothing.
    pub(crate) metrics: Option<Metrics>,
    /// A counter of answers, sent as `upstash-sync-token`. One Redis gives read-your-writes
    /// already; the token only has to exist and move forward.
    sync: AtomicU64,
    /// Pipelines run, for `Config::drop_responses_every`.
    pipelines: AtomicU32,
}

impl Shared {
    pub(crate) fn new(
        config: Config,
        redis: RedisExec,
        scripts: Scripts,
        metrics: Option<Metrics>,
    ) -> Shared {
        Shared {
            config,
            redis,
            scripts,
            metrics,
            sync: AtomicU64::new(0),
            pipelines: AtomicU32::new(0),
        }
    }

    /// The next `upstash-sync-token`.
    pub(crate) fn next_sync_token(&self) -> u64 {
        self.sync.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Whether a request is for the metrics page (`GET /metrics` with the page on) rather than a
    /// command: it is not counted as a request, and needs no token when the page is public.
    pub(crate) fn is_metrics_page(&self, method: &Method, path: &str) -> bool {
        self.metrics.is_some() && method == Method::GET && path == "/metrics"
    }

    /// Sends `pipe` on `lane`, timing the round trip for the metrics. A failure to talk to Redis
    /// at all (not a command's own error) is a 503, so clients retry.
    pub(crate) async fn round_trip(
        &self,
        pipe: &redis::Pipeline,
        lane: Lane,
    ) -> Result<Vec<Value>, Response> {
        let started = Instant::now();
        let span = telemetry::redis_span(pipe.cmd_iter().count());
        match self
            .redis
            .round_trip(pipe, lane)
            .instrument(span.clone())
            .await
        {
            Ok(values) => {
                if let Some(m) = &self.metrics {
                    m.redis_round_trip(started.elapsed());
                }
                Ok(values)
            }
            Err(e) => {
                telemetry::redis_failed(&span, failure_class(&e));
                tracing::warn!(error = %e, "redis unreachable");
                if let Some(m) = &self.metrics {
                    m.redis_error();
                }
                Err(error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("ERR redis unavailable: {e}"),
                ))
            }
        }
    }

    /// Counts commands Redis answered.
    pub(crate) fn count_commands<'a>(&self, commands: impl IntoIterator<Item = &'a Command>) {
        if let Some(m) = &self.metrics {
            for c in commands {
                m.command(&c[0]);
            }
        }
    }

    /// Counts a pipeline that ran; whether its answer is to be dropped.
    pub(crate) fn drop_this_pipeline(&self) -> bool {
        let Some(every) = self.config.drop_responses_every else {
            return false;
        };
        let n = self.pipelines.fetch_add(1, Ordering::Relaxed) + 1;
        n.is_multiple_of(every.get())
    }
}

/// A failed round trip's class for its span: `timeout`, `io` (no connection, a reset) or
/// `redis` (anything else the client reports).
fn failure_class(e: &redis::RedisError) -> &'static str {
    if e.is_timeout() {
        "timeout"
    } else if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
        "io"
    } else {
        "redis"
    }
}
