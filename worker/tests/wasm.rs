//! The request → limits → headers path compiled to wasm32 and run under node
//! (`wasm-bindgen-test-runner`): the same code the Worker runs, minus the runtime glue.
//! `scripts/test.d/worker.sh` runs these with
//! `cargo test -p edgelimit-worker --target wasm32-unknown-unknown`.

#![cfg(target_arch = "wasm32")]

use edgelimit::{Limiter, MemoryStore, TimeMode};
use edgelimit_worker::{Action, Config, OwnedRequest, RequestView};
use wasm_bindgen_test::wasm_bindgen_test;

fn config() -> Config {
    Config::from_json(
        r#"{
          "rules": [
            { "name": "api", "hosts": ["*.example.com"], "path": "/v1/**",
              "limits": [
                { "name": "per-ip", "policy": "gcra 2/1s burst 3", "identifier": "ip" },
                { "name": "daily", "policy": "fixed 100/day", "identifier": "api-key:header:authorization", "missing": "deny" }
              ] }
          ]
        }"#,
    )
    .expect("valid config")
}

fn request(path: &str, key: Option<&str>) -> OwnedRequest {
    let req =
        OwnedRequest::get("api.example.com", path).with_header("cf-connecting-ip", "198.51.100.4");
    match key {
        Some(key) => req.with_header("authorization", key),
        None => req,
    }
}

fn header<'a>(headers: &'a [(&str, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

#[wasm_bindgen_test]
fn a_burst_is_admitted_then_denied_with_headers() {
    let config = config();
    let store = MemoryStore::new();
    let req = request("/v1/items", Some("Bearer k1"));
    let mut seen = Vec::new();
    for i in 0..4 {
        let plan = config.plan(&req);
        let now = 1_700_000_000_000 + i;
        let outcome = plan.decide(&store.check_now(plan.checks(), now), req.path());
        seen.push(outcome.clone());
    }
    assert!(seen[..3].iter().all(|o| o.allowed()));
    let denied = &seen[3];
    let Action::Respond { status, body, .. } = &denied.action else {
        panic!("the fourth request of a burst of 3 is denied");
    };
    assert_eq!(*status, 429);
    assert!(body.contains("\"policy\":\"per-ip\""), "{body}");
    // GCRA 2/s: the next slot opens 500 ms later → Retry-After rounds up to 1 s.
    assert_eq!(header(&denied.headers, "Retry-After"), Some("1"));
    assert_eq!(
        header(&seen[0].headers, "RateLimit-Policy"),
        Some("\"per-ip\";q=3;w=2, \"daily\";q=100;w=86400")
    );
    // The daily window ends at the next UTC midnight.
    let now: u64 = 1_700_000_000_000;
    let day_left_s = (86_400_000 - now % 86_400_000).div_ceil(1000);
    assert_eq!(
        header(&seen[0].headers, "RateLimit").map(str::to_string),
        Some(format!("\"per-ip\";r=2;t=1, \"daily\";r=99;t={day_left_s}"))
    );
}

#[wasm_bindgen_test]
fn unmatched_requests_and_missing_keys() {
    let config = config();
    assert!(config.plan(&request("/v2/items", None)).checks().is_empty());
    let plan = config.plan(&request("/v1/items", None));
    assert!(plan.checks().is_empty());
    let outcome = plan.decide(&[], "/v1/items");
    assert!(matches!(
        outcome.action,
        Action::Respond { status: 400, .. }
    ));
}

#[wasm_bindgen_test]
async fn the_limiter_caches_denials_under_wasm32() {
    let config = config();
    let limiter = Limiter::new(MemoryStore::new()).with_time_mode(TimeMode::Local);
    let req = request("/v1/x", Some("Bearer k2"));
    let mut allowed = 0;
    for _ in 0..6 {
        let plan = config.plan(&req);
        let checked = limiter.check_all(plan.checks()).await;
        if plan.decide(&checked.verdicts, "/v1/x").allowed() {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 3);
    let metrics = limiter.metrics();
    assert!(metrics.totals().cache_hits >= 2, "{metrics:?}");
}

#[wasm_bindgen_test]
fn configuration_errors_name_the_field_under_wasm32() {
    let e = Config::from_json(r#"{"rules":[{"name":"a","limits":[{"name":"b","policy":"gcra 1/1s burst 0","identifier":"ip"}]}]}"#)
        .unwrap_err();
    assert_eq!(e.field, "rules[0].limits[0].policy");
}

#[wasm_bindgen_test]
fn deny_lists_answer_403_under_wasm32() {
    let config = Config::from_json(
        r#"{"deny": ["ip 198.51.100.0/24"],
            "rules": [{"name": "api", "limits": [{"name": "per-ip", "policy": "fixed 5/1m", "identifier": "ip"}]}]}"#,
    )
    .expect("valid config");
    let plan = config.plan(&request("/v1/items", None));
    assert!(plan.checks().is_empty(), "a static deny asks no store");
    let outcome = plan.decide(&[], "/v1/items");
    let Action::Respond { status, body, .. } = &outcome.action else {
        panic!("denied");
    };
    assert_eq!(*status, 403);
    assert!(body.contains("\"list\":\"deny\""), "{body}");
    let other = OwnedRequest::get("h", "/").with_header("cf-connecting-ip", "203.0.113.1");
    let plan = config.plan(&other);
    let store = MemoryStore::new();
    assert!(plan
        .decide(&store.check_now(plan.checks(), 0), "/")
        .allowed());
}
