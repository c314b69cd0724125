//! When Redis cannot answer, each limit follows its `fail` mode: `open` admits, `closed` answers
//! 503 with a problem body, `fallback N%` decides in process at N% of the limit; once Redis is
//! back, it decides again. When Redis refuses the limiter, each limit follows its
//! `fail_misconfigured` mode, closed unless set.

mod common;

use std::time::Duration;

use axum::http::StatusCode;
use common::Req;
use edgelimit_testkit::RedisServer;
use edgelimit_tower::{redis_store, Builder, ConfigBuilder, LimitBuilder, RuleBuilder};

/// A rule per fail mode, each limiting `/api/<mode>` to 4 an hour per client address (a
/// sliding log: no window edge inside the test).
fn config() -> edgelimit_tower::Config {
    let rule = |mode: &str, fail: &str| {
        RuleBuilder::new(mode)
            .path(&format!("/api/{mode}"))
            .limit(LimitBuilder::new(&format!("per-ip-{mode}"), "sliding-log 4/1h").fail(fail))
    };
    ConfigBuilder::new()
        .timeout(Duration::from_millis(300))
        .rule(rule("open", "open"))
        .rule(rule("closed", "closed"))
        .rule(rule("fallback", "fallback 50%"))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_limit_follows_its_fail_mode_while_redis_is_down() {
    let mut redis = RedisServer::start();
    let config = config();
    let store = redis_store(&redis.url(), &config).await.expect("Redis");
    let router = common::routes().layer(Builder::new(config).build(store).unwrap());
    let send = |mode: &str| common::send(&router, Req::get(&format!("/api/{mode}")).build());
    for mode in ["open", "closed", "fallback"] {
        let up = send(mode).await;
        assert_eq!(up.status, StatusCode::OK, "{mode}");
        assert_eq!(
            up.remaining(&format!("per-ip-{mode}")),
            Some(3),
            "{mode}: Redis decided"
        );
    }

    redis.stop();
    for _ in 0..3 {
        assert_eq!(send("open").await.status, StatusCode::OK, "fails open");
    }
    let closed = send("closed").await;
    assert_eq!(closed.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(closed.json()["reason"], "failed_closed");
    assert_eq!(
        closed.header("content-type"),
        Some("application/problem+json")
    );
    assert!(closed.header("retry-after").is_some());
    // 50% of 4, decided in this process.
    assert_eq!(send("fallback").await.status, StatusCode::OK);
    assert_eq!(send("fallback").await.status, StatusCode::OK);
    let over = send("fallback").await;
    assert_eq!(over.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(over.json()["reason"], "over_limit");

    // Redis back (empty: nothing persisted): it decides again.
    redis.restart();
    let mut recovered = false;
    for _ in 0..50 {
        let closed = send("closed").await;
        if closed.status == StatusCode::OK {
            assert_eq!(
                closed.remaining("per-ip-closed"),
                Some(3),
                "a fresh Redis decided"
            );
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(recovered, "the store answers again once Redis is back");
}

/// When Redis refuses the limiter — here a user without the right to run scripts — a limit
/// fails closed although its `fail` is open, unless its `fail_misconfigured` says open; the
/// metrics page counts the refusals by class.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_refusing_the_limiter_fails_closed_unless_fail_misconfigured_says_open() {
    let redis = RedisServer::start();
    redis
        .command(&[
            "ACL", "SETUSER", "limiter", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval",
        ])
        .unwrap();
    let rule = |name: &str, limit: LimitBuilder| {
        RuleBuilder::new(name)
            .path(&format!("/api/{name}"))
            .limit(limit)
    };
    let config = ConfigBuilder::new()
        .metrics_path("/metrics")
        .rule(rule(
            "defaults",
            LimitBuilder::new("per-ip-defaults", "fixed 4/1h").fail("open"),
        ))
        .rule(rule(
            "open",
            LimitBuilder::new("per-ip-open", "fixed 4/1h")
                .fail("open")
                .fail_misconfigured("open"),
        ))
        .build()
        .unwrap();
    let url = format!("redis://limiter:pw@127.0.0.1:{}/", redis.port());
    let store = redis_store(&url, &config).await.expect("Redis");
    let metrics_token = "fail-modes-metrics-token-0123456789";
    let router = common::routes().layer(
        Builder::new(config)
            .metrics_token(metrics_token)
            .build(store)
            .unwrap(),
    );
    let send = |path: &str| {
        common::send(
            &router,
            Req::get(path)
                .header("authorization", &format!("Bearer {metrics_token}"))
                .build(),
        )
    };

    let refused = send("/api/defaults").await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    // The client is told what it would be of an outage; the log and counters say more.
    assert_eq!(refused.json()["reason"], "failed_closed");
    assert_eq!(send("/api/open").await.status, StatusCode::OK);

    let page = send("/metrics").await.body;
    let samples = edgelimit_testkit::metrics::Samples::parse(&page).unwrap();
    let errors = |class: &str| samples.value("edgelimit_store_errors_total", &[("class", class)]);
    assert_eq!((errors("refused_auth"), errors("unreachable")), (2.0, 0.0));
}
