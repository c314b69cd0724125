//! Each rule and each of its limits checked: matching (hosts, methods, path), identifiers, costs
//! and settlement, fail modes (`fail`, `fail_misconfigured`), tiers, scope; and the static deny
//! and allow lists. Every error names its rule, limit and field.

use std::collections::HashMap;
use std::sync::Arc;

use edgelimit::control::list::ListEntry;
use edgelimit::global::is_global;
use edgelimit::{Algorithm, FailMode, Limit, Policy};

use super::limiter_options::Exceeding;
use super::raw::{RawCost, RawLimit, RawRule};
use super::ConfigError;
use crate::identify::IdentifierSource;
use crate::lists::{ProbeSource, StaticList};
use crate::rules::{
    CostSource, Exceed, HostPattern, Missing, PathMatch, Rule, RuleLimit, Scope, Settle, StatusSet,
};

const METHODS: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE",
];

pub(super) fn is_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 64
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Parses static list entries; `field` names the list (`deny`, `rules[0] "api" → allow`), and
/// each entry's source joins `sources` (what a request's probe carries).
pub(super) fn static_list(
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
pub(super) fn add_source(sources: &mut Vec<(String, ProbeSource)>, source: ProbeSource) {
    let spec = source.spec();
    if !sources.iter().any(|(s, _)| *s == spec) {
        sources.push((spec, source));
    }
}

impl RawRule {
    pub(super) fn validate(
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
            let limit = raw.validate(&at, &here, seen, global, self.shadow)?;
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
            preflight: false,
            limits,
            deny,
            allow,
        })
    }
}

impl RawLimit {
    pub(super) fn validate(
        self,
        at: &str,
        rule: &str,
        seen: &mut HashMap<String, (Limit, String)>,
        global: bool,
        shadow_rule: bool,
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
        // A store that refuses the limiter (docs/design.md §3, "Store failures") fails closed
        // unless the limit says otherwise.
        let fail_misconfigured = self
            .fail_misconfigured
            .as_deref()
            .map_or(Ok(FailMode::Closed), str::parse)
            .map_err(|problem| ConfigError::at(format!("{at} → fail_misconfigured"), problem))?;
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
        let over = Exceeding::check(
            &self.policy,
            scope,
            shadow_rule,
            self.exceed.as_deref(),
            self.block_for.as_deref(),
            self.enforce.as_deref(),
        )
        .map_err(|e| e.under(at))?;
        let count_status = match &self.count_status {
            None => None,
            Some(raw) => {
                let field = format!("{at} → count_status");
                if self.policy.algorithm() == Algorithm::Concurrency {
                    return Err(ConfigError::at(
                        field,
                        "a concurrency limit counts requests in flight and releases each lease \
                         at the response, whatever its status: there is nothing to count by it",
                    ));
                }
                let entries = raw.entries();
                Some(
                    StatusSet::parse(entries.iter().map(String::as_str))
                        .map_err(|problem| ConfigError::at(field, problem))?,
                )
            }
        };
        let mut limit = Limit::new(self.name.as_str(), self.policy)
            .with_fail_mode(fail_mode)
            .with_fail_misconfigured(fail_misconfigured)
            .with_block_for(over.block_ms);
        if let Exceed::Delay { max_ms } = over.exceed {
            limit = limit.with_max_delay(max_ms);
        }
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
                        "limit `{}` is also defined in {first} with another policy, fail mode \
                         (`fail`, `fail_misconfigured`), `block_for` or longest wait; limits \
                         that share a name share their state, so they must agree",
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
            exceed: over.exceed,
            enforce: over.enforce,
            count_status,
        })
    }
}
