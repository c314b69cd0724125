//! Counting by response, through the request path's settlement: only the responses a predicate
//! selects are charged (failed logins), a cost read from a response header replaces the
//! reserved estimate, and a concurrency lease ends with the response — settled in a task of its
//! own, which the response never waits for.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::get;
use common::{App, Req};
use edgelimit::{Check, ManualClock, MemoryStore, Store, StoreError, TimeSource, Verdict};
use edgelimit_tower::{Builder, ConfigBuilder, LimitBuilder, RuleBuilder};
use tokio::sync::Notify;

#[tokio::test]
async fn only_the_responses_a_predicate_selects_are_charged() {
    let config = ConfigBuilder::new()
        .rule(
            RuleBuilder::new("login")
                .path("/login")
                .methods(["POST"])
                .limit(
                    LimitBuilder::new("failed-logins", "fixed 3/15m")
                        .settled(1, "custom:failed-login"),
                ),
        )
        .build()
        .unwrap();
    let app = App::new(config, |b| {
        b.count_when("failed-login", |response| {
            response.status == StatusCode::UNAUTHORIZED
        })
    });
    let login = |password: &str| {
        Req::new("POST", "/login")
            .header("x-password", password)
            .build()
    };
    // Successful logins cost nothing, however many.
    for _ in 0..10 {
        let ok = app.send(login("right")).await;
        assert_eq!(ok.status, StatusCode::OK);
    }
    // The quota is whole: each answer counts the one it reserved, the next one sees it back.
    let ok = app.send(login("right")).await;
    assert_eq!(ok.remaining("failed-logins"), Some(2), "{:?}", ok.headers);
    // `qu` is not said: the unit is requests.
    assert_eq!(
        ok.header("ratelimit-policy"),
        Some("\"failed-logins\";q=3;w=900")
    );
    for attempt in 0..3 {
        let failed = app.send(login("wrong")).await;
        assert_eq!(failed.status, StatusCode::UNAUTHORIZED, "attempt {attempt}");
    }
    // Three failures spent the quota: the fourth attempt is refused, right or wrong.
    let refused = app.send(login("wrong")).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        app.send(login("right")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    app.clock.advance(15 * 60_000);
    assert_eq!(app.send(login("right")).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_cost_stated_by_the_response_replaces_the_estimate() {
    let config = ConfigBuilder::new()
        .rule(
            RuleBuilder::new("llm").path("/llm").limit(
                LimitBuilder::new("tokens", "fixed 1000/1h")
                    .settled(100, "response-header:x-tokens-used"),
            ),
        )
        .build()
        .unwrap();
    let app = App::new(config, |b| b);
    let spend = |tokens: &str| Req::get("/llm").header("x-spend", tokens).build();
    let first = app.send(spend("10")).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.remaining("tokens"),
        Some(900),
        "the estimate, reserved"
    );
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"tokens\";q=1000;w=3600;qu=\"tokens\"")
    );
    // The first request was settled at 10: 990 left, less this one's estimate.
    let second = app.send(spend("850")).await;
    assert_eq!(second.remaining("tokens"), Some(890));
    // 10 + 850 used: 140 left, enough for one more estimate.
    let third = app.send(spend("0")).await;
    assert_eq!(third.remaining("tokens"), Some(40));
    // Settled at 0: the estimate came back, so one more fits; this one uses 100.
    let fourth = app.send(spend("100")).await;
    assert_eq!(fourth.status, StatusCode::OK);
    assert_eq!(fourth.remaining("tokens"), Some(40));
    // 960 used: the next estimate does not fit.
    let refused = app.send(spend("0")).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_concurrency_lease_ends_with_the_response() {
    let config = ConfigBuilder::new()
        .rule(
            RuleBuilder::new("slow")
                .path("/slow")
                .limit(LimitBuilder::new("in-flight", "concurrency 1 timeout 60s")),
        )
        .build()
        .unwrap();
    let clock = Arc::new(ManualClock::at(common::T0));
    let release = Arc::new(Notify::new());
    let entered = Arc::new(Notify::new());
    let (r, e) = (release.clone(), entered.clone());
    let router = axum::Router::new()
        .route(
            "/slow",
            get(move || {
                let (r, e) = (r.clone(), e.clone());
                async move {
                    e.notify_one();
                    r.notified().await;
                    "slow"
                }
            }),
        )
        .layer(
            Builder::new(config)
                .clock(clock.clone())
                .build(MemoryStore::new().with_clock(clock))
                .unwrap(),
        );
    let first = tokio::spawn({
        let router = router.clone();
        async move { common::send(&router, Req::get("/slow").build()).await }
    });
    entered.notified().await;
    let second = common::send(&router, Req::get("/slow").build()).await;
    assert_eq!(
        second.status,
        StatusCode::TOO_MANY_REQUESTS,
        "one in flight"
    );
    assert_eq!(
        second.header("ratelimit-policy"),
        Some("\"in-flight\";q=1;qu=\"concurrent-requests\"")
    );
    release.notify_one();
    let first = tokio::time::timeout(Duration::from_secs(10), first)
        .await
        .expect("the first request ends")
        .unwrap();
    assert_eq!(first.status, StatusCode::OK);
    // Its lease was released with its response, long before the timeout.
    let third = tokio::spawn({
        let router = router.clone();
        async move { common::send(&router, Req::get("/slow").build()).await }
    });
    entered.notified().await;
    release.notify_one();
    assert_eq!(third.await.unwrap().status, StatusCode::OK);
}

/// A memory store whose call number `held` (counted from 0) waits until released, and says
/// when that call is done.
struct Held {
    store: MemoryStore,
    calls: AtomicUsize,
    held: usize,
    release: Notify,
    done: AtomicBool,
}

#[async_trait::async_trait]
impl Store for Held {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        if call == self.held {
            self.release.notified().await;
        }
        let verdicts = self.store.check(checks, time).await;
        if call == self.held {
            self.done.store(true, Ordering::SeqCst);
        }
        verdicts
    }
}

#[tokio::test]
async fn the_answer_does_not_wait_for_the_settlement() {
    let config = ConfigBuilder::new()
        .rule(
            RuleBuilder::new("work")
                .path("/work")
                .limit(LimitBuilder::new("in-flight", "concurrency 1 timeout 60s")),
        )
        .build()
        .unwrap();
    let clock = Arc::new(ManualClock::at(common::T0));
    // Call 0 decides the first request; call 1 is its settlement, releasing the lease.
    let store = Arc::new(Held {
        store: MemoryStore::new().with_clock(clock.clone()),
        calls: AtomicUsize::new(0),
        held: 1,
        release: Notify::new(),
        done: AtomicBool::new(false),
    });
    let router = axum::Router::new()
        .route("/work", get(|| async { "done" }))
        .layer(
            Builder::new(config)
                .clock(clock)
                .build(store.clone())
                .unwrap(),
        );
    let send = || common::send(&router, Req::get("/work").build());
    // Answered while its settlement is held in the store.
    let first = tokio::time::timeout(Duration::from_secs(10), send())
        .await
        .expect("answered without waiting for the settlement");
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        store.calls.load(Ordering::SeqCst),
        2,
        "the settlement was sent"
    );
    assert!(!store.done.load(Ordering::SeqCst), "and is still pending");
    // Its lease is still held until the settlement lands.
    assert_eq!(send().await.status, StatusCode::TOO_MANY_REQUESTS);
    store.release.notify_one();
    tokio::time::timeout(Duration::from_secs(10), async {
        while !store.done.load(Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the settlement is done once released");
    // Released by the settlement, long before the lease's timeout.
    assert_eq!(send().await.status, StatusCode::OK);
}
