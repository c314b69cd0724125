//! The gateway's spans (docs/observability.md, "Spans"), target `edgelimit`, level `info`:
//!
//! - `edgelimit.gateway.request`, one per request but the metrics page's: its method, route (a
//!   [`Route`], never the path or query, which may carry data or the token), status and the
//!   commands Redis answered for it;
//! - `edgelimit.gateway.redis`, its child, one per round trip to Redis: the commands sent and,
//!   when it failed, the error's class (never its text, which may name the Redis URL).
//!
//! With no subscriber taking them the spans are disabled: a branch per request. With the
//! `otel` feature and `--otel`, they are exported over OTLP ([`crate::otel`]).

use axum::http::Method;
use tracing::field::Empty;
use tracing::Span;

use crate::metrics::Route;

/// A new `edgelimit.gateway.request` span for a `method` request to `route`.
pub(crate) fn request_span(method: &Method, route: Route) -> Span {
    tracing::info_span!(
        target: "edgelimit",
        "edgelimit.gateway.request",
        http.request.method = method.as_str(),
        edgelimit.gateway.route = route.as_str(),
        http.response.status_code = Empty,
        edgelimit.gateway.commands = Empty,
    )
}

/// Records the answer of the request `span` stands for.
pub(crate) fn answered(span: &Span, status: u16, commands: usize) {
    if span.is_disabled() {
        return;
    }
    // As i64: OpenTelemetry's integer (an unsigned one is exported as text).
    span.record("http.response.status_code", i64::from(status));
    span.record("edgelimit.gateway.commands", signed(commands));
}

/// A new `edgelimit.gateway.redis` span for a round trip carrying `commands` commands.
pub(crate) fn redis_span(commands: usize) -> Span {
    tracing::info_span!(
        target: "edgelimit",
        "edgelimit.gateway.redis",
        db.system.name = "redis",
        edgelimit.gateway.commands = signed(commands),
        error.type = Empty,
    )
}

/// Records on the round trip's `span` that it failed, and how (`timeout`, `io`, …: the
/// client's error kind, never its message).
pub(crate) fn redis_failed(span: &Span, class: &str) {
    if !span.is_disabled() {
        span.record("error.type", class);
    }
}

/// A count as OpenTelemetry's integer.
fn signed(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
