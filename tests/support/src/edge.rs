//! The Worker's end-to-end stack, on either of its stores: the built Worker under `wrangler dev`
//! in front of an origin, deciding against a `redis-server` through the gateway (the Upstash REST
//! protocol) or in its own Durable Objects (no Redis, no gateway, no Upstash variable: the
//! zero-setup default), all on free loopback ports; and what its tests ask of it (statuses of a
//! run of requests, a limit's remaining quota, the store's keys, the admin route).

use std::net::SocketAddr;
use std::time::Duration;

use edgelimit::store::DEFAULT_NAMESPACE;
use edgelimit_gateway::{Config as GatewayConfig, Gateway};
use reqwest::{Client, Response};

use crate::gateway;
use crate::http::header;
use crate::objects::{self, glob_match, ObjectEntry};
use crate::origin::start_origin;
use crate::redis::RedisServer;
use crate::sf;
use crate::wrangler::WranglerDev;

/// The gateway's token in the stack.
pub const TOKEN: &str = "e2e-token-0123456789";

/// The admin route's token (`EDGELIMIT_ADMIN_TOKEN`) in a Durable Object stack: at least 32
/// bytes, as the Worker asks.
pub const ADMIN_TOKEN: &str = "e2e-admin-token-7a1c93-0f4d2b8e6a";

macro_rules! metrics_token {
    () => {
        "e2e-metrics-token-5b8e1f-c2a7d94e0"
    };
}

/// The metrics page's token (`EDGELIMIT_METRICS_TOKEN`) in every stack.
pub const METRICS_TOKEN: &str = metrics_token!();

/// The header field presenting [`METRICS_TOKEN`], for a stack's `metrics_path`.
pub const METRICS_AUTHORIZATION: (&str, &str) =
    ("authorization", concat!("Bearer ", metrics_token!()));

/// The secret keying which object an identifier lands on (`EDGELIMIT_SHARD_KEY`) in a Durable
/// Object stack: a test that asks where an identifier lives places it with this key.
pub const SHARD_KEY: &str = "e2e-shard-key-5f02b7d1c4e8";

/// Where a Durable Object stack serves its admin route, unless the configuration names its own
/// `admin_path`.
pub const ADMIN_PATH: &str = "/__edgelimit/admin";

/// Where the Worker keeps its state in a [`Stack`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgeStore {
    /// A `redis-server` behind the gateway, reached over the Upstash REST protocol.
    Redis,
    /// The Worker's Durable Objects (`EDGELIMIT_STATE`, class `EdgeLimitState`), with the admin
    /// route on at [`ADMIN_PATH`] and [`ADMIN_TOKEN`].
    DurableObjects,
}

impl EdgeStore {
    /// Both stores, Redis first.
    pub const EVERY: [EdgeStore; 2] = [EdgeStore::Redis, EdgeStore::DurableObjects];

    /// `redis` or `durable-objects`, for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            EdgeStore::Redis => "redis",
            EdgeStore::DurableObjects => "durable-objects",
        }
    }
}

/// Runs each named `async fn(EdgeStore)` as one ignored end-to-end test per store: `redis::name`
/// and `durable_objects::name`, so a body written once runs against both and either can be
/// picked by its path (`cargo test --test e2e -- --ignored durable_objects::`).
#[macro_export]
macro_rules! on_every_store {
    ($($body:ident),+ $(,)?) => {
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                #[ignore = "needs the built Worker and wrangler: scripts/test.d/worker.sh runs it"]
                async fn $body() {
                    super::$body($crate::edge::EdgeStore::Redis).await
                }
            )+
        }
        mod durable_objects {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                #[ignore = "needs the built Worker and wrangler: scripts/test.d/worker.sh runs it"]
                async fn $body() {
                    super::$body($crate::edge::EdgeStore::DurableObjects).await
                }
            )+
        }
    };
}

/// The `[vars]` of a Worker that sends requests on to `origin` and decides through the REST
/// store at `store_url` with `token`; `config` is the body of `[vars.EDGELIMIT_CONFIG]` (TOML).
pub fn worker_vars(origin: SocketAddr, store_url: &str, token: &str, config: &str) -> String {
    format!(
        "[vars]\nORIGIN = \"http://{origin}\"\nUPSTASH_REDIS_REST_URL = \"{store_url}\"\n\
         UPSTASH_REDIS_REST_TOKEN = \"{token}\"\nEDGELIMIT_METRICS_TOKEN = \"{METRICS_TOKEN}\"\n\n\
         [vars.EDGELIMIT_CONFIG]\n{config}\n"
    )
}

/// The `[vars]` and bindings of a Worker that sends requests on to `origin` and keeps its state
/// in its Durable Objects, as the root wrangler.toml binds them (no Upstash variable, so the
/// binding is the store), its admin route at [`ADMIN_PATH`] (unless `config` names its own
/// `admin_path`) with [`ADMIN_TOKEN`], identifiers placed by [`SHARD_KEY`]; `config` is the body
/// of `[vars.EDGELIMIT_CONFIG]`.
pub fn durable_vars(origin: SocketAddr, config: &str) -> String {
    let admin_path = if config.contains("admin_path") {
        String::new()
    } else {
        format!("admin_path = \"{ADMIN_PATH}\"\n")
    };
    format!(
        "[vars]\nORIGIN = \"http://{origin}\"\nEDGELIMIT_ADMIN_TOKEN = \"{ADMIN_TOKEN}\"\n\
         EDGELIMIT_METRICS_TOKEN = \"{METRICS_TOKEN}\"\n\
         EDGELIMIT_SHARD_KEY = \"{SHARD_KEY}\"\n\n\
         [vars.EDGELIMIT_CONFIG]\n{admin_path}{config}\n\n{}",
        durable_bindings()
    )
}

/// The Durable Object binding and migration of the root wrangler.toml, as TOML tables.
pub fn durable_bindings() -> &'static str {
    "[[durable_objects.bindings]]\nname = \"EDGELIMIT_STATE\"\nclass_name = \"EdgeLimitState\"\n\n\
     [[migrations]]\ntag = \"v1\"\nnew_sqlite_classes = [\"EdgeLimitState\"]\n"
}

/// The Worker, its origin and its store, for one test. Everything stops when it is dropped (the
/// origin with the test's runtime).
#[derive(Debug)]
pub struct Stack {
    /// Where the Worker keeps its state.
    pub store: EdgeStore,
    /// The Redis behind the gateway ([`EdgeStore::Redis`]).
    redis: Option<RedisServer>,
    /// The gateway, with [`TOKEN`] ([`EdgeStore::Redis`]).
    gateway: Option<Gateway>,
    /// The configuration's namespace, as keys name it.
    namespace: String,
    /// The origin the Worker forwards to.
    pub origin: SocketAddr,
    /// The Worker under `wrangler dev`.
    pub worker: WranglerDev,
    /// A client for the Worker, with a 90 s timeout: a loaded machine is slow, never stuck
    /// (beside `stress-ng --cpu 2` on a busy machine, an admin call queued behind the objects'
    /// other calls took over 30 s).
    pub http: Client,
}

impl Stack {
    /// Starts everything on Redis in front of an echo origin ([`start_origin`]); `config` is the
    /// body of `[vars.EDGELIMIT_CONFIG]` (TOML).
    pub async fn start(config: &str) -> Stack {
        Stack::start_on(EdgeStore::Redis, config).await
    }

    /// Starts everything on `store` in front of an echo origin.
    pub async fn start_on(store: EdgeStore, config: &str) -> Stack {
        let origin = start_origin().await;
        Stack::start_with_on(store, config, origin, |gateway| gateway).await
    }

    /// Starts everything on Redis in front of an `origin` the test runs, with the gateway
    /// configured by `gateway` (e.g. to inject faults).
    pub async fn start_with(
        config: &str,
        origin: SocketAddr,
        gateway: impl FnOnce(GatewayConfig) -> GatewayConfig,
    ) -> Stack {
        Stack::start_with_on(EdgeStore::Redis, config, origin, gateway).await
    }

    /// Starts everything on `store` in front of an `origin` the test runs; `gateway` configures
    /// the gateway when there is one.
    pub async fn start_with_on(
        store: EdgeStore,
        config: &str,
        origin: SocketAddr,
        gateway: impl FnOnce(GatewayConfig) -> GatewayConfig,
    ) -> Stack {
        let (redis, gateway, vars) = match store {
            EdgeStore::Redis => {
                let redis = RedisServer::start();
                let gateway = Gateway::start(gateway(gateway::config(redis.url(), TOKEN)))
                    .await
                    .expect("gateway starts");
                let vars = worker_vars(origin, &gateway::url(&gateway), TOKEN, config);
                (Some(redis), Some(gateway), vars)
            }
            EdgeStore::DurableObjects => (None, None, durable_vars(origin, config)),
        };
        let worker = tokio::task::spawn_blocking(move || WranglerDev::start(&vars))
            .await
            .expect("wrangler dev starts");
        Stack {
            store,
            redis,
            gateway,
            namespace: namespace_of(config),
            origin,
            worker,
            http: Client::builder()
                .timeout(Duration::from_secs(90))
                .build()
                .expect("an HTTP client"),
        }
    }

    /// The Redis behind the gateway. Panics on a Durable Object stack: a test that reaches
    /// for Redis is Redis-only.
    pub fn redis(&self) -> &RedisServer {
        self.redis
            .as_ref()
            .expect("this stack keeps its state in Durable Objects: no Redis")
    }

    /// The Redis behind the gateway, to stop or restart it. Panics as [`Stack::redis`] does.
    pub fn redis_mut(&mut self) -> &mut RedisServer {
        self.redis
            .as_mut()
            .expect("this stack keeps its state in Durable Objects: no Redis")
    }

    /// The gateway. Panics on a Durable Object stack, as [`Stack::redis`] does.
    pub fn gateway(&self) -> &Gateway {
        self.gateway
            .as_ref()
            .expect("this stack keeps its state in Durable Objects: no gateway")
    }

    /// `GET path` through the Worker with `headers`. Panics when the Worker does not answer.
    pub async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        let mut request = self.http.get(format!("{}{path}", self.worker.url()));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.expect("the worker answers")
    }

    /// The store's keys matching the glob `pattern`, sorted: Redis's own, or each Durable Object
    /// entry named as the Redis key of the same entry ([`ObjectEntry::redis_key`]), so one
    /// pattern asks either store.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let mut keys = match self.store {
            EdgeStore::Redis => self.redis().keys(pattern),
            EdgeStore::DurableObjects => self
                .object_entries()
                .iter()
                .map(|e| e.redis_key(&self.namespace))
                .filter(|key| glob_match(pattern, key))
                .collect(),
        };
        keys.sort();
        keys
    }

    /// Every entry the Durable Objects hold (none on a Redis stack).
    pub fn object_entries(&self) -> Vec<ObjectEntry> {
        match self.store {
            EdgeStore::Redis => Vec::new(),
            EdgeStore::DurableObjects => objects::entries(&self.worker.state_dir()),
        }
    }

    /// POSTs `body` to the admin route (at [`ADMIN_PATH`]) with `Authorization: Bearer <token>` (none: no header);
    /// the status and the body answered.
    pub async fn admin_with(&self, token: Option<&str>, body: &str) -> (u16, String) {
        let mut request = self
            .http
            .post(format!("{}{ADMIN_PATH}", self.worker.url()))
            .body(body.to_string());
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let response = request.send().await.expect("the worker answers");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    }

    /// POSTs `call` (a `Call` as JSON) to the admin route with [`ADMIN_TOKEN`]; its answer, as
    /// JSON. Panics unless the route answered 200.
    pub async fn admin(&self, call: &str) -> String {
        let (status, body) = self.admin_with(Some(ADMIN_TOKEN), call).await;
        assert_eq!(status, 200, "the admin route answered {status}: {body}");
        body
    }
}

/// The `namespace = "…"` of a `[vars.EDGELIMIT_CONFIG]` body, else the default.
fn namespace_of(config: &str) -> String {
    config
        .lines()
        .map(str::trim)
        .take_while(|line| !line.starts_with('['))
        .find_map(|line| {
            let value = line.strip_prefix("namespace")?.trim().strip_prefix('=')?;
            Some(value.trim().trim_matches('"').to_string())
        })
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string())
}

/// The statuses of `n` requests `GET path` with `headers`, one after another.
pub async fn statuses(stack: &Stack, path: &str, headers: &[(&str, &str)], n: usize) -> Vec<u16> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(stack.get(path, headers).await.status().as_u16());
    }
    out
}

/// How many of the stack's keys match `pattern` ([`Stack::keys`]).
pub fn keys(stack: &Stack, pattern: &str) -> usize {
    stack.keys(pattern).len()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_namespace_is_read_from_the_top_of_the_configuration() {
        assert_eq!(
            namespace_of("namespace = \"e2e\"\nlog_sample = 1.0\n"),
            "e2e"
        );
        assert_eq!(
            namespace_of("timeout_ms = 5\n[[vars.EDGELIMIT_CONFIG.rules]]\nnamespace = \"x\"\n"),
            DEFAULT_NAMESPACE
        );
    }

    #[test]
    fn durable_vars_bind_the_objects_and_turn_the_admin_route_on() {
        let origin: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let vars = durable_vars(origin, "timeout_ms = 5000\n");
        assert!(!vars.contains("UPSTASH"), "{vars}");
        assert!(vars.contains(&format!("admin_path = \"{ADMIN_PATH}\"")));
        assert!(vars.contains("class_name = \"EdgeLimitState\""));
        let own = durable_vars(origin, "admin_path = \"/own\"\n");
        assert_eq!(own.matches("admin_path").count(), 1, "{own}");
    }

    #[test]
    fn every_stack_has_the_metrics_token_and_long_enough_tokens() {
        let origin: SocketAddr = "127.0.0.1:9".parse().unwrap();
        for vars in [
            durable_vars(origin, ""),
            worker_vars(origin, "http://127.0.0.1:1", TOKEN, ""),
        ] {
            assert!(vars.contains(&format!("EDGELIMIT_METRICS_TOKEN = \"{METRICS_TOKEN}\"")));
        }
        assert_eq!(METRICS_AUTHORIZATION.1, format!("Bearer {METRICS_TOKEN}"));
        assert!(ADMIN_TOKEN.len() >= 32 && METRICS_TOKEN.len() >= 32);
    }
}
