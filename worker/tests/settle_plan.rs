//! What the Worker settles after the response (docs/design.md §4), decided natively against the
//! `MemoryStore` through the request path: the estimate reserved before forwarding, the real
//! cost read from the response and committed once under the request's own id, concurrency leases
//! released, request ids carried by idempotent limits, and the `qu` units in `RateLimit-Policy`.
//! The glue that sends these commits in `waitUntil` is exercised end to end in
//! `tests/e2e_settle.rs`.

#![cfg(not(target_arch = "wasm32"))]

use std::sync::Arc;

use edgelimit::algorithm::Charge;
use edgelimit::http::HeaderFields;
use edgelimit::{Identifier, ManualClock, MemoryStore};
use edgelimit_engine::{Config, Edge, Handled, OwnedRequest};

const T: u64 = 1_700_000_000_000;

fn config() -> Config {
    Config::from_json(
        r#"{
          "request_id_header": "x-request-id",
          "request_id_trusted": true,
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

fn request(id: Option<&str>) -> OwnedRequest {
    let req = OwnedRequest::get("api.example.com", "/v1/chat")
        .with_header("cf-connecting-ip", "198.51.100.4");
    match id {
        Some(id) => req.with_header("x-request-id", id),
        None => req,
    }
}

/// The request path over a memory store, both on one clock standing at `T`.
fn edge() -> Edge<MemoryStore> {
    let clock = Arc::new(ManualClock::at(T));
    Edge::new(config(), MemoryStore::new().with_clock(clock.clone())).with_clock(clock)
}

/// The request id every commit of `handled`'s settlement carries.
fn commit_id(items: &[edgelimit::CheckItem]) -> Identifier {
    let id = items[0].request_id.clone().expect("a commit carries an id");
    assert!(items.iter().all(|i| i.request_id.as_ref() == Some(&id)));
    id
}

fn own(handled: &Handled<'_>) -> Vec<u8> {
    let mut id = handled
        .plan()
        .own_id
        .unwrap()
        .identifier()
        .as_bytes()
        .to_vec();
    id.extend_from_slice(b"/commit");
    id
}

fn header<'a>(headers: &'a HeaderFields, name: &str) -> Option<&'a str> {
    headers.get(name)
}

fn tokens_used(value: &'static str) -> impl Fn(&str) -> Option<String> {
    move |name| (name == "x-tokens-used").then(|| value.to_string())
}

#[tokio::test]
async fn the_estimate_is_reserved_then_the_real_cost_committed_once_and_the_lease_released() {
    let edge = edge();
    let handled = edge.handle(&request(Some("8f2a-AMS")), T).await;
    let plan = handled.plan();
    // Only the idempotent limit carries the request id: the trusted header's.
    let items = plan.checks()[0].items();
    assert_eq!(items[0].cost, 1000);
    assert_eq!(
        items[0].request_id.as_ref().map(|i| i.as_bytes()),
        Some(&b"8f2a-AMS"[..])
    );
    assert_eq!(items[1].request_id, None);

    assert!(handled.outcome().allowed());
    let response = handled.response(&request(Some("8f2a-AMS")));
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

    let settlement = handled
        .settlement(tokens_used("4000"))
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
    // The commit is named by the request's own id, never by the header a client could send.
    assert_eq!(commit_id(items).as_bytes(), &own(&handled)[..]);

    let store = edge.limiter().store();
    let settled = store.direct().check(commits, T + 50).remove(0);
    assert_eq!(settled.decisions[0].remaining, 6000);
    assert_eq!(settled.decisions[1].remaining, 2);
    // The same commit again (a duplicated waitUntil, a retried pipeline) is charged once.
    assert_eq!(store.direct().check(commits, T + 60).remove(0), settled);
    let next = edge.handle(&request(Some("9c31-AMS")), T + 70).await;
    let decisions = &next.checked().verdicts[0].decisions;
    assert_eq!(decisions[0].remaining, 5000);
    assert_eq!(decisions[1].remaining, 1);
}

#[tokio::test]
async fn two_requests_sending_one_id_settle_apart() {
    // The request id names what idempotent limits remember; settlements commit under each
    // request's own id, so a second request repeating an id still pays its real cost.
    let edge = edge();
    let first = edge.handle(&request(Some("same")), T).await;
    let second = edge.handle(&request(Some("same")), T + 1).await;
    let commit = |handled: &Handled<'_>| handled.settlement(tokens_used("5000")).unwrap();
    let (a, b) = (commit(&first), commit(&second));
    assert_ne!(
        commit_id(a.commits()[0].items()),
        commit_id(b.commits()[0].items())
    );
    let store = edge.limiter().store();
    store.direct().check(a.commits(), T + 10);
    let after = store.direct().check(b.commits(), T + 11).remove(0);
    // 1,000 reserved once (the second request repeated the idempotent limit's id), then 4,000
    // more settled by each commit: 10,000 − 1,000 − 4,000 − 4,000.
    assert_eq!(after.decisions[0].remaining, 1000);
}

#[tokio::test]
async fn without_a_stated_cost_the_estimate_stands_and_the_lease_is_still_released() {
    let edge = edge();
    let handled = edge.handle(&request(None), T).await;
    for garbled in [None, Some("lots")] {
        let settlement = handled
            .settlement(|name| {
                garbled
                    .filter(|_| name == "x-tokens-used")
                    .map(str::to_string)
            })
            .unwrap();
        let commits = settlement.commits();
        let items = commits[0].items();
        assert_eq!(items.len(), 1, "only the release");
        assert!(matches!(items[0].charge, Charge::Release { .. }));
        assert_eq!(commit_id(items).as_bytes(), &own(&handled)[..]);
    }
    // A response that used exactly the estimate settles nothing but the lease.
    let settlement = handled.settlement(tokens_used("1000")).unwrap();
    assert_eq!(settlement.commits()[0].items().len(), 1);
}

#[tokio::test]
async fn a_denied_request_reserves_nothing_and_a_released_lease_admits_again() {
    let edge = edge();
    let first = edge.handle(&request(Some("r1")), T).await;
    let _second = edge.handle(&request(Some("r2")), T + 1).await;
    let third = edge.handle(&request(Some("r3")), T + 2).await;
    assert_eq!(third.outcome().status, 429);
    assert!(third.settlement(tokens_used("1000")).is_none());
    // The first response comes back: its lease is released, so the third is admitted on retry.
    let settlement = first.settlement(tokens_used("1000")).unwrap();
    edge.settle(settlement).await;
    let again = edge.handle(&request(Some("r3")), T + 4).await;
    assert!(again.outcome().allowed());
}
