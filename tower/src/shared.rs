//! What every service a layer wraps shares: the request path over the store and how requests are
//! read.

use std::sync::Arc;

use edgelimit::Clock;
use edgelimit_engine::config::RouteToken;
use edgelimit_engine::route_guard::RouteGuard;
use edgelimit_engine::Edge;

use crate::exempt::Exemptions;
use crate::request::Reading;

/// What every service the layer wraps shares: the request path over the store, how requests
/// are read, and the metrics page's token (unless the page is public or absent) with the guard
/// counting failed attempts at it.
pub(crate) struct Shared<S> {
    pub(crate) edge: Edge<S>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) reading: Reading,
    pub(crate) exempt: Exemptions,
    pub(crate) metrics_token: Option<RouteToken>,
    pub(crate) guard: RouteGuard,
    /// The store-latency histogram exported over OpenTelemetry, once
    /// [`crate::RateLimitLayer::export_metrics`] made it: each request's round trip is
    /// recorded in it as the limiter counts it for the metrics page.
    #[cfg(feature = "otel")]
    pub(crate) store_latency:
        std::sync::OnceLock<edgelimit_otel::opentelemetry::metrics::Histogram<f64>>,
}
