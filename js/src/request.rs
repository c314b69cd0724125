//! `limit(identifiers, options)`: one call's arguments (JSON from the wrapper) into the checks the
//! limiter decides — the enforced limits as one all-or-nothing check and those decided in shadow
//! (shadow limits, `soft` ones, and staged ones for the identifiers their hash leaves out) as a
//! second, both in one store round trip, as the Worker does (docs/design.md §4).

use std::collections::BTreeMap;

use edgelimit::script::MAX_SCRIPT_COST;
use edgelimit::{Algorithm, Check, CheckItem};
use serde::Deserialize;
use serde_json::Value as Json;

use crate::error::{Error, ErrorCode};
use crate::options::Setup;

/// What one call decides: the checks, and where each configured limit's decision is found.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitCall {
    /// The enforced check first (empty when every limit is decided in shadow this call), then
    /// the shadow check when any limit is decided in shadow.
    pub checks: Vec<Check>,
    /// Per configured limit, in order: whether it is decided in shadow this call
    /// ([`crate::options::ConfiguredLimit::in_shadow`]).
    pub shadow: Vec<bool>,
    /// The request path named in a denial's problem body (`instance`), if given.
    pub instance: Option<String>,
    /// The call's own `requestId`, if given: the id its settlement commits under.
    pub request_id: Option<String>,
    /// Whether the call may be settled or released after its work (`settle: true`, or a
    /// concurrency limit among the limits): only then does it keep a ticket, which costs every
    /// call that keeps one a little CPU.
    pub settles: bool,
}

/// The options of one call.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawCallOptions {
    cost: Option<Json>,
    request_id: Option<Json>,
    instance: Option<Json>,
    settle: Option<Json>,
}

impl LimitCall {
    /// The checks for `identifiers` (JSON: one string for every limit, or an object from limit
    /// name to identifier) and `options` (JSON: `{ cost, requestId, instance }`, any omitted).
    pub fn new(setup: &Setup, identifiers: &str, options: &str) -> Result<LimitCall, Error> {
        let identifiers: Json = serde_json::from_str(identifiers).map_err(|e| {
            Error::new(
                ErrorCode::InvalidIdentifier,
                "identifiers",
                format!("not JSON: {e}"),
            )
        })?;
        let options: RawCallOptions = if options.trim().is_empty() {
            RawCallOptions::default()
        } else {
            serde_json::from_str(options)
                .map_err(|e| Error::new(ErrorCode::InvalidArgument, "options", e.to_string()))?
        };
        let ids = identifiers_of(setup, &identifiers)?;
        let costs = costs_of(setup, options.cost.as_ref())?;
        let request_id = string_option(options.request_id, "options.requestId")?;
        let instance = string_option(options.instance, "options.instance")?;
        let settle = match options.settle {
            None | Some(Json::Null) | Some(Json::Bool(false)) => false,
            Some(Json::Bool(true)) => true,
            Some(other) => {
                return Err(Error::new(
                    ErrorCode::InvalidArgument,
                    "options.settle",
                    format!("must be a boolean, got {other}"),
                ))
            }
        };
        // A concurrency slot is always given back (`release`); a cost only when asked.
        let settles = settle
            || setup
                .limits
                .iter()
                .any(|l| l.limit.policy.algorithm() == Algorithm::Concurrency);

        let mut enforced = Check::new();
        let mut shadow = Check::new();
        let mut in_shadow = Vec::with_capacity(setup.limits.len());
        for (i, configured) in setup.limits.iter().enumerate() {
            let mut item = CheckItem::new(configured.limit.clone(), ids[i], costs[i]);
            if let Some(id) = &request_id {
                item = item.with_request_id(id.as_str());
            }
            let here = configured.in_shadow(ids[i]);
            in_shadow.push(here);
            if here {
                shadow.add_item(item);
            } else {
                enforced.add_item(item);
            }
        }
        let mut checks = vec![enforced];
        if !shadow.items().is_empty() {
            checks.push(shadow);
        }
        Ok(LimitCall {
            checks,
            shadow: in_shadow,
            instance,
            request_id,
            settles,
        })
    }
}

/// One identifier per configured limit, in their order.
fn identifiers_of<'j>(setup: &Setup, identifiers: &'j Json) -> Result<Vec<&'j str>, Error> {
    let given = match identifiers {
        Json::String(one) => {
            let path = "identifier";
            if one.is_empty() {
                return Err(Error::new(ErrorCode::MissingIdentifier, path, "is empty"));
            }
            return Ok(vec![one.as_str(); setup.limits.len()]);
        }
        Json::Object(map) => map,
        other => {
            return Err(Error::new(
                ErrorCode::InvalidIdentifier,
                "identifiers",
                format!(
                    "must be a string (for every limit) or an object from limit name to identifier, got {}",
                    kind(other)
                ),
            ))
        }
    };
    if let Some(unknown) = given.keys().find(|name| setup.limit(name).is_none()) {
        return Err(Error::new(
            ErrorCode::UnknownLimit,
            format!("identifiers[{unknown:?}]"),
            format!(
                "no limit is named `{unknown}`; the limits are {}",
                setup.names()
            ),
        ));
    }
    setup
        .limits
        .iter()
        .map(|configured| {
            let name = &*configured.limit.name;
            let path = || format!("identifiers[{name:?}]");
            match given.get(name) {
                None | Some(Json::Null) => Err(Error::new(
                    ErrorCode::MissingIdentifier,
                    path(),
                    format!("limit `{name}` needs an identifier (whose quota to count)"),
                )),
                Some(Json::String(id)) if id.is_empty() => Err(Error::new(
                    ErrorCode::MissingIdentifier,
                    path(),
                    format!("limit `{name}` got an empty identifier"),
                )),
                Some(Json::String(id)) => Ok(id.as_str()),
                Some(other) => Err(Error::new(
                    ErrorCode::InvalidIdentifier,
                    path(),
                    format!("must be a string, got {}", kind(other)),
                )),
            }
        })
        .collect()
}

/// One cost per configured limit: the same for all (a number, default 1), or per limit name
/// (an object; limits it leaves out cost 1).
fn costs_of(setup: &Setup, cost: Option<&Json>) -> Result<Vec<i64>, Error> {
    let n = setup.limits.len();
    match cost {
        None | Some(Json::Null) => Ok(vec![1; n]),
        Some(Json::Object(map)) => {
            if let Some(unknown) = map.keys().find(|name| setup.limit(name).is_none()) {
                return Err(Error::new(
                    ErrorCode::InvalidCost,
                    format!("options.cost[{unknown:?}]"),
                    format!(
                        "no limit is named `{unknown}`; the limits are {}",
                        setup.names()
                    ),
                ));
            }
            let by_name: BTreeMap<&str, &Json> = map.iter().map(|(k, v)| (k.as_str(), v)).collect();
            setup
                .limits
                .iter()
                .map(|c| {
                    let name = &*c.limit.name;
                    by_name.get(name).map_or(Ok(1), |v| {
                        whole_cost(v, || format!("options.cost[{name:?}]"))
                    })
                })
                .collect()
        }
        Some(one) => Ok(vec![whole_cost(one, || "options.cost".to_string())?; n]),
    }
}

/// A cost: a whole number within the scripts' exact range (±2^52).
/// `path` names it in the error, made only when there is one.
fn whole_cost(value: &Json, path: impl FnOnce() -> String) -> Result<i64, Error> {
    value
        .as_i64()
        .filter(|c| c.abs() <= MAX_SCRIPT_COST)
        .ok_or_else(|| {
            Error::new(
                ErrorCode::InvalidCost,
                path(),
                format!("must be a whole number within ±2^52, got {value}"),
            )
        })
}

fn string_option(value: Option<Json>, path: &str) -> Result<Option<String>, Error> {
    match value {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(s)) if !s.is_empty() => Ok(Some(s)),
        Some(other) => Err(Error::new(
            ErrorCode::InvalidArgument,
            path,
            format!("must be a non-empty string, got {other}"),
        )),
    }
}

fn kind(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn setup() -> Setup {
        Setup::from_json(
            &json!({
                "url": "http://127.0.0.1:1", "token": "t",
                "limits": [
                    { "name": "per-user", "policy": "gcra 10/1s burst 20" },
                    { "name": "per-team", "policy": "sliding-counter 1000/1h" },
                    { "name": "trial", "policy": "fixed 5/1m", "shadow": true },
                ],
            })
            .to_string(),
        )
        .unwrap()
    }

    fn call(ids: serde_json::Value, options: serde_json::Value) -> Result<LimitCall, Error> {
        LimitCall::new(&setup(), &ids.to_string(), &options.to_string())
    }

    fn summary(check: &Check) -> Vec<(String, String, i64)> {
        check
            .items()
            .iter()
            .map(|i| {
                (
                    i.limit.name.to_string(),
                    String::from_utf8(i.identifier.as_bytes().to_vec()).unwrap(),
                    i.cost,
                )
            })
            .collect()
    }

    #[test]
    fn enforced_limits_are_one_check_and_shadow_limits_another() {
        let c = call(
            json!({ "per-user": "u1", "per-team": "t1", "trial": "u1" }),
            json!({ "cost": { "per-team": 3 }, "instance": "/x" }),
        )
        .unwrap();
        assert_eq!(c.checks.len(), 2);
        assert_eq!(
            summary(&c.checks[0]),
            [
                ("per-user".into(), "u1".into(), 1),
                ("per-team".into(), "t1".into(), 3)
            ]
        );
        assert_eq!(summary(&c.checks[1]), [("trial".into(), "u1".into(), 1)]);
        assert_eq!(c.instance.as_deref(), Some("/x"));
        assert!(c.checks[0].items().iter().all(|i| i.request_id.is_none()));
    }

    #[test]
    fn one_string_identifies_every_limit_and_one_cost_charges_every_limit() {
        let c = call(json!("k"), json!({ "cost": 4, "requestId": "r-1" })).unwrap();
        let all: Vec<_> = c.checks.iter().flat_map(summary).collect();
        assert_eq!(all.len(), 3);
        assert!(all.iter().all(|(_, id, cost)| id == "k" && *cost == 4));
        assert!(c.checks[0].is_idempotent());
        let plain = LimitCall::new(&setup(), "\"k\"", "").unwrap();
        assert!(plain.checks[0].items().iter().all(|i| i.cost == 1));
    }

    #[test]
    fn bad_calls_say_what_and_where() {
        let cases = [
            (
                json!({ "per-user": "u" }),
                json!({}),
                ErrorCode::MissingIdentifier,
                "identifiers[\"per-team\"]",
            ),
            (
                json!({ "per-user": "u", "per-team": "", "trial": "x" }),
                json!({}),
                ErrorCode::MissingIdentifier,
                "identifiers[\"per-team\"]",
            ),
            (
                json!({ "per-user": "u", "per-team": "t", "trial": "x", "per-ip": "1" }),
                json!({}),
                ErrorCode::UnknownLimit,
                "identifiers[\"per-ip\"]",
            ),
            (
                json!({ "per-user": 7, "per-team": "t", "trial": "x" }),
                json!({}),
                ErrorCode::InvalidIdentifier,
                "identifiers[\"per-user\"]",
            ),
            (
                json!(""),
                json!({}),
                ErrorCode::MissingIdentifier,
                "identifier",
            ),
            (
                json!(["u"]),
                json!({}),
                ErrorCode::InvalidIdentifier,
                "identifiers",
            ),
            (
                json!("u"),
                json!({ "cost": 1.5 }),
                ErrorCode::InvalidCost,
                "options.cost",
            ),
            (
                json!("u"),
                json!({ "cost": "2" }),
                ErrorCode::InvalidCost,
                "options.cost",
            ),
            (
                json!("u"),
                json!({ "cost": 9007199254740993_i64 }),
                ErrorCode::InvalidCost,
                "options.cost",
            ),
            (
                json!("u"),
                json!({ "cost": { "nope": 2 } }),
                ErrorCode::InvalidCost,
                "options.cost[\"nope\"]",
            ),
            (
                json!("u"),
                json!({ "cost": { "trial": -1.5 } }),
                ErrorCode::InvalidCost,
                "options.cost[\"trial\"]",
            ),
            (
                json!("u"),
                json!({ "requestId": 5 }),
                ErrorCode::InvalidArgument,
                "options.requestId",
            ),
            (
                json!("u"),
                json!({ "costs": 5 }),
                ErrorCode::InvalidArgument,
                "options",
            ),
            (
                json!("u"),
                json!({ "settle": "yes" }),
                ErrorCode::InvalidArgument,
                "options.settle",
            ),
        ];
        for (ids, options, code, path) in cases {
            let e = call(ids.clone(), options.clone()).unwrap_err();
            assert_eq!(
                (e.code, e.path.as_str()),
                (code, path),
                "{ids} {options}: {e}"
            );
        }
        let e = call(json!({ "x": "u" }), json!({})).unwrap_err();
        assert!(
            e.message.contains("\"per-user\", \"per-team\", \"trial\""),
            "{e}"
        );
    }

    #[test]
    fn a_call_settles_when_asked_or_when_it_holds_a_concurrency_slot() {
        assert!(!call(json!("u"), json!({})).unwrap().settles);
        assert!(call(json!("u"), json!({ "settle": true })).unwrap().settles);
        let slots = Setup::from_json(
            &json!({ "url": "http://127.0.0.1:1", "token": "t",
                     "limits": [{ "name": "slots", "policy": "concurrency 2" }] })
            .to_string(),
        )
        .unwrap();
        assert!(LimitCall::new(&slots, "\"u\"", "").unwrap().settles);
    }

    #[test]
    fn a_negative_cost_refunds_and_zero_looks() {
        let c = call(
            json!("u"),
            json!({ "cost": { "per-user": -2, "per-team": 0 } }),
        )
        .unwrap();
        assert_eq!(summary(&c.checks[0])[0].2, -2);
        assert_eq!(summary(&c.checks[0])[1].2, 0);
        assert_eq!(summary(&c.checks[1])[0].2, 1);
    }
}
