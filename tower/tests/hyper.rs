//! The layer around a plain hyper service (no axum): the accept loop records each connection's
//! peer as a `PeerAddr`, the service's body is its own type, and the layer's answers and the
//! configuration's `metrics_path` (to its token only) come back over a real HTTP/1.1
//! connection.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use edgelimit::net::{ClientAddress, ProxyHeader, TrustedProxies};
use edgelimit::MemoryStore;
use edgelimit_tower::{Builder, ConfigBuilder, LimitBuilder, PeerAddr, RuleBuilder};
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tower::{Layer, ServiceExt};

/// The metrics page's token.
const METRICS_TOKEN: &str = "hyper-test-metrics-token-0f3a9c71";

/// Serves `/api/*` ("ok") behind the layer, on a free loopback port, trusting the loopback
/// proxy's `X-Forwarded-For`.
async fn serve() -> SocketAddr {
    let config = ConfigBuilder::new()
        .metrics_path("/metrics")
        .rule(
            RuleBuilder::new("api")
                .path_prefix("/api/")
                .limit(LimitBuilder::new("per-ip", "fixed 2/1h")),
        )
        .build()
        .unwrap();
    let layer = Builder::new(config)
        .client_address(ClientAddress::behind(
            TrustedProxies::parse(["loopback"]).unwrap(),
            ProxyHeader::XForwardedFor,
        ))
        .metrics_token(METRICS_TOKEN)
        .build(MemoryStore::new())
        .unwrap();
    let service = layer.layer(tower::service_fn(|_: Request<Incoming>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                return;
            };
            let service = service.clone();
            // The peer of this connection, recorded on each of its requests.
            let with_peer = tower::service_fn(move |mut request: Request<Incoming>| {
                request.extensions_mut().insert(PeerAddr(peer));
                service.clone().oneshot(request)
            });
            tokio::spawn(
                http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(with_peer)),
            );
        }
    });
    addr
}

#[tokio::test]
async fn a_hyper_service_is_limited_per_client_behind_its_proxy() {
    let addr = serve().await;
    let client = reqwest::Client::new();
    let get = |forwarded_for: &'static str| {
        client
            .get(format!("http://{addr}/api/items"))
            .header("x-forwarded-for", forwarded_for)
            .send()
    };
    for _ in 0..2 {
        let ok = get("203.0.113.5").await.unwrap();
        assert_eq!(ok.status(), 200);
        assert!(ok.headers().contains_key("ratelimit"));
        assert_eq!(ok.text().await.unwrap(), "ok");
    }
    let denied = get("203.0.113.5").await.unwrap();
    assert_eq!(denied.status(), 429);
    assert_eq!(denied.headers()["content-type"], "application/problem+json");
    let problem: serde_json::Value = serde_json::from_str(&denied.text().await.unwrap()).unwrap();
    assert_eq!(problem["violated-policies"][0], "per-ip");
    // Another client behind the same (trusted) proxy has its own quota.
    assert_eq!(get("203.0.113.6").await.unwrap().status(), 200);
    // The counters, at the configuration's metrics_path, unlimited, to the token only.
    let metrics = client
        .get(format!("http://{addr}/metrics"))
        .bearer_auth(METRICS_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("edgelimit_decisions_total{limit=\"per-ip\",outcome=\"denied\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn the_metrics_page_answers_its_token_and_limits_guesses_per_client() {
    let addr = serve().await;
    let client = reqwest::Client::new();
    let get = |token: Option<&str>, forwarded_for: &'static str| {
        let mut request = client
            .get(format!("http://{addr}/metrics"))
            .header("x-forwarded-for", forwarded_for);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    for i in 0..10 {
        let token = (i % 2 == 1).then_some("a-guess");
        let refused = get(token, "203.0.113.9").await.unwrap();
        assert_eq!(refused.status(), 401, "attempt {i}");
        assert!(!refused.text().await.unwrap().contains("edgelimit_"));
    }
    let locked = get(Some(METRICS_TOKEN), "203.0.113.9").await.unwrap();
    assert_eq!(locked.status(), 429);
    assert!(locked.headers().contains_key("retry-after"));
    let elsewhere = get(Some(METRICS_TOKEN), "203.0.113.10").await.unwrap();
    assert_eq!(elsewhere.status(), 200);
    assert!(elsewhere.text().await.unwrap().contains("edgelimit_"));
}
