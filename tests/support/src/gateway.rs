//! The gateway (`edgelimit-gateway`) in process, on a free loopback port, in front of a
//! `redis-server` a test started: the REST path (`RestStore` → gateway → Redis) without a
//! separate process. Runs on the caller's tokio runtime; stops when dropped or shut down.

use std::net::SocketAddr;

use edgelimit::RestStore;
use edgelimit_gateway::{Config, Gateway};

use crate::redis::RedisServer;

/// The gateway's configuration for `redis_url` and `token`, listening on a free loopback port:
/// the defaults, for a test to adjust before [`Gateway::start`].
pub fn config(redis_url: impl Into<String>, token: &str) -> Config {
    // Port 0: the gateway binds it and reports the port the system chose (`local_addr`).
    Config::new(crate::net::ANY_LOOPBACK_PORT, redis_url, token)
}

/// Starts the gateway with the defaults in front of `redis`. Panics when it does not start.
pub async fn start(redis: &RedisServer, token: &str) -> Gateway {
    Gateway::start(config(redis.url(), token))
        .await
        .expect("gateway starts")
}

/// `http://<address>`: the gateway's base URL, as `UPSTASH_REDIS_REST_URL` names it.
pub fn url(gateway: &Gateway) -> String {
    format!("http://{}", gateway.local_addr())
}

/// A `RestStore` on `gateway` with `token`, with the store's defaults (namespace, timeout).
pub fn rest_store(gateway: &Gateway, token: &str) -> RestStore {
    RestStore::new(&url(gateway), token).expect("valid URL")
}

/// A `redis-server` and the gateway in front of it, both on free loopback ports: the REST
/// backend of a test in one value. Both stop when it is dropped.
#[derive(Debug)]
pub struct GatewayServer {
    /// The Redis behind the gateway, for setup and assertions straight on it.
    pub redis: RedisServer,
    /// The gateway.
    pub gateway: Gateway,
    token: String,
}

impl GatewayServer {
    /// Starts both, the gateway with the defaults and `token`.
    pub async fn start(token: &str) -> GatewayServer {
        GatewayServer::start_with(token, |_| {}).await
    }

    /// Starts both; `configure` adjusts the gateway's defaults (limits, faults, metrics, …).
    pub async fn start_with(token: &str, configure: impl FnOnce(&mut Config)) -> GatewayServer {
        let redis = RedisServer::start();
        let mut config = config(redis.url(), token);
        configure(&mut config);
        let gateway = Gateway::start(config).await.expect("gateway starts");
        GatewayServer {
            redis,
            gateway,
            token: token.to_string(),
        }
    }

    /// The gateway's address.
    pub fn addr(&self) -> SocketAddr {
        self.gateway.local_addr()
    }

    /// `http://<address><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", url(&self.gateway))
    }

    /// A `RestStore` on the gateway with its token.
    pub fn rest_store(&self) -> RestStore {
        rest_store(&self.gateway, &self.token)
    }

    /// A Redis string value, read straight from Redis (not through the gateway): what requests
    /// left there.
    pub fn get(&self, key: &str) -> Option<String> {
        self.redis
            .command(&["GET", key])
            .expect("redis answers")
            .text()
    }
}
