//! The layer's span (docs/observability.md, "Spans"): each limited request runs inside an
//! `edgelimit.layer` span (target `edgelimit`, level `info`) carrying the request's method and
//! the status it was answered — the layer's own answer or the inner service's — around the
//! request path's `edgelimit.decide` span, the wait of a delayed request and the inner
//! service's own spans. With no subscriber listening the span is disabled: a branch per
//! request, nothing recorded.

use std::future::Future;

use edgelimit::Store;
use edgelimit_engine::Handled;
use http::{request, Response};
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::shared::Shared;

/// A new `edgelimit.layer` span for the request `parts` heads; `None`, its fields never read,
/// when no subscriber takes it (first one atomic load: `tracing`'s own first check).
#[inline]
pub(crate) fn layer_span(parts: &request::Parts) -> Option<Span> {
    if tracing::level_filters::STATIC_MAX_LEVEL < tracing::Level::INFO
        || tracing::level_filters::LevelFilter::current() < tracing::Level::INFO
    {
        return None;
    }
    let span = tracing::info_span!(
        target: "edgelimit",
        "edgelimit.layer",
        http.request.method = parts.method.as_str(),
        http.response.status_code = Empty,
    );
    (!span.is_disabled()).then_some(span)
}

/// `limited` run inside `span`, the status it answers recorded in it.
pub(crate) async fn within<B, E>(
    span: Span,
    limited: impl Future<Output = Result<Response<B>, E>>,
) -> Result<Response<B>, E> {
    let answer = limited.instrument(span.clone()).await;
    if !span.is_disabled() {
        if let Ok(response) = &answer {
            // As i64: OpenTelemetry's integer (an unsigned one is exported as text).
            span.record(
                "http.response.status_code",
                i64::from(response.status().as_u16()),
            );
        }
    }
    answer
}

/// What a host records once the path has decided a request: its store round trip, into the
/// OpenTelemetry histogram when [`crate::RateLimitLayer::export_metrics`] made one (feature
/// `otel`; without it, nothing).
#[inline]
pub(crate) fn decided<S: Store>(shared: &Shared<S>, handled: &Handled<'_>) {
    #[cfg(feature = "otel")]
    if let (Some(histogram), Some(ms)) = (shared.store_latency.get(), handled.checked().store_ms) {
        histogram.record(ms / 1000.0, &[]);
    }
    #[cfg(not(feature = "otel"))]
    let _ = (shared, handled);
}
