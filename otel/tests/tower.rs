//! The tower layer's OpenTelemetry export (its feature `otel`): its spans and its metrics page,
//! exported over OTLP as the `OTEL_*` variables say — HTTP/protobuf, then gRPC — to a receiver
//! that decodes them with the official protobuf definitions; names, attributes, parents and
//! values are checked against the requests sent.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::routing::get;
use axum::Router;
use edgelimit::MemoryStore;
use edgelimit_testkit::otlp::opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, Metric,
};
use edgelimit_testkit::otlp::opentelemetry_proto::tonic::trace::v1::Span;
use edgelimit_testkit::otlp::{attribute, text, AnyValue, OtlpReceiver, Signal};
use edgelimit_tower::otel::Telemetry;
use edgelimit_tower::{Builder, ConfigBuilder, LimitBuilder, RuleBuilder};
use tower::ServiceExt;
use tracing_subscriber::layer::SubscriberExt;

/// The client whose fourth request `fixed 3/1h` denies.
const CLIENT: &str = "203.0.113.9";
const COLLECTOR_KEY: &str = "test-collector-key-1";

/// Sends four requests from [`CLIENT`] through a layer exporting to the collector the
/// environment names: the statuses answered.
async fn run_requests(service_name: &str) -> Vec<u16> {
    let telemetry = Telemetry::from_env("unused-default").expect("telemetry from the environment");
    let subscriber = tracing_subscriber::registry().with(telemetry.tracing_layer());
    let config = ConfigBuilder::new()
        .rule(
            RuleBuilder::new("api")
                .path_prefix("/api/")
                .limit(LimitBuilder::new("per-ip", "fixed 3/1h")),
        )
        .build()
        .unwrap();
    let layer = Builder::new(config).build(MemoryStore::new()).unwrap();
    layer.export_metrics(&telemetry.meter());
    let router = Router::new()
        .route("/api/{*rest}", get(|| async { "ok" }))
        .layer(layer);
    let peer = SocketAddr::new(CLIENT.parse().unwrap(), 40_000);
    let mut statuses = Vec::new();
    {
        // This thread's subscriber while the requests run here, on the test's own thread.
        let _traced = tracing::subscriber::set_default(subscriber);
        for _ in 0..4 {
            let request = Request::get("/api/items")
                .extension(ConnectInfo(peer))
                .body(Body::empty())
                .unwrap();
            let response = router.clone().oneshot(request).await.unwrap();
            statuses.push(response.status().as_u16());
        }
    }
    // The exporters block while they send; gRPC's needs this runtime running meanwhile.
    tokio::task::spawn_blocking(move || telemetry.shutdown())
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{service_name}: the export failed: {e}"));
    statuses
}

fn int(value: Option<&AnyValue>) -> Option<i64> {
    match value {
        Some(AnyValue::IntValue(n)) => Some(*n),
        _ => None,
    }
}

/// The spans called `name`.
fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// A sum's or gauge's value for the data point with these `labels`.
fn point(metrics: &[Metric], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let metric = metrics.iter().find(|m| m.name == name)?;
    let points = match metric.data.as_ref()? {
        metric::Data::Sum(sum) => &sum.data_points,
        metric::Data::Gauge(gauge) => &gauge.data_points,
        _ => return None,
    };
    points
        .iter()
        .find(|p| {
            labels
                .iter()
                .all(|(k, v)| text(&p.attributes, k).as_deref() == Some(*v))
        })
        .and_then(|p| match p.value? {
            number_data_point::Value::AsDouble(v) => Some(v),
            number_data_point::Value::AsInt(v) => Some(v as f64),
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_and_metrics_reach_a_collector_over_http_protobuf_and_grpc() {
    let receiver = OtlpReceiver::start().await;
    for (protocol, endpoint) in [
        ("http/protobuf", receiver.http_endpoint()),
        ("grpc", receiver.grpc_endpoint()),
    ] {
        let service = format!("tower-test-{}", protocol.replace('/', "-"));
        // The only test of this binary: no other thread reads the environment meanwhile.
        std::env::set_var("OTEL_EXPORTER_OTLP_PROTOCOL", protocol);
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
        std::env::set_var(
            "OTEL_EXPORTER_OTLP_HEADERS",
            format!("x-collector-key={COLLECTOR_KEY}"),
        );
        std::env::set_var("OTEL_SERVICE_NAME", &service);
        let before = receiver.exports().len();
        let statuses = run_requests(&service).await;
        assert_eq!(statuses, [200, 200, 200, 429], "{protocol}");

        let exports = receiver.exports().split_off(before);
        assert!(!exports.is_empty(), "{protocol}: nothing arrived");
        for export in &exports {
            assert_eq!(export.protocol, protocol);
            assert_eq!(
                export.headers.get("x-collector-key").map(|v| v.as_bytes()),
                Some(COLLECTOR_KEY.as_bytes()),
                "{protocol}: OTEL_EXPORTER_OTLP_HEADERS sent"
            );
        }
        let (trace_exports, metric_exports) =
            exports.iter().fold((0, 0), |(t, m), e| match e.signal {
                Signal::Traces(_) => (t + 1, m),
                Signal::Metrics(_) => (t, m + 1),
            });
        assert!(
            trace_exports > 0 && metric_exports > 0,
            "{protocol}: {trace_exports} {metric_exports}"
        );

        // The spans: this run's only, each request's decide span inside its layer span, the
        // store call inside the decide span.
        let spans: Vec<Span> = receiver
            .spans()
            .into_iter()
            .filter(|(name, _)| *name == service)
            .map(|(_, span)| span)
            .collect();
        let layers = named(&spans, "edgelimit.layer");
        let decides = named(&spans, "edgelimit.decide");
        let stores = named(&spans, "edgelimit.store");
        assert_eq!(
            (layers.len(), decides.len(), stores.len()),
            (4, 4, 4),
            "{protocol}: {spans:#?}"
        );
        for decide in &decides {
            let parent = layers
                .iter()
                .find(|l| l.span_id == decide.parent_span_id)
                .expect("a decide span's parent is a layer span");
            assert_eq!(parent.trace_id, decide.trace_id);
            assert!(stores
                .iter()
                .any(|s| s.parent_span_id == decide.span_id && s.trace_id == decide.trace_id));
        }
        let decision = |s: &&Span| text(&s.attributes, "edgelimit.decision");
        let words: Vec<String> = decides.iter().filter_map(decision).collect();
        assert_eq!(
            words.iter().filter(|w| *w == "allowed").count(),
            3,
            "{words:?}"
        );
        let denied = decides
            .iter()
            .find(|s| decision(s).as_deref() == Some("denied"))
            .expect("the denied request's span");
        let a = &denied.attributes;
        assert_eq!(text(a, "edgelimit.rules").as_deref(), Some("api"));
        assert_eq!(text(a, "edgelimit.limits").as_deref(), Some("per-ip"));
        assert_eq!(text(a, "edgelimit.limit").as_deref(), Some("per-ip"));
        assert_eq!(text(a, "edgelimit.reason").as_deref(), Some("over_limit"));
        assert_eq!(int(attribute(a, "edgelimit.status")), Some(429));
        assert_eq!(int(attribute(a, "edgelimit.remaining")), Some(0));
        assert!(matches!(
            attribute(a, "edgelimit.store_ms"),
            Some(AnyValue::DoubleValue(ms)) if *ms >= 0.0
        ));
        assert!(text(a, "edgelimit.request_id").is_some_and(|id| !id.is_empty()));
        let identifier = text(a, "edgelimit.identifier").expect("the identifier, hashed");
        assert!(
            identifier.starts_with("hash:") && identifier.len() == 21,
            "{identifier}"
        );
        // The client's address is in no span, under no attribute.
        assert!(!format!("{spans:?}").contains(CLIENT));
        let denied_layer = layers
            .iter()
            .find(|l| l.span_id == denied.parent_span_id)
            .unwrap();
        assert_eq!(
            text(&denied_layer.attributes, "http.request.method").as_deref(),
            Some("GET")
        );
        assert_eq!(
            int(attribute(
                &denied_layer.attributes,
                "http.response.status_code"
            )),
            Some(429)
        );

        // The metrics: the page's counters, labels and values, and the latency histogram.
        let metrics = receiver.latest_metrics();
        let allowed = [("limit", "per-ip"), ("outcome", "allowed")];
        let over = [("limit", "per-ip"), ("outcome", "denied")];
        assert_eq!(point(&metrics, "edgelimit_decisions", &allowed), Some(3.0));
        assert_eq!(point(&metrics, "edgelimit_decisions", &over), Some(1.0));
        assert_eq!(
            point(&metrics, "edgelimit_checks", &[("outcome", "denied")]),
            Some(1.0)
        );
        assert!(point(&metrics, "edgelimit_store_timeout_seconds", &[]).is_some_and(|s| s > 0.0));
        let latency = metrics
            .iter()
            .find(|m| m.name == "edgelimit_store_latency_seconds")
            .expect("the latency histogram");
        assert_eq!(latency.unit, "s");
        let Some(metric::Data::Histogram(histogram)) = &latency.data else {
            panic!("{latency:?}");
        };
        assert_eq!(histogram.data_points[0].count, 4);
        assert_eq!(histogram.data_points[0].explicit_bounds.len(), 11);

        let attributes: BTreeMap<&str, String> = a
            .iter()
            .map(|kv| {
                (
                    kv.key.as_str(),
                    format!("{:?}", kv.value.as_ref().unwrap().value),
                )
            })
            .collect();
        println!(
            "{protocol}: {} exports ({trace_exports} of spans, {metric_exports} of metrics), {} spans, {} metrics; \
             the denied request's edgelimit.decide span: {attributes:#?}",
            exports.len(),
            spans.len(),
            metrics.len()
        );
    }
}
