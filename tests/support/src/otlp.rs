//! An OTLP receiver (feature `otlp`) standing in for an OpenTelemetry collector: HTTP/protobuf
//! (`POST /v1/traces`, `/v1/metrics`) on one loopback port and gRPC (the collector services'
//! `Export`) on another, each decoding what arrives with the official protobuf definitions
//! (`opentelemetry-proto`) and keeping it, with the headers it came with, for a test to read.
//!
//! ```no_run
//! # async fn run() {
//! let receiver = edgelimit_testkit::otlp::OtlpReceiver::start().await;
//! // OTEL_EXPORTER_OTLP_ENDPOINT=receiver.http_endpoint() (or grpc_endpoint() with
//! // OTEL_EXPORTER_OTLP_PROTOCOL=grpc) … export …
//! let spans = receiver.spans();
//! # let _ = spans;
//! # }
//! ```

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Frame;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
pub use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::Metric;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// The official protobuf definitions the receiver decodes with, for a test's assertions.
pub use opentelemetry_proto;

use crate::net::loopback_listener;

/// One export as it arrived.
#[derive(Debug, Clone)]
pub struct Export {
    /// `http/protobuf` or `grpc`.
    pub protocol: &'static str,
    /// The request's headers (`OTEL_EXPORTER_OTLP_HEADERS` among them).
    pub headers: HeaderMap,
    /// What it carried.
    pub signal: Signal,
}

/// What an export carried, decoded.
#[derive(Debug, Clone)]
pub enum Signal {
    /// Spans.
    Traces(ExportTraceServiceRequest),
    /// Metrics.
    Metrics(ExportMetricsServiceRequest),
}

/// A running receiver; its tasks stop when the runtime does.
#[derive(Debug)]
pub struct OtlpReceiver {
    http: SocketAddr,
    grpc: SocketAddr,
    exports: Arc<Mutex<Vec<Export>>>,
}

impl OtlpReceiver {
    /// Both listeners on free loopback ports, serving in the current tokio runtime.
    pub async fn start() -> OtlpReceiver {
        let exports = Arc::new(Mutex::new(Vec::new()));
        let http = loopback_listener().await;
        let grpc = loopback_listener().await;
        let receiver = OtlpReceiver {
            http: http.local_addr().unwrap(),
            grpc: grpc.local_addr().unwrap(),
            exports: exports.clone(),
        };
        let kept = exports.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = http.accept().await {
                let kept = kept.clone();
                let service = hyper::service::service_fn(move |r| receive(r, kept.clone()));
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        tokio::spawn(async move {
            while let Ok((stream, _)) = grpc.accept().await {
                let kept = exports.clone();
                let service = hyper::service::service_fn(move |r| receive(r, kept.clone()));
                tokio::spawn(
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        receiver
    }

    /// The HTTP/protobuf endpoint, as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it.
    pub fn http_endpoint(&self) -> String {
        format!("http://{}", self.http)
    }

    /// The gRPC endpoint, as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it with the protocol `grpc`.
    pub fn grpc_endpoint(&self) -> String {
        format!("http://{}", self.grpc)
    }

    /// Every export received so far.
    pub fn exports(&self) -> Vec<Export> {
        self.exports.lock().unwrap().clone()
    }

    /// Every span received so far, with its resource's `service.name`.
    pub fn spans(&self) -> Vec<(String, Span)> {
        let mut spans = Vec::new();
        for export in self.exports() {
            if let Signal::Traces(request) = export.signal {
                for resource in request.resource_spans {
                    let service = resource
                        .resource
                        .as_ref()
                        .and_then(|r| text(&r.attributes, "service.name"))
                        .unwrap_or_default();
                    for scope in resource.scope_spans {
                        spans.extend(scope.spans.into_iter().map(|s| (service.clone(), s)));
                    }
                }
            }
        }
        spans
    }

    /// The metrics of the latest export that carried any (each export of a cumulative
    /// instrument carries its every value so far).
    pub fn latest_metrics(&self) -> Vec<Metric> {
        self.exports()
            .into_iter()
            .rev()
            .find_map(|export| match export.signal {
                Signal::Metrics(request) => {
                    let metrics: Vec<Metric> = request
                        .resource_metrics
                        .into_iter()
                        .flat_map(|r| r.scope_metrics)
                        .flat_map(|s| s.metrics)
                        .collect();
                    (!metrics.is_empty()).then_some(metrics)
                }
                Signal::Traces(_) => None,
            })
            .unwrap_or_default()
    }
}

/// The value of the attribute `key`.
pub fn attribute<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a AnyValue> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

/// The attribute `key` when it is a string.
pub fn text(attributes: &[KeyValue], key: &str) -> Option<String> {
    match attribute(attributes, key) {
        Some(AnyValue::StringValue(text)) => Some(text.clone()),
        _ => None,
    }
}

type Answer = Response<BoxBody<Bytes, Infallible>>;

/// Decodes one export and answers as a collector does: an empty `Export…ServiceResponse`.
async fn receive(
    request: Request<Incoming>,
    exports: Arc<Mutex<Vec<Export>>>,
) -> Result<Answer, Infallible> {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let grpc = parts
        .headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    // A gRPC message is framed: a compression flag and a 4-byte length before it.
    let message = if grpc {
        body.get(5..).unwrap_or_default()
    } else {
        &body[..]
    };
    let path = parts.uri.path();
    let signal = if path.ends_with("/v1/traces") || path.ends_with("TraceService/Export") {
        ExportTraceServiceRequest::decode(message)
            .ok()
            .map(Signal::Traces)
    } else if path.ends_with("/v1/metrics") || path.ends_with("MetricsService/Export") {
        ExportMetricsServiceRequest::decode(message)
            .ok()
            .map(Signal::Metrics)
    } else {
        None
    };
    let Some(signal) = signal else {
        let mut refused = Response::new(Full::new(Bytes::new()).boxed());
        *refused.status_mut() = hyper::StatusCode::BAD_REQUEST;
        return Ok(refused);
    };
    exports.lock().unwrap().push(Export {
        protocol: if grpc { "grpc" } else { "http/protobuf" },
        headers: parts.headers,
        signal,
    });
    let mut answer = if grpc {
        let mut answer = Response::new(GrpcAnswer::default().boxed());
        answer
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        answer
    } else {
        let mut answer = Response::new(Full::new(Bytes::new()).boxed());
        answer.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-protobuf"),
        );
        answer
    };
    *answer.status_mut() = hyper::StatusCode::OK;
    Ok(answer)
}

/// A gRPC answer: one empty message, then the trailers `grpc-status: 0`.
#[derive(Debug, Default)]
struct GrpcAnswer {
    frames_sent: u8,
}

impl http_body::Body for GrpcAnswer {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.frames_sent += 1;
        Poll::Ready(match self.frames_sent {
            1 => Some(Ok(Frame::data(Bytes::from_static(&[0; 5])))),
            2 => {
                let mut trailers = HeaderMap::new();
                trailers.insert("grpc-status", HeaderValue::from_static("0"));
                Some(Ok(Frame::trailers(trailers)))
            }
            _ => None,
        })
    }
}
