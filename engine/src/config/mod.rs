//! The Worker's configuration: the `EDGELIMIT_CONFIG` var (a `[vars.EDGELIMIT_CONFIG]` table in
//! `wrangler.toml`, an object in `wrangler.jsonc`, or a JSON string), parsed and validated once per
//! isolate. Every error names the field it is about, e.g.
//! `rules[1] "api" → limits[0] "per-key" → identifier: unknown source `cookie:x` …`.

#[cfg(not(target_arch = "wasm32"))]
pub mod file;
pub mod global;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use edgelimit::control::list::ListEntry;
use edgelimit::limiter::{DEFAULT_DENIAL_CACHE, DEFAULT_DENIAL_CACHE_MS};
use edgelimit::store::DEFAULT_NAMESPACE;
use edgelimit::{Algorithm, FailMode, Limit, Policy, TimeMode};
use serde::Deserialize;

use crate::config::global::{Global, RawGlobal};
use crate::identify::IdentifierSource;
use crate::lists::{self, ProbeSource, StaticList};
use crate::rules::{CostSource, HostPattern, Missing, PathMatch, Rule, RuleLimit, Scope, Settle};
use edgelimit::global::is_global;
use edgelimit::net::AddressGrouping;

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
    /// A path answering `GET` with this isolate's counters as Prometheus text, if any.
    pub metrics_path: Option<String>,
    /// The response for admitted requests when no `ORIGIN` is set.
    pub respond: Option<FixedResponse>,
    /// The shards; empty means one store from `UPSTASH_REDIS_REST_URL`/`_TOKEN`.
    pub shards: Vec<ShardConfig>,
    /// The request header whose value is the request id (`cf-ray` unless configured): the
    /// name of a request's reservation, and what idempotent limits are remembered under.
    pub request_id_header: String,
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
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    namespace: Option<String>,
    timeout_ms: Option<u64>,
    time: Option<String>,
    denial_cache: Option<usize>,
    denial_cache_ms: Option<u64>,
    log_sample: Option<f64>,
    analytics: Option<String>,
    metrics_path: Option<String>,
    respond: Option<RawResponse>,
    #[serde(default)]
    shards: Vec<RawShard>,
    request_id_header: Option<String>,
    rules: Vec<RawRule>,
    #[serde(default)]
    deny: Vec<String>,
    #[serde(default)]
    allow: Vec<String>,
    dynamic_lists: Option<bool>,
    list_cache_ms: Option<u64>,
    #[serde(default)]
    list_sources: Vec<String>,
    shadow_header: Option<bool>,
    store: Option<String>,
    objects: Option<u32>,
    admin_path: Option<String>,
    ipv6_prefix: Option<u8>,
    global: Option<RawGlobal>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResponse {
    status: Option<u16>,
    body: Option<String>,
    content_type: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawShard {
    name: String,
    url_var: String,
    token_var: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: String,
    #[serde(default)]
    hosts: Vec<String>,
    #[serde(default)]
    methods: Vec<String>,
    path: Option<String>,
    path_prefix: Option<String>,
    #[serde(default)]
    shadow: bool,
    limits: Vec<RawLimit>,
    #[serde(default)]
    deny: Vec<String>,
    #[serde(default)]
    allow: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimit {
    name: String,
    policy: Policy,
    identifier: String,
    cost: Option<RawCost>,
    fail: Option<String>,
    missing: Option<String>,
    idempotent: Option<bool>,
    tiers: Option<BTreeMap<String, String>>,
    scope: Option<String>,
}

/// A cost: a whole number, or `{ reserve = N, from = "…", unit = "…" }` settled after the
/// response.
enum RawCost {
    Fixed(i64),
    Settled(RawSettled),
}

// By hand rather than `untagged`, so a mistake inside the table (`form = …`) is reported as
// itself, with its path, instead of "did not match any variant".
impl<'de> Deserialize<'de> for RawCost {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<RawCost, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = RawCost;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a whole number, or a table `{ reserve = N, from = \"…\" }`")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<RawCost, E> {
                Ok(RawCost::Fixed(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<RawCost, E> {
                i64::try_from(v)
                    .map(RawCost::Fixed)
                    .map_err(|_| E::custom(format!("{v} is too large")))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<RawCost, A::Error> {
                RawSettled::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(RawCost::Settled)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettled {
    reserve: i64,
    from: String,
    unit: Option<String>,
}

const METHODS: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE",
];

fn is_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 64
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Parses static list entries; `field` names the list (`deny`, `rules[0] "api" → allow`), and
/// each entry's source joins `sources` (what a request's probe carries).
fn static_list(
    field: &str,
    texts: &[String],
    sources: &mut Vec<(String, ProbeSource)>,
) -> Result<StaticList, ConfigError> {
    let mut entries = Vec::with_capacity(texts.len());
    for (i, text) in texts.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let entry: ListEntry = text
            .parse()
            .map_err(|problem: String| ConfigError::at(&at, problem))?;
        let spec = entry.source();
        let source = ProbeSource::parse(&spec).map_err(|problem| {
            ConfigError::at(
                &at,
                format!(
                    "`{text}`: the Worker cannot read source `{spec}` from a request: {problem}"
                ),
            )
        })?;
        add_source(sources, source);
        entries.push(entry);
    }
    Ok(StaticList::new(entries))
}

/// Adds `source` to `sources` unless there.
fn add_source(sources: &mut Vec<(String, ProbeSource)>, source: ProbeSource) {
    let spec = source.spec();
    if !sources.iter().any(|(s, _)| *s == spec) {
        sources.push((spec, source));
    }
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

impl RawConfig {
    fn validate(self) -> Result<Config, ConfigError> {
        let namespace = self
            .namespace
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
        if !is_name(&namespace) {
            return Err(ConfigError::at(
                "namespace",
                format!("`{namespace}` must be 1–64 of A-Z a-z 0-9 - _ ."),
            ));
        }
        let timeout_ms = self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
        if !(1..=30_000).contains(&timeout_ms) {
            return Err(ConfigError::at(
                "timeout_ms",
                format!("{timeout_ms} is outside 1..=30000"),
            ));
        }
        let global = self.global.map(RawGlobal::validate).transpose()?;
        // Global limits decide in two stores, a region's and the home's, on one clock: the
        // Worker's (docs/design.md §9).
        let default_time = if global.is_some() { "local" } else { "server" };
        let time =
            match self.time.as_deref().unwrap_or(default_time) {
                "server" if global.is_some() => return Err(ConfigError::at(
                    "time",
                    "global limits decide in a region's store and the home's on one clock, the \
                     Worker's: leave `time` out or set it to `local`",
                )),
                "server" => TimeMode::Server,
                "local" => TimeMode::Local,
                other => {
                    return Err(ConfigError::at(
                        "time",
                        format!("`{other}` is neither `server` (Redis TIME) nor `local`"),
                    ))
                }
            };
        let log_sample = self.log_sample.unwrap_or(DEFAULT_LOG_SAMPLE);
        if !(0.0..=1.0).contains(&log_sample) {
            return Err(ConfigError::at(
                "log_sample",
                format!("{log_sample} is outside 0.0..=1.0"),
            ));
        }
        let respond = self.respond.map(|r| r.validate()).transpose()?;
        if let Some(path) = &self.metrics_path {
            if !path.starts_with('/') {
                return Err(ConfigError::at(
                    "metrics_path",
                    format!("`{path}` must start with `/`"),
                ));
            }
        }
        let store = match self.store.as_deref() {
            None => None,
            Some("upstash") => Some(StoreKind::Upstash),
            Some("durable-object") => Some(StoreKind::DurableObject),
            Some(other) => {
                return Err(ConfigError::at(
                    "store",
                    format!("`{other}` is neither `upstash` nor `durable-object`"),
                ))
            }
        };
        let objects = self.objects.unwrap_or(DEFAULT_OBJECTS);
        if !(1..=MAX_OBJECTS).contains(&objects) {
            return Err(ConfigError::at(
                "objects",
                format!("{objects} is outside 1..={MAX_OBJECTS}"),
            ));
        }
        if global.is_some() {
            // Each region decides in its own Redis, and the leases live beside the states there.
            if store == Some(StoreKind::DurableObject) {
                return Err(ConfigError::at(
                    "store",
                    "global limits keep each region's state in its own Upstash database (the \
                     `global.regions`): the Durable Object store is one region's, drop `store` \
                     or the `global` section",
                ));
            }
            if !self.shards.is_empty() {
                return Err(ConfigError::at(
                    "shards",
                    "with a `global` section each region has one store (`global.regions`): \
                     drop `shards`",
                ));
            }
        }
        if store == Some(StoreKind::DurableObject) && !self.shards.is_empty() {
            return Err(ConfigError::at(
                "shards",
                "Upstash shards and `store = \"durable-object\"` exclude each other: Durable \
                 Objects spread the state themselves (see `objects`)",
            ));
        }
        if let Some(path) = &self.admin_path {
            if !path.starts_with('/') || path.len() < 2 {
                return Err(ConfigError::at(
                    "admin_path",
                    format!("`{path}` must be a path such as `/__edgelimit/admin`"),
                ));
            }
            if self.metrics_path.as_deref() == Some(path.as_str()) {
                return Err(ConfigError::at(
                    "admin_path",
                    "is also the metrics_path: give the admin route a path of its own",
                ));
            }
        }
        let mut shards = Vec::with_capacity(self.shards.len());
        for (i, s) in self.shards.into_iter().enumerate() {
            let field = format!("shards[{i}]");
            if !is_name(&s.name) {
                return Err(ConfigError::at(
                    format!("{field}.name"),
                    format!("`{}` must be 1–64 of A-Z a-z 0-9 - _ .", s.name),
                ));
            }
            if shards.iter().any(|o: &ShardConfig| o.name == s.name) {
                return Err(ConfigError::at(
                    format!("{field}.name"),
                    format!("shard `{}` is listed twice", s.name),
                ));
            }
            shards.push(ShardConfig {
                name: s.name,
                url_var: s.url_var,
                token_var: s.token_var,
            });
        }
        if self.rules.is_empty() {
            return Err(ConfigError::at(
                "rules",
                "is empty: list at least one rule (or remove the Worker from the route)",
            ));
        }
        let denial_cache_ms = self.denial_cache_ms.unwrap_or(DEFAULT_DENIAL_CACHE_MS);
        if denial_cache_ms > MAX_DENIAL_CACHE_MS {
            return Err(ConfigError::at(
                "denial_cache_ms",
                format!("{denial_cache_ms} is outside 0..={MAX_DENIAL_CACHE_MS}"),
            ));
        }
        let list_cache_ms = self.list_cache_ms.unwrap_or(DEFAULT_LIST_CACHE_MS);
        if list_cache_ms > MAX_LIST_CACHE_MS {
            return Err(ConfigError::at(
                "list_cache_ms",
                format!("{list_cache_ms} is outside 0..={MAX_LIST_CACHE_MS}"),
            ));
        }
        let mut probe_sources = lists::base_sources();
        let deny = static_list("deny", &self.deny, &mut probe_sources)?;
        let allow = static_list("allow", &self.allow, &mut probe_sources)?;
        for (i, text) in self.list_sources.iter().enumerate() {
            let source = ProbeSource::parse(text)
                .map_err(|problem| ConfigError::at(format!("list_sources[{i}]"), problem))?;
            add_source(&mut probe_sources, source);
        }
        let grouping = AddressGrouping::new(
            self.ipv6_prefix
                .unwrap_or(AddressGrouping::DEFAULT_IPV6_PREFIX),
        )
        .map_err(|e| ConfigError::at("ipv6_prefix", e.to_string()))?;
        let mut rules = Vec::with_capacity(self.rules.len());
        let mut seen: HashMap<String, (Limit, String)> = HashMap::new();
        for (i, raw) in self.rules.into_iter().enumerate() {
            let mut rule = raw.validate(i, &mut seen, &mut probe_sources, global.is_some())?;
            for limit in &mut rule.limits {
                limit.source.set_grouping(grouping);
            }
            if rules.iter().any(|r: &Rule| r.name == rule.name) {
                return Err(ConfigError::at(
                    format!("rules[{i}] \"{}\" → name", rule.name),
                    "another rule has this name",
                ));
            }
            rules.push(rule);
        }
        let request_id_header = self
            .request_id_header
            .unwrap_or_else(|| "cf-ray".to_string())
            .to_ascii_lowercase();
        if !is_name(&request_id_header) {
            return Err(ConfigError::at(
                "request_id_header",
                format!("`{request_id_header}` is not a header name"),
            ));
        }
        // A limit both enforced and shadowed would be charged twice per request (two checks).
        for (i, rule) in rules.iter().enumerate().filter(|(_, r)| r.shadow) {
            for (l, shadowed) in rule.limits.iter().enumerate() {
                let name = &shadowed.limit.name;
                if let Some(enforcing) = rules
                    .iter()
                    .find(|r| !r.shadow && r.limits.iter().any(|x| &x.limit.name == name))
                {
                    return Err(ConfigError::at(
                        format!(
                            "rules[{i}] \"{}\" → limits[{l}] \"{name}\" → name",
                            rule.name
                        ),
                        format!(
                            "limit `{name}` is also enforced by rule \"{}\"; a shadow rule needs \
                             limits of its own name, or requests would be charged twice",
                            enforcing.name
                        ),
                    ));
                }
            }
        }
        Ok(Config {
            namespace,
            timeout: Duration::from_millis(timeout_ms),
            time,
            denial_cache: self.denial_cache.unwrap_or(DEFAULT_DENIAL_CACHE),
            denial_cache_ms,
            log_sample,
            analytics: self.analytics.filter(|a| !a.is_empty()),
            metrics_path: self.metrics_path,
            respond,
            shards,
            request_id_header,
            rules,
            deny,
            allow,
            dynamic_lists: self.dynamic_lists.unwrap_or(true),
            list_cache_ms,
            probe_sources,
            shadow_header: self.shadow_header.unwrap_or(false),
            store,
            objects,
            admin_path: self.admin_path,
            ipv6_prefix: grouping.ipv6_prefix(),
            global,
        })
    }
}

impl RawResponse {
    fn validate(self) -> Result<FixedResponse, ConfigError> {
        let status = self.status.unwrap_or(200);
        if !(200..=599).contains(&status) {
            return Err(ConfigError::at(
                "respond.status",
                format!("{status} is not an HTTP status in 200..=599"),
            ));
        }
        Ok(FixedResponse {
            status,
            body: self.body.unwrap_or_default(),
            content_type: self
                .content_type
                .unwrap_or_else(|| "text/plain; charset=utf-8".to_string()),
        })
    }
}

impl RawRule {
    fn validate(
        self,
        index: usize,
        seen: &mut HashMap<String, (Limit, String)>,
        sources: &mut Vec<(String, ProbeSource)>,
        global: bool,
    ) -> Result<Rule, ConfigError> {
        let here = format!("rules[{index}] \"{}\"", self.name);
        if !is_name(&self.name) {
            return Err(ConfigError::at(
                format!("rules[{index}].name"),
                format!("`{}` must be 1–64 of A-Z a-z 0-9 - _ .", self.name),
            ));
        }
        let hosts = self
            .hosts
            .iter()
            .enumerate()
            .map(|(h, host)| {
                HostPattern::parse(host)
                    .map_err(|problem| ConfigError::at(format!("{here} → hosts[{h}]"), problem))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut methods = Vec::with_capacity(self.methods.len());
        for (m, method) in self.methods.iter().enumerate() {
            let upper = method.to_ascii_uppercase();
            if !METHODS.contains(&upper.as_str()) {
                return Err(ConfigError::at(
                    format!("{here} → methods[{m}]"),
                    format!("`{method}` is not an HTTP method ({})", METHODS.join(", ")),
                ));
            }
            methods.push(upper);
        }
        let path = match (self.path, self.path_prefix) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::at(
                    format!("{here} → path"),
                    "give `path` (a pattern) or `path_prefix`, not both",
                ))
            }
            (Some(pattern), None) => PathMatch::pattern(&pattern)
                .map_err(|problem| ConfigError::at(format!("{here} → path"), problem))?,
            (None, Some(prefix)) => PathMatch::prefix(&prefix)
                .map_err(|problem| ConfigError::at(format!("{here} → path_prefix"), problem))?,
            (None, None) => PathMatch::Any,
        };
        if self.limits.is_empty() {
            return Err(ConfigError::at(
                format!("{here} → limits"),
                "is empty: a rule applies at least one limit",
            ));
        }
        let mut limits = Vec::with_capacity(self.limits.len());
        for (l, raw) in self.limits.into_iter().enumerate() {
            let at = format!("{here} → limits[{l}] \"{}\"", raw.name);
            let limit = raw.validate(&at, &here, seen, global)?;
            // A custom value is no part of the request a list entry could name.
            if limit.source.custom_name().is_none() {
                add_source(sources, ProbeSource::Request(limit.source.clone()));
            }
            limits.push(limit);
        }
        let deny = static_list(&format!("{here} → deny"), &self.deny, sources)?;
        let allow = static_list(&format!("{here} → allow"), &self.allow, sources)?;
        Ok(Rule {
            gate: crate::lists::rule_gate(&self.name),
            deny_list: crate::lists::rule_deny(&self.name),
            name: self.name,
            hosts,
            methods,
            path,
            shadow: self.shadow,
            limits,
            deny,
            allow,
        })
    }
}

impl RawLimit {
    fn validate(
        self,
        at: &str,
        rule: &str,
        seen: &mut HashMap<String, (Limit, String)>,
        global: bool,
    ) -> Result<RuleLimit, ConfigError> {
        let scope = match (self.scope.as_deref(), global) {
            (Some("region"), _) | (None, false) => Scope::Region,
            (Some("global") | None, true) => Scope::Global,
            (Some("global"), false) => {
                return Err(ConfigError::at(
                    format!("{at} → scope"),
                    "`global` needs the `global` section (regions and a home)",
                ))
            }
            (Some(other), _) => {
                return Err(ConfigError::at(
                    format!("{at} → scope"),
                    format!("`{other}` is neither `global` nor `region`"),
                ))
            }
        };
        if scope == Scope::Global && !is_global(self.policy.algorithm()) {
            return Err(ConfigError::at(
                format!("{at} → scope"),
                format!(
                    "`{}` cannot be global (docs/design.md §9): a lease bounds a fixed window and \
                     the buckets, not a sliding window or concurrent requests; set \
                     `scope = \"region\"` to count it in each region",
                    self.policy.algorithm()
                ),
            ));
        }
        if !is_name(&self.name) {
            return Err(ConfigError::at(
                format!("{at} → name"),
                format!("`{}` must be 1–64 of A-Z a-z 0-9 - _ .", self.name),
            ));
        }
        let fail_mode = self
            .fail
            .as_deref()
            .map_or(Ok(FailMode::Open), str::parse)
            .map_err(|problem| ConfigError::at(format!("{at} → fail"), problem))?;
        let source = IdentifierSource::parse(&self.identifier)
            .map_err(|problem| ConfigError::at(format!("{at} → identifier"), problem))?;
        let (cost, settle) = match self.cost {
            None => (1, None),
            Some(RawCost::Fixed(cost)) => (cost, None),
            Some(RawCost::Settled(settled)) => {
                let from = CostSource::parse(&settled.from)
                    .map_err(|problem| ConfigError::at(format!("{at} → cost → from"), problem))?;
                if self.policy.algorithm() == Algorithm::Concurrency {
                    return Err(ConfigError::at(
                        format!("{at} → cost"),
                        "a concurrency limit counts requests in flight; its lease is released \
                         after the response, with no cost to settle",
                    ));
                }
                let unit = settled
                    .unit
                    .unwrap_or_else(|| from.default_unit().to_string());
                if !is_name(&unit) {
                    return Err(ConfigError::at(
                        format!("{at} → cost → unit"),
                        format!("`{unit}` must be 1–64 of A-Z a-z 0-9 - _ ."),
                    ));
                }
                (settled.reserve, Some(Settle { from, unit }))
            }
        };
        let capacity = self.policy.capacity();
        if cost < 1 || cost as u64 > capacity {
            let field = if settle.is_some() {
                "cost → reserve"
            } else {
                "cost"
            };
            return Err(ConfigError::at(
                format!("{at} → {field}"),
                format!(
                    "{cost} is outside 1..={capacity} (the policy `{}` can never admit more at once)",
                    self.policy
                ),
            ));
        }
        let missing = self
            .missing
            .as_deref()
            .map_or(Ok(Missing::default()), str::parse)
            .map_err(|problem| ConfigError::at(format!("{at} → missing"), problem))?;
        let mut limit = Limit::new(self.name.as_str(), self.policy).with_fail_mode(fail_mode);
        if let Some(tiers) = self.tiers {
            let mut named = Vec::with_capacity(tiers.len());
            for (tier, spec) in tiers {
                let field = format!("{at} → tiers.{tier}");
                if !is_name(&tier) {
                    return Err(ConfigError::at(
                        field,
                        format!("tier name `{tier}` must be 1–64 of A-Z a-z 0-9 - _ ."),
                    ));
                }
                let policy: Policy = spec
                    .parse()
                    .map_err(|e| ConfigError::at(&field, format!("`{spec}`: {e}")))?;
                if policy.algorithm() != self.policy.algorithm() {
                    return Err(ConfigError::at(
                        field,
                        format!(
                            "`{spec}` is not a {} policy like the limit's own (`{}`): an \
                             identifier's state must keep its meaning when its tier changes",
                            self.policy.algorithm(),
                            self.policy
                        ),
                    ));
                }
                if cost as u64 > policy.capacity() {
                    return Err(ConfigError::at(
                        field,
                        format!(
                            "`{spec}` can never admit the limit's cost {cost} at once (capacity {})",
                            policy.capacity()
                        ),
                    ));
                }
                named.push((tier, policy));
            }
            limit = limit
                .with_tiers(named)
                .map_err(|problem| ConfigError::at(format!("{at} → tiers"), problem))?;
        }
        match seen.get(&self.name) {
            Some((other, first)) if other != &limit => {
                return Err(ConfigError::at(
                    format!("{at} → policy"),
                    format!(
                        "limit `{}` is also defined in {first} with another policy or fail mode; \
                         limits that share a name share their state, so they must agree",
                        self.name
                    ),
                ))
            }
            Some(_) => {}
            None => {
                seen.insert(self.name.clone(), (limit.clone(), rule.to_string()));
            }
        }
        Ok(RuleLimit {
            limit: Arc::new(limit),
            source,
            cost,
            missing,
            settle,
            idempotent: self.idempotent.unwrap_or(false),
            scope,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn minimal() -> serde_json::Value {
        json!({
            "rules": [{
                "name": "api",
                "path_prefix": "/api/",
                "limits": [{ "name": "per-ip", "policy": "fixed 100/1m", "identifier": "ip" }]
            }]
        })
    }

    fn error_of(value: serde_json::Value) -> ConfigError {
        Config::from_value(value).expect_err("should be refused")
    }

    #[test]
    fn a_minimal_config_takes_the_documented_defaults() {
        let c = Config::from_value(minimal()).unwrap();
        assert_eq!(c.timeout, Duration::from_millis(50));
        assert_eq!(c.time, TimeMode::Server);
        assert_eq!(c.namespace, "edgelimit");
        assert_eq!(c.denial_cache, DEFAULT_DENIAL_CACHE);
        let limit = &c.rules[0].limits[0];
        assert_eq!((limit.cost, limit.missing), (1, Missing::Shared));
        assert_eq!(limit.limit.fail_mode, FailMode::Open);
        assert_eq!(limit.source, IdentifierSource::ClientIp(Default::default()));
    }

    #[test]
    fn errors_name_the_rule_the_limit_and_the_field() {
        let mut v = minimal();
        v["rules"][0]["limits"][0]["policy"] = json!("fixed 0/1m");
        let e = error_of(v);
        assert_eq!(e.field, "rules[0].limits[0].policy", "{e}");
        assert!(e.problem.contains("fixed 0/1m"), "{e}");

        let mut v = minimal();
        v["rules"][0]["limits"][0]["identifier"] = json!("x-forwarded-for");
        let e = error_of(v);
        assert_eq!(
            e.field,
            "rules[0] \"api\" → limits[0] \"per-ip\" → identifier"
        );

        let mut v = minimal();
        v["rules"][0]["limits"][0]["fail"] = json!("sometimes");
        assert!(error_of(v).field.ends_with("→ fail"));

        let mut v = minimal();
        v["rules"][0]["limits"][0]["cost"] = json!(101);
        let e = error_of(v);
        assert!(
            e.field.ends_with("→ cost") && e.problem.contains("1..=100"),
            "{e}"
        );

        let mut v = minimal();
        v["rules"][0]["methdos"] = json!(["GET"]);
        let e = error_of(v);
        assert!(e.problem.contains("unknown field `methdos`"), "{e}");
        assert_eq!(e.field, "rules[0].methdos");

        let mut v = minimal();
        v["rules"][0]["methods"] = json!(["GETT"]);
        assert!(error_of(v).field.ends_with("methods[0]"));

        let mut v = minimal();
        v["rules"][0]["path"] = json!("/x");
        assert!(error_of(v).problem.contains("not both"));
    }

    #[test]
    fn an_unknown_empty_key_is_named_at_the_top_level() {
        let e = Config::from_json(r#"{"":{}}"#).unwrap_err();
        assert_eq!(e.field, "(top level)", "{e}");
        assert!(e.problem.contains("unknown field ``"), "{e}");
    }

    #[test]
    fn missing_or_garbled_configs_are_refused_with_the_reason() {
        assert!(Config::from_json("")
            .unwrap_err()
            .problem
            .contains("not valid JSON"));
        assert!(Config::from_json("{\"rules\": [")
            .unwrap_err()
            .to_string()
            .contains("line 1"));
        assert!(error_of(json!("fixed 10/1s"))
            .problem
            .contains("must be a table"));
        assert!(error_of(json!({}))
            .problem
            .contains("missing field `rules`"));
        assert!(error_of(json!({"rules": []})).problem.contains("is empty"));
    }

    #[test]
    fn limits_sharing_a_name_must_agree() {
        let mut v = minimal();
        v["rules"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "other", "limits": [{"name": "per-ip", "policy": "fixed 5/1m", "identifier": "ip"}]}));
        let e = error_of(v);
        assert!(e.problem.contains("rules[0] \"api\""), "{e}");
        let mut v = minimal();
        v["rules"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "other", "limits": [{"name": "per-ip", "policy": "fixed 100/60s", "identifier": "header:x-user"}]}));
        assert!(Config::from_value(v).is_ok());
    }

    #[test]
    fn shadow_rules_cannot_share_an_enforced_limit() {
        let mut v = minimal();
        v["rules"].as_array_mut().unwrap().push(json!({
            "name": "watch", "shadow": true,
            "limits": [{"name": "per-ip", "policy": "fixed 100/1m", "identifier": "ip"}]
        }));
        let e = error_of(v);
        assert!(e.problem.contains("charged twice"), "{e}");
        assert!(e.field.starts_with("rules[1] \"watch\""), "{e}");
    }

    #[test]
    fn a_region_holds_the_global_limits_once_each_and_not_the_regional_ones() {
        let mut v = json!({
            "global": {
                "home": {"url_var": "H", "token_var": "HT"},
                "regions": [
                    {"name": "eu", "url_var": "E", "token_var": "ET"},
                    {"name": "us", "url_var": "U", "token_var": "UT", "weight": 3}
                ]
            },
            "rules": [
                {"name": "a", "path_prefix": "/a/", "limits": [
                    {"name": "per-ip", "policy": "fixed 80/1m", "identifier": "ip"},
                    {"name": "local", "policy": "fixed 8/1s", "identifier": "ip",
                     "scope": "region"}
                ]},
                {"name": "b", "path_prefix": "/b/", "limits": [
                    {"name": "per-ip", "policy": "fixed 80/1m", "identifier": "ip"}
                ]}
            ]
        });
        let c = Config::from_value(v.clone()).unwrap();
        let us = c.regional_limits(1).unwrap();
        let held = us.get("per-ip").expect("the global limit");
        // Half of 80 held by the regions, weighted 1:3; the home the rest.
        assert_eq!(held.share.as_ref().unwrap().policy.limit(), 30);
        assert_eq!(held.pool.as_ref().unwrap().policy.limit(), 40);
        assert!(us.get("local").is_none(), "counted in each region");
        v.as_object_mut().unwrap().remove("global");
        let plain = Config::from_value(v).unwrap();
        assert!(plain.regional_limits(0).unwrap().is_empty());
    }

    #[test]
    fn global_limits_need_regions_one_clock_and_an_algorithm_leases_bound() {
        let global = json!({
            "home": {"url_var": "HOME_URL", "token_var": "HOME_TOKEN"},
            "regions": [{"name": "eu", "url_var": "EU_URL", "token_var": "EU_TOKEN"}]
        });
        let mut v = minimal();
        v["global"] = global.clone();
        let c = Config::from_value(v).unwrap();
        assert_eq!(c.time, TimeMode::Local, "one clock: the Worker's");
        assert_eq!(
            c.rules[0].limits[0].scope,
            Scope::Global,
            "global by default"
        );
        assert_eq!(
            Config::from_value(minimal()).unwrap().rules[0].limits[0].scope,
            Scope::Region
        );
        let mut server = minimal();
        server["global"] = global.clone();
        server["time"] = json!("server");
        assert_eq!(error_of(server).field, "time");
        let mut log = minimal();
        log["global"] = global.clone();
        log["rules"][0]["limits"][0]["policy"] = json!("sliding-log 10/1m");
        let e = error_of(log.clone());
        assert!(e.field.ends_with("→ scope"), "{e}");
        log["rules"][0]["limits"][0]["scope"] = json!("region");
        assert!(
            Config::from_value(log).is_ok(),
            "counted per region on purpose"
        );
        let mut nowhere = minimal();
        nowhere["rules"][0]["limits"][0]["scope"] = json!("global");
        assert!(error_of(nowhere).field.ends_with("→ scope"));
        let mut objects = minimal();
        objects["global"] = global.clone();
        objects["store"] = json!("durable-object");
        assert_eq!(error_of(objects).field, "store");
        let mut sharded = minimal();
        sharded["global"] = global.clone();
        sharded["shards"] = json!([{"name": "a", "url_var": "A", "token_var": "AT"}]);
        assert_eq!(error_of(sharded).field, "shards");
        let mut bad = minimal();
        bad["global"] = global;
        bad["global"]["lease_ms"] = json!(1);
        assert_eq!(error_of(bad).field, "global.lease_ms");
    }

    #[test]
    fn custom_sources_are_listed_with_their_fields_and_refused_for_the_worker() {
        let c = Config::from_value(minimal()).unwrap();
        assert_eq!(c.custom_sources(), []);
        assert_eq!(c.refuse_custom_sources(), Ok(()));
        let mut v = minimal();
        v["rules"][0]["limits"] = json!([
            {"name": "per-ip", "policy": "fixed 100/1m", "identifier": "ip"},
            {"name": "per-user", "policy": "fixed 10/1m", "identifier": "api-key:custom:user"},
            {"name": "logins", "policy": "fixed 5/15m", "identifier": "ip",
             "cost": {"reserve": 1, "from": "custom:failed-login"}}
        ]);
        let c = Config::from_value(v).unwrap();
        assert_eq!(
            c.custom_sources(),
            [
                CustomSource {
                    field: "rules[0] \"api\" → limits[1] \"per-user\" → identifier".into(),
                    name: "user".into(),
                    cost: false
                },
                CustomSource {
                    field: "rules[0] \"api\" → limits[2] \"logins\" → cost → from".into(),
                    name: "failed-login".into(),
                    cost: true
                }
            ]
        );
        let logins = &c.rules[0].limits[2];
        assert_eq!(logins.settle.as_ref().unwrap().unit, "requests");
        let e = c.refuse_custom_sources().unwrap_err();
        assert!(
            e.field.ends_with("limits[1] \"per-user\" → identifier"),
            "{e}"
        );
        assert!(e.problem.contains("`custom:user`"), "{e}");
        // A custom value is nothing a list can be asked about.
        assert!(!c
            .probe_sources
            .iter()
            .any(|(spec, _)| spec.contains("custom")));
        let mut v = minimal();
        v["list_sources"] = json!(["custom:user"]);
        assert_eq!(error_of(v).field, "list_sources[0]");
    }

    #[test]
    fn the_ipv6_prefix_is_read_and_checked() {
        let c = Config::from_value(minimal()).unwrap();
        assert_eq!(c.ipv6_prefix, 64);
        let mut v = minimal();
        v["ipv6_prefix"] = json!(48);
        let c = Config::from_value(v).unwrap();
        assert_eq!(c.ipv6_prefix, 48);
        let mut grouped = IdentifierSource::parse("ip").unwrap();
        grouped.set_grouping(AddressGrouping::new(48).unwrap());
        assert!(c
            .rules
            .iter()
            .flat_map(|r| &r.limits)
            .all(|l| l.source == grouped || !matches!(l.source, IdentifierSource::ClientIp(_))));
        for bad in [json!(0), json!(129), json!("64")] {
            let mut v = minimal();
            v["ipv6_prefix"] = bad;
            assert_eq!(error_of(v).field, "ipv6_prefix");
        }
    }

    #[test]
    fn top_level_settings_are_checked() {
        let mut v = minimal();
        v["shards"] = json!([
            {"name": "a", "url_var": "A_URL", "token_var": "A_TOKEN"},
            {"name": "a", "url_var": "B_URL", "token_var": "B_TOKEN"}
        ]);
        assert!(error_of(v).problem.contains("listed twice"));
        for (key, value, field) in [
            ("timeout_ms", json!(0), "timeout_ms"),
            ("log_sample", json!(1.5), "log_sample"),
            ("time", json!("gps"), "time"),
            ("metrics_path", json!("metrics"), "metrics_path"),
            ("respond", json!({"status": 99}), "respond.status"),
            ("namespace", json!("a b"), "namespace"),
        ] {
            let mut v = minimal();
            v[key] = value;
            assert_eq!(error_of(v).field, field);
        }
    }

    #[test]
    fn settled_costs_and_the_request_id_header_are_read_and_checked() {
        let mut v = minimal();
        v["request_id_header"] = json!("X-Request-Id");
        v["rules"][0]["limits"] = json!([
            {"name": "llm", "policy": "fixed 100000/1h", "identifier": "ip",
             "cost": {"reserve": 1000, "from": "response-header:X-Tokens-Used"}, "idempotent": true},
            {"name": "egress", "policy": "fixed 1000000/1h", "identifier": "ip",
             "cost": {"reserve": 5000, "from": "response-bytes", "unit": "bytes"}},
            {"name": "inflight", "policy": "concurrency 2 timeout 30s", "identifier": "ip"}
        ]);
        let c = Config::from_value(v).unwrap();
        assert_eq!(c.request_id_header, "x-request-id");
        let [llm, egress, inflight] = &c.rules[0].limits[..] else {
            panic!("three limits")
        };
        assert_eq!(llm.cost, 1000);
        assert!(llm.idempotent && !egress.idempotent);
        assert_eq!(
            llm.settle,
            Some(Settle {
                from: CostSource::ResponseHeader("x-tokens-used".to_string()),
                unit: "tokens".to_string()
            })
        );
        assert_eq!(
            egress.settle,
            Some(Settle {
                from: CostSource::ResponseBytes,
                unit: "bytes".to_string()
            })
        );
        assert_eq!((inflight.cost, &inflight.settle), (1, &None));
        assert_eq!(
            Config::from_value(minimal()).unwrap().request_id_header,
            "cf-ray"
        );
    }

    #[test]
    fn settled_cost_errors_name_the_field() {
        let at = "rules[0] \"api\" → limits[0] \"per-ip\"";
        for (cost, field, says) in [
            (
                json!({"reserve": 10, "from": "body"}),
                "cost → from",
                "response-header:<name>",
            ),
            (
                json!({"reserve": 10, "from": "response-header:"}),
                "cost → from",
                "response-bytes",
            ),
            (
                json!({"reserve": 0, "from": "response-bytes"}),
                "cost → reserve",
                "1..=100",
            ),
            (
                json!({"reserve": 101, "from": "response-bytes"}),
                "cost → reserve",
                "1..=100",
            ),
            (
                json!({"reserve": 1, "from": "response-bytes", "unit": "a b"}),
                "cost → unit",
                "A-Z",
            ),
        ] {
            let mut v = minimal();
            v["rules"][0]["limits"][0]["cost"] = cost.clone();
            let e = error_of(v);
            assert_eq!(e.field, format!("{at} → {field}"), "{cost}: {e}");
            assert!(e.problem.contains(says), "{cost}: {e}");
        }
        // A mistake inside the table is named as itself, with its path.
        let mut v = minimal();
        v["rules"][0]["limits"][0]["cost"] = json!({"reserve": 10, "form": "response-bytes"});
        let e = error_of(v);
        assert_eq!(e.field, "rules[0].limits[0].cost.form", "{e}");
        assert!(e.problem.contains("unknown field `form`"), "{e}");
        let mut v = minimal();
        v["rules"][0]["limits"][0]["cost"] = json!("ten");
        assert!(error_of(v).problem.contains("a whole number, or a table"));
        // A concurrency limit has no cost to settle: its lease is released instead.
        let mut v = minimal();
        v["rules"][0]["limits"][0]["policy"] = json!("concurrency 2 timeout 30s");
        v["rules"][0]["limits"][0]["cost"] = json!({"reserve": 1, "from": "response-bytes"});
        assert_eq!(error_of(v).field, format!("{at} → cost"));
        let mut v = minimal();
        v["request_id_header"] = json!("x request");
        assert_eq!(error_of(v).field, "request_id_header");
    }

    #[test]
    fn lists_take_the_documented_defaults() {
        let c = Config::from_value(minimal()).unwrap();
        assert!(c.dynamic_lists);
        assert_eq!(c.list_cache_ms, DEFAULT_LIST_CACHE_MS);
        assert!(c.deny.is_empty() && c.allow.is_empty());
        let specs: Vec<&str> = c.probe_sources.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(
            specs,
            ["ip", "country"],
            "the limit's own `ip` is not probed twice"
        );
    }

    #[test]
    fn tiers_are_read_and_checked() {
        let mut v = minimal();
        v["rules"][0]["limits"][0]["policy"] = json!("gcra 10/1s burst 20");
        v["rules"][0]["limits"][0]["tiers"] =
            json!({"free": "gcra 10/1s burst 20", "pro": "gcra 100/1s burst 200"});
        let c = Config::from_value(v.clone()).unwrap();
        let limit: &Limit = &c.rules[0].limits[0].limit;
        assert_eq!(limit.tiers.len(), 2);
        assert_eq!(
            limit.tiers.get("pro").map(ToString::to_string).as_deref(),
            Some("gcra 100/1s burst 200")
        );
        assert_ne!(
            limit,
            &Limit::new("per-ip", "gcra 10/1s burst 20".parse().unwrap()),
            "a limit with tiers is not the limit without"
        );
        let at = "rules[0] \"api\" → limits[0] \"per-ip\"";
        for (tiers, field, says) in [
            (
                json!({"pro": "fixed 100/1s"}),
                "tiers.pro",
                "not a gcra policy",
            ),
            (json!({"pro": "gcra 0/1s"}), "tiers.pro", "gcra 0/1s"),
            (
                json!({"pro plan": "gcra 10/1s"}),
                "tiers.pro plan",
                "tier name",
            ),
            (json!({"tiny": "gcra 1/1s burst 1"}), "tiers.tiny", "cost 5"),
        ] {
            let mut v = v.clone();
            v["rules"][0]["limits"][0]["tiers"] = tiers.clone();
            v["rules"][0]["limits"][0]["cost"] = json!(if field == "tiers.tiny" { 5 } else { 1 });
            let e = error_of(v);
            assert_eq!(e.field, format!("{at} → {field}"), "{tiers}: {e}");
            assert!(e.problem.contains(says), "{tiers}: {e}");
        }
        let mut bad = v.clone();
        bad["rules"][0]["limits"][0]["tiers"] = json!({"pro": 100});
        let e = error_of(bad);
        assert_eq!(e.field, "rules[0].limits[0].tiers.pro", "{e}");
        // Limits sharing a name must agree on their tiers too.
        let mut v2 = v.clone();
        let mut other = v["rules"][0].clone();
        other["name"] = json!("other");
        other["limits"][0]["tiers"] = json!({"pro": "gcra 50/1s burst 50"});
        v2["rules"].as_array_mut().unwrap().push(other);
        assert!(error_of(v2).problem.contains("must agree"));
    }

    #[test]
    fn static_list_entries_are_parsed_and_errors_name_the_index() {
        let mut v = minimal();
        v["deny"] = json!(["ip 198.51.100.0/24", "country CN"]);
        v["allow"] = json!(["header:x-partner-key s3cret"]);
        v["rules"][0]["deny"] = json!(["query:key abc"]);
        v["rules"][0]["allow"] = json!(["api-key:header:authorization ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"]);
        v["list_sources"] = json!(["header:X-Team"]);
        let c = Config::from_value(v.clone()).unwrap();
        assert_eq!(c.deny.entries().len(), 2);
        assert_eq!(c.allow.entries().len(), 1);
        assert_eq!(c.rules[0].deny.entries().len(), 1);
        assert_eq!(c.rules[0].allow.entries().len(), 1);
        let specs: Vec<&str> = c.probe_sources.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(
            specs,
            [
                "ip",
                "country",
                "header:x-partner-key",
                "header:x-team",
                "query:key",
                "api-key:header:authorization"
            ]
        );
        for (key, value, field) in [
            (
                "deny",
                json!(["ip 198.51.100.0/24", "ip 300.1.1.1"]),
                "deny[1]".to_string(),
            ),
            ("allow", json!(["nonsense"]), "allow[0]".to_string()),
            (
                "list_sources",
                json!(["cookie:x"]),
                "list_sources[0]".to_string(),
            ),
        ] {
            let mut v = minimal();
            v[key] = value;
            assert_eq!(error_of(v).field, field);
        }
        let mut v = minimal();
        v["rules"][0]["allow"] = json!(["ip 203.0.113.7", "ip ::1/129"]);
        assert_eq!(error_of(v).field, "rules[0] \"api\" → allow[1]");
        let mut v = minimal();
        v["rules"][0]["deny"] = json!("ip 1.2.3.4");
        assert_eq!(error_of(v).field, "rules[0].deny", "a list, not a string");
    }

    #[test]
    fn list_settings_are_checked() {
        let mut v = minimal();
        v["list_cache_ms"] = json!(0);
        v["dynamic_lists"] = json!(false);
        let c = Config::from_value(v).unwrap();
        assert_eq!((c.list_cache_ms, c.dynamic_lists), (0, false));
        let mut v = minimal();
        v["list_cache_ms"] = json!(MAX_LIST_CACHE_MS + 1);
        let e = error_of(v);
        assert_eq!(e.field, "list_cache_ms");
        assert!(e.problem.contains("0..=600000"), "{e}");
        let mut v = minimal();
        v["dynamic_lists"] = json!("yes");
        assert_eq!(error_of(v).field, "dynamic_lists");
    }

    #[test]
    fn the_denial_cache_time_is_bounded() {
        assert_eq!(
            Config::from_value(minimal()).unwrap().denial_cache_ms,
            DEFAULT_DENIAL_CACHE_MS
        );
        let mut v = minimal();
        v["denial_cache_ms"] = json!(0);
        assert_eq!(Config::from_value(v).unwrap().denial_cache_ms, 0);
        let mut v = minimal();
        v["denial_cache_ms"] = json!(MAX_DENIAL_CACHE_MS + 1);
        let e = error_of(v);
        assert_eq!(e.field, "denial_cache_ms");
        assert!(e.problem.contains("0..=600000"), "{e}");
        let mut v = minimal();
        v["denial_cache_ms"] = json!(-1);
        assert_eq!(error_of(v).field, "denial_cache_ms");
    }
}
