//! What the Worker settles after the response (docs/design.md §4), decided natively against the
//! `MemoryStore`: the estimate reserved before forwarding, the real cost read from the response
//! and committed once, concurrency leases released, request ids carried by idempotent limits, and
//! the `qu` units in `RateLimit-Policy`. The glue that sends these commits in `waitUntil` is
//! exercised end to end in `tests/e2e_settle.rs`.

#![cfg(not(target_arch = "wasm32"))]

use edgelimit::algorithm::Charge;
use edgelimit::http::HeaderFields;
use edgelimit::MemoryStore;
use edgelimit_engine::{Config, OwnedRequest, RequestView};

const T: u64 = 1_700_000_000_000;

fn config() -> Config {
    Config::from_json(
        r#"{
          "rules": [
            { "name": "llm", "path_prefix": "/v1/",
              "limits": [
                { "name": "tokens", "policy": "fixed 10000/1h", "identifier": "ip",
                  "cost": { "reserve": 1000, "from": "response-header:X-Tokens-Used" },
                  "idempotent": true },
                { "name": "inflight", "policy": "concurrency 2 timeout 30s", "identifier": "ip" }
              ] }
          ]
        }"#,
    )
    .expect("valid config")
}

fn request(ray: Option<&str>) -> OwnedRequest {
    let req = OwnedRequest::get("api.example.com", "/v1/chat")
        .with_header("cf-connecting-ip", "198.51.100.4");
    match ray {
        Some(ray) => req.with_header("cf-ray", ray),
        None => req,
    }
}

fn header<'a>(headers: &'a HeaderFields, name: &str) -> Option<&'a str> {
    headers.get(name)
}

fn tokens_used(value: &'static str) -> impl Fn(&str) -> Option<String> {
    move |name| (name == "x-tokens-used").then(|| value.to_string())
}

#[test]
fn the_estimate_is_reserved_then_the_real_cost_committed_once_and_the_lease_released() {
    let config = config();
    let store = MemoryStore::new();
    let req = request(Some("8f2a-AMS"));
    let plan = config.plan(&req);
    // Only the idempotent limit carries the request id.
    let items = plan.checks()[0].items();
    assert_eq!(items[0].cost, 1000);
    assert_eq!(
        items[0].request_id.as_ref().map(|i| i.as_bytes()),
        Some(&b"8f2a-AMS"[..])
    );
    assert_eq!(items[1].request_id, None);

    let verdicts = store.direct().check(plan.checks(), T);
    let outcome = plan.rule(&verdicts);
    assert!(outcome.allowed());
    let response = plan.response(&verdicts, &outcome, req.path());
    let policy = header(&response.headers, "RateLimit-Policy").expect("RateLimit-Policy");
    assert!(
        policy.contains("\"tokens\";q=10000;w=3600;qu=\"tokens\""),
        "{policy}"
    );
    assert!(
        policy.contains("\"inflight\";q=2;qu=\"concurrent-requests\""),
        "{policy}"
    );
    let limits = header(&response.headers, "RateLimit").unwrap();
    assert!(limits.contains("\"tokens\";r=9000"), "{limits}");

    let settlement = plan
        .settlement(&verdicts, "unused", tokens_used("4000"))
        .expect("something to settle");
    let commits = settlement.commits();
    assert_eq!(commits.len(), 1);
    let items = commits[0].items();
    // 4,000 used of 1,000 reserved: 3,000 more, charged as a settlement (never denied).
    assert_eq!((items[0].cost, items[0].charge), (3000, Charge::Settle));
    assert_eq!(
        items[1].charge,
        Charge::Release {
            lease_ms: T + 30_000
        }
    );
    assert!(items
        .iter()
        .all(|i| i.request_id.as_ref().map(|i| i.as_bytes()) == Some(&b"8f2a-AMS/commit"[..])));

    let settled = store.direct().check(commits, T + 50).remove(0);
    assert_eq!(settled.decisions[0].remaining, 6000);
    assert_eq!(settled.decisions[1].remaining, 2);
    // The same commit again (a duplicated waitUntil, a retried pipeline) is charged once.
    assert_eq!(store.direct().check(commits, T + 60).remove(0), settled);
    let next = config.plan(&request(Some("9c31-AMS")));
    let verdict = store.direct().check(next.checks(), T + 70).remove(0);
    assert_eq!(verdict.decisions[0].remaining, 5000);
    assert_eq!(verdict.decisions[1].remaining, 1);
}

#[test]
fn without_a_stated_cost_the_estimate_stands_and_the_lease_is_still_released() {
    let config = config();
    let store = MemoryStore::new();
    let plan = config.plan(&request(None));
    let verdicts = store.direct().check(plan.checks(), T);
    for garbled in [None, Some("lots")] {
        let settlement = plan
            .settlement(&verdicts, "edge-1", |name| {
                garbled
                    .filter(|_| name == "x-tokens-used")
                    .map(str::to_string)
            })
            .unwrap();
        let commits = settlement.commits();
        let items = commits[0].items();
        assert_eq!(items.len(), 1, "only the release");
        assert!(matches!(items[0].charge, Charge::Release { .. }));
        // No cf-ray: the reservation is named by the fallback id.
        assert_eq!(
            items[0].request_id.as_ref().map(|i| i.as_bytes()),
            Some(&b"edge-1/commit"[..])
        );
    }
    // A response that used exactly the estimate settles nothing but the lease.
    let settlement = plan
        .settlement(&verdicts, "edge-1", tokens_used("1000"))
        .unwrap();
    assert_eq!(settlement.commits()[0].items().len(), 1);
}

#[test]
fn a_denied_request_reserves_nothing_and_a_released_lease_admits_again() {
    let config = config();
    let store = MemoryStore::new();
    let first = config.plan(&request(Some("r1")));
    let v1 = store.direct().check(first.checks(), T);
    let second = config.plan(&request(Some("r2")));
    store.direct().check(second.checks(), T + 1);
    let third = config.plan(&request(Some("r3")));
    let denied = store.direct().check(third.checks(), T + 2);
    let outcome = third.rule(&denied);
    assert_eq!(outcome.status, 429);
    assert!(third
        .settlement(&denied, "x", tokens_used("1000"))
        .is_none());
    // The first response comes back: its lease is released, so the third is admitted on retry.
    let settlement = first.settlement(&v1, "x", tokens_used("1000")).unwrap();
    store.direct().check(settlement.commits(), T + 3);
    let again = store.direct().check(third.checks(), T + 4);
    assert!(again[0].allowed);
}
