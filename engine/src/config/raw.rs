//! The configuration as written: serde's shapes of `EDGELIMIT_CONFIG`, unknown keys refused,
//! before any value is checked ([`super::validate`] and [`super::limits`] check them).

use std::collections::BTreeMap;

use edgelimit::Policy;
use serde::Deserialize;

use super::global::RawGlobal;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) namespace: Option<String>,
    pub(super) timeout_ms: Option<u64>,
    pub(super) time: Option<String>,
    pub(super) denial_cache: Option<usize>,
    pub(super) denial_cache_ms: Option<u64>,
    pub(super) log_sample: Option<f64>,
    pub(super) analytics: Option<String>,
    pub(super) metrics_path: Option<String>,
    pub(super) metrics_public: Option<bool>,
    pub(super) respond: Option<RawResponse>,
    #[serde(default)]
    pub(super) shards: Vec<RawShard>,
    pub(super) request_id_header: Option<String>,
    pub(super) request_id_trusted: Option<bool>,
    pub(super) duplicates: Option<String>,
    pub(super) preflight_limit: Option<String>,
    pub(super) rules: Vec<RawRule>,
    #[serde(default)]
    pub(super) deny: Vec<String>,
    #[serde(default)]
    pub(super) allow: Vec<String>,
    pub(super) dynamic_lists: Option<bool>,
    pub(super) list_cache_ms: Option<u64>,
    #[serde(default)]
    pub(super) list_sources: Vec<String>,
    pub(super) shadow_header: Option<bool>,
    pub(super) headers: Option<Vec<String>>,
    pub(super) store: Option<String>,
    pub(super) objects: Option<u32>,
    pub(super) admin_path: Option<String>,
    pub(super) ipv6_prefix: Option<u8>,
    pub(super) global: Option<RawGlobal>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawResponse {
    pub(super) status: Option<u16>,
    pub(super) body: Option<String>,
    pub(super) content_type: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawShard {
    pub(super) name: String,
    pub(super) url_var: String,
    pub(super) token_var: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRule {
    pub(super) name: String,
    #[serde(default)]
    pub(super) hosts: Vec<String>,
    #[serde(default)]
    pub(super) methods: Vec<String>,
    pub(super) path: Option<String>,
    pub(super) path_prefix: Option<String>,
    #[serde(default)]
    pub(super) shadow: bool,
    pub(super) limits: Vec<RawLimit>,
    #[serde(default)]
    pub(super) deny: Vec<String>,
    #[serde(default)]
    pub(super) allow: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimit {
    pub(super) name: String,
    pub(super) policy: Policy,
    pub(super) identifier: String,
    pub(super) cost: Option<RawCost>,
    pub(super) fail: Option<String>,
    pub(super) fail_misconfigured: Option<String>,
    pub(super) missing: Option<String>,
    pub(super) idempotent: Option<bool>,
    pub(super) tiers: Option<BTreeMap<String, String>>,
    pub(super) scope: Option<String>,
    pub(super) exceed: Option<String>,
    pub(super) block_for: Option<String>,
    pub(super) enforce: Option<String>,
    pub(super) count_status: Option<RawStatuses>,
}

/// `count_status`: one entry (`"401"`, `"4xx"`, `"200-299"`, a comma-separated list of them, or
/// a bare number) or an array of entries.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawStatuses {
    One(RawStatus),
    Many(Vec<RawStatus>),
}

/// One entry of `count_status`, as text or a bare number.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawStatus {
    Code(u64),
    Text(String),
}

impl RawStatuses {
    /// The entries as text.
    pub(super) fn entries(&self) -> Vec<String> {
        let one = |s: &RawStatus| match s {
            RawStatus::Code(code) => code.to_string(),
            RawStatus::Text(text) => text.clone(),
        };
        match self {
            RawStatuses::One(s) => vec![one(s)],
            RawStatuses::Many(all) => all.iter().map(one).collect(),
        }
    }
}

/// A cost: a whole number, or `{ reserve = N, from = "…", unit = "…" }` settled after the
/// response.
pub(super) enum RawCost {
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
pub(super) struct RawSettled {
    pub(super) reserve: i64,
    pub(super) from: String,
    pub(super) unit: Option<String>,
}
