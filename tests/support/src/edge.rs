//! The Worker's end-to-end stack: a `redis-server`, the gateway in front of it, an origin and
//! the built Worker under `wrangler dev`, all on free loopback ports; and what its tests ask of
//! it (statuses of a run of requests, a limit's remaining quota, keys in its Redis).

use std::net::SocketAddr;
use std::time::Duration;

use edgelimit_gateway::{Config as GatewayConfig, Gateway};
use reqwest::{Client, Response};

use crate::gateway;
use crate::http::header;
use crate::origin::start_origin;
use crate::redis::RedisServer;
use crate::sf;
use crate::wrangler::WranglerDev;

/// The gateway's token in the stack.
pub const TOKEN: &str = "e2e-token-0123456789";

/// The `[vars]` of a Worker that sends requests on to `origin` and decides through the REST
/// store at `store_url` with `token`; `config` is the body of `[vars.EDGELIMIT_CONFIG]` (TOML).
pub fn worker_vars(origin: SocketAddr, store_url: &str, token: &str, config: &str) -> String {
    format!(
        "[vars]\nORIGIN = \"http://{origin}\"\nUPSTASH_REDIS_REST_URL = \"{store_url}\"\n\
         UPSTASH_REDIS_REST_TOKEN = \"{token}\"\n\n[vars.EDGELIMIT_CONFIG]\n{config}\n"
    )
}

/// Redis, the gateway, the origin and the Worker, for one test. Everything stops when it is
/// dropped (the origin with the test's runtime).
#[derive(Debug)]
pub struct Stack {
    /// The Redis behind the gateway.
    pub redis: RedisServer,
    /// The gateway, with [`TOKEN`].
    pub gateway: Gateway,
    /// The origin the Worker forwards to.
    pub origin: SocketAddr,
    /// The Worker under `wrangler dev`.
    pub worker: WranglerDev,
    /// A client for the Worker, with a 30 s timeout (a loaded machine is slow, never stuck).
    pub http: Client,
}

impl Stack {
    /// Starts everything in front of an echo origin ([`start_origin`]); `config` is the body of
    /// `[vars.EDGELIMIT_CONFIG]` (TOML).
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
        let gateway = Gateway::start(gateway(gateway::config(redis.url(), TOKEN)))
            .await
            .expect("gateway starts");
        let vars = worker_vars(origin, &gateway::url(&gateway), TOKEN, config);
        let worker = tokio::task::spawn_blocking(move || WranglerDev::start(&vars))
            .await
            .expect("wrangler dev starts");
        Stack {
            redis,
            gateway,
            origin,
            worker,
            http: Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("an HTTP client"),
        }
    }

    /// `GET path` through the Worker with `headers`. Panics when the Worker does not answer.
    pub async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        let mut request = self.http.get(format!("{}{path}", self.worker.url()));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.expect("the worker answers")
    }
}

/// The statuses of `n` requests `GET path` with `headers`, one after another.
pub async fn statuses(stack: &Stack, path: &str, headers: &[(&str, &str)], n: usize) -> Vec<u16> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(stack.get(path, headers).await.status().as_u16());
    }
    out
}

/// How many keys in the stack's Redis match `pattern`.
pub fn keys(stack: &Stack, pattern: &str) -> usize {
    stack.redis.keys(pattern).len()
}

/// `r` (remaining) of limit `name` in the response's `RateLimit` header. Panics when the header,
/// the limit or its `r` is missing.
pub fn remaining(response: &Response, name: &str) -> u64 {
    let field = header(response, "ratelimit").expect("a RateLimit header");
    let item = sf::items(&field)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .find(|i| i.name == name)
        .unwrap_or_else(|| panic!("no `{name}` in `{field}`"));
    item.param("r")
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no r= in `{field}`"))
}
