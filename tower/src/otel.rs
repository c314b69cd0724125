//! OpenTelemetry export (feature `otel`; docs/observability.md): the layer's spans through
//! [`Telemetry::tracing_layer`], and its metrics page's counters as instruments of the same
//! names, labels and values ([`RateLimitLayer::export_metrics`]). Where and how they are sent is
//! the standard `OTEL_*` variables' to say ([`Telemetry::from_env`]).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use edgelimit::MemoryStore;
//! use edgelimit_tower::otel::Telemetry;
//! use edgelimit_tower::{Builder, ConfigBuilder, LimitBuilder, RuleBuilder};
//! use tracing_subscriber::layer::SubscriberExt;
//!
//! let telemetry = Telemetry::from_env("my-service")?;
//! tracing::subscriber::set_global_default(
//!     tracing_subscriber::registry().with(telemetry.tracing_layer()),
//! )?;
//! let config = ConfigBuilder::new()
//!     .rule(RuleBuilder::new("api").limit(LimitBuilder::new("per-ip", "fixed 100/1m")))
//!     .build()?;
//! let layer = Builder::new(config).build(MemoryStore::new())?;
//! layer.export_metrics(&telemetry.meter());
//! // … serve with `layer`, then, as the service stops:
//! telemetry.shutdown()?;
//! # Ok(())
//! # }
//! ```

use edgelimit::metrics::LATENCY_BUCKETS_MS;
use edgelimit::Store;
pub use edgelimit_otel::opentelemetry;
use edgelimit_otel::opentelemetry::metrics::Meter;
pub use edgelimit_otel::{OtelError, Telemetry};

use crate::RateLimitLayer;

/// The store-latency histogram's name on the metrics page, and as an instrument.
const STORE_LATENCY: &str = "edgelimit_store_latency_seconds";

impl<S: Store + 'static> RateLimitLayer<S> {
    /// Registers the layer's metrics on `meter`: every counter and gauge of its metrics page
    /// ([`edgelimit_engine::Edge::metrics_text`]) read at each collection, named as there less
    /// `_total`, and the store's round trips as the histogram `edgelimit_store_latency_seconds`
    /// with the page's buckets, recorded from now on. Call it once per layer.
    pub fn export_metrics(&self, meter: &Meter) {
        let shared = self.shared.clone();
        edgelimit_otel::export_page(meter, move || shared.edge.metrics_text());
        let bounds: Vec<f64> = LATENCY_BUCKETS_MS.iter().map(|ms| ms / 1000.0).collect();
        let histogram =
            edgelimit_otel::histogram(meter, STORE_LATENCY, "Store round-trip latency.", &bounds);
        let _ = self.shared.store_latency.set(histogram);
    }
}
