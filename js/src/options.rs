//! `new Ratelimit(options)`: the options (as JSON from the wrapper) parsed and validated once into
//! a [`Setup`], every error naming its option.
//!
//! The knobs are the Worker's (docs/design.md §3–4), in JavaScript's spelling: `namespace`,
//! `timeout` (ms), `time` (`server`, Redis `TIME`, the default: a Worker's `Date.now()` stands
//! still during a request; or `local`), `denialCache`/`denialCacheMs`, and per limit a policy
//! spec, a fail mode (`open`, `closed`, `fallback N%`), tiers, `shadow` (decided and reported,
//! never enforced), and what exceeding it does — `exceed` (`deny`, `soft`, `delay <duration>`),
//! `blockFor` and `enforce`. Each setting the Worker's configuration also has is checked by the
//! engine's configuration model ([`edgelimit_engine::config::limiter_options`]): one validation,
//! one set of bounds, the same reasons (docs/configuration.md, "What exceeding a limit does"), so
//! a limit means the same, and is refused the same, here as in the Worker.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use edgelimit::control::valid_tier_name;
use edgelimit::http::FieldSets;
use edgelimit::limiter::{DEFAULT_DENIAL_CACHE, DEFAULT_DENIAL_CACHE_MS};
use edgelimit::store::DEFAULT_NAMESPACE;
use edgelimit::{FailMode, Limit, Policy, TimeMode};
use edgelimit_engine::config::limiter_options::{self, Exceeding, FieldError};
use edgelimit_engine::rules::{unenforced, Enforce, Exceed, Scope};
use serde::Deserialize;

use crate::error::{Error, ErrorCode};

/// How long one store round trip may take unless `timeout` says otherwise, in ms: a Node service
/// reaches Upstash across the internet, where the Worker's 50 ms would fail open on an ordinary
/// slow request; a limiter still steps aside (each limit's fail mode) well before a user waits.
pub const DEFAULT_TIMEOUT_MS: u64 = 1_000;

/// One configured limit.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfiguredLimit {
    /// The limit (name, policy, fail mode, tiers), shared by every check built from it.
    pub limit: Arc<Limit>,
    /// Decided and reported, never enforced.
    pub shadow: bool,
    /// What exceeding the limit does (`exceed`): deny, admit and report it (`soft`), or wait.
    pub exceed: Exceed,
    /// The share of identifiers the limit is enforced for (`enforce`); the others are decided
    /// in shadow. `None`: every identifier.
    pub enforce: Option<Enforce>,
}

impl ConfiguredLimit {
    /// Whether the limit is decided in shadow for `identifier`: a shadow limit, a soft one (its
    /// denial is reported, never enforced), or a staged one whose hash does not enforce it.
    pub fn in_shadow(&self, identifier: &str) -> bool {
        self.shadow
            || unenforced(
                &self.limit.name,
                self.exceed,
                self.enforce,
                identifier.as_bytes(),
            )
            .is_some()
    }
}

/// Validated options.
#[derive(Debug, Clone, PartialEq)]
pub struct Setup {
    /// The REST URL, without a trailing `/`.
    pub url: String,
    /// The REST token.
    pub token: String,
    /// The Redis key namespace (the Worker's and every store's default unless set).
    pub namespace: String,
    /// How long one store round trip may take.
    pub timeout: Duration,
    /// Whose clock decides.
    pub time: TimeMode,
    /// Capacity of the denial cache (0: off).
    pub denial_cache: usize,
    /// How long a denial is kept at most, in ms (0: off).
    pub denial_cache_ms: u64,
    /// The limits, in the order given.
    pub limits: Vec<ConfiguredLimit>,
    /// The rate-limit header fields a result's `headers` carries (`headers`, both sets unless
    /// set), as the Worker's `headers` key.
    pub headers: FieldSets,
}

impl Setup {
    /// Parses the options' JSON (what the wrapper made of the options object, `fetch` aside).
    pub fn from_json(text: &str) -> Result<Setup, Error> {
        let mut de = serde_json::Deserializer::from_str(text);
        let raw: RawOptions = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            let path = if path == "." {
                "options".to_string()
            } else {
                path
            };
            Error::new(ErrorCode::InvalidOption, path, e.inner().to_string())
        })?;
        raw.validate()
    }

    /// The limit named `name`.
    pub fn limit(&self, name: &str) -> Option<&ConfiguredLimit> {
        self.limits.iter().find(|l| &*l.limit.name == name)
    }

    /// The configured names, for error messages.
    pub fn names(&self) -> String {
        let names: Vec<String> = self
            .limits
            .iter()
            .map(|l| format!("\"{}\"", l.limit.name))
            .collect();
        names.join(", ")
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawOptions {
    url: Option<String>,
    token: Option<String>,
    limits: Option<Vec<RawLimit>>,
    namespace: Option<String>,
    timeout: Option<u64>,
    time: Option<String>,
    denial_cache: Option<usize>,
    denial_cache_ms: Option<u64>,
    headers: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawLimit {
    name: String,
    policy: String,
    fail: Option<String>,
    #[serde(default)]
    shadow: bool,
    tiers: Option<BTreeMap<String, String>>,
    exceed: Option<String>,
    block_for: Option<String>,
    enforce: Option<String>,
}

fn invalid(path: impl Into<String>, message: impl Into<String>) -> Error {
    Error::new(ErrorCode::InvalidOption, path, message)
}

/// The engine's refusal of a setting, at the option `at` (`limits[0]`, or `""` at the top) under
/// JavaScript's name for the field.
fn refused(at: &str, e: FieldError) -> Error {
    let name = match e.field {
        "timeout_ms" => "timeout",
        "denial_cache_ms" => "denialCacheMs",
        "block_for" => "blockFor",
        other => other,
    };
    let path = if at.is_empty() {
        name.to_string()
    } else {
        format!("{at}.{name}")
    };
    invalid(path, e.problem)
}

impl RawOptions {
    fn validate(self) -> Result<Setup, Error> {
        let url = self
            .url
            .map(|u| u.trim().trim_end_matches('/').to_string())
            .filter(|u| !u.is_empty())
            .ok_or_else(|| {
                invalid(
                    "url",
                    "is missing: the Upstash REST URL (UPSTASH_REDIS_REST_URL), or a gateway's",
                )
            })?;
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(invalid(
                "url",
                format!("must be an http:// or https:// URL, got `{url}`"),
            ));
        }
        let token = self
            .token
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                invalid(
                    "token",
                    "is missing: the REST token (UPSTASH_REDIS_REST_TOKEN)",
                )
            })?;
        let namespace = self
            .namespace
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
        if !valid_tier_name(&namespace) {
            return Err(invalid(
                "namespace",
                format!("`{namespace}` must be 1–64 of A-Z a-z 0-9 - _ ."),
            ));
        }
        let timeout_ms = limiter_options::timeout_ms(self.timeout.unwrap_or(DEFAULT_TIMEOUT_MS))
            .map_err(|e| refused("", e))?;
        let time: TimeMode =
            limiter_options::time_mode(self.time.as_deref(), false).map_err(|e| refused("", e))?;
        let denial_cache_ms = limiter_options::denial_cache_ms(
            self.denial_cache_ms.unwrap_or(DEFAULT_DENIAL_CACHE_MS),
        )
        .map_err(|e| refused("", e))?;
        let raw_limits = self
            .limits
            .filter(|l| !l.is_empty())
            .ok_or_else(|| invalid("limits", "is missing or empty: name at least one limit"))?;
        let mut limits: Vec<ConfiguredLimit> = Vec::with_capacity(raw_limits.len());
        for (i, raw) in raw_limits.into_iter().enumerate() {
            let limit = raw.validate(&format!("limits[{i}]"))?;
            if limits.iter().any(|l| l.limit.name == limit.limit.name) {
                return Err(invalid(
                    format!("limits[{i}].name"),
                    format!("`{}` is named twice", limit.limit.name),
                ));
            }
            limits.push(limit);
        }
        if limits.iter().all(|l| l.shadow) {
            return Err(invalid(
                "limits",
                "every limit is a shadow limit: at least one must be enforced (or `soft`)",
            ));
        }
        let headers = match self.headers {
            None => FieldSets::ALL,
            Some(names) => FieldSets::named(&names)
                .map_err(|(i, why)| invalid(format!("headers[{i}]"), why))?,
        };
        Ok(Setup {
            url,
            token,
            namespace,
            timeout: Duration::from_millis(timeout_ms),
            time,
            denial_cache: self.denial_cache.unwrap_or(DEFAULT_DENIAL_CACHE),
            denial_cache_ms,
            limits,
            headers,
        })
    }
}

impl RawLimit {
    fn validate(self, at: &str) -> Result<ConfiguredLimit, Error> {
        if !valid_tier_name(&self.name) {
            return Err(invalid(
                format!("{at}.name"),
                format!("`{}` must be 1–64 of A-Z a-z 0-9 - _ .", self.name),
            ));
        }
        let policy: Policy = self
            .policy
            .parse()
            .map_err(|e| invalid(format!("{at}.policy"), format!("{e}")))?;
        let fail_mode: FailMode = self
            .fail
            .as_deref()
            .map_or(Ok(FailMode::Open), str::parse)
            .map_err(|problem| invalid(format!("{at}.fail"), problem))?;
        let Exceeding {
            exceed,
            block_ms,
            enforce,
        } = Exceeding::check(
            &policy,
            Scope::Region,
            self.shadow,
            self.exceed.as_deref(),
            self.block_for.as_deref(),
            self.enforce.as_deref(),
        )
        .map_err(|e| refused(at, e))?;
        let mut limit = Limit::new(self.name, policy).with_fail_mode(fail_mode);
        if let Some(tiers) = self.tiers {
            let mut parsed = Vec::with_capacity(tiers.len());
            for (tier, spec) in tiers {
                let policy: Policy = spec
                    .parse()
                    .map_err(|e| invalid(format!("{at}.tiers.{tier}"), format!("{e}")))?;
                parsed.push((tier, policy));
            }
            limit = limit
                .with_tiers(parsed)
                .map_err(|problem| invalid(format!("{at}.tiers"), problem))?;
        }
        if let Exceed::Delay { max_ms } = exceed {
            limit = limit.with_max_delay(max_ms);
        }
        if block_ms > 0 {
            limit = limit.with_block_for(block_ms);
        }
        Ok(ConfiguredLimit {
            limit: Arc::new(limit),
            shadow: self.shadow,
            exceed,
            enforce,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn setup(options: serde_json::Value) -> Result<Setup, Error> {
        Setup::from_json(&options.to_string())
    }

    fn minimal() -> serde_json::Value {
        json!({
            "url": "http://127.0.0.1:8079/",
            "token": " t ",
            "limits": [{ "name": "per-user", "policy": "gcra 10/1s burst 20" }],
        })
    }

    #[test]
    fn defaults_are_the_libraries() {
        let s = setup(minimal()).unwrap();
        assert_eq!(s.url, "http://127.0.0.1:8079");
        assert_eq!(s.token, "t");
        assert_eq!(s.namespace, DEFAULT_NAMESPACE);
        assert_eq!(s.timeout, Duration::from_millis(DEFAULT_TIMEOUT_MS));
        assert_eq!(s.time, TimeMode::Server);
        assert_eq!(
            (s.denial_cache, s.denial_cache_ms),
            (DEFAULT_DENIAL_CACHE, DEFAULT_DENIAL_CACHE_MS)
        );
        let l = &s.limits[0];
        assert_eq!(&*l.limit.name, "per-user");
        assert_eq!(l.limit.policy.to_string(), "gcra 10/1s burst 20");
        assert_eq!(l.limit.fail_mode, FailMode::Open);
        assert!(!l.shadow);
        assert_eq!(s.headers, FieldSets::ALL);
    }

    #[test]
    fn every_knob_is_read() {
        let s = setup(json!({
            "url": "https://x.upstash.io", "token": "t", "namespace": "app.v2", "timeout": 80,
            "time": "local", "denialCache": 0, "denialCacheMs": 500, "headers": ["ratelimit"],
            "limits": [
                { "name": "a", "policy": "fixed 5/1m", "fail": "closed" },
                { "name": "b", "policy": "sliding-counter 1000/1h", "fail": "fallback 10%", "shadow": true },
                { "name": "c", "policy": "token-bucket 1/1s burst 5", "tiers": { "pro": "token-bucket 10/1s burst 50" } },
            ],
        }))
        .unwrap();
        assert_eq!(s.namespace, "app.v2");
        assert_eq!(s.timeout, Duration::from_millis(80));
        assert_eq!(s.time, TimeMode::Local);
        assert_eq!((s.denial_cache, s.denial_cache_ms), (0, 500));
        assert_eq!(s.headers, FieldSets::NONE.with_set("ratelimit").unwrap());
        assert_eq!(s.limits[0].limit.fail_mode, FailMode::Closed);
        assert_eq!(
            s.limits[1].limit.fail_mode,
            FailMode::Fallback { per_mille: 100 }
        );
        assert!(s.limits[1].shadow);
        assert_eq!(
            s.limits[2].limit.tiers.get("pro").unwrap().to_string(),
            "token-bucket 10/1s burst 50"
        );
        assert!(s.limit("b").is_some() && s.limit("z").is_none());
        let s = setup(json!({
            "url": "https://x.upstash.io", "token": "t",
            "limits": [
                { "name": "a", "policy": "gcra 5/1m", "exceed": "delay 500ms", "blockFor": "10m" },
                { "name": "b", "policy": "fixed 5/1m", "exceed": "soft" },
                { "name": "c", "policy": "fixed 5/1m", "enforce": "12.5%" },
            ],
        }))
        .unwrap();
        assert_eq!(s.limits[0].exceed, Exceed::Delay { max_ms: 500 });
        assert_eq!(
            (s.limits[0].limit.max_delay_ms, s.limits[0].limit.block_ms),
            (500, 600_000)
        );
        assert!(s.limits[1].in_shadow("anyone") && !s.limits[0].in_shadow("anyone"));
        assert_eq!(s.limits[2].enforce, Some("12.5%".parse().unwrap()));
        assert_eq!(s.names(), "\"a\", \"b\", \"c\"");
    }

    #[test]
    fn bad_options_name_their_path() {
        let with = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut options = minimal();
            edit(&mut options);
            setup(options).unwrap_err()
        };
        type Edit = Box<dyn Fn(&mut serde_json::Value)>;
        let cases: Vec<(Edit, &str, &str)> = vec![
            (Box::new(|o| o["url"] = json!(null)), "url", "missing"),
            (
                Box::new(|o| o["url"] = json!("redis://x")),
                "url",
                "http://",
            ),
            (Box::new(|o| o["token"] = json!("  ")), "token", "missing"),
            (
                Box::new(|o| o["namespace"] = json!("a b")),
                "namespace",
                "1–64",
            ),
            (Box::new(|o| o["timeout"] = json!(0)), "timeout", "outside"),
            (
                Box::new(|o| o["timeout"] = json!(-5)),
                "timeout",
                "invalid value",
            ),
            (Box::new(|o| o["time"] = json!("utc")), "time", "neither"),
            (
                Box::new(|o| o["denialCacheMs"] = json!(600_001)),
                "denialCacheMs",
                "0..=600000",
            ),
            (
                Box::new(|o| o["headers"] = json!(["ratelimit", "draft"])),
                "headers[1]",
                "`draft`",
            ),
            (Box::new(|o| o["limits"] = json!([])), "limits", "empty"),
            (
                Box::new(|o| o["timout"] = json!(5)),
                "timout",
                "unknown field `timout`",
            ),
            (
                Box::new(|o| o["limits"][0]["policy"] = json!("gcra ten/1s")),
                "limits[0].policy",
                "ten",
            ),
            (
                Box::new(|o| o["limits"][0]["fail"] = json!("sometimes")),
                "limits[0].fail",
                "sometimes",
            ),
            (
                Box::new(|o| o["limits"][0]["name"] = json!("per user")),
                "limits[0].name",
                "1–64",
            ),
            (
                Box::new(|o| o["limits"][0]["shadow"] = json!(true)),
                "limits",
                "at least one must be enforced",
            ),
            (
                Box::new(|o| o["limits"][0]["policy"] = json!(10)),
                "limits[0].policy",
                "expected a string",
            ),
            (
                Box::new(|o| o["limits"][0]["tiers"] = json!({ "pro": "fixed 5/1s" })),
                "limits[0].tiers",
                "algorithm",
            ),
            (
                Box::new(|o| o["limits"][0]["tiers"] = json!({ "pro": "gcra x" })),
                "limits[0].tiers.pro",
                "",
            ),
        ];
        for (edit, path, needle) in cases {
            let e = with(&*edit);
            assert_eq!(e.code, ErrorCode::InvalidOption, "{e}");
            assert_eq!(e.path, path, "{e}");
            assert!(e.message.contains(needle), "{e} lacks {needle:?}");
        }
        let limit_cases: Vec<(serde_json::Value, &str, &str)> = vec![
            (
                json!({ "exceed": "sometimes" }),
                "limits[0].exceed",
                "sometimes",
            ),
            (
                json!({ "exceed": "delay" }),
                "limits[0].exceed",
                "longest wait",
            ),
            (
                json!({ "exceed": "soft", "blockFor": "1m" }),
                "limits[0].blockFor",
                "soft",
            ),
            (
                json!({ "exceed": "soft", "enforce": "10%" }),
                "limits[0].enforce",
                "soft",
            ),
            (json!({ "blockFor": "0s" }), "limits[0].blockFor", "within"),
            // The engine's bound: a block is kept beside the limit's state, collected after a day.
            (
                json!({ "blockFor": "2d" }),
                "limits[0].blockFor",
                "at most 1 day",
            ),
            (
                json!({ "shadow": true, "exceed": "delay 1s" }),
                "limits[0].exceed",
                "`shadow`",
            ),
            (json!({ "blockFor": "soon" }), "limits[0].blockFor", "soon"),
            (json!({ "enforce": "110%" }), "limits[0].enforce", "110"),
            (
                json!({ "policy": "concurrency 5", "exceed": "delay 1s" }),
                "limits[0].exceed",
                "concurrency",
            ),
            (
                json!({ "policy": "fixed 5/1m", "exceed": "delay 1s" }),
                "limits[0].exceed",
                "delay needs a gcra policy",
            ),
            (
                json!({ "policy": "token-bucket 5/1m", "exceed": "delay 1s" }),
                "limits[0].exceed",
                "delay needs a gcra policy",
            ),
            (
                json!({ "block_for": "1m" }),
                "limits[0].block_for",
                "unknown field",
            ),
        ];
        for (fields, path, needle) in limit_cases {
            let e = with(&|o| {
                for (key, value) in fields.as_object().unwrap() {
                    o["limits"][0][key] = value.clone();
                }
            });
            assert_eq!(e.path, path, "{e}");
            assert!(e.message.contains(needle), "{e} lacks {needle:?}");
        }
        let mut shadow_and_soft = minimal();
        shadow_and_soft["limits"] = json!([
            { "name": "a", "policy": "fixed 1/1s" },
            { "name": "b", "policy": "fixed 2/1s", "shadow": true, "exceed": "soft" },
        ]);
        assert_eq!(setup(shadow_and_soft).unwrap_err().path, "limits[1].exceed");
        let mut twice = minimal();
        twice["limits"] = json!([
            { "name": "a", "policy": "fixed 1/1s" },
            { "name": "a", "policy": "fixed 2/1s" },
        ]);
        let e = setup(twice).unwrap_err();
        assert_eq!(
            (e.path.as_str(), e.message.contains("twice")),
            ("limits[1].name", true)
        );
        let e = Setup::from_json("[1]").unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidOption);
    }
}
