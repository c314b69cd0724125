//! The configuration checked as a whole: its top-level settings, the store, the lists, and the
//! rules together (names unique, no limit both enforced and shadowed). Each rule and limit is
//! checked by [`super::limits`]; every error names its field.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::time::Duration;

use edgelimit::http::FieldSets;
use edgelimit::limiter::{DEFAULT_DENIAL_CACHE, DEFAULT_DENIAL_CACHE_MS};
use edgelimit::net::AddressGrouping;
use edgelimit::store::DEFAULT_NAMESPACE;
use edgelimit::Limit;

use super::global::RawGlobal;
use super::limiter_options;
use super::limits::{add_source, is_name, static_list};
use super::raw::{RawConfig, RawResponse, RawRule, RawShard};
use super::*;
use crate::lists::{self, ProbeSource};
use crate::reading::Duplicates;
use crate::rules::{Rule, PREFLIGHT_RULE};

impl RawConfig {
    pub(super) fn validate(self) -> Result<Config, ConfigError> {
        let namespace = self
            .namespace
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
        if !is_name(&namespace) {
            return Err(ConfigError::at(
                "namespace",
                format!("`{namespace}` must be 1–64 of A-Z a-z 0-9 - _ ."),
            ));
        }
        let timeout_ms = limiter_options::timeout_ms(self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS))
            .map_err(|e| e.under(""))?;
        let global = self.global.map(RawGlobal::validate).transpose()?;
        let time = limiter_options::time_mode(self.time.as_deref(), global.is_some())
            .map_err(|e| e.under(""))?;
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
        let metrics_public = self.metrics_public.unwrap_or(false);
        if metrics_public && self.metrics_path.is_none() {
            return Err(ConfigError::at(
                "metrics_public",
                "is set, and there is no metrics_path to make public",
            ));
        }
        let store = store_kind(
            self.store.as_deref(),
            global.is_some(),
            !self.shards.is_empty(),
        )?;
        let objects = within(
            "objects",
            self.objects.unwrap_or(DEFAULT_OBJECTS),
            1..=MAX_OBJECTS,
        )?;
        check_admin_path(self.admin_path.as_deref(), self.metrics_path.as_deref())?;
        let shards = shards(self.shards)?;
        if self.rules.is_empty() {
            return Err(ConfigError::at(
                "rules",
                "is empty: list at least one rule (or remove the Worker from the route)",
            ));
        }
        let denial_cache_ms = limiter_options::denial_cache_ms(
            self.denial_cache_ms.unwrap_or(DEFAULT_DENIAL_CACHE_MS),
        )
        .map_err(|e| e.under(""))?;
        let list_cache_ms = within(
            "list_cache_ms",
            self.list_cache_ms.unwrap_or(DEFAULT_LIST_CACHE_MS),
            0..=MAX_LIST_CACHE_MS,
        )?;
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
        let mut raw_rules = self.rules;
        let preflights = self.preflight_limit.is_some();
        if let Some(policy) = self.preflight_limit {
            raw_rules.push(preflight_rule(&policy, &raw_rules)?);
        }
        let mut rules = rules(raw_rules, grouping, &mut probe_sources, global.is_some())?;
        if preflights {
            if let Some(preflight) = rules.last_mut() {
                preflight.preflight = true;
            }
        }
        let request_id_header = request_id_header(self.request_id_header, self.request_id_trusted)?;
        let duplicates = match self.duplicates {
            None => Duplicates::default(),
            Some(text) => text
                .parse()
                .map_err(|why| ConfigError::at("duplicates", why))?,
        };
        let headers = match self.headers {
            None => FieldSets::ALL,
            Some(names) => FieldSets::named(&names)
                .map_err(|(i, why)| ConfigError::at(format!("headers[{i}]"), why))?,
        };
        Ok(Config {
            namespace,
            timeout: Duration::from_millis(timeout_ms),
            time,
            denial_cache: self.denial_cache.unwrap_or(DEFAULT_DENIAL_CACHE),
            denial_cache_ms,
            log_sample,
            analytics: self.analytics.filter(|a| !a.is_empty()),
            metrics_path: self.metrics_path,
            metrics_public,
            respond,
            shards,
            request_id_header,
            duplicates,
            rules,
            deny,
            allow,
            dynamic_lists: self.dynamic_lists.unwrap_or(true),
            list_cache_ms,
            probe_sources,
            shadow_header: self.shadow_header.unwrap_or(false),
            headers,
            store,
            objects,
            admin_path: self.admin_path,
            ipv6_prefix: grouping.ipv6_prefix(),
            global,
        })
    }
}

/// `value` if `range` holds it, else an error naming `field`.
fn within<T>(field: &'static str, value: T, range: RangeInclusive<T>) -> Result<T, ConfigError>
where
    T: PartialOrd + std::fmt::Display,
{
    limiter_options::within(field, value, range).map_err(|e| e.under(""))
}

/// `store`, checked against the `global` section and `shards`, which each choose the store
/// their own way.
fn store_kind(
    store: Option<&str>,
    global: bool,
    sharded: bool,
) -> Result<Option<StoreKind>, ConfigError> {
    let store = match store {
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
    if global {
        // Each region decides in its own Redis, and the leases live beside the states there.
        if store == Some(StoreKind::DurableObject) {
            return Err(ConfigError::at(
                "store",
                "global limits keep each region's state in its own Upstash database (the \
                 `global.regions`): the Durable Object store is one region's, drop `store` \
                 or the `global` section",
            ));
        }
        if sharded {
            return Err(ConfigError::at(
                "shards",
                "with a `global` section each region has one store (`global.regions`): \
                 drop `shards`",
            ));
        }
    }
    if store == Some(StoreKind::DurableObject) && sharded {
        return Err(ConfigError::at(
            "shards",
            "Upstash shards and `store = \"durable-object\"` exclude each other: Durable \
             Objects spread the state themselves (see `objects`)",
        ));
    }
    Ok(store)
}

/// `admin_path`: a path of its own, not the metrics page's.
fn check_admin_path(admin: Option<&str>, metrics: Option<&str>) -> Result<(), ConfigError> {
    let Some(path) = admin else {
        return Ok(());
    };
    if !path.starts_with('/') || path.len() < 2 {
        return Err(ConfigError::at(
            "admin_path",
            format!("`{path}` must be a path such as `/__edgelimit/admin`"),
        ));
    }
    if metrics == Some(path) {
        return Err(ConfigError::at(
            "admin_path",
            "is also the metrics_path: give the admin route a path of its own",
        ));
    }
    Ok(())
}

/// `shards`: each named once.
fn shards(raw: Vec<RawShard>) -> Result<Vec<ShardConfig>, ConfigError> {
    let mut shards = Vec::with_capacity(raw.len());
    for (i, s) in raw.into_iter().enumerate() {
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
    Ok(shards)
}

/// The rules, each checked ([`RawRule::validate`]) and named once; limits sharing a name agree
/// across rules, and no limit is both enforced and shadowed.
fn rules(
    raw: Vec<RawRule>,
    grouping: AddressGrouping,
    probe_sources: &mut Vec<(String, ProbeSource)>,
    global: bool,
) -> Result<Vec<Rule>, ConfigError> {
    let mut rules = Vec::with_capacity(raw.len());
    let mut seen: HashMap<String, (Limit, String)> = HashMap::new();
    for (i, raw) in raw.into_iter().enumerate() {
        let mut rule = raw.validate(i, &mut seen, probe_sources, global)?;
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
    Ok(rules)
}

impl RawResponse {
    pub(super) fn validate(self) -> Result<FixedResponse, ConfigError> {
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

/// The request id header, if named: only a header the configuration says is trusted
/// (`request_id_trusted = true`: the deployment's proxy or the platform sets it, replacing any
/// value a client sent). A client that chooses its request id could repeat one to have every
/// `idempotent` limit answer from memory and charge nothing (docs/security.md).
fn request_id_header(
    header: Option<String>,
    trusted: Option<bool>,
) -> Result<Option<String>, ConfigError> {
    let Some(header) = header else {
        return match trusted {
            Some(true) => Err(ConfigError::at(
                "request_id_trusted",
                "trusts no header: name it in `request_id_header`",
            )),
            _ => Ok(None),
        };
    };
    let header = header.to_ascii_lowercase();
    if !is_name(&header) {
        return Err(ConfigError::at(
            "request_id_header",
            format!("`{header}` is not a header name"),
        ));
    }
    if trusted != Some(true) {
        return Err(ConfigError::at(
            "request_id_header",
            format!(
                "a client can send `{header}` itself, and a repeated id would answer every \
                 `idempotent` limit from memory: name it only if your own proxy or the platform \
                 sets it on every request (replacing any value the client sent), and say so with \
                 `request_id_trusted = true`"
            ),
        ));
    }
    Ok(Some(header))
}

/// The rule `preflight_limit` gives CORS preflights: one limit of that policy per client
/// address, named [`PREFLIGHT_RULE`] (no rule of the configuration may take the name). It comes
/// last, and a preflight matches it alone ([`crate::Config::matched_places`]).
fn preflight_rule(policy: &str, rules: &[RawRule]) -> Result<RawRule, ConfigError> {
    policy
        .parse::<edgelimit::Policy>()
        .map_err(|e| ConfigError::at("preflight_limit", e.to_string()))?;
    if rules.iter().any(|r| r.name == PREFLIGHT_RULE) {
        return Err(ConfigError::at(
            "preflight_limit",
            format!("a rule is named \"{PREFLIGHT_RULE}\", the name of the preflights' rule"),
        ));
    }
    serde_json::from_value(serde_json::json!({
        "name": PREFLIGHT_RULE,
        "methods": ["OPTIONS"],
        "limits": [{ "name": PREFLIGHT_RULE, "policy": policy, "identifier": "ip" }],
    }))
    .map_err(|e| ConfigError::at("preflight_limit", e.to_string()))
}
