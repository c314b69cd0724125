//! End to end, what exceeding a limit does (docs/configuration.md, "Over the limit"): the built
//! Worker under `wrangler dev` in front of an origin that answers the status a path names and
//! says which limits the Worker told it were exceeded, deciding against a real `redis-server`
//! through the gateway or in its own Durable Objects, all on free loopback ports. Each test runs
//! on both stores (`redis::…`, `durable_objects::…`):
//!
//! - `exceed = "soft"`: every request reaches the origin; those over the limit carry
//!   `EdgeLimit-Exceeded` naming it, and the client is never refused;
//! - `exceed = "delay …"`: a request the limit would admit within the longest wait is held and
//!   forwarded then (its response comes no earlier), one beyond it is refused;
//! - `block_for`: after a denial the identifier is refused for the block, even once its window
//!   has turned, and admitted again after it;
//! - `enforce = "50%"`: the identifiers the stable hash picks are refused, the others pass;
//! - `count_status = "401"`: only the origin's 401s are charged.
//!
//! Like `tests/e2e.rs` these need the built Worker and wrangler, so they are `#[ignore]`d in a
//! plain `cargo test`; `scripts/test.d/worker.sh` builds the Worker and runs them.

#![cfg(not(target_arch = "wasm32"))]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use edgelimit_engine::rules::Enforce;
use edgelimit_testkit::edge::{EdgeStore, Stack};
use edgelimit_testkit::http::header;
use edgelimit_testkit::{on_every_store, origin};

/// An origin answering `/status/<code>` with that status (anything else 200), and telling in
/// `x-seen-exceeded` the `edgelimit-exceeded` request header it received (`-` when none).
async fn start_status_origin() -> SocketAddr {
    async fn handle(uri: axum::http::Uri, request: HeaderMap) -> axum::response::Response {
        let mut segments = uri.path().trim_start_matches('/').split('/');
        let status = match (segments.next(), segments.next()) {
            (Some("status"), Some(code)) => code
                .parse::<u16>()
                .ok()
                .and_then(|c| StatusCode::from_u16(c).ok())
                .unwrap_or(StatusCode::OK),
            _ => StatusCode::OK,
        };
        let seen = request
            .get("edgelimit-exceeded")
            .cloned()
            .unwrap_or(HeaderValue::from_static("-"));
        let mut headers = HeaderMap::new();
        headers.insert("x-seen-exceeded", seen);
        (status, headers, "done").into_response()
    }
    origin::serve(axum::Router::new().fallback(handle)).await
}

on_every_store!(
    a_soft_limit_admits_and_tells_the_origin_which_limit_is_over,
    a_delayed_request_is_forwarded_after_its_wait_and_one_beyond_the_longest_is_refused,
    a_blocked_identifier_is_refused_for_the_block_even_in_a_new_window,
    a_staged_limit_refuses_exactly_the_identifiers_its_hash_enforces,
    only_the_statuses_counted_are_charged,
);

fn config(limit: &str) -> String {
    format!(
        r#"
time = "server"
timeout_ms = 2000
denial_cache = 0
[[vars.EDGELIMIT_CONFIG.rules]]
name = "api"
path_prefix = "/"
[[vars.EDGELIMIT_CONFIG.rules.limits]]
identifier = "header:x-user"
{limit}
"#
    )
}

async fn a_soft_limit_admits_and_tells_the_origin_which_limit_is_over(store: EdgeStore) {
    let origin = start_status_origin().await;
    let limit = "name = \"per-user\"\npolicy = \"fixed 2/1h\"\nexceed = \"soft\"";
    let stack = Stack::start_with_on(store, &config(limit), origin, |g| g).await;
    let user = [("x-user", "alice")];
    for n in 1..=4 {
        let response = stack.get("/items", &user).await;
        assert_eq!(response.status(), 200, "request {n} reaches the origin");
        let seen = header(&response, "x-seen-exceeded").unwrap();
        if n <= 2 {
            assert_eq!(seen, "-", "request {n} is within the limit");
        } else {
            assert_eq!(seen, "\"per-user\"", "request {n} is over the soft limit");
        }
        assert!(header(&response, "retry-after").is_none());
    }
}

async fn a_delayed_request_is_forwarded_after_its_wait_and_one_beyond_the_longest_is_refused(
    store: EdgeStore,
) {
    let origin = start_status_origin().await;
    // One request a second, no burst: a second request right after the first fits in ≤ 1 s.
    let limit = "name = \"paced\"\npolicy = \"gcra 1/1s burst 1\"\nexceed = \"delay 1500ms\"";
    let stack = Stack::start_with_on(store, &config(limit), origin, |g| g).await;
    let user = [("x-user", "bob")];
    assert_eq!(stack.get("/a", &user).await.status(), 200);
    let started = Instant::now();
    let second = stack.get("/b", &user).await;
    let waited = started.elapsed();
    assert_eq!(second.status(), 200, "the second request waits instead");
    assert!(
        waited >= Duration::from_millis(700),
        "forwarded after its wait, not at once ({waited:?})"
    );
    // Three at once now: the first fits within ~1 s, the second ~2 s away is beyond 1.5 s.
    let send = |stack: &Stack| {
        let request = stack
            .http
            .get(format!("{}/c", stack.worker.url()))
            .header("x-user", "bob");
        tokio::spawn(request.send())
    };
    let all = [send(&stack), send(&stack), send(&stack)];
    let mut statuses = Vec::new();
    for each in all {
        statuses.push(each.await.unwrap().expect("answered").status().as_u16());
    }
    statuses.sort_unstable();
    assert_eq!(statuses[0], 200, "{statuses:?}");
    assert_eq!(
        statuses[2], 429,
        "one is beyond the longest wait: {statuses:?}"
    );
}

async fn a_blocked_identifier_is_refused_for_the_block_even_in_a_new_window(store: EdgeStore) {
    let origin = start_status_origin().await;
    let limit = "name = \"login\"\npolicy = \"fixed 2/1s\"\nblock_for = \"4s\"";
    let stack = Stack::start_with_on(store, &config(limit), origin, |g| g).await;
    let user = [("x-user", "carol")];
    let mut denied_at = None;
    for _ in 0..5 {
        let response = stack.get("/login", &user).await;
        if response.status() == 429 {
            denied_at = Some(Instant::now());
            let retry: u64 = header(&response, "retry-after").unwrap().parse().unwrap();
            assert!(
                (3..=4).contains(&retry),
                "Retry-After {retry} counts to the block's end"
            );
            break;
        }
    }
    let denied_at = denied_at.expect("the limit denied the third request of its second");
    // A new one-second window, still blocked.
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    let blocked = stack.get("/login", &user).await;
    assert_eq!(blocked.status(), 429, "the block outlasts the window");
    let problem: serde_json::Value = blocked.json().await.unwrap();
    assert_eq!(problem["reason"], "blocked", "{problem}");
    // Another identifier is not blocked.
    assert_eq!(
        stack.get("/login", &[("x-user", "dave")]).await.status(),
        200
    );
    // After the block (4 s from the denial, with a margin for the Worker's own time).
    let until = denied_at + Duration::from_millis(4_600);
    tokio::time::sleep(until.saturating_duration_since(Instant::now())).await;
    assert_eq!(
        stack.get("/login", &user).await.status(),
        200,
        "the block is over"
    );
}

async fn a_staged_limit_refuses_exactly_the_identifiers_its_hash_enforces(store: EdgeStore) {
    let origin = start_status_origin().await;
    let limit = "name = \"staged\"\npolicy = \"fixed 1/1h\"\nenforce = \"50%\"";
    let stack = Stack::start_with_on(store, &config(limit), origin, |g| g).await;
    let share: Enforce = "50%".parse().unwrap();
    let mut enforced = 0;
    for i in 0..24 {
        let user = format!("user-{i}");
        let headers = [("x-user", user.as_str())];
        assert_eq!(stack.get("/x", &headers).await.status(), 200);
        let second = stack.get("/x", &headers).await.status();
        let expected = if share.enforces("staged", user.as_bytes()) {
            enforced += 1;
            429
        } else {
            200
        };
        assert_eq!(second, expected, "{user}'s second request");
    }
    assert!(
        (4..=20).contains(&enforced),
        "about half enforced: {enforced}"
    );
}

async fn only_the_statuses_counted_are_charged(store: EdgeStore) {
    let origin = start_status_origin().await;
    let limit = "name = \"failures\"\npolicy = \"fixed 3/1h\"\ncount_status = \"401\"";
    let stack = Stack::start_with_on(store, &config(limit), origin, |g| g).await;
    let user = [("x-user", "erin")];
    // Successful logins are refunded after their response: never charged.
    for _ in 0..5 {
        assert_eq!(stack.get("/status/200", &user).await.status(), 200);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Three failures are charged; the fourth request is refused before the origin.
    for _ in 0..3 {
        assert_eq!(stack.get("/status/401", &user).await.status(), 401);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let refused = stack.get("/status/200", &user).await;
    assert_eq!(refused.status(), 429, "three 401s spent the limit");
}
