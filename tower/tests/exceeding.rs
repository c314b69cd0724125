//! A limit's `count_status`, `exceed = "soft"` and `exceed = "delay …"` through the layer:
//! responses outside the set refunded, the inner service told of a soft limit's denial, and a
//! delayed request forwarded after its wait.

mod common;

use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use axum::Router;
use common::{App, Req};
use edgelimit::MemoryStore;
use edgelimit_tower::{Builder, ConfigBuilder, LimitBuilder, RuleBuilder};

#[tokio::test]
async fn count_status_charges_only_the_statuses_in_its_set() {
    let config = ConfigBuilder::new()
        .rule(
            RuleBuilder::new("login")
                .path("/login")
                .methods(["POST"])
                .limit(LimitBuilder::new("failed-logins", "fixed 3/15m").count_status(["401"])),
        )
        .build()
        .unwrap();
    let app = App::new(config, |b| b);
    let login = |password: &str| {
        Req::new("POST", "/login")
            .header("x-password", password)
            .build()
    };
    // Successful logins are refunded once answered: any number of them.
    for _ in 0..10 {
        assert_eq!(app.send(login("right")).await.status, StatusCode::OK);
    }
    let ok = app.send(login("right")).await;
    assert_eq!(ok.remaining("failed-logins"), Some(2), "{:?}", ok.headers);
    for attempt in 0..3 {
        let failed = app.send(login("wrong")).await;
        assert_eq!(failed.status, StatusCode::UNAUTHORIZED, "attempt {attempt}");
    }
    // Three 401s were kept: the quota is spent, right password or not.
    assert_eq!(
        app.send(login("right")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// The routes, with `/echo` answering the `EdgeLimit-Exceeded` field it was sent (or `-`).
fn echoing() -> Router {
    common::routes().route(
        "/echo",
        get(|headers: HeaderMap| async move {
            headers
                .get("edgelimit-exceeded")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_string()
        }),
    )
}

#[tokio::test]
async fn a_soft_limit_forwards_and_tells_the_inner_service() {
    let config = ConfigBuilder::new()
        .rule(
            RuleBuilder::new("echo")
                .path("/echo")
                .limit(LimitBuilder::new("per-ip", "fixed 1/1m").exceed("soft")),
        )
        .build()
        .unwrap();
    let app = App::new(config, |b| b);
    let router = echoing().layer(app.layer.clone());
    // A client's own field is never passed on.
    let first = common::send(
        &router,
        Req::get("/echo")
            .header("edgelimit-exceeded", "\"forged\"")
            .build(),
    )
    .await;
    assert_eq!((first.status, first.body.as_str()), (StatusCode::OK, "-"));
    for _ in 0..2 {
        let over = common::send(&router, Req::get("/echo").build()).await;
        assert_eq!(over.status, StatusCode::OK);
        assert_eq!(over.body, "\"per-ip\"");
    }
}

#[tokio::test]
async fn a_delayed_request_waits_before_the_inner_service_runs() {
    let config = ConfigBuilder::new()
        .rule(
            RuleBuilder::new("api")
                .path_prefix("/api/")
                .limit(LimitBuilder::new("per-ip", "gcra 1/300ms burst 1").exceed("delay 1s")),
        )
        .build()
        .unwrap();
    let layer = Builder::new(config)
        .build(MemoryStore::new())
        .expect("the layer builds");
    let router = common::routes().layer(layer);
    let started = Instant::now();
    let first = common::send(&router, Req::get("/api/a").build()).await;
    assert_eq!(first.status, StatusCode::OK);
    // Over the limit, but its place comes 300 ms after the first's, within the longest wait:
    // admitted after the wait, not refused.
    let second = common::send(&router, Req::get("/api/b").build()).await;
    assert_eq!(second.status, StatusCode::OK, "{}", second.body);
    let elapsed = started.elapsed();
    // Exact but for 1 ms: the store's clock is read in whole milliseconds. A slow machine only
    // makes it later.
    assert!(
        elapsed >= Duration::from_millis(299),
        "forwarded {elapsed:?} after the first request, before its place"
    );
}
