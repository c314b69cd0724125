//! The configuration written in code: [`ConfigBuilder`], [`RuleBuilder`] and [`LimitBuilder`]
//! build the very `Config` a TOML or JSON file gives — they write its keys and hand them to
//! `Config::from_value`, so a mistake is refused with the message, and the field path, the file
//! would get (`rules[0] "api" → limits[1] "per-key" → identifier: …`).
//!
//! Policies, fail modes and `missing` take anything that prints as their spec: the library's
//! types (`Policy`, `FailMode`, `Missing`) or the text itself (`"gcra 10/1s burst 20"`).

use std::fmt::Display;
use std::time::Duration;

use edgelimit_engine::{Config, ConfigError};
use serde_json::{json, Map, Value};

/// A configuration in code: the top-level keys, and the rules in order (every matching rule
/// applies). docs/configuration.md is every key's meaning and default.
#[derive(Debug, Clone, Default)]
pub struct ConfigBuilder {
    keys: Map<String, Value>,
    rules: Vec<Value>,
}

impl ConfigBuilder {
    /// No rules yet, every setting at its default.
    pub fn new() -> ConfigBuilder {
        ConfigBuilder::default()
    }

    /// Adds a rule (after the others).
    pub fn rule(mut self, rule: RuleBuilder) -> ConfigBuilder {
        self.rules.push(Value::Object(rule.keys));
        self
    }

    /// The Redis key namespace (`namespace`, default `edgelimit`).
    pub fn namespace(self, namespace: &str) -> ConfigBuilder {
        self.set("namespace", json!(namespace))
    }

    /// The store's time budget per request (`timeout_ms`, default 50 ms), in whole ms: a store
    /// set up by [`crate::redis_store`] times out after it, and each limit then follows its
    /// `fail` mode.
    pub fn timeout(self, timeout: Duration) -> ConfigBuilder {
        self.set("timeout_ms", json!(timeout.as_millis() as u64))
    }

    /// Whose clock decides (`time`): Redis's `server` clock (the default, one clock for a
    /// fleet) or this process's `local` one.
    pub fn time(self, time: &str) -> ConfigBuilder {
        self.set("time", json!(time))
    }

    /// How many leading bits of an IPv6 client address make its `ip` identifier
    /// (`ipv6_prefix`, default 64).
    pub fn ipv6_prefix(self, bits: u8) -> ConfigBuilder {
        self.set("ipv6_prefix", json!(bits))
    }

    /// Whether the deny and allow lists kept in the store are consulted in the check's round
    /// trip (`dynamic_lists`, default on).
    pub fn dynamic_lists(self, on: bool) -> ConfigBuilder {
        self.set("dynamic_lists", json!(on))
    }

    /// The sets of rate-limit header fields responses carry (`headers`, default both):
    /// `ratelimit` (`RateLimit-Policy`, `RateLimit`) and `x-ratelimit` (`X-RateLimit-Limit`,
    /// `-Remaining`, `-Reset`); none for `&[]`. `Retry-After` goes with denials either way.
    pub fn headers(self, sets: &[&str]) -> ConfigBuilder {
        self.set("headers", json!(sets))
    }

    /// How many denied identifiers this process remembers (`denial_cache`, 0 off).
    pub fn denial_cache(self, entries: usize) -> ConfigBuilder {
        self.set("denial_cache", json!(entries))
    }

    /// The request header naming a request, which a proxy in front of the service sets on
    /// every request, replacing any value a client sent (`request_id_header` with
    /// `request_id_trusted = true`): what `idempotent` limits remember a request under, so the
    /// proxy's retry is charged once. A header a client can set must never be named here: a
    /// repeated id would answer every `idempotent` limit from memory. Without it, each request
    /// is remembered under an id of the layer's own.
    pub fn trusted_request_id_header(self, name: &str) -> ConfigBuilder {
        self.set("request_id_header", json!(name))
            .set("request_id_trusted", json!(true))
    }

    /// How a header or query parameter an identifier comes from is read when a request sends
    /// it more than once (`duplicates`): `refuse` (400, the default), or `first` / `last` for a
    /// service known to read that one.
    pub fn duplicates(self, reading: &str) -> ConfigBuilder {
        self.set("duplicates", json!(reading))
    }

    /// Gives CORS preflights (`OPTIONS` with `Access-Control-Request-Method`) a limit of their
    /// own, per client address (`preflight_limit`), in place of the rules: without it they are
    /// ordinary requests, counted by every rule they match.
    pub fn preflight_limit(self, policy: impl Display) -> ConfigBuilder {
        self.set("preflight_limit", json!(policy.to_string()))
    }

    /// A path answering `GET` with the layer's counters as Prometheus text (`metrics_path`), to
    /// the bearer token given to [`crate::Builder::metrics_token`] unless
    /// [`ConfigBuilder::metrics_public`].
    pub fn metrics_path(self, path: &str) -> ConfigBuilder {
        self.set("metrics_path", json!(path))
    }

    /// Serves `metrics_path` to anyone, without a token (`metrics_public`): only where the
    /// service is reachable from a private network alone.
    pub fn metrics_public(self) -> ConfigBuilder {
        self.set("metrics_public", json!(true))
    }

    /// A configuration-wide static deny entry (`deny`): `ip 192.0.2.0/24`, `header:x-key abc`.
    pub fn deny(self, entry: &str) -> ConfigBuilder {
        self.push("deny", json!(entry))
    }

    /// A configuration-wide static allow entry (`allow`).
    pub fn allow(self, entry: &str) -> ConfigBuilder {
        self.push("allow", json!(entry))
    }

    /// The configuration, validated as a file's is.
    pub fn build(self) -> Result<Config, ConfigError> {
        let mut keys = self.keys;
        keys.insert("rules".to_string(), Value::Array(self.rules));
        Config::from_value(Value::Object(keys))
    }

    fn set(mut self, key: &str, value: Value) -> ConfigBuilder {
        self.keys.insert(key.to_string(), value);
        self
    }

    fn push(mut self, key: &str, value: Value) -> ConfigBuilder {
        push(&mut self.keys, key, value);
        self
    }
}

/// A rule: which requests it matches (every request unless narrowed) and its limits, decided
/// all or nothing.
#[derive(Debug, Clone)]
pub struct RuleBuilder {
    keys: Map<String, Value>,
}

impl RuleBuilder {
    /// A rule named `name` (for logs, errors and its own lists), matching every request.
    pub fn new(name: &str) -> RuleBuilder {
        let mut keys = Map::new();
        keys.insert("name".to_string(), json!(name));
        keys.insert("limits".to_string(), json!([]));
        RuleBuilder { keys }
    }

    /// Only paths starting with `prefix` (`path_prefix`).
    pub fn path_prefix(self, prefix: &str) -> RuleBuilder {
        self.set("path_prefix", json!(prefix))
    }

    /// Only paths matching `pattern` (`path`): `*` one segment, a final `**` the rest.
    pub fn path(self, pattern: &str) -> RuleBuilder {
        self.set("path", json!(pattern))
    }

    /// Only these methods (`methods`).
    pub fn methods<'a>(self, methods: impl IntoIterator<Item = &'a str>) -> RuleBuilder {
        let methods: Vec<&str> = methods.into_iter().collect();
        self.set("methods", json!(methods))
    }

    /// Only these hosts (`hosts`): `api.example.com`, `*.example.com`.
    pub fn hosts<'a>(self, hosts: impl IntoIterator<Item = &'a str>) -> RuleBuilder {
        let hosts: Vec<&str> = hosts.into_iter().collect();
        self.set("hosts", json!(hosts))
    }

    /// Decide and count, but never refuse (`shadow`).
    pub fn shadow(self) -> RuleBuilder {
        self.set("shadow", json!(true))
    }

    /// A static deny entry of this rule (`deny`).
    pub fn deny(mut self, entry: &str) -> RuleBuilder {
        push(&mut self.keys, "deny", json!(entry));
        self
    }

    /// A static allow entry of this rule (`allow`).
    pub fn allow(mut self, entry: &str) -> RuleBuilder {
        push(&mut self.keys, "allow", json!(entry));
        self
    }

    /// Adds a limit (after the others).
    pub fn limit(mut self, limit: LimitBuilder) -> RuleBuilder {
        push(&mut self.keys, "limits", Value::Object(limit.keys));
        self
    }

    fn set(mut self, key: &str, value: Value) -> RuleBuilder {
        self.keys.insert(key.to_string(), value);
        self
    }
}

/// A limit: its name (limits of one name share their quota), policy and identifier.
#[derive(Debug, Clone)]
pub struct LimitBuilder {
    keys: Map<String, Value>,
}

impl LimitBuilder {
    /// The limit `name` of `policy` (a `Policy`, or its spec: `"gcra 10/1s burst 20"`),
    /// counted per client address (`ip`) until [`LimitBuilder::identifier`] says otherwise.
    pub fn new(name: &str, policy: impl Display) -> LimitBuilder {
        let mut keys = Map::new();
        keys.insert("name".to_string(), json!(name));
        keys.insert("policy".to_string(), json!(policy.to_string()));
        keys.insert("identifier".to_string(), json!("ip"));
        LimitBuilder { keys }
    }

    /// Where the identifier comes from: `ip`, `header:<name>`, `query:<name>`, `path:<n>`,
    /// `api-key:<source>` (hashed), `custom:<name>` (a closure,
    /// [`crate::Builder::custom_identifier`]).
    pub fn identifier(self, source: &str) -> LimitBuilder {
        self.set("identifier", json!(source))
    }

    /// Units per request (`cost`, default 1).
    pub fn cost(self, units: u64) -> LimitBuilder {
        self.set("cost", json!(units))
    }

    /// A cost known from the response (`cost = { reserve, from }`): `reserve` units before the
    /// service runs, then what `from` says — `response-header:<name>`, `response-bytes`, or
    /// `custom:<name>` (a closure, [`crate::Builder::count_when`]).
    pub fn settled(self, reserve: u64, from: &str) -> LimitBuilder {
        self.set("cost", json!({"reserve": reserve, "from": from}))
    }

    /// What to do when the store cannot answer (`fail`): a `FailMode`, or `open`, `closed`,
    /// `fallback 10%`.
    pub fn fail(self, mode: impl Display) -> LimitBuilder {
        self.set("fail", json!(mode.to_string()))
    }

    /// What to do when the store refuses the limiter — credentials, permissions, a script
    /// (`fail_misconfigured`, `closed` unless set): a `FailMode`, or `open`, `closed`,
    /// `fallback 10%`.
    pub fn fail_misconfigured(self, mode: impl Display) -> LimitBuilder {
        self.set("fail_misconfigured", json!(mode.to_string()))
    }

    /// What to do without an identifier (`missing`): a `Missing`, or `deny`, `allow`, `shared`.
    pub fn missing(self, missing: impl Display) -> LimitBuilder {
        self.set("missing", json!(missing.to_string()))
    }

    /// Checks carry the request id, so a retried request is charged once (`idempotent`).
    pub fn idempotent(self) -> LimitBuilder {
        self.set("idempotent", json!(true))
    }

    /// What exceeding the limit does (`exceed`): `deny` (the default), `soft` (forward with
    /// `EdgeLimit-Exceeded` naming the limit), or `delay <duration>` (a `gcra` limit only:
    /// wait up to that long for a place rather than refuse).
    pub fn exceed(self, exceed: &str) -> LimitBuilder {
        self.set("exceed", json!(exceed))
    }

    /// How long an identifier the limit denies stays refused on it (`block_for`, e.g. `15m`).
    pub fn block_for(self, duration: &str) -> LimitBuilder {
        self.set("block_for", json!(duration))
    }

    /// The share of identifiers the limit is enforced for (`enforce`, e.g. `10%`); the others
    /// are decided in shadow.
    pub fn enforce(self, share: &str) -> LimitBuilder {
        self.set("enforce", json!(share))
    }

    /// The response statuses charged (`count_status`): each `401`, `4xx` or `200-299`; the
    /// others are refunded after the response.
    pub fn count_status<'a>(self, statuses: impl IntoIterator<Item = &'a str>) -> LimitBuilder {
        let statuses: Vec<&str> = statuses.into_iter().collect();
        self.set("count_status", json!(statuses))
    }

    /// A named alternative policy identifiers may be assigned (`tiers`).
    pub fn tier(mut self, name: &str, policy: impl Display) -> LimitBuilder {
        let tiers = self
            .keys
            .entry("tiers")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(tiers) = tiers {
            tiers.insert(name.to_string(), json!(policy.to_string()));
        }
        self
    }

    fn set(mut self, key: &str, value: Value) -> LimitBuilder {
        self.keys.insert(key.to_string(), value);
        self
    }
}

/// Appends `value` to the list at `key`.
fn push(keys: &mut Map<String, Value>, key: &str, value: Value) {
    if let Value::Array(list) = keys.entry(key).or_insert_with(|| Value::Array(Vec::new())) {
        list.push(value);
    }
}

#[cfg(test)]
mod tests {
    use edgelimit::{FailMode, Policy};
    use edgelimit_engine::Missing;

    use super::*;

    #[test]
    fn the_builder_gives_the_config_its_file_gives() {
        let built = ConfigBuilder::new()
            .ipv6_prefix(56)
            .dynamic_lists(false)
            .rule(
                RuleBuilder::new("api")
                    .path_prefix("/api/")
                    .methods(["GET", "POST"])
                    .limit(
                        LimitBuilder::new(
                            "per-key",
                            "gcra 10/1s burst 20".parse::<Policy>().unwrap(),
                        )
                        .identifier("api-key:header:x-api-key")
                        .missing(Missing::Deny)
                        .fail(FailMode::Closed)
                        .tier("pro", "gcra 100/1s burst 200"),
                    )
                    .limit(LimitBuilder::new("per-ip", "fixed 100/1m")),
            )
            .rule(RuleBuilder::new("login").path("/login").limit(
                LimitBuilder::new("failed-logins", "fixed 5/15m").settled(1, "custom:failed"),
            ))
            .build()
            .unwrap();
        let file = Config::from_value(json!({
            "ipv6_prefix": 56,
            "dynamic_lists": false,
            "rules": [
                {"name": "api", "path_prefix": "/api/", "methods": ["GET", "POST"], "limits": [
                    {"name": "per-key", "policy": "gcra 10/1s burst 20",
                     "identifier": "api-key:header:x-api-key", "missing": "deny", "fail": "closed",
                     "tiers": {"pro": "gcra 100/1s burst 200"}},
                    {"name": "per-ip", "policy": "fixed 100/1m", "identifier": "ip"}
                ]},
                {"name": "login", "path": "/login", "limits": [
                    {"name": "failed-logins", "policy": "fixed 5/15m", "identifier": "ip",
                     "cost": {"reserve": 1, "from": "custom:failed"}}
                ]}
            ]
        }))
        .unwrap();
        assert_eq!(built, file);
    }

    #[test]
    fn mistakes_are_named_as_in_a_file() {
        let e = ConfigBuilder::new()
            .rule(RuleBuilder::new("api").limit(LimitBuilder::new("per-ip", "fixed 0/1m")))
            .build()
            .unwrap_err();
        assert!(
            e.field.contains("limits[0]") && e.field.ends_with("policy"),
            "{e}"
        );
        let e = ConfigBuilder::new()
            .rule(
                RuleBuilder::new("api")
                    .limit(LimitBuilder::new("per-ip", "fixed 5/1m").identifier("cookie:x")),
            )
            .build()
            .unwrap_err();
        assert_eq!(
            e.field,
            "rules[0] \"api\" → limits[0] \"per-ip\" → identifier"
        );
        let e = ConfigBuilder::new()
            .rule(RuleBuilder::new("api"))
            .build()
            .unwrap_err();
        assert!(e.problem.contains("at least one limit"), "{e}");
    }
}
