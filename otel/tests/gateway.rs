//! The gateway's OpenTelemetry export (its feature `otel`, what `--otel` sets up): its spans and
//! its metrics page, exported over OTLP as the `OTEL_*` variables say — HTTP/protobuf, then
//! gRPC — to a receiver that decodes them with the official protobuf definitions; names,
//! attributes, parents and values are checked against the requests sent.

use edgelimit_gateway::config::DEFAULT_MAX_CONNECTIONS;
use edgelimit_gateway::otel::{export_metrics, Telemetry};
use edgelimit_gateway::{Gateway, MetricsPage};
use edgelimit_testkit::otlp::opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, Metric,
};
use edgelimit_testkit::otlp::opentelemetry_proto::tonic::trace::v1::Span;
use edgelimit_testkit::otlp::{attribute, text, AnyValue, OtlpReceiver};
use edgelimit_testkit::RedisServer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, Layer};

const TOKEN: &str = "otel-test-gateway-token-4b7d91e2c0a6";

fn int(value: Option<&AnyValue>) -> Option<i64> {
    match value {
        Some(AnyValue::IntValue(n)) => Some(*n),
        _ => None,
    }
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

/// `POST path` with a JSON body and `token`: the status.
async fn post(
    client: &reqwest::Client,
    gateway: &Gateway,
    path: &str,
    body: &str,
    token: &str,
) -> u16 {
    client
        .post(format!("http://{}{path}", gateway.local_addr()))
        .bearer_auth(token)
        .body(body.to_string())
        .send()
        .await
        .expect("the gateway answers")
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_s_spans_and_page_reach_a_collector_over_http_protobuf_and_grpc() {
    let receiver = OtlpReceiver::start().await;
    let redis = RedisServer::start();
    let client = reqwest::Client::new();
    // The process's one subscriber (the gateway's tasks run on the runtime's threads), its
    // OpenTelemetry layer swapped for each protocol's.
    let mut swap = None;
    for (protocol, endpoint) in [
        ("http/protobuf", receiver.http_endpoint()),
        ("grpc", receiver.grpc_endpoint()),
    ] {
        let service = format!("gateway-test-{}", protocol.replace('/', "-"));
        // The only test of this binary: no other thread reads the environment meanwhile.
        std::env::set_var("OTEL_EXPORTER_OTLP_PROTOCOL", protocol);
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
        std::env::set_var("OTEL_SERVICE_NAME", &service);
        let telemetry = Telemetry::from_env("unused-default").expect("telemetry");
        match &swap {
            None => {
                let (layer, handle) = reload::Layer::new(telemetry.tracing_layer());
                tracing_subscriber::registry()
                    .with(
                        layer.with_filter(
                            Targets::new().with_target("edgelimit", tracing::Level::INFO),
                        ),
                    )
                    .init();
                swap = Some(handle);
            }
            Some(handle) => handle.reload(telemetry.tracing_layer()).unwrap(),
        }
        let before = receiver.exports().len();
        let mut config = edgelimit_testkit::gateway::config(redis.url(), TOKEN);
        config.metrics = MetricsPage::Token;
        let gateway = Gateway::start(config).await.expect("the gateway starts");
        let instruments = export_metrics(&gateway, &telemetry);
        assert!(
            instruments.contains(&"edgelimit_gateway_http_requests".to_string()),
            "{instruments:?}"
        );
        let mut statuses = Vec::new();
        for _ in 0..3 {
            statuses.push(post(&client, &gateway, "/", r#"["SET","k","v"]"#, TOKEN).await);
        }
        statuses.push(
            post(
                &client,
                &gateway,
                "/pipeline",
                r#"[["GET","k"],["TIME"]]"#,
                TOKEN,
            )
            .await,
        );
        statuses.push(post(&client, &gateway, "/", r#"["GET","k"]"#, "a-wrong-token").await);
        assert_eq!(statuses, [200, 200, 200, 200, 401], "{protocol}");
        gateway.shutdown().await;
        tokio::task::spawn_blocking(move || telemetry.shutdown())
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{protocol}: the export failed: {e}"));

        let exports = receiver.exports().split_off(before);
        assert!(
            exports.iter().all(|e| e.protocol == protocol),
            "{protocol}: {exports:?}"
        );
        let spans: Vec<Span> = receiver
            .spans()
            .into_iter()
            .filter(|(name, _)| *name == service)
            .map(|(_, span)| span)
            .collect();
        let requests: Vec<&Span> = spans
            .iter()
            .filter(|s| s.name == "edgelimit.gateway.request")
            .collect();
        let round_trips: Vec<&Span> = spans
            .iter()
            .filter(|s| s.name == "edgelimit.gateway.redis")
            .collect();
        assert_eq!(requests.len(), 5, "{protocol}: {requests:#?}");
        let answered = |route: &str, status: i64| {
            requests
                .iter()
                .filter(|s| {
                    text(&s.attributes, "edgelimit.gateway.route").as_deref() == Some(route)
                        && int(attribute(&s.attributes, "http.response.status_code"))
                            == Some(status)
                        && text(&s.attributes, "http.request.method").as_deref() == Some("POST")
                })
                .copied()
                .collect::<Vec<&Span>>()
        };
        assert_eq!(answered("single", 200).len(), 3, "{requests:#?}");
        assert_eq!(answered("single", 401).len(), 1);
        let pipeline = answered("pipeline", 200);
        assert_eq!(pipeline.len(), 1);
        assert_eq!(
            int(attribute(
                &pipeline[0].attributes,
                "edgelimit.gateway.commands"
            )),
            Some(2)
        );
        // Each answered request's round trip to Redis is its child; the refused one has none.
        for request in answered("single", 200).into_iter().chain(pipeline) {
            let child = round_trips
                .iter()
                .find(|r| r.parent_span_id == request.span_id && r.trace_id == request.trace_id)
                .expect("a round trip inside the request");
            assert_eq!(
                text(&child.attributes, "db.system.name").as_deref(),
                Some("redis")
            );
        }
        let refused = answered("single", 401)[0];
        assert!(!round_trips
            .iter()
            .any(|r| r.parent_span_id == refused.span_id));
        // No span carries the token.
        assert!(!format!("{spans:?}").contains(TOKEN));

        let metrics = receiver.latest_metrics();
        let requests_by = |route, status| {
            point(
                &metrics,
                "edgelimit_gateway_http_requests",
                &[("route", route), ("status", status)],
            )
        };
        assert_eq!(requests_by("single", "200"), Some(3.0), "{protocol}");
        assert_eq!(requests_by("single", "401"), Some(1.0));
        assert_eq!(requests_by("pipeline", "200"), Some(1.0));
        assert_eq!(
            point(
                &metrics,
                "edgelimit_gateway_commands",
                &[("command", "SET")]
            ),
            Some(3.0)
        );
        assert_eq!(
            point(&metrics, "edgelimit_gateway_auth_failures", &[]),
            Some(1.0)
        );
        assert_eq!(
            point(&metrics, "edgelimit_gateway_connections_max", &[]),
            Some(DEFAULT_MAX_CONNECTIONS as f64)
        );
        // The round trips, as the page's histogram: one per answered request, in seconds.
        let round_trip = metrics
            .iter()
            .find(|m| m.name == "edgelimit_gateway_redis_round_trip_seconds")
            .expect("the round-trip histogram");
        assert_eq!(round_trip.unit, "s");
        let Some(metric::Data::Histogram(histogram)) = &round_trip.data else {
            panic!("{round_trip:?}");
        };
        assert_eq!(histogram.data_points[0].count, 4);
        assert_eq!(histogram.data_points[0].explicit_bounds.len(), 13);
        println!(
            "{protocol}: {} exports, {} spans ({} requests, {} round trips), {} metrics",
            exports.len(),
            spans.len(),
            requests.len(),
            round_trips.len(),
            metrics.len()
        );
    }
}
