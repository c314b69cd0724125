//! What the gateway is told: where Redis is, which tokens to accept, what to allow, how long to
//! wait for clients.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::tls::TlsFiles;

/// The commands allowed by default: exactly what edgelimit sends (`EVALSHA`, then `EVAL` after
/// `NOSCRIPT`, `SCRIPT LOAD` to load its scripts ahead of traffic, `GET` of a control key) and
/// what its scripts call (`src/script/*.lua` and the assignment script: `GET`, `SET`, `DEL`,
/// `PEXPIRE`, `PERSIST`, `TIME` and the sorted-set commands of the dynamic lists). Nothing that
/// lists keys (`SCAN`, `KEYS`, `RANDOMKEY`) nor empties a database (`FLUSHDB`, `FLUSHALL`), so a
/// token can touch only keys it can name. Anything else must be allowed explicitly
/// (`--allow-command`; [`UPSTASH_CLIENT_COMMANDS`] for `@upstash/ratelimit`), and stays refused
/// inside scripts too (see [`RedisAcl`]). `gateway/tests/allow_list.rs` checks the list against
/// the library's scripts.
pub const DEFAULT_COMMANDS: &[&str] = &[
    "DEL",
    "EVAL",
    "EVALSHA",
    "GET",
    "PERSIST",
    "PEXPIRE",
    "SCRIPT LOAD",
    "SET",
    "TIME",
    "ZADD",
    "ZMSCORE",
    "ZRANGE",
    "ZREM",
    "ZREMRANGEBYSCORE",
];

/// The commands the official Upstash clients' basic use and every documented feature of
/// `@upstash/ratelimit` 2.2 send, directly or from their scripts (deny lists: `SMISMEMBER`, `SDIFFSTORE`, `SUNIONSTORE`; analytics: `ZINCRBY`, `ZUNION`;
/// `resetUsedTokens`: `SCAN` and `DEL`). Not allowed by default: an operator serving those clients
/// adds them (`--allow-command`, docs/gateway.md). With `SCAN` a token can list every key, and
/// with `DEL` then delete them all.
pub const UPSTASH_CLIENT_COMMANDS: &[&str] = &[
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

/// Commands that can never be allowed: each reaches a database other than the one the Redis URL
/// names (`SELECT` would also switch the database under every other request sharing the
/// connection; `FLUSHALL` empties them all; `MOVE`, `COPY … DB`, `SWAPDB` cross over), and
/// inside a script Redis cannot tell one database argument from another. A gateway serves one
/// database; allow `FLUSHDB` rather than `FLUSHALL`.
pub const NEVER_ALLOWED: &[&str] = &["COPY", "FLUSHALL", "MOVE", "SELECT", "SWAPDB"];

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

/// How long a connection that has not yet presented a valid token may wait, unless told
/// otherwise: for its TLS handshake and first request's headers (from its opening), and between
/// answers. Ample for a client that means to send a request (a handshake and a few hundred bytes,
/// a few round trips); short enough that connections opened to hold a place are soon let go.
pub const DEFAULT_UNAUTHENTICATED_TIMEOUT: Duration = Duration::from_secs(3);

/// Connections served at once unless told otherwise; more wait in the listen queue until one
/// closes, or take the place of a connection that has not authenticated yet. Below the
/// usual 1024 open files, counting the Redis connections and the listener.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1000;

/// Connections one client address may hold at once unless told otherwise (an IPv6 address counts
/// by its /64, which one host usually holds whole); more are closed as they arrive. A quarter of
/// [`DEFAULT_MAX_CONNECTIONS`]: four addresses are needed to fill the gateway, while a Worker's
/// requests, which reach it from Cloudflare's addresses, many to one address, keep ample room.
pub const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS: usize = 256;

/// Scripts whose Upstash-only flag the gateway strips, remembered unless told otherwise (the SHA
/// a client calls them by, and the SHA Redis knows them by: 40 bytes and the map's overhead
/// each). `@upstash/ratelimit` 2.2 has ten such scripts: room for many clients and versions.
pub const DEFAULT_MAX_SCRIPTS: usize = 1024;

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
    /// Until a connection has presented a valid token: how long it may wait, for its TLS
    /// handshake and first request's headers and between answers (when shorter than the two
    /// timeouts above).
    pub unauthenticated_timeout: Duration,
    /// Most connections served at once (at least 1); more wait to be accepted, or take the place
    /// of one not yet authenticated (the one heard from longest ago).
    pub max_connections: usize,
    /// Most connections one client address (an IPv6 /64) may hold at once (at least 1); more
    /// are closed as they arrive.
    pub max_connections_per_address: usize,
    /// Most scripts remembered for the rewrite of the Upstash-only flag (at least 2); beyond
    /// it the least recently used go (a client calling one by its SHA then gets `NOSCRIPT` and
    /// sends it again, as it does after a Redis restart).
    pub max_scripts: usize,
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
            .field("unauthenticated_timeout", &self.unauthenticated_timeout)
            .field("max_connections", &self.max_connections)
            .field(
                "max_connections_per_address",
                &self.max_connections_per_address,
            )
            .field("max_scripts", &self.max_scripts)
            .field("redis_acl", &self.redis_acl)
            .field("tls", &self.tls)
            .field("drop_responses_every", &self.drop_responses_every)
            .finish()
    }
}

impl Config {
    /// A configuration with the defaults: loopback on `listen`, the default allow-list, 1 MiB
    /// bodies, 1000 commands per pipeline, [`DEFAULT_CONNECTIONS`] connections, no metrics page,
    /// the default timeouts, connection caps and script map bound, scripts held to the allow-list
    /// by the ACL user [`DEFAULT_ACL_USER`], and cleartext HTTP.
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
            unauthenticated_timeout: DEFAULT_UNAUTHENTICATED_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_address: DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
            max_scripts: DEFAULT_MAX_SCRIPTS,
            redis_acl: RedisAcl::default(),
            tls: None,
            drop_responses_every: None,
        }
    }
}

/// The entry of `allowed` naming a command of [`NEVER_ALLOWED`], if any (alone, as `MOVE`, or
/// with a subcommand).
pub fn never_allowed(allowed: &BTreeSet<String>) -> Option<&str> {
    allowed.iter().map(String::as_str).find(|entry| {
        let name = entry.split_whitespace().next().unwrap_or("");
        NEVER_ALLOWED
            .iter()
            .any(|never| never.eq_ignore_ascii_case(name))
    })
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
    fn commands_reaching_another_database_are_found_in_any_case() {
        let list = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
        assert_eq!(never_allowed(&list(DEFAULT_COMMANDS)), None);
        assert_eq!(never_allowed(&list(UPSTASH_CLIENT_COMMANDS)), None);
        assert_eq!(never_allowed(&list(&["GET", "select"])), Some("select"));
        assert_eq!(
            never_allowed(&list(&["FLUSHALL ASYNC"])),
            Some("FLUSHALL ASYNC")
        );
        assert_eq!(never_allowed(&list(&["FLUSHDB", "SELECTED"])), None);
    }

    #[test]
    fn the_default_list_neither_lists_nor_empties() {
        for command in [
            "SCAN",
            "KEYS",
            "RANDOMKEY",
            "FLUSHDB",
            "FLUSHALL",
            "PING",
            "INCR",
        ] {
            assert!(!DEFAULT_COMMANDS.contains(&command), "{command}");
        }
    }

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
