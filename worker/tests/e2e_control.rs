//! End to end, live control: the built Worker under `wrangler dev`, deciding against a
//! real `redis-server` through the gateway (whose `/metrics` counts what reached Redis) or in its
//! own Durable Objects (written through the Worker's admin route, as `edgelimit-admin --worker`
//! writes), all on free loopback ports. Every test runs on both stores (`redis::…`,
//! `durable_objects::…`). What an operator writes to the store takes effect on the next request,
//! with no redeploy:
//!
//! - tiers: an identifier assigned `pro` gets the pro limit, an unassigned one the limit's own, an
//!   override its own policy, and an assignment made mid-stream counts from the next request;
//! - deny: an address in a CIDR added to the `deny` list at runtime is answered 403 with the
//!   problem body, counted, logged; its next requests (any address of that range) are refused
//!   from the isolate's cache with no Redis command; a rule's own list (`deny:<rule>`) matches the
//!   request's `cf.country`; a static entry in the configuration costs no Redis command at all;
//! - allow: a partner's header (static) or a listed identifier (dynamic) is forwarded without
//!   being counted or advertised;
//! - a request with tiers and lists on costs one `/pipeline` round trip (one call to one object).
//!
//! What reached the store is counted twice on Redis — the gateway's `/metrics` (round trips,
//! commands) and the Worker's own count of its store calls — and by the Worker's count alone on
//! the objects, which nothing outside the Worker sees.
//!
//! Like `tests/e2e.rs` these need the built Worker and wrangler, so they are `#[ignore]`d in a
//! plain `cargo test`; `scripts/test.d/worker.sh` builds the Worker and runs them.

#![cfg(not(target_arch = "wasm32"))]

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use edgelimit::control::list::{ListEntry, NEVER_MS};
use edgelimit::control::Assignment;
use edgelimit::store::key::{control_key, list_key};
use edgelimit::{Identifier, Limit, Policy};
use edgelimit_engine::wire::{WireAnswer, WireBytes, WireCall, WireLimit};
use edgelimit_gateway::MetricsPage;
use edgelimit_testkit::edge::{keys, statuses, EdgeStore, Stack, METRICS_AUTHORIZATION};
use edgelimit_testkit::http::header;
use edgelimit_testkit::metrics::{scrape, Samples};
use edgelimit_testkit::origin::start_origin;
use edgelimit_testkit::wrangler::wait_for_log;
use edgelimit_testkit::{on_every_store, Reply};

const NAMESPACE: &str = "edgelimit";

const CONFIG: &str = r#"
time = "server"
timeout_ms = 5000      # a loaded 2-core CI box
log_sample = 1.0
metrics_path = "/__edgelimit/metrics"
list_cache_ms = 60000
deny = ["ip 192.0.2.0/24"]
allow = ["header:x-partner-key s3cret"]

[[vars.EDGELIMIT_CONFIG.rules]]
name = "api"
path_prefix = "/api/"
[[vars.EDGELIMIT_CONFIG.rules.limits]]
name = "per-user"
policy = "fixed 3/1h"
identifier = "header:x-user"
tiers = { free = "fixed 3/1h", pro = "fixed 6/1h" }

[[vars.EDGELIMIT_CONFIG.rules]]
name = "geo"
path_prefix = "/geo/"
limits = [{ name = "geo-per-user", policy = "fixed 100/1h", identifier = "header:x-user" }]
"#;

/// The stack on `store`, with the gateway's `/metrics` page public (on Redis), so the test counts
/// what reached Redis.
async fn start(store: EdgeStore, config: &str) -> Stack {
    let origin = start_origin().await;
    Stack::start_with_on(store, config, origin, |mut gateway| {
        gateway.metrics = MetricsPage::Public;
        gateway
    })
    .await
}

on_every_store!(
    tiers_come_from_the_store_and_change_without_a_redeploy,
    deny_lists_answer_403_and_a_blocked_client_costs_no_command,
    allow_lists_forward_uncounted_and_a_request_costs_one_round_trip,
);

fn redis(stack: &Stack, args: &[&str]) -> Reply {
    stack.redis().command(args).expect("redis answers")
}

/// `call` through the admin route; its answer.
async fn admin(stack: &Stack, call: &WireCall) -> WireAnswer {
    let answer = stack.admin(&serde_json::to_string(call).unwrap()).await;
    serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

/// The configured limit named `name` (its policy and tiers, as the admin route takes it).
fn configured(name: &str) -> Limit {
    let config =
        edgelimit_engine::config::file::parse(&format!("[vars.EDGELIMIT_CONFIG]\n{CONFIG}"), "e2e")
            .expect("CONFIG is valid");
    let found = config
        .rules
        .iter()
        .flat_map(|r| &r.limits)
        .find(|l| &*l.limit.name == name)
        .unwrap_or_else(|| panic!("no limit {name}"));
    Limit::clone(&found.limit)
}

/// Assigns `identifier` on limit `limit` as the admin CLI would: the contract's text at the
/// contract's key in Redis, or one call to the Worker's admin route.
async fn assign(stack: &Stack, limit: &str, identifier: &str, assignment: &Assignment) {
    match stack.store {
        EdgeStore::Redis => {
            let key = control_key(NAMESPACE, limit, &Identifier::from(identifier));
            let reply = redis(stack, &["SET", &key, &assignment.encode(None)]);
            assert!(matches!(reply, Reply::Status(_)), "SET {key}: {reply:?}");
        }
        EdgeStore::DurableObjects => {
            let call = WireCall::Assign {
                limit: WireLimit::of(&configured(limit)),
                identifier: WireBytes::of(identifier.as_bytes()),
                assignment: Some(assignment.encode(None)),
                until_ms: None,
            };
            assert_eq!(admin(stack, &call).await, WireAnswer::Done);
        }
    }
}

/// Adds `entry` to dynamic list `list`, never lapsing.
async fn list_add(stack: &Stack, list: &str, entry: &str) {
    let member = entry.parse::<ListEntry>().expect("an entry").member();
    match stack.store {
        EdgeStore::Redis => {
            let key = list_key(NAMESPACE, list);
            redis(stack, &["ZADD", &key, &NEVER_MS.to_string(), &member]);
        }
        EdgeStore::DurableObjects => {
            let now_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64;
            let call = WireCall::ListAdd {
                list: list.to_string(),
                entry: member,
                until_ms: None,
                now_ms,
            };
            assert_eq!(admin(stack, &call).await, WireAnswer::Done);
        }
    }
}

fn gateway_counts(stack: &Stack) -> Samples {
    scrape(&stack.gateway().local_addr().to_string(), None).expect("the gateway's /metrics")
}

/// (`/pipeline` requests, Redis commands) the gateway served between two scrapes.
fn served(before: &Samples, after: &Samples) -> (f64, f64) {
    let delta = |name: &str| after.sum(name) - before.sum(name);
    (
        delta("edgelimit_gateway_http_requests_total"),
        delta("edgelimit_gateway_commands_total"),
    )
}

/// What reached the store so far: the Worker's own count of its store calls, and on Redis the
/// gateway's counts.
struct Reached {
    store_calls: f64,
    gateway: Option<Samples>,
}

async fn reached(stack: &Stack) -> Reached {
    Reached {
        store_calls: worker_metrics(stack)
            .await
            .value("edgelimit_store_latency_seconds_count", &[]),
        gateway: (stack.store == EdgeStore::Redis).then(|| gateway_counts(stack)),
    }
}

impl Reached {
    /// Store calls the Worker made since `before`.
    fn calls_since(&self, before: &Reached) -> f64 {
        self.store_calls - before.store_calls
    }

    /// (`/pipeline` requests, Redis commands) since `before`, on Redis.
    fn served_since(&self, before: &Reached) -> Option<(f64, f64)> {
        Some(served(before.gateway.as_ref()?, self.gateway.as_ref()?))
    }
}

async fn worker_metrics(stack: &Stack) -> Samples {
    let text = stack
        .get("/__edgelimit/metrics", &[METRICS_AUTHORIZATION])
        .await
        .text()
        .await
        .unwrap();
    Samples::parse(&text).unwrap_or_else(|e| panic!("{e}:\n{text}"))
}

async fn tiers_come_from_the_store_and_change_without_a_redeploy(store: EdgeStore) {
    let stack = start(store, CONFIG).await;
    let pro = Assignment::Tier(Arc::from("pro"));
    assign(&stack, "per-user", "paula", &pro).await;
    let paula = [("x-user", "paula")];
    assert_eq!(
        statuses(&stack, "/api/x", &paula, 7).await,
        [200, 200, 200, 200, 200, 200, 429],
        "pro: 6 an hour"
    );
    let first = stack.get("/api/x", &paula).await;
    let policy = header(&first, "ratelimit-policy").unwrap();
    assert!(
        policy.contains("\"per-user\";q=6"),
        "the pro policy is advertised: {policy}"
    );
    assert_eq!(
        statuses(&stack, "/api/x", &[("x-user", "frank")], 4).await,
        [200, 200, 200, 429],
        "no assignment: the limit's own policy"
    );
    // Upgraded mid-stream: the next request counts against the pro tier, no redeploy.
    let gina = [("x-user", "gina")];
    assert_eq!(statuses(&stack, "/api/x", &gina, 3).await, [200, 200, 200]);
    assign(&stack, "per-user", "gina", &pro).await;
    assert_eq!(
        statuses(&stack, "/api/x", &gina, 4).await,
        [200, 200, 200, 429],
        "her 3 requests count against the pro tier's 6"
    );
    // An override: a policy of its own (same algorithm as the limit's).
    let strict: Policy = "fixed 1/1h".parse().unwrap();
    assign(&stack, "per-user", "oscar", &Assignment::Override(strict)).await;
    assert_eq!(
        statuses(&stack, "/api/x", &[("x-user", "oscar")], 2).await,
        [200, 429]
    );
}

async fn deny_lists_answer_403_and_a_blocked_client_costs_no_command(store: EdgeStore) {
    let stack = start(store, CONFIG).await;
    let attacker = |ip: &'static str| [("cf-connecting-ip", ip), ("x-user", "mallory")];
    assert_eq!(
        stack
            .get("/api/x", &attacker("198.51.100.7"))
            .await
            .status(),
        200
    );

    // Blocked at runtime: a range, in the configuration-wide list.
    list_add(&stack, "deny", "ip 198.51.100.0/24").await;
    let denied = stack.get("/api/x", &attacker("198.51.100.7")).await;
    assert_eq!(denied.status(), 403);
    assert_eq!(
        header(&denied, "content-type").as_deref(),
        Some("application/problem+json")
    );
    assert_eq!(
        header(&denied, "cache-control").as_deref(),
        Some("no-store")
    );
    assert!(
        header(&denied, "ratelimit").is_none(),
        "no quota is advertised"
    );
    let problem: serde_json::Value = denied.json().await.unwrap();
    assert_eq!(problem["status"], 403);
    assert_eq!(problem["title"], "Forbidden");
    assert_eq!(problem["reason"], "denied");
    assert_eq!(problem["list"], "deny");
    assert_eq!(problem["type"], "about:blank", "{problem}");
    assert!(
        wait_for_log(
            &stack.worker,
            r#""reason":"denied","list":"deny","via":"store""#
        )
        .await,
        "the denial is logged:\n{}",
        stack.worker.logs()
    );

    // The next requests from that range are refused by the isolate: no store call.
    let before = reached(&stack).await;
    for ip in ["198.51.100.7", "198.51.100.8", "198.51.100.200"] {
        assert_eq!(
            stack.get("/api/x", &attacker(ip)).await.status(),
            403,
            "{ip}"
        );
    }
    let after = reached(&stack).await;
    if let Some((round_trips, commands)) = after.served_since(&before) {
        println!("3 cached denials: {round_trips} round trips, {commands} Redis commands");
        assert_eq!((round_trips, commands), (0.0, 0.0));
    }
    assert_eq!(
        after.calls_since(&before),
        0.0,
        "3 cached denials: no store call"
    );
    // Nothing was charged while denied: mallory used one request of three.
    assert_eq!(
        statuses(&stack, "/api/x", &attacker("203.0.113.9"), 3).await,
        [200, 200, 429]
    );

    // A rule's own list, by the request's country (wrangler dev says `US`).
    list_add(&stack, "deny:geo", "country us").await;
    let geo = stack.get("/geo/x", &[("x-user", "ursula")]).await;
    assert_eq!(geo.status(), 403);
    let problem: serde_json::Value = geo.json().await.unwrap();
    assert_eq!(problem["list"], "deny:geo");
    assert_eq!(
        stack.get("/api/x", &[("x-user", "ursula")]).await.status(),
        200,
        "another rule: its list does not apply"
    );

    // A static entry: refused in the isolate, before any store call.
    let before = reached(&stack).await;
    let static_denied = stack
        .get(
            "/api/x",
            &[("cf-connecting-ip", "192.0.2.44"), ("x-user", "sam")],
        )
        .await;
    assert_eq!(static_denied.status(), 403);
    let after = reached(&stack).await;
    if let Some((round_trips, commands)) = after.served_since(&before) {
        println!("a static denial: {round_trips} round trips, {commands} Redis commands");
        assert_eq!((round_trips, commands), (0.0, 0.0));
    }
    assert_eq!(
        after.calls_since(&before),
        0.0,
        "a static denial: no store call"
    );
    assert_eq!(keys(&stack, "*sam*"), 0, "nothing was charged");

    // Counted, by list and by how the match was found.
    let metrics = worker_metrics(&stack).await;
    let denied = |list: &str, via: &str| {
        metrics
            .get(
                "edgelimit_list_denied_total",
                &[("list", list), ("via", via)],
            )
            .unwrap_or(0.0)
    };
    assert_eq!(denied("deny", "store"), 1.0);
    assert_eq!(denied("deny", "cache"), 3.0);
    assert_eq!(denied("deny", "static"), 1.0);
    assert_eq!(denied("deny:geo", "store"), 1.0);
}

async fn allow_lists_forward_uncounted_and_a_request_costs_one_round_trip(store: EdgeStore) {
    let stack = start(store, CONFIG).await;
    // A partner's key, allowed in the configuration: never counted, never advertised.
    let partner = [("x-user", "partner"), ("x-partner-key", "s3cret")];
    for _ in 0..5 {
        let r = stack.get("/api/x", &partner).await;
        assert_eq!(r.status(), 200);
        assert!(
            header(&r, "ratelimit").is_none(),
            "an allowed request is not advertised"
        );
    }
    assert_eq!(keys(&stack, "*partner*"), 0, "nothing was counted");
    // A wrong key is no partner's.
    let impostor = [("x-user", "partner"), ("x-partner-key", "guess")];
    assert_eq!(
        statuses(&stack, "/api/x", &impostor, 4).await,
        [200, 200, 200, 429]
    );

    // Allowed at runtime, on one rule's list, by the limit's own identifier.
    list_add(&stack, "allow:api", "header:x-user vip").await;
    let vip = [("x-user", "vip")];
    assert_eq!(statuses(&stack, "/api/x", &vip, 5).await, [200; 5]);
    assert_eq!(keys(&stack, "*per-user:vip*"), 0, "nothing was counted");

    // Round trips with tiers and lists on: one `/pipeline` per request (each of a fresh
    // identifier, so the isolate's denial cache answers none; every other one assigned `pro`).
    let _ = stack.get("/api/x", &[("x-user", "warm-up")]).await;
    let n = 20;
    for i in (0..n).step_by(2) {
        let pro = Assignment::Tier(Arc::from("pro"));
        assign(&stack, "per-user", &format!("rt{i}"), &pro).await;
    }
    let before = reached(&stack).await;
    let started = Instant::now();
    for i in 0..n {
        let user = format!("rt{i}");
        let r = stack.get("/api/x", &[("x-user", user.as_str())]).await;
        assert_eq!(r.status(), 200);
        let policy = header(&r, "ratelimit-policy").unwrap();
        let q = if i % 2 == 0 { "q=6" } else { "q=3" };
        assert!(policy.contains(q), "{user}: {policy}");
    }
    let took = started.elapsed();
    let after = reached(&stack).await;
    if let Some((round_trips, commands)) = after.served_since(&before) {
        println!(
            "tiers + lists on: {n} requests, {round_trips} /pipeline round trips ({:.2} per \
             request), {commands} Redis commands ({:.2} per request), {:.1} ms per request",
            round_trips / n as f64,
            commands / n as f64,
            took.as_secs_f64() * 1000.0 / n as f64
        );
        assert_eq!(round_trips, n as f64, "one round trip per request");
    }
    // One store call per request; with one limit it is one object's.
    let calls = after.calls_since(&before);
    println!(
        "{}: tiers + lists on: {n} requests, {calls} store calls, {:.1} ms per request",
        stack.store.as_str(),
        took.as_secs_f64() * 1000.0 / n as f64
    );
    assert_eq!(calls, n as f64, "one store call per request");
}
