//! # edgelimit-otel
//!
//! OpenTelemetry export for edgelimit's native hosts — the tower layer (`edgelimit-tower`'s
//! feature `otel`) and the gateway (`edgelimit-gateway`'s feature `otel`, flag `--otel`):
//!
//! - [`Telemetry::from_env`]: a tracer and a meter provider exporting over OTLP, HTTP/protobuf
//!   or gRPC, to the endpoint with the headers the standard `OTEL_*` variables name
//!   (`OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_HEADERS`,
//!   `OTEL_SERVICE_NAME`, `OTEL_METRIC_EXPORT_INTERVAL`, `OTEL_TRACES_SAMPLER`, …), and the
//!   `tracing` layer that turns the hosts' spans into OpenTelemetry spans;
//! - [`export_page`]: the counters and gauges of a host's Prometheus page as OpenTelemetry
//!   instruments of the same names (less `_total`), labels and values, read from the page itself
//!   at each collection, so the two cannot disagree; [`histogram`] for a histogram, which a host
//!   records as it observes (OpenTelemetry has no instrument for a histogram observed whole).
//!
//! ```no_run
//! use tracing_subscriber::layer::SubscriberExt;
//!
//! let telemetry = edgelimit_otel::Telemetry::from_env("my-service")?;
//! let subscriber = tracing_subscriber::registry().with(telemetry.tracing_layer());
//! tracing::subscriber::set_global_default(subscriber)?;
//! edgelimit_otel::export_page(&telemetry.meter(), || String::from("# TYPE up gauge\nup 1\n"));
//! // … serve …
//! telemetry.shutdown()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Layout
//!
//! - [`telemetry`]: [`Telemetry`], the providers and their exporters.
//! - [`page`]: a Prometheus text page read into families and samples.
//! - [`bridge`]: [`export_page`] and [`histogram`].

#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]

pub mod bridge;
pub mod page;
pub mod telemetry;

pub use bridge::{export_page, histogram};
pub use telemetry::{OtelError, Telemetry};

/// The OpenTelemetry API this crate builds on, for a host's own instruments.
pub use opentelemetry;
