use edgelimit::http::FieldSets;
use edgelimit::limiter::{DEFAULT_DENIAL_CACHE, DEFAULT_DENIAL_CACHE_MS};
use edgelimit::net::AddressGrouping;
use edgelimit::{FailMode, Limit};
use serde_json::json;

use super::*;
use crate::identify::IdentifierSource;
use crate::rules::{Missing, Scope, Settle};

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
    assert_eq!((limit.cost, limit.missing), (1, Missing::Address));
    assert_eq!(limit.limit.fail_mode, FailMode::Open);
    assert_eq!(limit.source, IdentifierSource::ClientIp(Default::default()));
    // What a client sends chooses nothing: no request id header is trusted, a field sent twice
    // is refused, and preflights are requests like any other.
    assert_eq!(c.request_id_header, None);
    assert_eq!(c.duplicates, crate::reading::Duplicates::Refuse);
    assert!(c.rules.iter().all(|r| !r.preflight));
}

#[test]
fn preflights_get_a_rule_of_their_own_only_when_asked() {
    let mut v = minimal();
    v["preflight_limit"] = json!("gcra 10/1s burst 20");
    let c = Config::from_value(v).unwrap();
    let preflight = c.rules.last().unwrap();
    assert!(preflight.preflight);
    assert_eq!(preflight.name, crate::rules::PREFLIGHT_RULE);
    assert_eq!(
        preflight.limits[0].source,
        IdentifierSource::ClientIp(Default::default())
    );
    let mut v = minimal();
    v["preflight_limit"] = json!("often");
    assert_eq!(error_of(v).field, "preflight_limit");
    let mut v = minimal();
    v["rules"][0]["name"] = json!(crate::rules::PREFLIGHT_RULE);
    v["preflight_limit"] = json!("fixed 1/1s");
    assert_eq!(error_of(v).field, "preflight_limit");
    let mut v = minimal();
    v["duplicates"] = json!("both");
    assert_eq!(error_of(v).field, "duplicates");
}

#[test]
fn header_sets_are_read_by_name_and_an_unknown_one_is_refused_where_written() {
    assert_eq!(
        Config::from_value(minimal()).unwrap().headers,
        FieldSets::ALL
    );
    let mut v = minimal();
    v["headers"] = json!(["ratelimit"]);
    let sets = Config::from_value(v).unwrap().headers;
    assert!(sets.ratelimit && !sets.x_ratelimit);
    let mut v = minimal();
    v["headers"] = json!([]);
    assert_eq!(Config::from_value(v).unwrap().headers, FieldSets::NONE);
    let mut v = minimal();
    v["headers"] = json!(["ratelimit", "x-rate-limit"]);
    let e = error_of(v);
    assert_eq!(e.field, "headers[1]", "{e}");
    assert!(
        e.problem.contains("`x-rate-limit`") && e.problem.contains("`x-ratelimit`"),
        "{e}"
    );
    let mut v = minimal();
    v["headers"] = json!("ratelimit");
    assert!(
        error_of(v).field.contains("headers"),
        "a list, not a string"
    );
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
        ("metrics_public", json!(true), "metrics_public"),
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
    v["request_id_trusted"] = json!(true);
    v["rules"][0]["limits"] = json!([
        {"name": "llm", "policy": "fixed 100000/1h", "identifier": "ip",
         "cost": {"reserve": 1000, "from": "response-header:X-Tokens-Used"}, "idempotent": true},
        {"name": "egress", "policy": "fixed 1000000/1h", "identifier": "ip",
         "cost": {"reserve": 5000, "from": "response-bytes", "unit": "bytes"}},
        {"name": "inflight", "policy": "concurrency 2 timeout 30s", "identifier": "ip"}
    ]);
    let c = Config::from_value(v).unwrap();
    assert_eq!(c.request_id_header.as_deref(), Some("x-request-id"));
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
    // No header is read as the request id unless named and trusted: a client could send one.
    assert_eq!(
        Config::from_value(minimal()).unwrap().request_id_header,
        None
    );
    let mut v = minimal();
    v["request_id_header"] = json!("cf-ray");
    let untrusted = error_of(v);
    assert_eq!(untrusted.field, "request_id_header");
    assert!(untrusted.problem.contains("request_id_trusted = true"));
    let mut v = minimal();
    v["request_id_trusted"] = json!(true);
    assert_eq!(error_of(v).field, "request_id_trusted");
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
    v["request_id_trusted"] = json!(true);
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

/// `minimal()` with these keys set on its one limit.
fn limit_with(keys: serde_json::Value) -> serde_json::Value {
    let mut v = minimal();
    for (key, value) in keys.as_object().unwrap() {
        v["rules"][0]["limits"][0][key] = value.clone();
    }
    v
}

const AT: &str = "rules[0] \"api\" → limits[0] \"per-ip\"";

#[test]
fn exceed_block_for_enforce_and_count_status_are_read() {
    use crate::rules::{Enforce, Exceed};
    let c = Config::from_value(minimal()).unwrap();
    let plain = &c.rules[0].limits[0];
    assert_eq!(
        (plain.exceed, plain.enforce, plain.count_status.is_none()),
        (Exceed::Deny, None, true)
    );
    assert_eq!((plain.limit.block_ms, plain.limit.max_delay_ms), (0, 0));
    assert!(!c.tells_origin());

    let c = Config::from_value(limit_with(json!({"exceed": "soft"}))).unwrap();
    assert_eq!(c.rules[0].limits[0].exceed, Exceed::Soft);
    assert!(c.tells_origin());

    let c = Config::from_value(limit_with(
        json!({"policy": "gcra 100/1m", "exceed": "delay 500ms"}),
    ))
    .unwrap();
    let l = &c.rules[0].limits[0];
    assert_eq!(l.exceed, Exceed::Delay { max_ms: 500 });
    assert_eq!(l.limit.max_delay_ms, 500);

    let c = Config::from_value(limit_with(json!({"exceed": "deny", "block_for": "10m"}))).unwrap();
    assert_eq!(c.rules[0].limits[0].limit.block_ms, 600_000);

    let c = Config::from_value(limit_with(json!({"enforce": "0.5%"}))).unwrap();
    assert_eq!(
        c.rules[0].limits[0].enforce,
        Some(Enforce { per_million: 5_000 })
    );
    let c = Config::from_value(limit_with(json!({"enforce": "100%"}))).unwrap();
    assert_eq!(c.rules[0].limits[0].enforce.unwrap().to_string(), "100%");

    for written in [
        json!("401"),
        json!(401),
        json!(["401", "5xx"]),
        json!("401, 500-503"),
    ] {
        let c = Config::from_value(limit_with(json!({"count_status": written}))).unwrap();
        let statuses = c.rules[0].limits[0].count_status.as_ref().unwrap();
        assert!(statuses.contains(401), "{written}");
        assert!(
            !statuses.contains(200) && !statuses.contains(402),
            "{written}"
        );
    }
    let c = Config::from_value(limit_with(json!({"count_status": "2xx"}))).unwrap();
    let statuses = c.rules[0].limits[0].count_status.as_ref().unwrap();
    assert!(statuses.contains(200) && statuses.contains(299) && !statuses.contains(300));
}

#[test]
fn bad_values_of_the_exceeding_keys_name_the_field() {
    for (keys, field, says) in [
        (
            json!({"exceed": "refuse"}),
            "exceed",
            "`deny`, `soft` or `delay",
        ),
        (
            json!({"exceed": "delay"}),
            "exceed",
            "names no longest wait",
        ),
        (
            json!({"policy": "gcra 100/1m", "exceed": "delay 0ms"}),
            "exceed",
            "at most 30s",
        ),
        (
            json!({"policy": "gcra 100/1m", "exceed": "delay 31s"}),
            "exceed",
            "at most 30s",
        ),
        (json!({"exceed": "delay soon"}), "exceed", "window"),
        (json!({"block_for": "forever"}), "block_for", "forever"),
        (json!({"block_for": "2d"}), "block_for", "at most 1 day"),
        (json!({"enforce": "10"}), "enforce", "percentage"),
        (json!({"enforce": "0%"}), "enforce", "percentage"),
        (json!({"enforce": "100.5%"}), "enforce", "percentage"),
        (json!({"enforce": "0.00001%"}), "enforce", "percentage"),
        (json!({"count_status": "4xy"}), "count_status", "`4xy`"),
        (json!({"count_status": "600"}), "count_status", "100–599"),
        (
            json!({"count_status": "299-200"}),
            "count_status",
            "start is above",
        ),
        (
            json!({"count_status": []}),
            "count_status",
            "names no status",
        ),
    ] {
        let e = error_of(limit_with(keys.clone()));
        assert_eq!(e.field, format!("{AT} → {field}"), "{keys}: {e}");
        assert!(e.problem.contains(says), "{keys}: {e}");
    }
}

#[test]
fn options_combined_badly_are_refused_naming_the_field() {
    for (keys, field, says) in [
        (
            json!({"exceed": "soft", "block_for": "1m"}),
            "block_for",
            "never refuses",
        ),
        (
            json!({"exceed": "soft", "enforce": "10%"}),
            "enforce",
            "enforced for nobody",
        ),
        (
            json!({"policy": "concurrency 5", "exceed": "delay 1s"}),
            "exceed",
            "delay needs a gcra policy (the shaping algorithm): a concurrency limit",
        ),
        (
            json!({"exceed": "delay 1s"}),
            "exceed",
            "delay needs a gcra policy (the shaping algorithm): a window's",
        ),
        (
            json!({"policy": "sliding-log 10/1s", "exceed": "delay 1s"}),
            "exceed",
            "a window's future quota",
        ),
        (
            json!({"policy": "token-bucket 10/1s burst 5", "exceed": "delay 1s"}),
            "exceed",
            "`gcra L/W burst B` decides exactly as",
        ),
        (
            json!({"policy": "concurrency 5", "count_status": "401"}),
            "count_status",
            "concurrency",
        ),
    ] {
        let e = error_of(limit_with(keys.clone()));
        assert_eq!(e.field, format!("{AT} → {field}"), "{keys}: {e}");
        assert!(e.problem.contains(says), "{keys}: {e}");
    }
    // A shadow rule enforces nothing: nothing to soften, delay or stage.
    for (keys, field) in [
        (json!({"exceed": "soft"}), "exceed"),
        (json!({"exceed": "delay 1s"}), "exceed"),
        (json!({"enforce": "5%"}), "enforce"),
    ] {
        let mut v = limit_with(keys.clone());
        v["rules"][0]["shadow"] = json!(true);
        let e = error_of(v);
        assert_eq!(e.field, format!("{AT} → {field}"), "{keys}: {e}");
        assert!(e.problem.contains("`shadow`"), "{keys}: {e}");
    }
    // Limits sharing a name share their block and their wait.
    let mut v = minimal();
    v["rules"][0]["limits"][0]["block_for"] = json!("1m");
    v["rules"].as_array_mut().unwrap().push(json!({
        "name": "other", "limits": [{ "name": "per-ip", "policy": "fixed 100/1m", "identifier": "ip" }]
    }));
    let e = error_of(v);
    assert!(e.field.starts_with("rules[1] \"other\""), "{e}");
}

#[test]
fn blocks_and_delays_are_refused_on_global_limits() {
    let global = |keys: serde_json::Value| {
        let mut v = limit_with(keys);
        v["global"] = json!({
            "home": {"url_var": "HOME_URL", "token_var": "HOME_TOKEN"},
            "regions": [{"name": "eu", "url_var": "EU_URL", "token_var": "EU_TOKEN"}]
        });
        v
    };
    // The `global` section as the other tests write it must itself be accepted.
    Config::from_value(global(json!({}))).expect("a valid global configuration");
    for (keys, field) in [
        (json!({"block_for": "1m"}), "block_for"),
        (
            json!({"policy": "gcra 100/1m", "exceed": "delay 1s"}),
            "exceed",
        ),
    ] {
        let e = error_of(global(keys.clone()));
        assert_eq!(e.field, format!("{AT} → {field}"), "{keys}: {e}");
        assert!(e.problem.contains("not supported on global limits"), "{e}");
        // Decided in each region alone, the limit may block and delay.
        let mut keys = keys;
        keys["scope"] = json!("region");
        Config::from_value(global(keys)).expect("a regional limit blocks and delays");
    }
    // `soft`, staged enforcement and counting by status are decided as on any limit.
    Config::from_value(global(json!({"exceed": "soft", "count_status": "401"}))).unwrap();
}

#[test]
fn a_store_refusing_the_limiter_fails_closed_unless_the_limit_says_otherwise() {
    let limit = |v: serde_json::Value| {
        let c = Config::from_value(v).unwrap();
        let limit = c.rules[0].limits[0].limit.clone();
        (limit.fail_mode, limit.fail_misconfigured)
    };
    assert_eq!(limit(minimal()), (FailMode::Open, FailMode::Closed));
    for (given, mode) in [
        ("open", FailMode::Open),
        ("closed", FailMode::Closed),
        ("fallback 10%", FailMode::Fallback { per_mille: 100 }),
    ] {
        let mut v = minimal();
        v["rules"][0]["limits"][0]["fail_misconfigured"] = json!(given);
        assert_eq!(limit(v), (FailMode::Open, mode), "{given}");
    }
    let mut v = minimal();
    v["rules"][0]["limits"][0]["fail_misconfigured"] = json!("never");
    let e = error_of(v);
    assert_eq!(
        e.field,
        "rules[0] \"api\" → limits[0] \"per-ip\" → fail_misconfigured"
    );
    assert!(e.problem.contains("`never`"), "{e}");
    // Limits sharing a name share state, and so their fail modes.
    let mut v = minimal();
    v["rules"].as_array_mut().unwrap().push(json!({"name": "other", "limits": [
        {"name": "per-ip", "policy": "fixed 100/1m", "identifier": "ip", "fail_misconfigured": "open"}
    ]}));
    let e = error_of(v);
    assert!(e.problem.contains("fail_misconfigured"), "{e}");
}

#[test]
fn the_store_section_names_its_redis_through_the_hosts_lookup() {
    use edgelimit::store::{StoreSpec, REST_TOKEN_VAR, REST_URL_VAR};
    let vars = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    };
    let plain = Config::from_value(minimal()).unwrap();
    assert_eq!(plain.store_spec(vars(&[])), Ok(None), "no Redis named");
    assert_eq!(
        plain.store_spec(vars(&[(REST_URL_VAR, "http://h"), (REST_TOKEN_VAR, "t")])),
        Ok(Some(StoreSpec::Upstash {
            url: "http://h".into(),
            token: Some("t".into())
        }))
    );
    let e = plain
        .store_spec(vars(&[(REST_URL_VAR, "http://h")]))
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("UPSTASH_REDIS_REST_TOKEN: is not set"),
        "{e}"
    );

    let mut v = minimal();
    v["shards"] = json!([
        {"name": "eu", "url_var": "EU_URL", "token_var": "EU_TOKEN"},
        {"name": "us", "url_var": "US_URL", "token_var": "US_TOKEN"}
    ]);
    let sharded = Config::from_value(v).unwrap();
    // The shards, never the single store, even when its URL is set too.
    let all = vars(&[
        (REST_URL_VAR, "http://one"),
        ("EU_URL", "http://eu"),
        ("EU_TOKEN", "e"),
        ("US_URL", "http://us"),
        ("US_TOKEN", "u"),
    ]);
    let spec = sharded.store_spec(all).unwrap().unwrap();
    assert_eq!(
        spec.to_string(),
        "shards eu upstash+http://eu, us upstash+http://us"
    );
    let e = sharded
        .store_spec(vars(&[
            ("EU_URL", "http://eu"),
            ("EU_TOKEN", "e"),
            ("US_URL", "u"),
        ]))
        .unwrap_err();
    assert_eq!(e.to_string(), "US_TOKEN: is not set: shard `us` names it");
}

#[test]
fn a_global_section_names_the_home_and_each_regions_endpoint() {
    let mut v = minimal();
    v["global"] = json!({
        "home": {"url_var": "HOME_URL", "token_var": "HOME_TOKEN"},
        "regions": [{"name": "eu", "url_var": "EU_URL", "token_var": "EU_TOKEN"}]
    });
    let c = Config::from_value(v).unwrap();
    let lookup = |name: &str| (name != "EU_TOKEN").then(|| format!("http://{name}"));
    let e = c.global_endpoints(lookup).unwrap_err().to_string();
    assert_eq!(e, "EU_TOKEN: is not set: global.regions[0] \"eu\" names it");
    let (home, regions) = c
        .global_endpoints(|name: &str| Some(format!("http://{name}")))
        .unwrap()
        .unwrap();
    assert_eq!(
        (home.url.as_str(), home.token.as_str()),
        ("http://HOME_URL", "http://HOME_TOKEN")
    );
    assert_eq!(regions.len(), 1);
    assert_eq!(
        (regions[0].name.as_str(), regions[0].url.as_str()),
        ("eu", "http://EU_URL")
    );
    let plain = Config::from_value(minimal()).unwrap();
    assert!(plain.global_endpoints(|_: &str| None).unwrap().is_none());
}
