//! What the gateway is told: where Redis is, which tokens to accept, what to allow.

use std::collections::BTreeSet;
use std::net::SocketAddr;

/// The commands allowed by default: what the limiter's scripts and the official Upstash clients'
/// basic use need. Anything else (KEYS, MONITOR, FLUSHALL, CONFIG, DEBUG, SHUTDOWN, MODULE, …)
/// must be allowed explicitly.
pub const DEFAULT_COMMANDS: &[&str] = &[
    "APPEND",
    "DBSIZE",
    "DECR",
    "DECRBY",
    "DEL",
    "ECHO",
    "EVAL",
    "EVALSHA",
    "EVAL_RO",
    "EVALSHA_RO",
    "EXISTS",
    "EXPIRE",
    "EXPIREAT",
    "GET",
    "GETDEL",
    "GETEX",
    "GETRANGE",
    "GETSET",
    "HDEL",
    "HEXISTS",
    "HGET",
    "HGETALL",
    "HINCRBY",
    "HKEYS",
    "HLEN",
    "HMGET",
    "HMSET",
    "HSET",
    "HSETNX",
    "HVALS",
    "INCR",
    "INCRBY",
    "INCRBYFLOAT",
    "LINDEX",
    "LLEN",
    "LPOP",
    "LPUSH",
    "LRANGE",
    "LREM",
    "LSET",
    "LTRIM",
    "MGET",
    "MSET",
    "MSETNX",
    "PERSIST",
    "PEXPIRE",
    "PEXPIREAT",
    "PING",
    "PSETEX",
    "PTTL",
    "RPOP",
    "RPUSH",
    "SADD",
    "SCAN",
    "SCARD",
    "SCRIPT",
    "SET",
    "SETEX",
    "SETNX",
    "SISMEMBER",
    "SMEMBERS",
    "SREM",
    "STRLEN",
    "TIME",
    "TTL",
    "TYPE",
    "UNLINK",
    "ZADD",
    "ZCARD",
    "ZCOUNT",
    "ZINCRBY",
    "ZRANGE",
    "ZRANGEBYSCORE",
    "ZRANK",
    "ZREM",
    "ZREMRANGEBYRANK",
    "ZREMRANGEBYSCORE",
    "ZREVRANGE",
    "ZSCORE",
];

/// Commands a read-only token may run (a subset of what is allowed at all).
pub const READ_ONLY_COMMANDS: &[&str] = &[
    "DBSIZE",
    "ECHO",
    "EVAL_RO",
    "EVALSHA_RO",
    "EXISTS",
    "GET",
    "GETRANGE",
    "HEXISTS",
    "HGET",
    "HGETALL",
    "HKEYS",
    "HLEN",
    "HMGET",
    "HVALS",
    "LINDEX",
    "LLEN",
    "LRANGE",
    "MGET",
    "PING",
    "PTTL",
    "SCAN",
    "SCARD",
    "SISMEMBER",
    "SMEMBERS",
    "STRLEN",
    "TIME",
    "TTL",
    "TYPE",
    "ZCARD",
    "ZCOUNT",
    "ZRANGE",
    "ZRANGEBYSCORE",
    "ZRANK",
    "ZREVRANGE",
    "ZSCORE",
];

/// Redis connections the gateway multiplexes requests over unless told otherwise. Redis runs
/// commands on one thread, so a few connections suffice; each one more splits the same load
/// into smaller batches (more syscalls in Redis and in the gateway per command). `benches/rest.rs`
/// at 64 clients on a 2-core box: 1 or 2 connections about 5% more decisions/s than 4, and Redis
/// reading ~3x fewer times with 1 than with 4.
pub const DEFAULT_CONNECTIONS: usize = 2;

/// SCRIPT subcommands allowed with SCRIPT (FLUSH and KILL change the server for everyone).
pub const SCRIPT_SUBCOMMANDS: &[&str] = &["LOAD", "EXISTS"];

/// Whether and to whom the gateway serves its Prometheus metrics at `GET /metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MetricsPage {
    /// Not served (the default): `/metrics` stays the path form of a command named `metrics`,
    /// which is not allowed, and answers that error as any unknown command does.
    #[default]
    Off,
    /// Served to requests carrying the token or the read-only token, like any other request.
    Token,
    /// Served to anyone who can reach the gateway, without a token.
    Public,
}

/// The gateway's configuration.
#[derive(Clone)]
pub struct Config {
    /// Where to listen. Loopback by default; exposing the gateway is a deliberate choice.
    pub listen: SocketAddr,
    /// The Redis to serve, `redis://host:port/db`.
    pub redis_url: String,
    /// The token that may run every allowed command.
    pub token: String,
    /// A token that may run read-only commands only.
    pub read_only_token: Option<String>,
    /// Upper-case names of the allowed commands.
    pub allowed: BTreeSet<String>,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Most commands accepted in one `/pipeline` or `/multi-exec`.
    pub max_pipeline: usize,
    /// Multiplexed Redis connections shared round-robin by requests.
    pub connections: usize,
    /// Whether `GET /metrics` serves Prometheus metrics, and to whom.
    pub metrics: MetricsPage,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the tokens, nor credentials in the Redis URL.
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("redis_url", &redact_url(&self.redis_url))
            .field("token", &"<redacted>")
            .field(
                "read_only_token",
                &self.read_only_token.as_ref().map(|_| "<redacted>"),
            )
            .field("allowed", &self.allowed.len())
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_pipeline", &self.max_pipeline)
            .field("connections", &self.connections)
            .field("metrics", &self.metrics)
            .finish()
    }
}

/// `redis://user:secret@host` → `redis://<redacted>@host`.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}<redacted>{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

impl Config {
    /// A configuration with the defaults: loopback on `listen`, the default allow-list, 1 MiB
    /// bodies, 1000 commands per pipeline, [`DEFAULT_CONNECTIONS`] connections, no metrics page.
    pub fn new(
        listen: SocketAddr,
        redis_url: impl Into<String>,
        token: impl Into<String>,
    ) -> Config {
        Config {
            listen,
            redis_url: redis_url.into(),
            token: token.into(),
            read_only_token: None,
            allowed: DEFAULT_COMMANDS.iter().map(|c| c.to_string()).collect(),
            max_body_bytes: 1 << 20,
            max_pipeline: 1000,
            connections: DEFAULT_CONNECTIONS,
            metrics: MetricsPage::Off,
        }
    }
}
