//! What the gateway is told: where Redis is, which tokens to accept, what to allow, how long to
//! wait for clients.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::tls::TlsFiles;

/// The commands allowed by default: what the limiter's scripts, the official Upstash clients'
/// basic use and every documented feature of `@upstash/ratelimit` 2.2 send, directly or from its
/// scripts (deny lists: `SMISMEMBER`, `SDIFFSTORE`, `SUNIONSTORE`; analytics: `ZINCRBY`,
/// `ZUNION`; `resetUsedTokens`: `SCAN` and `DEL`), and edgelimit's own deny and allow lists
/// (`ZMSCORE` inside the gated limiter script). Anything else (KEYS, MONITOR, FLUSHALL, CONFIG,
/// DEBUG, SHUTDOWN, MODULE, …) must be allowed explicitly, and stays refused inside scripts too
/// (see [`RedisAcl`]).
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
    "SDIFFSTORE",
    "SET",
    "SETEX",
    "SETNX",
    "SISMEMBER",
    "SMEMBERS",
    "SMISMEMBER",
    "SREM",
    "STRLEN",
    "SUNIONSTORE",
    "TIME",
    "TTL",
    "TYPE",
    "UNLINK",
    "ZADD",
    "ZCARD",
    "ZCOUNT",
    "ZINCRBY",
    "ZMSCORE",
    "ZRANGE",
    "ZRANGEBYSCORE",
    "ZRANK",
    "ZREM",
    "ZREMRANGEBYRANK",
    "ZREMRANGEBYSCORE",
    "ZREVRANGE",
    "ZSCORE",
    "ZUNION",
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
    "SMISMEMBER",
    "STRLEN",
    "TIME",
    "TTL",
    "TYPE",
    "ZCARD",
    "ZCOUNT",
    "ZMSCORE",
    "ZRANGE",
    "ZRANGEBYSCORE",
    "ZRANK",
    "ZREVRANGE",
    "ZSCORE",
    "ZUNION",
];

/// Redis connections the gateway multiplexes requests over unless told otherwise. Redis runs
/// commands on one thread, so a few connections suffice; each one more splits the same load
/// into smaller batches (more syscalls in Redis and in the gateway per command). `benches/rest.rs`
/// at 64 clients on a 2-core box: 1 or 2 connections about 5% more decisions/s than 4, and Redis
/// reading ~3x fewer times with 1 than with 4.
pub const DEFAULT_CONNECTIONS: usize = 2;

/// SCRIPT subcommands allowed with SCRIPT (FLUSH and KILL change the server for everyone).
pub const SCRIPT_SUBCOMMANDS: &[&str] = &["LOAD", "EXISTS"];

/// How long a client may take to send a request's headers (from its first byte, or from the
/// connection's opening for its first request), and then its body, unless told otherwise.
/// Generous for any real client, short enough that stalled connections do not pile up.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a keep-alive connection may sit between requests unless told otherwise: longer than
/// the clients' own pools usually keep a connection unused, so it is they who close first.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(75);

/// Connections served at once unless told otherwise; more wait in the listen queue until one
/// closes. Below the usual 1024 open files, counting the Redis connections and the listener.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1000;

/// The Redis ACL user the gateway creates for its connections unless told otherwise.
pub const DEFAULT_ACL_USER: &str = "edgelimit-gateway";

/// How the allow-list reaches inside scripts: `EVAL` runs Lua that calls `redis.call(…)` on the
/// server, where the gateway cannot look. A Redis ACL user allowed exactly the allow-list can:
/// Redis checks every command a script calls against the user running it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisAcl {
    /// At start (and again whenever Redis has forgotten it, after a restart), create or reset the
    /// ACL user `user`, allowed every key, no channel and exactly the allow-list's commands, and
    /// run every command as that user. The Redis URL's own user must be allowed `ACL SETUSER`.
    Create {
        /// The ACL user's name.
        user: String,
    },
    /// Run commands as the Redis URL's own user. Scripts may then call whatever that user may:
    /// only safe when that user is restricted already (an ACL user you created yourself) or when
    /// every token holder may do anything to this Redis.
    Off,
}

impl Default for RedisAcl {
    fn default() -> RedisAcl {
        RedisAcl::Create {
            user: DEFAULT_ACL_USER.to_string(),
        }
    }
}

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
    /// How long a request's headers, and then its body, may take to arrive.
    pub header_read_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// Most connections served at once (at least 1); more wait to be accepted.
    pub max_connections: usize,
    /// How scripts are held to the allow-list.
    pub redis_acl: RedisAcl,
    /// Serve HTTPS with this certificate and key instead of cleartext HTTP.
    pub tls: Option<TlsFiles>,
    /// For tests of clients' retries only: every N-th `/pipeline` runs on Redis, then its
    /// connection is closed without an answer, so the client loses a response whose effect
    /// happened. Never set in production.
    pub drop_responses_every: Option<NonZeroU32>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the tokens, nor credentials in the Redis URL.
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("redis_url", &edgelimit::redact::redact(&self.redis_url))
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
            .field("header_read_timeout", &self.header_read_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_connections", &self.max_connections)
            .field("redis_acl", &self.redis_acl)
            .field("tls", &self.tls)
            .field("drop_responses_every", &self.drop_responses_every)
            .finish()
    }
}

impl Config {
    /// A configuration with the defaults: loopback on `listen`, the default allow-list, 1 MiB
    /// bodies, 1000 commands per pipeline, [`DEFAULT_CONNECTIONS`] connections, no metrics page,
    /// the default timeouts and connection cap, scripts held to the allow-list by the ACL user
    /// [`DEFAULT_ACL_USER`], and cleartext HTTP.
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
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            redis_acl: RedisAcl::default(),
            tls: None,
            drop_responses_every: None,
        }
    }
}

/// A duration as the gateway's flags take it: `500ms`, `10s`, `2m`, or bare seconds (`10`,
/// `0.5`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        _ => return Err(format!("`{text}`: the unit must be ms, s or m")),
    };
    let seconds = number
        .trim()
        .parse::<f64>()
        .map_err(|_| format!("`{text}` is not a duration like 500ms, 10s or 2m"))?;
    Duration::try_from_secs_f64(seconds * scale)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("`{text}`: a duration must be above zero"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit_or_mean_seconds() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("0s").unwrap_err().contains("above zero"));
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("5h").unwrap_err().contains("ms, s or m"));
        assert!(parse_duration("ten").is_err());
    }
}
