//! End to end: the built Worker under `wrangler dev`, in front of a tiny origin, deciding against a
//! real `redis-server` through the gateway (the Upstash REST protocol) or in its own Durable
//! Objects, all on free loopback ports. The tests of what any store must do run on both
//! (`redis::…`, `durable_objects::…`); those of a store's own failures (Redis stopped, a server
//! that never answers, Upstash shards) are Redis's, and `e2e_objects.rs` has the objects' own.
//!
//! These need the built Worker and wrangler, so they are `#[ignore]`d in a plain `cargo test`;
//! `scripts/test.d/worker.sh` (part of `scripts/test`) builds the Worker and runs them.

#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use edgelimit_testkit::edge::{statuses, worker_vars, EdgeStore, Stack};
use edgelimit_testkit::http::header;
use edgelimit_testkit::net::SilentServer;
use edgelimit_testkit::origin::start_origin;
use edgelimit_testkit::sf::parse_sf_list;
use edgelimit_testkit::wrangler::wait_for_log;
use edgelimit_testkit::{edge, gateway, on_every_store, WranglerDev};
use reqwest::{Client, StatusCode};
use serde_json::Value;

/// Waits until at least `margin` remains before the next `window`-aligned boundary, so a test
/// counting admissions in one fixed window does not straddle two.
async fn clear_of_window_edge(window: Duration, margin: Duration) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let into = Duration::from_millis((now.as_millis() % window.as_millis()) as u64);
    let left = window - into;
    if left < margin {
        tokio::time::sleep(left + Duration::from_millis(200)).await;
    }
}

const MAIN_CONFIG: &str = r#"
namespace = "e2e"
timeout_ms = 5000      # a loaded 2-core CI box; the 50 ms default has its own test below
log_sample = 1.0
metrics_path = "/__edgelimit/metrics"
shadow_header = true   # the shadow rule's decisions, checked below (off by default)

[[vars.EDGELIMIT_CONFIG.rules]]
name = "fixed"
path_prefix = "/fixed/"
limits = [{ name = "fixed-per-user", policy = "fixed 5/1h", identifier = "header:x-user" }]

[[vars.EDGELIMIT_CONFIG.rules]]
name = "gcra"
path_prefix = "/gcra/"
limits = [{ name = "gcra-per-user", policy = "gcra 3/1h burst 4", identifier = "header:x-user" }]

[[vars.EDGELIMIT_CONFIG.rules]]
name = "keys"
path_prefix = "/keys/"
limits = [{ name = "per-key", policy = "fixed 2/1h", identifier = "api-key:header:authorization", missing = "deny" }]

[[vars.EDGELIMIT_CONFIG.rules]]
name = "shadow"
path_prefix = "/shadow/"
shadow = true
limits = [{ name = "shadow-per-user", policy = "fixed 1/1h", identifier = "header:x-user" }]

[[vars.EDGELIMIT_CONFIG.rules]]
name = "segment"
path = "/users/*/items"
limits = [{ name = "per-path-user", policy = "fixed 2/1h", identifier = "path:2" }]

[[vars.EDGELIMIT_CONFIG.rules]]
name = "ip"
path_prefix = "/ip/"
limits = [{ name = "per-ip", policy = "fixed 3/1h", identifier = "ip" }]
"#;

on_every_store!(
    limits_headers_shadow_and_identifiers_end_to_end,
    thirty_two_concurrent_connections_never_exceed_the_limit,
);

async fn limits_headers_shadow_and_identifiers_end_to_end(store: EdgeStore) {
    let stack = Stack::start_on(store, MAIN_CONFIG).await;
    clear_of_window_edge(Duration::from_secs(3600), Duration::from_secs(60)).await;

    // Fixed window 5/1h: exactly five 200s, then 429s with consistent headers.
    let alice = [("x-user", "alice")];
    for expected_remaining in (0..5).rev() {
        let r = stack.get("/fixed/a?x=1", &alice).await;
        assert_eq!(r.status(), StatusCode::OK);
        let policy = parse_sf_list(&header(&r, "ratelimit-policy").unwrap());
        assert_eq!(policy["fixed-per-user"]["q"], 5);
        assert_eq!(policy["fixed-per-user"]["w"], 3600);
        let state = parse_sf_list(&header(&r, "ratelimit").unwrap());
        assert_eq!(state["fixed-per-user"]["r"], expected_remaining);
        assert!(state["fixed-per-user"]["t"] <= 3600);
        assert_eq!(header(&r, "x-ratelimit-limit").as_deref(), Some("5"));
        assert_eq!(
            header(&r, "x-ratelimit-remaining"),
            Some(expected_remaining.to_string())
        );
        assert!(header(&r, "retry-after").is_none());
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["origin"], true, "admitted requests reach the origin");
        assert_eq!(
            (body["path"].as_str(), body["query"].as_str()),
            (Some("/fixed/a"), Some("x=1"))
        );
    }
    for attempt in 0..3 {
        let r = stack.get("/fixed/a", &alice).await;
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            header(&r, "content-type").as_deref(),
            Some("application/problem+json")
        );
        assert_eq!(header(&r, "cache-control").as_deref(), Some("no-store"));
        let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
        let state = parse_sf_list(&header(&r, "ratelimit").unwrap());
        assert_eq!(state["fixed-per-user"]["r"], 0);
        assert!(
            retry >= state["fixed-per-user"]["t"],
            "Retry-After before t"
        );
        assert!((1..=3600).contains(&retry));
        let problem: Value = r.json().await.unwrap();
        assert_eq!(problem["status"], 429);
        assert_eq!(problem["policy"], "fixed-per-user");
        assert_eq!(problem["instance"], "/fixed/a");
        // The first denial is the store's; repeats come from the isolate's denial cache, which
        // the client is not told (the log line says it).
        assert_eq!(problem["reason"], "over_limit");
        if attempt > 0 {
            assert!(
                wait_for_log(&stack.worker, "\"reason\":\"cached_denial\"").await,
                "a repeat is answered from the isolate's cache"
            );
        }
    }
    assert_eq!(
        stack.get("/fixed/a", &[("x-user", "bob")]).await.status(),
        StatusCode::OK,
        "another identifier has its own quota"
    );

    // A POST with a body is forwarded whole.
    let r = stack
        .http
        .post(format!("{}/fixed/post?k=v", stack.worker.url()))
        .header("x-user", "poster")
        .body("hello origin")
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        (body["method"].as_str(), body["body"].as_str()),
        (Some("POST"), Some("hello origin"))
    );

    // GCRA 3/1h burst 4: four at once, then the fifth waits one emission interval (1200 s).
    let carol = [("x-user", "carol")];
    assert_eq!(
        statuses(&stack, "/gcra/x", &carol, 5).await,
        [200, 200, 200, 200, 429]
    );
    let r = stack.get("/gcra/x", &[("x-user", "dave")]).await;
    let policy = parse_sf_list(&header(&r, "ratelimit-policy").unwrap());
    assert_eq!(
        (policy["gcra-per-user"]["q"], policy["gcra-per-user"]["w"]),
        (4, 4800)
    );
    let r = stack.get("/gcra/x", &carol).await;
    let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    assert!((1190..=1200).contains(&retry), "GCRA retry {retry}");

    // Shadow mode decides and reports, never blocks.
    let eve = [("x-user", "eve")];
    let mut reports = Vec::new();
    for _ in 0..4 {
        let r = stack.get("/shadow/x", &eve).await;
        assert_eq!(r.status(), StatusCode::OK, "shadow mode never blocks");
        assert!(
            header(&r, "ratelimit").is_none(),
            "shadow limits are not advertised"
        );
        reports.push(header(&r, "x-edgelimit-shadow").unwrap());
    }
    assert_eq!(reports[0], "allow");
    assert!(reports[1..]
        .iter()
        .all(|h| h == "deny; policies=\"shadow-per-user\""));

    // API keys: required here, hashed before use.
    let r = stack.get("/keys/x", &[]).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let problem: Value = r.json().await.unwrap();
    assert!(problem["detail"]
        .as_str()
        .unwrap()
        .contains("authorization"));
    let key = [("authorization", "Bearer sk-live-very-secret-0042")];
    assert_eq!(statuses(&stack, "/keys/x", &key, 3).await, [200, 200, 429]);
    let keys = stack.keys("*").join(" ");
    assert!(keys.contains("per-key"), "{keys}");
    assert!(
        !keys.contains("secret"),
        "API keys reach the store only hashed: {keys}"
    );

    // Path segments, percent-encoded unicode included.
    assert_eq!(
        statuses(&stack, "/users/%E2%9C%93/items", &[], 3).await,
        [200, 200, 429]
    );
    assert_eq!(statuses(&stack, "/users/other/items", &[], 1).await, [200]);

    // Hostile identifiers: huge, hash-tag braces, non-ASCII bytes. Each gets its own quota.
    let huge = "h".repeat(8 * 1024);
    for hostile in [huge.as_str(), "{alice}", "}{:*", "alice}"] {
        let got = statuses(&stack, "/fixed/h", &[("x-user", hostile)], 6).await;
        assert_eq!(
            got,
            [200, 200, 200, 200, 200, 429],
            "identifier {:.20}…",
            hostile
        );
    }
    let r = stack
        .http
        .get(format!("{}/fixed/u", stack.worker.url()))
        .header(
            "x-user",
            reqwest::header::HeaderValue::from_bytes("ünï©ødé".as_bytes()).unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);

    // The client address comes from CF-Connecting-IP only: rotating X-Forwarded-For does not help.
    let mut got = Vec::new();
    for i in 0..4 {
        let xff = format!("10.0.0.{i}");
        got.push(
            stack
                .get("/ip/x", &[("x-forwarded-for", &xff)])
                .await
                .status()
                .as_u16(),
        );
    }
    assert_eq!(got, [200, 200, 200, 429]);

    // The isolate's counters: the cache hits above are counted.
    let metrics = stack
        .get("/__edgelimit/metrics", &[edge::METRICS_AUTHORIZATION])
        .await
        .text()
        .await
        .unwrap();
    let hits: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("edgelimit_isolate_cache_hits_total "))
        .and_then(|v| v.parse().ok())
        .expect("cache hits are exported");
    assert!(hits >= 2, "{metrics}");

    // Shadow denials are logged, with the isolate's counters.
    assert!(
        wait_for_log(&stack.worker, "\"shadow_denied\":[\"shadow-per-user\"]").await,
        "no shadow log line in:\n{}",
        stack.worker.logs()
    );
}

async fn thirty_two_concurrent_connections_never_exceed_the_limit(store: EdgeStore) {
    let stack = Arc::new(
        Stack::start_on(
            store,
            r#"
timeout_ms = 5000
[[vars.EDGELIMIT_CONFIG.rules]]
name = "hot"
limits = [{ name = "hot", policy = "fixed 20/1h", identifier = "header:x-user" }]
"#,
        )
        .await,
    );
    clear_of_window_edge(Duration::from_secs(3600), Duration::from_secs(60)).await;
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let stack = stack.clone();
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..8 {
                seen.push(
                    stack
                        .get("/x", &[("x-user", "one")])
                        .await
                        .status()
                        .as_u16(),
                );
            }
            seen
        }));
    }
    let mut count = BTreeMap::new();
    for task in tasks {
        for status in task.await.unwrap() {
            *count.entry(status).or_insert(0u32) += 1;
        }
    }
    eprintln!("{}: 32 connections × 8 requests: {count:?}", store.as_str());
    assert_eq!(count.get(&200), Some(&20), "{count:?}");
    assert_eq!(count.get(&429), Some(&236), "{count:?}");
}

const FAIL_CONFIG: &str = r#"
timeout_ms = 2000
[[vars.EDGELIMIT_CONFIG.rules]]
name = "open"
path_prefix = "/open/"
limits = [{ name = "open", policy = "fixed 3/1h", identifier = "header:x-user", fail = "open" }]

[[vars.EDGELIMIT_CONFIG.rules]]
name = "closed"
path_prefix = "/closed/"
limits = [{ name = "closed", policy = "fixed 3/1h", identifier = "header:x-user", fail = "closed" }]

[[vars.EDGELIMIT_CONFIG.rules]]
name = "fallback"
path_prefix = "/fallback/"
limits = [{ name = "fallback", policy = "fixed 10/1h", identifier = "header:x-user", fail = "fallback 20%" }]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built Worker and wrangler: scripts/test.d/worker.sh runs it"]
async fn each_limit_follows_its_fail_mode_while_redis_is_down_and_recovers() {
    let mut stack = Stack::start(FAIL_CONFIG).await;
    clear_of_window_edge(Duration::from_secs(3600), Duration::from_secs(120)).await;
    let u = [("x-user", "u")];
    assert_eq!(statuses(&stack, "/open/x", &u, 1).await, [200]);
    stack.redis_mut().stop();

    assert_eq!(
        statuses(&stack, "/open/x", &u, 5).await,
        [200; 5],
        "fail open admits"
    );
    let r = stack.get("/closed/x", &u).await;
    assert_eq!(
        r.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "fail closed denies"
    );
    assert_eq!(header(&r, "retry-after").as_deref(), Some("1"));
    let problem: Value = r.json().await.unwrap();
    assert_eq!(problem["reason"], "failed_closed");
    // The local fallback admits 20% of 10 on its own.
    assert_eq!(
        statuses(&stack, "/fallback/x", &u, 3).await,
        [200, 200, 429],
        "fallback decides at its share of the limit"
    );

    stack.redis_mut().restart();
    // The gateway reconnects on its own; wait until a probe gets through.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut probes = 0;
    while stack
        .get("/closed/x", &[("x-user", "probe")])
        .await
        .status()
        != StatusCode::OK
    {
        probes += 1;
        assert!(
            Instant::now() < deadline,
            "no recovery after {probes} probes"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("recovered after {probes} failed-closed probes");
    // Exact decisions resume (the restarted Redis kept nothing, so quotas start over).
    let closed = statuses(&stack, "/closed/x", &[("x-user", "w")], 4).await;
    assert_eq!(closed, [200, 200, 200, 429]);
    let open = statuses(&stack, "/open/y", &[("x-user", "v")], 4).await;
    assert_eq!(open, [200, 200, 200, 429]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built Worker and wrangler: scripts/test.d/worker.sh runs it"]
async fn a_store_that_never_answers_is_cut_off_by_the_default_50ms_budget() {
    // Accepts connections and never answers.
    let silent = SilentServer::start();
    let origin = start_origin().await;
    let vars = worker_vars(
        origin,
        &format!("http://{}", silent.addr()),
        "t",
        &FAIL_CONFIG.replace("timeout_ms = 2000", ""),
    );
    let worker = tokio::task::spawn_blocking(move || WranglerDev::start(&vars))
        .await
        .unwrap();
    let http = Client::new();
    // Warm the isolate first (its first request pays for instantiation).
    let _ = http.get(format!("{}/open/warm", worker.url())).send().await;
    let started = Instant::now();
    let open = http
        .get(format!("{}/open/x", worker.url()))
        .header("x-user", "u")
        .send()
        .await
        .unwrap();
    let open_took = started.elapsed();
    assert_eq!(open.status(), StatusCode::OK);
    let closed = http
        .get(format!("{}/closed/x", worker.url()))
        .header("x-user", "u")
        .send()
        .await
        .unwrap();
    assert_eq!(closed.status(), StatusCode::SERVICE_UNAVAILABLE);
    eprintln!("fail-open answer with a silent store took {open_took:?} (budget 50 ms)");
}

/// The Worker's lines in wrangler's output (wrangler's own, such as its table of vars, left
/// out).
fn worker_lines(worker: &WranglerDev) -> Vec<String> {
    worker
        .logs()
        .lines()
        .filter(|line| line.contains("edgelimit: "))
        .map(str::to_string)
        .collect()
}

/// A Redis password as pasted into the REST URL's place: `@` and `%` in it.
const PASTED_PASSWORD: &str = "Pa55w0rd-x7q";

/// A rule, the origin, and a store that needs no server (none is called before the refusal).
const VALID: &str = "[[vars.EDGELIMIT_CONFIG.rules]]\nname = \"api\"\n\
                     limits = [{ name = \"x\", policy = \"fixed 10/1m\", identifier = \"ip\" }]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built Worker and wrangler: scripts/test.d/worker.sh runs it"]
async fn a_configuration_it_cannot_run_is_refused_with_an_error_id_and_a_clear_log_line() {
    let upstash =
        "UPSTASH_REDIS_REST_URL = \"http://127.0.0.1:9\"\nUPSTASH_REDIS_REST_TOKEN = \"t\"\n";
    let long_token = "0123456789abcdef0123456789abcdef";
    // (vars, what the log line says, whether the Durable Object binding goes with them)
    let cases: Vec<(String, String, bool)> = vec![
        (
            format!("[vars]\n{upstash}"),
            "EDGELIMIT_CONFIG: (var): is not set".into(),
            false,
        ),
        (
            format!("[vars]\n{upstash}EDGELIMIT_CONFIG = \"{{ not json\"\n"),
            "not valid JSON".into(),
            false,
        ),
        (
            format!(
                "[vars]\n{upstash}\
                 [[vars.EDGELIMIT_CONFIG.rules]]\nname = \"api\"\n\
                 limits = [{{ name = \"x\", policy = \"fixed 0/1m\", identifier = \"ip\" }}]\n"
            ),
            "rules[0].limits[0].policy".into(),
            false,
        ),
        (
            // No store at all: both ways to get one are named.
            VALID.to_string(),
            "no store: set UPSTASH_REDIS_REST_URL and UPSTASH_REDIS_REST_TOKEN".into(),
            false,
        ),
        // The Durable Object store's own: asked for but not bound; the admin route without its
        // secret, with one too short, or over Redis (which edgelimit-admin controls directly).
        (
            format!("[vars.EDGELIMIT_CONFIG]\nstore = \"durable-object\"\n{VALID}"),
            "needs the Durable Object binding EDGELIMIT_STATE".into(),
            false,
        ),
        (
            format!("[vars.EDGELIMIT_CONFIG]\nadmin_path = \"/__admin\"\n{VALID}\n"),
            "needs the EDGELIMIT_ADMIN_TOKEN secret".into(),
            true,
        ),
        (
            format!(
                "[vars]\nEDGELIMIT_ADMIN_TOKEN = \"{}\"\n\
                 [vars.EDGELIMIT_CONFIG]\nadmin_path = \"/__admin\"\n{VALID}\n",
                &long_token[..31]
            ),
            "EDGELIMIT_ADMIN_TOKEN (secret): is 31 bytes".into(),
            true,
        ),
        (
            format!(
                "[vars]\n{upstash}EDGELIMIT_ADMIN_TOKEN = \"{long_token}\"\n\
                 [vars.EDGELIMIT_CONFIG]\nadmin_path = \"/__admin\"\n{VALID}"
            ),
            "the admin route controls Durable Objects".into(),
            false,
        ),
        // The metrics page without a token, and the origin unnamed.
        (
            format!(
                "[vars]\nORIGIN = \"http://127.0.0.1:9\"\n{upstash}\
                 [vars.EDGELIMIT_CONFIG]\nmetrics_path = \"/m\"\n{VALID}"
            ),
            "metrics_path: `/m` answers a bearer token".into(),
            false,
        ),
        (
            format!("[vars]\n{upstash}{VALID}"),
            "ORIGIN is not set".into(),
            false,
        ),
        // A Redis URL pasted where the REST URL belongs: the log names it, password redacted.
        (
            format!(
                "[vars]\nORIGIN = \"http://127.0.0.1:9\"\n\
                 UPSTASH_REDIS_REST_URL = \"rediss://default:{PASTED_PASSWORD}%40@eu1-sure-ant.upstash.io:6379\"\n\
                 UPSTASH_REDIS_REST_TOKEN = \"t\"\n{VALID}"
            ),
            "got `rediss://default:***@eu1-sure-ant.upstash.io:6379`".into(),
            false,
        ),
    ];
    let http = Client::new();
    for (vars, expected, bound) in cases {
        let vars = if bound {
            format!("{vars}{}", edge::durable_bindings())
        } else {
            vars
        };
        let worker = tokio::task::spawn_blocking(move || WranglerDev::start(&vars))
            .await
            .unwrap();
        let mut ids = Vec::new();
        for _ in 0..2 {
            let r = http
                .get(format!("{}/any", worker.url()))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
            let body = r.text().await.unwrap();
            let problem: Value = serde_json::from_str(&body).unwrap();
            let id = problem["error_id"].as_str().unwrap_or_default().to_string();
            assert!(!id.is_empty(), "{body}");
            // The client learns nothing of the configuration: neither the reason nor a secret.
            assert!(
                !body.contains(&expected),
                "`{expected}` in the answer: {body}"
            );
            assert!(!body.contains(PASTED_PASSWORD), "{body}");
            assert!(
                wait_for_log(&worker, &format!("refusing requests (error_id {id})")).await,
                "{}",
                worker.logs()
            );
            ids.push(id);
        }
        assert_ne!(ids[0], ids[1], "an error id names one occurrence");
        let lines = worker_lines(&worker);
        for id in &ids {
            let line = lines.iter().find(|l| l.contains(id.as_str()));
            assert!(
                line.is_some_and(|l| l.contains(&expected)),
                "`{expected}` not in the line of {id}: {lines:#?}"
            );
        }
        assert!(
            !lines.iter().any(|l| l.contains(PASTED_PASSWORD)),
            "{lines:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built Worker and wrangler: scripts/test.d/worker.sh runs it"]
async fn identifiers_spread_over_configured_shards_and_stay_exact() {
    use edgelimit_testkit::RedisServer;

    let redis = [RedisServer::start(), RedisServer::start()];
    let mut gateways = Vec::new();
    for r in &redis {
        gateways.push(gateway::start(r, edge::TOKEN).await);
    }
    let origin = start_origin().await;
    let vars = format!(
        r#"[vars]
ORIGIN = "http://{origin}"
SHARD_A_URL = "http://{}"
SHARD_B_URL = "http://{}"
SHARD_TOKEN = "{}"

[vars.EDGELIMIT_CONFIG]
timeout_ms = 5000
analytics = "EDGELIMIT_ANALYTICS"
shards = [
  {{ name = "a", url_var = "SHARD_A_URL", token_var = "SHARD_TOKEN" }},
  {{ name = "b", url_var = "SHARD_B_URL", token_var = "SHARD_TOKEN" }},
]
[[vars.EDGELIMIT_CONFIG.rules]]
name = "all"
limits = [{{ name = "per-user", policy = "fixed 2/1h", identifier = "header:x-user" }}]

[[analytics_engine_datasets]]
binding = "EDGELIMIT_ANALYTICS"
"#,
        gateways[0].local_addr(),
        gateways[1].local_addr(),
        edge::TOKEN
    );
    let worker = tokio::task::spawn_blocking(move || WranglerDev::start(&vars))
        .await
        .unwrap();
    clear_of_window_edge(Duration::from_secs(3600), Duration::from_secs(60)).await;
    let http = Client::new();
    let users = 24;
    for u in 0..users {
        let user = format!("user-{u}");
        let mut got = Vec::new();
        for _ in 0..3 {
            let r = http
                .get(format!("{}/x", worker.url()))
                .header("x-user", &user)
                .send()
                .await
                .unwrap();
            got.push(r.status().as_u16());
        }
        assert_eq!(got, [200, 200, 429], "{user}");
    }
    let per_shard: Vec<usize> = redis.iter().map(|r| r.keys("*per-user*").len()).collect();
    eprintln!("{users} identifiers over 2 shards: {per_shard:?}");
    assert_eq!(
        per_shard.iter().sum::<usize>(),
        users,
        "one key per identifier"
    );
    assert!(
        per_shard.iter().all(|&n| n >= 4),
        "both shards used: {per_shard:?}"
    );
    assert!(
        !worker.logs().contains("edgelimit: analytics"),
        "the Analytics Engine binding accepted every data point:\n{}",
        worker.logs()
    );
}
