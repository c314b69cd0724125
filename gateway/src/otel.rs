//! OpenTelemetry export (feature `otel`, flag `--otel`; docs/observability.md): the gateway's
//! spans through [`Telemetry::tracing_layer`] and its metrics page's counters and gauges as
//! instruments of the same names, labels and values ([`export_metrics`]), sent over OTLP
//! (HTTP/protobuf or gRPC) where the standard `OTEL_*` variables say ([`Telemetry::from_env`]).

pub use edgelimit_otel::{OtelError, Telemetry};

use crate::Gateway;

/// The service name the gateway's resource carries unless `OTEL_SERVICE_NAME` names another.
pub const SERVICE_NAME: &str = "edgelimit-gateway";

/// Registers every counter and gauge of `gateway`'s metrics page on `telemetry`'s meter, read
/// from the page at each collection; the instruments' names (none when the page is off).
/// Histograms stay on the page: OpenTelemetry has no instrument observed whole.
pub fn export_metrics(gateway: &Gateway, telemetry: &Telemetry) -> Vec<String> {
    match gateway.metrics_text() {
        Some(page) => edgelimit_otel::export_page(&telemetry.meter(), page),
        None => Vec::new(),
    }
}
