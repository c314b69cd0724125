//! What the layer's tests share: an axum service behind the layer (in memory on a manual clock,
//! or over any store), requests from a chosen peer, and answers read back.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use edgelimit::{ManualClock, MemoryStore, Store};
use edgelimit_tower::{Builder, Config, RateLimitLayer};
use serde_json::Value;
use tower::ServiceExt;

/// The service the tests limit: `/api/*` and `/health` answer 200; `POST /login` 401 unless
/// `x-password: right`; `/llm` answers `x-tokens-used` with what `x-spend` asked for.
pub fn routes() -> Router {
    async fn login(headers: HeaderMap) -> StatusCode {
        match headers.get("x-password").and_then(|v| v.to_str().ok()) {
            Some("right") => StatusCode::OK,
            _ => StatusCode::UNAUTHORIZED,
        }
    }
    async fn llm(headers: HeaderMap) -> impl IntoResponse {
        let spend = headers
            .get("x-spend")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("0")
            .to_string();
        ([("x-tokens-used", spend)], "done")
    }
    Router::new()
        .route(
            "/api/{*rest}",
            get(|| async { "ok" }).options(|| async { "options" }),
        )
        .route("/health", get(|| async { "healthy" }))
        .route("/login", post(login))
        .route("/llm", get(llm))
}

/// The routes behind a layer over `MemoryStore`, both on one manual clock (standing at a
/// fixed day, moved by the test).
pub struct App {
    pub router: Router,
    pub layer: RateLimitLayer<MemoryStore>,
    pub clock: Arc<ManualClock>,
}

/// A fixed instant, epoch ms (2024-01-01T00:00:00Z): windows start where the test expects.
pub const T0: u64 = 1_704_067_200_000;

impl App {
    /// `config` with the builder's other settings from `build`.
    pub fn new(config: Config, build: impl FnOnce(Builder) -> Builder) -> App {
        let clock = Arc::new(ManualClock::at(T0));
        let store = MemoryStore::new().with_clock(clock.clone());
        let layer = build(Builder::new(config).clock(clock.clone()))
            .build(store)
            .expect("the layer builds");
        App {
            router: routes().layer(layer.clone()),
            layer,
            clock,
        }
    }

    /// Sends `request` through the service.
    pub async fn send(&self, request: Request<Body>) -> Reply {
        send(&self.router, request).await
    }
}

/// Sends `request` to `router`; its answer.
pub async fn send(router: &Router, request: Request<Body>) -> Reply {
    let response = router.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let headers = response.headers().clone();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("a body");
    // The work left for after the response (settlement, upkeep) runs in a task of its own: let
    // it run before the next request, as a server's runtime does between two requests of one
    // client.
    tokio::task::yield_now().await;
    Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// A request under construction: method, path, headers, and the peer it comes from.
pub struct Req {
    builder: axum::http::request::Builder,
}

impl Req {
    /// `GET path` from 203.0.113.7.
    pub fn get(path: &str) -> Req {
        Req::new("GET", path)
    }

    /// `method path` from 203.0.113.7.
    pub fn new(method: &str, path: &str) -> Req {
        Req {
            builder: Request::builder().method(method).uri(path),
        }
        .from("203.0.113.7")
    }

    /// From the peer `ip` (as axum's `ConnectInfo` records it).
    pub fn from(self, ip: &str) -> Req {
        let addr = SocketAddr::new(ip.parse().expect("an address"), 40_000);
        Req {
            builder: self.builder.extension(ConnectInfo(addr)),
        }
    }

    /// With a header field.
    pub fn header(self, name: &str, value: &str) -> Req {
        Req {
            builder: self.builder.header(name, value),
        }
    }

    /// The request.
    pub fn build(self) -> Request<Body> {
        self.builder.body(Body::empty()).expect("a request")
    }
}

/// What a request was answered.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as JSON (a problem body).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The `r` (remaining) of `limit` in the `RateLimit` field.
    pub fn remaining(&self, limit: &str) -> Option<u64> {
        edgelimit_testkit::sf::int_param(self.header("ratelimit")?, limit, "r")
    }
}

/// The routes behind a layer over `store` (a real one), serving on a free loopback port with
/// the peer recorded; the address.
pub async fn serve<S: Store + 'static>(layer: RateLimitLayer<S>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("the listener's address");
    let app = routes().layer(layer);
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .ok()
    });
    addr
}
