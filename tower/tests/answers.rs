//! What an axum service behind the layer answers, in memory: the `RateLimit` fields on every
//! limited response, 429 with `Retry-After` and a problem body, several limits all or nothing,
//! 400 for a missing identifier, 403 from a deny list; what passes untouched (no rule, an exempt
//! path, a CORS preflight); custom identifiers.

mod common;

use axum::http::StatusCode;
use common::{App, Req};
use edgelimit_tower::config_file;
use edgelimit_tower::{ConfigBuilder, LimitBuilder, RuleBuilder};

/// `/api/` limited per API key (2 a minute, hashed key, refused without one) and per client
/// address (3 a minute), all or nothing.
fn api() -> App {
    let config = config_file::parse(
        r#"
        [[rules]]
        name = "api"
        path_prefix = "/api/"
        limits = [
          { name = "per-key", policy = "fixed 2/1m", identifier = "api-key:header:x-api-key", missing = "deny" },
          { name = "per-ip", policy = "fixed 3/1m", identifier = "ip" },
        ]
        "#,
        "api.toml",
    )
    .expect("the configuration is valid");
    App::new(config, |b| b.exempt_path("/api/public/**"))
}

#[tokio::test]
async fn limited_responses_carry_the_ratelimit_fields_and_the_429_its_problem() {
    let app = api();
    let key = |k: &str| Req::get("/api/items").header("x-api-key", k);
    let first = app.send(key("alpha").build()).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.body, "ok", "the service answered");
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"per-key\";q=2;w=60, \"per-ip\";q=3;w=60")
    );
    assert_eq!(
        (first.remaining("per-key"), first.remaining("per-ip")),
        (Some(1), Some(2))
    );
    assert_eq!(app.send(key("alpha").build()).await.status, StatusCode::OK);
    let denied = app.send(key("alpha").build()).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.header("retry-after"), Some("60"));
    assert_eq!(
        denied.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(denied.header("cache-control"), Some("no-store"));
    assert_eq!(denied.remaining("per-key"), Some(0));
    let problem = denied.json();
    assert_eq!(problem["status"], 429);
    assert_eq!(
        problem["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(problem["violated-policies"], serde_json::json!(["per-key"]));
    assert_eq!(problem["instance"], "/api/items");
    assert_eq!(problem["policy"], "per-key");
    // The per-address limit was not charged for the denied request (all or nothing): another
    // key from the same address has its last unit.
    let other = app.send(key("beta").build()).await;
    assert_eq!(other.status, StatusCode::OK);
    assert_eq!(other.remaining("per-ip"), Some(0));
    let spent = app.send(key("gamma").build()).await;
    assert_eq!(spent.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(spent.json()["policy"], "per-ip");
    // A new window, a new quota.
    app.clock.advance(60_000);
    assert_eq!(app.send(key("alpha").build()).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_missing_identifier_is_refused_by_name_and_api_keys_never_appear_in_clear() {
    let app = api();
    let refused = app.send(Req::get("/api/items").build()).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    let problem = refused.json();
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("an API key in header `x-api-key`"),
        "{problem}"
    );
    // Nothing was charged: the address still has its whole quota.
    let ok = app
        .send(Req::get("/api/items").header("x-api-key", "s3cret").build())
        .await;
    assert_eq!(ok.remaining("per-ip"), Some(2));
    let metrics = app.layer.edge().metrics_text();
    assert!(!metrics.contains("s3cret"), "{metrics}");
}

#[tokio::test]
async fn what_no_rule_matches_and_exempt_paths_pass_untouched() {
    let app = api();
    for _ in 0..5 {
        let health = app.send(Req::get("/health").build()).await;
        assert_eq!(health.status, StatusCode::OK);
        assert_eq!(health.header("ratelimit"), None, "no rule: no fields");
        let public = app.send(Req::get("/api/public/logo").build()).await;
        assert_eq!(public.status, StatusCode::OK, "an exempt path needs no key");
        assert_eq!(public.header("ratelimit"), None);
    }
    // None of them was counted.
    let first = app
        .send(Req::get("/api/items").header("x-api-key", "k").build())
        .await;
    assert_eq!(first.remaining("per-ip"), Some(2));
}

fn preflight() -> Req {
    Req::new("OPTIONS", "/api/items")
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
}

#[tokio::test]
async fn preflights_are_counted_unless_given_a_limit_of_their_own() {
    // A client adding `Access-Control-Request-Method` to an OPTIONS gets no free pass: it is
    // counted by the rules, as any request.
    let app = App::new(api_config(), |b| b);
    let counted = app.send(preflight().build()).await;
    assert_eq!(counted.remaining("per-ip"), Some(2));
    let plain = app.send(Req::new("OPTIONS", "/api/items").build()).await;
    assert_eq!(plain.remaining("per-ip"), Some(1));
    // Given a limit of their own, preflights match it alone, and it holds.
    let config = ConfigBuilder::new()
        .preflight_limit("fixed 2/1m")
        .rule(
            RuleBuilder::new("api")
                .path_prefix("/api/")
                .limit(LimitBuilder::new("per-ip", "fixed 3/1m")),
        )
        .build()
        .unwrap();
    let apart = App::new(config, |b| b);
    let statuses = [
        apart.send(preflight().build()).await,
        apart.send(preflight().build()).await,
        apart.send(preflight().build()).await,
    ];
    assert_eq!(statuses[0].remaining("cors-preflight"), Some(1));
    assert_eq!(statuses[2].status, StatusCode::TOO_MANY_REQUESTS);
    let get = apart
        .send(Req::get("/api/items").header("x-api-key", "k").build())
        .await;
    assert_eq!(get.remaining("per-ip"), Some(2), "the rules never saw them");
}

fn api_config() -> edgelimit_tower::Config {
    ConfigBuilder::new()
        .rule(
            RuleBuilder::new("api")
                .path_prefix("/api/")
                .limit(LimitBuilder::new("per-ip", "fixed 3/1m")),
        )
        .build()
        .unwrap()
}

#[tokio::test]
async fn deny_lists_answer_403_before_the_store() {
    let config = ConfigBuilder::new()
        .deny("ip 198.51.100.0/24")
        .rule(
            RuleBuilder::new("api")
                .path_prefix("/api/")
                .limit(LimitBuilder::new("per-ip", "fixed 3/1m")),
        )
        .build()
        .unwrap();
    let app = App::new(config, |b| b);
    let refused = app
        .send(Req::get("/api/x").from("198.51.100.20").build())
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(refused.json()["reason"], "denied");
    assert_eq!(
        app.send(Req::get("/api/x").from("203.0.113.1").build())
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_custom_identifier_is_what_the_services_closure_finds() {
    #[derive(Clone)]
    struct User(&'static str);
    let config = ConfigBuilder::new()
        .rule(
            RuleBuilder::new("api").path_prefix("/api/").limit(
                LimitBuilder::new("per-user", "fixed 1/1m")
                    .identifier("custom:user")
                    .missing("allow"),
            ),
        )
        .build()
        .unwrap();
    let app = App::new(config, |b| {
        b.custom_identifier("user", |request| {
            request.extensions.get::<User>().map(|u| u.0.to_string())
        })
    });
    let as_user = |user: &'static str| {
        let mut request = Req::get("/api/x").build();
        request.extensions_mut().insert(User(user));
        request
    };
    assert_eq!(app.send(as_user("alice")).await.status, StatusCode::OK);
    assert_eq!(
        app.send(as_user("alice")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(app.send(as_user("bob")).await.status, StatusCode::OK);
    // No user (an anonymous request): `missing = "allow"` skips the limit.
    for _ in 0..3 {
        assert_eq!(
            app.send(Req::get("/api/x").build()).await.status,
            StatusCode::OK
        );
    }
}
