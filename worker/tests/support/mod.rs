//! The end-to-end stack shared by `tests/e2e.rs` and `benches/edge_latency.rs`: Redis, the
//! gateway, a tiny origin and the Worker under `wrangler dev`, all on free loopback ports.

#![allow(dead_code)] // each user takes what it needs

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::Request;
use axum::http::HeaderMap;
use axum::Json;
use edgelimit_gateway::{Config as GatewayConfig, Gateway};
use edgelimit_testkit::{RedisServer, WranglerDev};
use reqwest::{Client, Response};
use serde_json::{json, Value};

/// The gateway's token.
pub const TOKEN: &str = "e2e-token-0123456789";

/// An origin that echoes what reached it.
pub async fn start_origin() -> SocketAddr {
    async fn echo(headers: HeaderMap, request: Request) -> Json<Value> {
        let (parts, body) = request.into_parts();
        let body: Bytes = axum::body::to_bytes(body, 1 << 20)
            .await
            .unwrap_or_default();
        Json(json!({
            "origin": true,
            "method": parts.method.as_str(),
            "path": parts.uri.path(),
            "query": parts.uri.query(),
            "body": String::from_utf8_lossy(&body),
            "x_user": headers.get("x-user").and_then(|v| v.to_str().ok()),
        }))
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(echo);
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    addr
}

/// Redis, the gateway, the origin and the Worker, for one test.
pub struct Stack {
    pub redis: RedisServer,
    pub gateway: Gateway,
    pub origin: SocketAddr,
    pub worker: WranglerDev,
    pub http: Client,
}

impl Stack {
    /// Starts everything; `config` is the body of `[vars.EDGELIMIT_CONFIG]` (TOML).
    pub async fn start(config: &str) -> Stack {
        let origin = start_origin().await;
        Stack::start_with(config, origin, |gateway| gateway).await
    }

    /// Starts everything in front of an `origin` the test runs, with the gateway configured by
    /// `gateway` (e.g. to inject faults).
    pub async fn start_with(
        config: &str,
        origin: SocketAddr,
        gateway: impl FnOnce(GatewayConfig) -> GatewayConfig,
    ) -> Stack {
        let redis = RedisServer::start();
        let gateway = Gateway::start(gateway(GatewayConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            redis.url(),
            TOKEN,
        )))
        .await
        .expect("gateway starts");
        let vars = format!(
            "[vars]\nORIGIN = \"http://{origin}\"\nUPSTASH_REDIS_REST_URL = \"http://{}\"\n\
             UPSTASH_REDIS_REST_TOKEN = \"{TOKEN}\"\n\n[vars.EDGELIMIT_CONFIG]\n{config}\n",
            gateway.local_addr()
        );
        let worker = tokio::task::spawn_blocking(move || WranglerDev::start(&vars))
            .await
            .unwrap();
        Stack {
            redis,
            gateway,
            origin,
            worker,
            http: Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
        }
    }

    pub async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        let mut request = self.http.get(format!("{}{path}", self.worker.url()));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.expect("the worker answers")
    }
}
