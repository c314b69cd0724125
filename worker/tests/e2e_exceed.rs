//! End to end, what a limit's `exceed` and `count_status` do in the built Worker under
//! `wrangler dev`, deciding against a real `redis-server` through the gateway or in its own
//! Durable Objects (each test on both stores), all on free loopback ports:
//!
//! - `exceed = "soft"`: a request over the limit is forwarded all the same, the origin told in
//!   `EdgeLimit-Exceeded` (a client's own field of that name never reaches it);
//! - `count_status = "401"`: only 401s are charged — a 200 is refunded once answered (the
//!   settlement in `waitUntil`), so successful logins never spend the quota.
//!
//! Like `tests/e2e.rs` these need the built Worker and wrangler, so they are `#[ignore]`d in a
//! plain `cargo test`; `scripts/test.d/worker.sh` builds the Worker and runs them.

#![cfg(not(target_arch = "wasm32"))]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use edgelimit_testkit::edge::{EdgeStore, Stack};
use edgelimit_testkit::{on_every_store, origin};

/// An origin answering `/login/fail` with 401 and anything else with 200, its body the
/// `EdgeLimit-Exceeded` field it was sent (or `-`).
async fn start_exceed_origin() -> SocketAddr {
    async fn handle(uri: axum::http::Uri, headers: HeaderMap) -> axum::response::Response {
        let status = if uri.path() == "/login/fail" {
            StatusCode::UNAUTHORIZED
        } else {
            StatusCode::OK
        };
        let told = headers
            .get("edgelimit-exceeded")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_string();
        (status, told).into_response()
    }
    origin::serve(axum::Router::new().fallback(handle)).await
}

on_every_store!(
    a_soft_limit_forwards_and_tells_the_origin,
    count_status_charges_only_the_statuses_in_its_set,
);

const SOFT: &str = r#"
timeout_ms = 2000
[[vars.EDGELIMIT_CONFIG.rules]]
name = "api"
path_prefix = "/"
[[vars.EDGELIMIT_CONFIG.rules.limits]]
name = "per-user"
policy = "fixed 2/1h"
identifier = "header:x-user"
exceed = "soft"
"#;

async fn a_soft_limit_forwards_and_tells_the_origin(store: EdgeStore) {
    let origin = start_exceed_origin().await;
    let stack = Stack::start_with_on(store, SOFT, origin, |g| g).await;
    let forged = [("x-user", "ann"), ("edgelimit-exceeded", "\"forged\"")];
    for _ in 0..2 {
        let within = stack.get("/x", &forged).await;
        assert_eq!(within.status(), 200);
        assert_eq!(
            within.text().await.unwrap(),
            "-",
            "a client's field is dropped"
        );
    }
    for _ in 0..2 {
        let over = stack.get("/x", &forged).await;
        assert_eq!(over.status(), 200, "a soft limit never refuses");
        assert_eq!(over.text().await.unwrap(), "\"per-user\"");
    }
    // Another user is within the limit: the origin is told nothing.
    let other = stack.get("/x", &[("x-user", "bob")]).await;
    assert_eq!(other.text().await.unwrap(), "-");
}

const LOGINS: &str = r#"
timeout_ms = 2000
[[vars.EDGELIMIT_CONFIG.rules]]
name = "login"
path_prefix = "/login/"
[[vars.EDGELIMIT_CONFIG.rules.limits]]
name = "failed-logins"
policy = "fixed 2/1h"
identifier = "header:x-user"
count_status = "401"
"#;

async fn count_status_charges_only_the_statuses_in_its_set(store: EdgeStore) {
    let origin = start_exceed_origin().await;
    let stack = Stack::start_with_on(store, LOGINS, origin, |g| g).await;
    let user = [("x-user", "carol")];
    // Successful logins: each reserved, then refunded in `waitUntil` once answered 200.
    for attempt in 0..4 {
        let started = Instant::now();
        loop {
            let ok = stack.get("/login/ok", &user).await;
            if ok.status() == 200 {
                break;
            }
            // A refund not yet landed: the quota is whole again within seconds.
            assert_eq!(ok.status(), 429);
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "login {attempt}: the 200s were not refunded"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Let the last refund land, then two failures spend the quota for good.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for attempt in 0..2 {
        let failed = stack.get("/login/fail", &user).await;
        assert_eq!(failed.status(), 401, "failure {attempt}");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let refused = stack.get("/login/ok", &user).await;
    assert_eq!(refused.status(), 429, "two 401s were kept");
}
