//! OpenTelemetry export (feature `otel`, flag `--otel`; docs/observability.md): the gateway's
//! spans through [`Telemetry::tracing_layer`] and its metrics page's counters and gauges as
//! instruments of the same names, labels and values ([`export_metrics`]), sent over OTLP
//! (HTTP/protobuf or gRPC) where the standard `OTEL_*` variables say ([`Telemetry::from_env`]).

pub use edgelimit_otel::{OtelError, Telemetry};

use crate::metrics::ROUND_TRIP_BUCKETS;
use crate::Gateway;

/// The service name the gateway's resource carries unless `OTEL_SERVICE_NAME` names another.
pub const SERVICE_NAME: &str = "edgelimit-gateway";

/// The Redis round-trip histogram's name, on the page and as an instrument.
const ROUND_TRIP: &str = "edgelimit_gateway_redis_round_trip_seconds";

/// Registers every counter and gauge of `gateway`'s metrics page on `telemetry`'s meter, read
/// from the page at each collection, and the Redis round trips as the histogram
/// `edgelimit_gateway_redis_round_trip_seconds` with the page's buckets, recorded from now on;
/// the instruments' names (none when the page is off). Call it once per gateway.
pub fn export_metrics(gateway: &Gateway, telemetry: &Telemetry) -> Vec<String> {
    let (Some(page), Some(metrics)) = (gateway.metrics_text(), gateway.metrics()) else {
        return Vec::new();
    };
    let meter = telemetry.meter();
    let mut names = edgelimit_otel::export_page(&meter, page);
    let histogram = edgelimit_otel::histogram(
        &meter,
        ROUND_TRIP,
        "Time from sending a request's commands to Redis to having its answer",
        ROUND_TRIP_BUCKETS,
    );
    if metrics.exported_round_trip.set(histogram).is_ok() {
        names.push(ROUND_TRIP.to_string());
    }
    names
}
