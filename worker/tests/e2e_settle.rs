//! End to end, limits that settle after the response (docs/design.md §4): the built Worker under
//! `wrangler dev` in front of an origin that sleeps or states the tokens it used, deciding against
//! a real `redis-server` through the gateway or in its own Durable Objects, all on free loopback
//! ports. Each test runs on both stores (`redis::…`, `durable_objects::…`) but the last, which
//! injects faults into the gateway's `/pipeline` (a resend of an idempotent REST pipeline whose
//! answer was lost is `RestStore`'s own; the objects' client never resends).
//!
//! - concurrency: a third parallel request is refused while two are in flight, and admitted again
//!   once a response has released a lease (long before the lease's timeout);
//! - an aborted request's lease ends at its timeout;
//! - a token quota drains by the tokens the origin says it used, and the headers say so;
//! - the same request id twice: the check and its commit are each charged once;
//! - a `/pipeline` whose answer the gateway drops is retried and charged once for an idempotent
//!   limit (and, for a limit without request ids, is not retried: its lost answer fails closed).
//!
//! Like `tests/e2e.rs` these need the built Worker and wrangler, so they are `#[ignore]`d in a
//! plain `cargo test`; `scripts/test.d/worker.sh` builds the Worker and runs them.

#![cfg(not(target_arch = "wasm32"))]

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use edgelimit_testkit::edge::{keys, remaining, EdgeStore, Stack};
use edgelimit_testkit::http::header;
use edgelimit_testkit::{on_every_store, origin, wait};

/// An origin for settling: `/sleep/<ms>` answers after that long, `/tokens/<n>` answers at once
/// with `X-Tokens-Used: n`; anything else answers at once.
async fn start_settle_origin() -> SocketAddr {
    async fn handle(uri: axum::http::Uri) -> axum::response::Response {
        let mut segments = uri.path().trim_start_matches('/').split('/');
        let (kind, n) = (
            segments.next(),
            segments.next().and_then(|n| n.parse().ok()),
        );
        let mut headers = HeaderMap::new();
        match (kind, n) {
            (Some("sleep"), Some(ms)) => tokio::time::sleep(Duration::from_millis(ms)).await,
            (Some("tokens"), Some(n)) => {
                headers.insert("x-tokens-used", HeaderValue::from(n));
            }
            _ => {}
        }
        (StatusCode::OK, headers, "done").into_response()
    }
    origin::serve(axum::Router::new().fallback(handle)).await
}

on_every_store!(
    a_third_request_in_flight_is_refused_until_a_response_releases_a_lease,
    an_aborted_request_holds_its_lease_until_its_timeout,
    a_token_quota_drains_by_the_tokens_used_and_a_repeat_is_charged_once,
);

/// Polls until `pattern` matches a key (the commit sent in `waitUntil` has landed), up to 10 s.
/// Waits until `count` keys match `pattern` (a commit is remembered under its request's own id,
/// which the test cannot name: it counts them).
async fn wait_for_keys(stack: &Stack, pattern: &str, count: usize) {
    let found = wait::until_async(Duration::from_secs(10), Duration::from_millis(50), || {
        keys(stack, pattern) >= count
    })
    .await;
    assert!(found, "fewer than {count} keys `{pattern}` after 10 s");
}

const INFLIGHT: &str = r#"
time = "server"
timeout_ms = 2000
[[vars.EDGELIMIT_CONFIG.rules]]
name = "api"
path_prefix = "/"
[[vars.EDGELIMIT_CONFIG.rules.limits]]
name = "inflight"
policy = "concurrency 2 timeout 30s"
identifier = "header:x-user"
"#;

async fn a_third_request_in_flight_is_refused_until_a_response_releases_a_lease(store: EdgeStore) {
    let origin = start_settle_origin().await;
    let stack = Stack::start_with_on(store, INFLIGHT, origin, |g| g).await;
    let user = [("x-user", "alice")];
    let slow = |stack: &Stack| {
        let request = stack
            .http
            .get(format!("{}/sleep/2500", stack.worker.url()))
            .header("x-user", "alice");
        tokio::spawn(request.send())
    };
    let (a, b) = (slow(&stack), slow(&stack));
    tokio::time::sleep(Duration::from_millis(800)).await;
    let third = stack.get("/fast", &user).await;
    assert_eq!(third.status(), 429, "two requests are in flight");
    let policy = header(&third, "ratelimit-policy").unwrap();
    assert!(
        policy.contains("\"inflight\";q=2;qu=\"concurrent-requests\""),
        "{policy}"
    );
    assert_eq!(remaining(&third, "inflight"), 0);
    // Another identifier has its own two leases.
    assert_eq!(stack.get("/fast", &[("x-user", "bob")]).await.status(), 200);

    for slow in [a, b] {
        assert_eq!(slow.await.unwrap().expect("answered").status(), 200);
    }
    let answered = Instant::now();
    // Released after the response (in waitUntil): admitted again within seconds, not at the
    // leases' 30 s timeout (5 s: slack for a loaded machine's `waitUntil`, a sixth of it).
    loop {
        let again = stack.get("/fast", &user).await;
        if again.status() == 200 {
            break;
        }
        assert!(
            answered.elapsed() < Duration::from_secs(5),
            "the leases were not released after the responses"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn an_aborted_request_holds_its_lease_until_its_timeout(store: EdgeStore) {
    let origin = start_settle_origin().await;
    let config = INFLIGHT.replace("concurrency 2 timeout 30s", "concurrency 1 timeout 3s");
    let stack = Stack::start_with_on(store, &config, origin, |g| g).await;
    let user = [("x-user", "carol")];
    let started = Instant::now();
    // The client gives up mid-flight; the origin would answer only after the lease's timeout.
    let aborted = stack
        .http
        .get(format!("{}/sleep/20000", stack.worker.url()))
        .header("x-user", "carol")
        .timeout(Duration::from_millis(700))
        .send()
        .await;
    assert!(aborted.is_err(), "the request was aborted");
    let denied = stack.get("/fast", &user).await;
    // The lease was taken before this answer: its end is at most Retry-After from here.
    let seen_held = Instant::now();
    assert_eq!(
        denied.status(),
        429,
        "the aborted request still holds its lease"
    );
    let retry_after: u64 = header(&denied, "retry-after").unwrap().parse().unwrap();
    assert!((1..=3).contains(&retry_after), "Retry-After {retry_after}");
    // Admitted once the lease ends: not before ~3 s after the admission, and not much after.
    // Below, counted from `started` (the admission is later), 500 ms of slack for the store's
    // clock, read in whole milliseconds. Above, counted from when the lease was seen held (the
    // admission is earlier: on a loaded machine it may come seconds after `started`; beside
    // `stress-ng --cpu 2` the lease was still held 6.2 s after `started`), the lease's
    // Retry-After plus 3 s of slack for a loaded machine's round trips, against the 20 s the
    // origin would hold a lease that never timed out.
    let freed_by = Duration::from_secs(retry_after + 3);
    loop {
        let status = stack.get("/fast", &user).await.status();
        let elapsed = started.elapsed();
        if status == 200 {
            assert!(
                elapsed >= Duration::from_millis(2500),
                "freed after {elapsed:?}"
            );
            break;
        }
        assert!(
            seen_held.elapsed() < freed_by,
            "still held {:?} after it was seen held with Retry-After {retry_after} \
             ({elapsed:?} after the aborted request)",
            seen_held.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

const TOKENS: &str = r#"
time = "server"
timeout_ms = 2000
request_id_header = "x-request-id"
request_id_trusted = true
[[vars.EDGELIMIT_CONFIG.rules]]
name = "llm"
path_prefix = "/"
[[vars.EDGELIMIT_CONFIG.rules.limits]]
name = "tokens"
policy = "fixed 10000/1h"
identifier = "header:x-user"
cost = { reserve = 1000, from = "response-header:X-Tokens-Used" }
idempotent = true
"#;

async fn a_token_quota_drains_by_the_tokens_used_and_a_repeat_is_charged_once(store: EdgeStore) {
    let origin = start_settle_origin().await;
    let stack = Stack::start_with_on(store, TOKENS, origin, |g| g).await;
    let first = stack
        .get(
            "/tokens/2500",
            &[("x-user", "dan"), ("x-request-id", "req-1")],
        )
        .await;
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "x-tokens-used").as_deref(), Some("2500"));
    let policy = header(&first, "ratelimit-policy").unwrap();
    assert!(
        policy.contains("\"tokens\";q=10000;w=3600;qu=\"tokens\""),
        "{policy}"
    );
    // The estimate is reserved before forwarding ...
    assert_eq!(remaining(&first, "tokens"), 9000);
    // ... and the 2,500 used committed after the response, under the request's own id.
    wait_for_keys(&stack, "*commit*", 1).await;

    // The same request id again (the proxy's retry, the header trusted): the reservation is
    // answered as the first's, charged nothing. The origin served it again, so what it reports
    // is settled by a commit of the retry's own (an id no client can repeat).
    let repeat = stack
        .get(
            "/tokens/2500",
            &[("x-user", "dan"), ("x-request-id", "req-1")],
        )
        .await;
    assert_eq!(repeat.status(), 200);
    assert_eq!(
        remaining(&repeat, "tokens"),
        9000,
        "the first decision, recalled"
    );
    wait_for_keys(&stack, "*commit*", 2).await;

    // A request using less than its estimate is refunded the difference.
    let second = stack
        .get(
            "/tokens/200",
            &[("x-user", "dan"), ("x-request-id", "req-2")],
        )
        .await;
    assert_eq!(remaining(&second, "tokens"), 10000 - 2500 - 1500 - 1000);
    wait_for_keys(&stack, "*commit*", 3).await;
    let third = stack
        .get("/other", &[("x-user", "dan"), ("x-request-id", "req-3")])
        .await;
    // 2,500, the retry's 2,500 (1,500 past its recalled estimate) and 200 used, 1,000 reserved
    // now: each commit charged once.
    assert_eq!(
        remaining(&third, "tokens"),
        10000 - 2500 - 1500 - 200 - 1000
    );
}

const DROPPED: &str = r#"
time = "server"
timeout_ms = 5000
request_id_header = "x-request-id"
request_id_trusted = true
[[vars.EDGELIMIT_CONFIG.rules]]
name = "retried"
path_prefix = "/retried"
[[vars.EDGELIMIT_CONFIG.rules.limits]]
name = "retried"
policy = "fixed 100/1h"
identifier = "header:x-user"
fail = "closed"
idempotent = true
[[vars.EDGELIMIT_CONFIG.rules]]
name = "plain"
path_prefix = "/plain"
[[vars.EDGELIMIT_CONFIG.rules.limits]]
name = "plain"
policy = "fixed 100/1h"
identifier = "header:x-user"
fail = "closed"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built Worker and wrangler (scripts/test.d/worker.sh)"]
async fn a_pipeline_whose_answer_is_dropped_is_retried_and_charged_once() {
    let origin = start_settle_origin().await;
    let stack = Stack::start_with(DROPPED, origin, |mut g| {
        g.drop_responses_every = NonZeroU32::new(2);
        g
    })
    .await;
    // Every second /pipeline runs against Redis and loses its answer. Failing closed, a lost
    // answer not retried would be a 503; each request here is admitted and charged once.
    let n = 8;
    for i in 0..n {
        let id = format!("drop-{i}");
        let response = stack
            .get("/retried", &[("x-user", "erin"), ("x-request-id", &id)])
            .await;
        assert_eq!(response.status(), 200, "request {i}");
        assert_eq!(remaining(&response, "retried"), 100 - 1 - i, "request {i}");
    }
    // The control: without request ids a lost answer is not retried (a retry could charge
    // twice), so within a few requests one fails closed.
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(
            stack
                .get("/plain", &[("x-user", "erin")])
                .await
                .status()
                .as_u16(),
        );
    }
    assert!(statuses.contains(&503), "{statuses:?}");
}
