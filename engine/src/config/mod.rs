//! The Worker's configuration: the `EDGELIMIT_CONFIG` var (a `[vars.EDGELIMIT_CONFIG]` table in
//! `wrangler.toml`, an object in `wrangler.jsonc`, or a JSON string), parsed and validated once per
//! isolate. Every error names the field it is about, e.g.
//! `rules[1] "api" → limits[0] "per-key" → identifier: unknown source `cookie:x` …`.

#[cfg(not(target_arch = "wasm32"))]
pub mod file;
pub mod global;
pub mod limiter_options;
mod limits;
mod raw;
mod store;
mod tokens;
mod validate;

use std::time::Duration;

use edgelimit::http::FieldSets;
use edgelimit::TimeMode;

use crate::config::global::Global;
use crate::lists::{ProbeSource, StaticList};
use crate::rules::{CostSource, Rule};
use raw::RawConfig;
pub use tokens::{RouteToken, RouteTokens, MIN_TOKEN_BYTES};

/// The name of the var holding the configuration.
pub const CONFIG_VAR: &str = "EDGELIMIT_CONFIG";

/// The default store timeout: at the edge a limiter must answer fast or step aside.
pub const DEFAULT_TIMEOUT_MS: u64 = 50;
/// The default share of requests that get a log line.
pub const DEFAULT_LOG_SAMPLE: f64 = 0.01;
/// How long the isolate remembers a denial the dynamic lists answered, by default (ms).
pub const DEFAULT_LIST_CACHE_MS: u64 = 10_000;
/// The longest `list_cache_ms` allowed: a removal from a list must take effect in minutes.
pub const MAX_LIST_CACHE_MS: u64 = 600_000;
/// The longest `denial_cache_ms` allowed: a `reset`, tier or override must take effect in
/// minutes.
pub const MAX_DENIAL_CACHE_MS: u64 = 600_000;
/// How many Durable Objects hold the state by default (`objects`).
pub const DEFAULT_OBJECTS: u32 = 64;
/// The most Durable Objects `objects` may name: a list write reaches every one of them.
pub const MAX_OBJECTS: u32 = 1024;
/// The secret the admin route's bearer token must equal.
pub const ADMIN_TOKEN_VAR: &str = "EDGELIMIT_ADMIN_TOKEN";
/// The secret the metrics page's bearer token must equal (else [`ADMIN_TOKEN_VAR`]'s), unless
/// `metrics_public = true`.
pub const METRICS_TOKEN_VAR: &str = "EDGELIMIT_METRICS_TOKEN";
/// The Durable Object binding of `store = "durable-object"`.
pub const STATE_BINDING: &str = "EDGELIMIT_STATE";

/// Where the Worker keeps its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// Redis over the Upstash REST protocol (`UPSTASH_REDIS_REST_URL`, or `shards`).
    Upstash,
    /// Durable Objects of the class `EdgeLimitState`, bound as `EDGELIMIT_STATE`.
    DurableObject,
}

/// A configuration that could not be used, and where the problem is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{CONFIG_VAR}: {field}: {problem}")]
pub struct ConfigError {
    /// The field, as a path: `rules[0] "api" → limits[1] "daily" → policy`.
    pub field: String,
    /// What is wrong with it.
    pub problem: String,
}

impl ConfigError {
    pub(crate) fn at(field: impl Into<String>, problem: impl Into<String>) -> ConfigError {
        ConfigError {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

/// The response given to admitted requests when no `ORIGIN` is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixedResponse {
    /// Its status.
    pub status: u16,
    /// Its body.
    pub body: String,
    /// Its `Content-Type`.
    pub content_type: String,
}

/// One shard of the store: the names of the secrets holding its REST URL and token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardConfig {
    /// The shard's name: it decides which identifiers land on it (rendezvous hashing), so renaming
    /// a shard moves its identifiers.
    pub name: String,
    /// The secret (or var) holding the shard's REST URL.
    pub url_var: String,
    /// The secret (or var) holding the shard's REST token.
    pub token_var: String,
}

/// A validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The Redis key namespace.
    pub namespace: String,
    /// The store's time budget per request.
    pub timeout: Duration,
    /// Whose clock decides: Redis's (the default at the edge) or the isolate's.
    pub time: TimeMode,
    /// Capacity of the in-isolate denial cache (0 turns it off).
    pub denial_cache: usize,
    /// How long the isolate keeps a denial at most, in ms, however far its retry time (0 turns
    /// the cache off): the time a `reset`, tier or override takes to reach every isolate.
    pub denial_cache_ms: u64,
    /// Share of requests logged (shadow-mode denials are always logged).
    pub log_sample: f64,
    /// The Analytics Engine binding to write one data point per request to, if any.
    pub analytics: Option<String>,
    /// A path answering `GET` with this isolate's counters as Prometheus text, if any: to a
    /// bearer token ([`Config::route_tokens`]) unless [`Config::metrics_public`].
    pub metrics_path: Option<String>,
    /// Whether `metrics_path` answers anyone, without a token (off unless configured: the
    /// counters name the limits and how often each denies, which an attacker tunes against).
    pub metrics_public: bool,
    /// The response for admitted requests when no `ORIGIN` is set.
    pub respond: Option<FixedResponse>,
    /// The shards; empty means one store from `UPSTASH_REDIS_REST_URL`/`_TOKEN`.
    pub shards: Vec<ShardConfig>,
    /// The request header whose value is the request id, when the configuration names one and
    /// says it is trusted (`request_id_trusted`: set by the deployment's own proxy or the
    /// platform, never by the client): what `idempotent` limits remember a request under, so a
    /// retry the proxy sends with the same id is charged once. `None` (the default): idempotent
    /// limits remember the path's own id ([`crate::Edge`]), unique per request.
    pub request_id_header: Option<String>,
    /// How a header or query parameter an identifier is read from is read when a request sends
    /// it more than once (`duplicates`).
    pub duplicates: crate::reading::Duplicates,
    /// The rules, in order; every matching rule applies.
    pub rules: Vec<Rule>,
    /// Configuration-wide deny entries, matched in the isolate (a match: 403, no store call).
    pub deny: StaticList,
    /// Configuration-wide allow entries, matched in the isolate (a match: no limit counts).
    pub allow: StaticList,
    /// Whether the dynamic lists in Redis (`deny`, `allow`, `deny:<rule>`, `allow:<rule>`) are
    /// consulted, in the check's round trip.
    pub dynamic_lists: bool,
    /// How long the isolate remembers a denial the dynamic lists answered, in ms (0: not at
    /// all), so a blocked client's next requests cost no store command.
    pub list_cache_ms: u64,
    /// The sources a request offers the lists, by their canonical spec: `ip`, `country`, every
    /// limit's identifier source, every static entry's source and `list_sources`.
    pub probe_sources: Vec<(String, ProbeSource)>,
    /// Regions and the home for global limits (docs/design.md §9), if the deployment has them.
    pub global: Option<Global>,
    /// How many leading bits of an IPv6 client address make its `ip` identifier (default 64: an
    /// IPv6 client holds at least a /64, so one limit per address would not limit it).
    pub ipv6_prefix: u8,
    /// Where state lives: `None` chooses by what the deployment has (Upstash when its URL is set,
    /// else the Durable Object binding), see [`StoreKind`].
    pub store: Option<StoreKind>,
    /// How many Durable Objects hold the state (`store = "durable-object"`): identifiers are
    /// spread over them by rendezvous hashing, every limit of an identifier in one object.
    pub objects: u32,
    /// The admin route (a path, e.g. `/__edgelimit/admin`): live control — tiers, overrides,
    /// lists, peek, reset — through the Worker, for a store only the Worker can reach (Durable
    /// Objects). Off unless set; answers only a bearer token equal to the
    /// `EDGELIMIT_ADMIN_TOKEN` secret.
    pub admin_path: Option<String>,
    /// Whether responses carry `X-EdgeLimit-Shadow` (what shadow rules decided): off unless
    /// configured, since shadow mode is meant to go unnoticed by clients — attackers included.
    /// A debugging aid; the log line, metrics and `sim` report shadow decisions either way.
    pub shadow_header: bool,
    /// The rate-limit header fields answers carry (`headers = ["ratelimit", "x-ratelimit"]`,
    /// both unless configured; `[]` for neither): a deployment whose clients read only the
    /// draft's fields need not send the older trio on every response.
    pub headers: FieldSets,
}

impl Config {
    /// Parses a configuration written as JSON (what a `[vars]` table becomes at run time).
    pub fn from_json(text: &str) -> Result<Config, ConfigError> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            ConfigError::at(
                format!("line {}, column {}", e.line(), e.column()),
                format!("not valid JSON: {e}"),
            )
        })?;
        Config::from_value(value)
    }

    /// Parses a configuration from a JSON value.
    pub fn from_value(value: serde_json::Value) -> Result<Config, ConfigError> {
        if !value.is_object() {
            return Err(ConfigError::at(
                "(top level)",
                "must be a table (TOML) or an object (JSON) with a `rules` list",
            ));
        }
        let raw: RawConfig = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            // An unknown key named "" at the top level has an empty path (found by fuzzing).
            let field = if path == "." || path.is_empty() {
                "(top level)".to_string()
            } else {
                path
            };
            ConfigError::at(field, e.into_inner().to_string())
        })?;
        raw.validate()
    }
}

/// A `custom:<name>` source a configuration names: an identifier or a cost that a native
/// service's code supplies (edgelimit-tower's layer, from closures registered by name). The
/// Worker has none ([`Config::refuse_custom_sources`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomSource {
    /// Where it is named: `rules[0] "api" → limits[1] "per-user" → identifier` (or `… → cost →
    /// from`).
    pub field: String,
    /// The name after `custom:`.
    pub name: String,
    /// Whether it is a cost read from the response (`cost = { from = "custom:<name>" }`), not an
    /// identifier.
    pub cost: bool,
}

impl Config {
    /// Whether a limit is `exceed = "soft"`: then the forwarded request's
    /// [`crate::EXCEEDED_HEADER`] is the path's own, and a host removes the one a client sent.
    pub fn tells_origin(&self) -> bool {
        self.rules
            .iter()
            .flat_map(|r| &r.limits)
            .any(|l| l.exceed == crate::rules::Exceed::Soft)
    }

    /// Every `custom:<name>` source the rules name, identifiers and costs, in configuration
    /// order.
    pub fn custom_sources(&self) -> Vec<CustomSource> {
        let mut found = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            for (l, limit) in rule.limits.iter().enumerate() {
                let at = format!(
                    "rules[{i}] \"{}\" → limits[{l}] \"{}\"",
                    rule.name, limit.limit.name
                );
                if let Some(name) = limit.source.custom_name() {
                    found.push(CustomSource {
                        field: format!("{at} → identifier"),
                        name: name.to_string(),
                        cost: false,
                    });
                }
                if let Some(CostSource::Custom(name)) = limit.settle.as_ref().map(|s| &s.from) {
                    found.push(CustomSource {
                        field: format!("{at} → cost → from"),
                        name: name.clone(),
                        cost: true,
                    });
                }
            }
        }
        found
    }

    /// An error naming the first `custom:` source, if any: what the Worker answers such a
    /// configuration with, since only a native service's code can supply one.
    pub fn refuse_custom_sources(&self) -> Result<(), ConfigError> {
        match self.custom_sources().into_iter().next() {
            None => Ok(()),
            Some(custom) => Err(ConfigError::at(
                custom.field,
                format!(
                    "`custom:{}` is supplied by a native service's code (edgelimit-tower); the \
                     Worker has no custom sources: use ip, header:, query:, path: or api-key:",
                    custom.name
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests;
