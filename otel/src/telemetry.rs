//! [`Telemetry`]: a tracer provider and a meter provider exporting over OTLP as the standard
//! `OTEL_*` variables say, the resource naming the service.

use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{MetricExporter, SpanExporter};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing_core::Subscriber;
use tracing_subscriber::registry::LookupSpan;

/// The instrumentation scope of every span and instrument this crate's providers make.
pub const SCOPE: &str = "edgelimit";

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// An exporter could not be built from the `OTEL_*` variables (an unknown protocol, a bad
    /// endpoint or header).
    #[error("OpenTelemetry exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    /// Flushing or shutting down a provider failed (the collector did not take what was sent).
    #[error("OpenTelemetry: {0}")]
    Sdk(#[from] opentelemetry_sdk::error::OTelSdkError),
}

/// A tracer provider and a meter provider, each exporting over OTLP.
///
/// Configured as every OpenTelemetry SDK is, by the environment:
///
/// | variable | what | default |
/// |---|---|---|
/// | `OTEL_EXPORTER_OTLP_PROTOCOL` (`…_TRACES_…`, `…_METRICS_…`) | `http/protobuf` or `grpc` | `http/protobuf` |
/// | `OTEL_EXPORTER_OTLP_ENDPOINT` (`…_TRACES_…`, `…_METRICS_…`) | the collector | `http://localhost:4318` (gRPC: `:4317`) |
/// | `OTEL_EXPORTER_OTLP_HEADERS` (`…_TRACES_…`, `…_METRICS_…`) | `key=value,…` sent with each export | none |
/// | `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` | the resource | the host's name |
/// | `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG` | which traces are kept | `parentbased_always_on` |
/// | `OTEL_METRIC_EXPORT_INTERVAL` | ms between metric exports | `60000` |
/// | `OTEL_BSP_*` | the span batches | the SDK's |
/// | `OTEL_SDK_DISABLED` | `true`: export nothing | `false` |
///
/// Spans and metrics are exported from threads of the SDK's own; gRPC needs the tokio runtime
/// the providers were made in to be running.
#[derive(Debug, Clone)]
pub struct Telemetry {
    tracer: SdkTracerProvider,
    meter: SdkMeterProvider,
}

impl Telemetry {
    /// Providers exporting as the environment says, for the service `service_name` unless
    /// `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` names another. Must be called inside a
    /// tokio runtime when the protocol is gRPC.
    pub fn from_env(service_name: &str) -> Result<Telemetry, OtelError> {
        let resource = resource(service_name);
        let mut tracer = SdkTracerProvider::builder().with_resource(resource.clone());
        let mut meter = SdkMeterProvider::builder().with_resource(resource);
        if !disabled() {
            tracer = tracer.with_batch_exporter(SpanExporter::builder().build()?);
            meter = meter.with_periodic_exporter(MetricExporter::builder().build()?);
        }
        Ok(Telemetry {
            tracer: tracer.build(),
            meter: meter.build(),
        })
    }

    /// The `tracing` layer that records the spans of a subscriber it is added to as
    /// OpenTelemetry spans, exported by this telemetry.
    pub fn tracing_layer<S>(&self) -> tracing_opentelemetry::OpenTelemetryLayer<S, SdkTracer>
    where
        S: Subscriber + for<'span> LookupSpan<'span>,
    {
        tracing_opentelemetry::layer().with_tracer(self.tracer.tracer(SCOPE))
    }

    /// The meter a host registers its instruments on.
    pub fn meter(&self) -> Meter {
        self.meter.meter(SCOPE)
    }

    /// Exports every span ended and every instrument's value now, waiting for the collector.
    pub fn flush(&self) -> Result<(), OtelError> {
        self.tracer.force_flush()?;
        self.meter.force_flush()?;
        Ok(())
    }

    /// Exports what is left and stops both providers (blocking until the collector answered or
    /// the exporters' timeout passed): a host calls it once, as it stops.
    pub fn shutdown(&self) -> Result<(), OtelError> {
        let traced = self.tracer.shutdown();
        self.meter.shutdown()?;
        traced?;
        Ok(())
    }
}

/// `OTEL_SDK_DISABLED=true`: the specification's switch for exporting nothing.
fn disabled() -> bool {
    std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// The resource the SDK detects (service name and attributes from the environment, the SDK's
/// own), named `service_name` when the environment names no service.
fn resource(service_name: &str) -> Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.trim().is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| {
            v.split(',')
                .any(|kv| kv.trim_start().starts_with("service.name="))
        });
    let builder = Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name(service_name.to_string()).build()
    }
}
