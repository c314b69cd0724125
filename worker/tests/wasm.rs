//! The request path (`Edge`) compiled to wasm32 and run under node (`wasm-bindgen-test-runner`):
//! the same code the Worker runs, minus the runtime glue.
//! `scripts/test.d/worker.sh` runs these with
//! `cargo test -p edgelimit-worker --target wasm32-unknown-unknown`.

#![cfg(target_arch = "wasm32")]

use std::sync::Arc;

use edgelimit::{ManualClock, MemoryStore};
use edgelimit_engine::{Action, Config, Edge, OwnedRequest, Response};
use wasm_bindgen_test::wasm_bindgen_test;

/// The request path of `config` over a `MemoryStore`, both on `clock`.
fn edge(config: Config, clock: &Arc<ManualClock>) -> Edge<MemoryStore> {
    Edge::new(config, MemoryStore::new().with_clock(clock.clone())).with_clock(clock.clone())
}

/// What the path answers `req` at `now`.
async fn respond(edge: &Edge<MemoryStore>, req: &OwnedRequest, now: u64) -> Response {
    edge.handle(req, now).await.response(req)
}

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

#[wasm_bindgen_test]
async fn a_burst_is_admitted_then_denied_with_headers() {
    let clock = Arc::new(ManualClock::at(0));
    let edge = edge(config(), &clock);
    let req = request("/v1/items", Some("Bearer k1"));
    let mut seen = Vec::new();
    for i in 0..4 {
        let now = 1_700_000_000_000 + i;
        clock.set(now);
        seen.push(respond(&edge, &req, now).await);
    }
    assert!(seen[..3].iter().all(|o| o.status() == 200));
    let denied = &seen[3];
    let Action::Respond { status, body, .. } = &denied.action else {
        panic!("the fourth request of a burst of 3 is denied");
    };
    assert_eq!(*status, 429);
    assert!(body.contains("\"policy\":\"per-ip\""), "{body}");
    // GCRA 2/s: the next slot opens 500 ms later → Retry-After rounds up to 1 s.
    assert_eq!(denied.header("Retry-After"), Some("1"));
    assert_eq!(
        seen[0].header("RateLimit-Policy"),
        Some("\"per-ip\";q=3;w=2, \"daily\";q=100;w=86400")
    );
    // The daily window ends at the next UTC midnight.
    let now: u64 = 1_700_000_000_000;
    let day_left_s = (86_400_000 - now % 86_400_000).div_ceil(1000);
    assert_eq!(
        seen[0].header("RateLimit").map(str::to_string),
        Some(format!("\"per-ip\";r=2;t=1, \"daily\";r=99;t={day_left_s}"))
    );
}

#[wasm_bindgen_test]
async fn unmatched_requests_and_missing_keys() {
    let config = config();
    assert!(config.plan(&request("/v2/items", None)).checks().is_empty());
    let plan = config.plan(&request("/v1/items", None));
    assert!(plan.checks().is_empty());
    let clock = Arc::new(ManualClock::at(0));
    let response = respond(
        &edge(config.clone(), &clock),
        &request("/v1/items", None),
        0,
    )
    .await;
    assert!(matches!(
        response.action,
        Action::Respond { status: 400, .. }
    ));
}

#[wasm_bindgen_test]
async fn the_limiter_caches_denials_under_wasm32() {
    let clock = Arc::new(ManualClock::at(1_700_000_000_000));
    let edge = edge(config(), &clock);
    let req = request("/v1/x", Some("Bearer k2"));
    let mut allowed = 0;
    for _ in 0..6 {
        if edge.handle(&req, 0).await.outcome().allowed() {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 3);
    let metrics = edge.limiter().metrics();
    assert!(metrics.totals().cache_hits >= 2, "{metrics:?}");
}

#[wasm_bindgen_test]
fn configuration_errors_name_the_field_under_wasm32() {
    let e = Config::from_json(r#"{"rules":[{"name":"a","limits":[{"name":"b","policy":"gcra 1/1s burst 0","identifier":"ip"}]}]}"#)
        .unwrap_err();
    assert_eq!(e.field, "rules[0].limits[0].policy");
}

#[wasm_bindgen_test]
async fn deny_lists_answer_403_under_wasm32() {
    let config = Config::from_json(
        r#"{"deny": ["ip 198.51.100.0/24"],
            "rules": [{"name": "api", "limits": [{"name": "per-ip", "policy": "fixed 5/1m", "identifier": "ip"}]}]}"#,
    )
    .expect("valid config");
    let plan = config.plan(&request("/v1/items", None));
    assert!(plan.checks().is_empty(), "a static deny asks no store");
    let clock = Arc::new(ManualClock::at(0));
    let edge = edge(config.clone(), &clock);
    let response = respond(&edge, &request("/v1/items", None), 0).await;
    let Action::Respond { status, body, .. } = &response.action else {
        panic!("denied");
    };
    assert_eq!(*status, 403);
    assert!(body.contains("\"list\":\"deny\""), "{body}");
    let other = OwnedRequest::get("h", "/").with_header("cf-connecting-ip", "203.0.113.1");
    assert_eq!(respond(&edge, &other, 0).await.status(), 200);
}
