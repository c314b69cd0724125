//! One quota, four deciders: the `edgelimit` npm package (the packed tarball, under node), the
//! Rust Worker (under `wrangler dev`), a native `RespStore` (straight to Redis) and a native
//! `RestStore` (through the gateway) decide requests of the same two limits for the same
//! identifiers, taking turns, and each sees what the others charged — same keys, same scripts.
//!
//! Needs the package built and installed (scripts/build-js, then `node js/test/install.mjs`), the
//! Worker built (scripts/build-worker) and wrangler: scripts/test.d/js.sh runs it.

#![cfg(not(target_arch = "wasm32"))]

use std::path::Path;
use std::process::Command;

use edgelimit::{Check, Limit, Policy, RespStore, RestStore, Store, TimeSource, Verdict};
use edgelimit_gateway::{Config as GatewayConfig, Gateway};
use edgelimit_testkit::dir::repo_root;
use edgelimit_testkit::{RedisServer, WranglerDev};
use serde_json::{json, Value};

const TOKEN: &str = "interop-token-0123456789";
const USER: &str = "gcra 1/1h burst 10";
const TEAM: &str = "sliding-log 8/1h";

/// The two limits as the package and the Worker configure them.
fn limits_json() -> Value {
    json!([
        { "name": "per-user", "policy": USER },
        { "name": "per-team", "policy": TEAM },
    ])
}

/// The same limits for a native store.
fn check(user: &str, team: &str) -> Check {
    let per_user = Limit::new("per-user", USER.parse::<Policy>().unwrap());
    let per_team = Limit::new("per-team", TEAM.parse::<Policy>().unwrap());
    Check::single(&per_user, user, 1).with(&per_team, team, 1)
}

/// (admitted, [remaining per limit]) of a native verdict.
fn summary(verdict: &Verdict) -> (bool, Vec<u64>) {
    (
        verdict.allowed,
        verdict.decisions.iter().map(|d| d.remaining).collect(),
    )
}

/// One call's answer from `decide.mjs`: admitted, and per limit (name, admitted, remaining).
type JsAnswer = (bool, Vec<(String, bool, u64)>);

/// Decides `calls` (user, team) through the package under node; (admitted, [remaining]) each.
fn through_js(url: &str, calls: &[(&str, &str)]) -> Vec<(bool, Vec<u64>)> {
    let root = repo_root();
    let tests = root.join("js/test");
    assert!(
        tests.join("node_modules/edgelimit/package.json").exists(),
        "the package is not installed in js/test/node_modules: run scripts/build-js, then node js/test/install.mjs"
    );
    let calls: Vec<Value> = calls
        .iter()
        .map(|(user, team)| json!({ "per-user": user, "per-team": team }))
        .collect();
    let output = Command::new(node(&root))
        .current_dir(&tests)
        .arg("interop/decide.mjs")
        .args([url, TOKEN])
        .arg(limits_json().to_string())
        .arg(Value::from(calls).to_string())
        .output()
        .expect("node runs");
    assert!(
        output.status.success(),
        "node failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answers: Vec<JsAnswer> = serde_json::from_slice(&output.stdout).expect("one line of JSON");
    answers
        .into_iter()
        .map(|(ok, decisions)| (ok, decisions.into_iter().map(|d| d.2).collect()))
        .collect()
}

/// The pinned node 22 of the root package.json (scripts/setup.d/worker-toolchain.sh).
fn node(root: &Path) -> std::path::PathBuf {
    let node = root.join("node_modules/.bin/node");
    assert!(
        node.exists(),
        "{} is missing: npm install at the root",
        node.display()
    );
    node
}

/// The Worker's answer to one request as `user` of `team`: its status and its `RateLimit` field.
async fn through_worker(worker: &WranglerDev, user: &str, team: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .get(format!("{}/api", worker.url()))
        .header("x-user", user)
        .header("x-team", team)
        .send()
        .await
        .expect("the Worker answers");
    let field = response
        .headers()
        .get("ratelimit")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (response.status().as_u16(), field)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built package and Worker, node and wrangler: scripts/test.d/js.sh runs it"]
async fn the_package_the_worker_and_the_native_stores_share_one_quota() {
    let redis = RedisServer::start();
    let gateway = Gateway::start(GatewayConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        redis.url(),
        TOKEN,
    ))
    .await
    .expect("gateway starts");
    let url = format!("http://{}", gateway.local_addr());
    let config = format!(
        "[vars]\nUPSTASH_REDIS_REST_URL = \"{url}\"\nUPSTASH_REDIS_REST_TOKEN = \"{TOKEN}\"\n\n\
         [vars.EDGELIMIT_CONFIG]\ntimeout_ms = 5000\nrespond = {{ status = 200, body = \"ok\" }}\n\n\
         [[vars.EDGELIMIT_CONFIG.rules]]\nname = \"api\"\npath_prefix = \"/\"\nlimits = [\n\
         {{ name = \"per-user\", policy = \"{USER}\", identifier = \"header:x-user\" }},\n\
         {{ name = \"per-team\", policy = \"{TEAM}\", identifier = \"header:x-team\" }},\n]\n"
    );
    let worker = tokio::task::spawn_blocking(move || WranglerDev::start(&config))
        .await
        .unwrap();
    let resp = RespStore::connect(&redis.url())
        .await
        .expect("RESP connects");
    let rest = RestStore::new(&url, TOKEN).unwrap();
    let native = |store: &'static str| move |v: Vec<Verdict>| (store, summary(&v[0]));

    // per-user (burst 10) for alice, per-team (8 an hour) for the team, taken in turns.
    assert_eq!(
        through_js(&url, &[("alice", "t"); 3]),
        [(true, vec![9, 7]), (true, vec![8, 6]), (true, vec![7, 5])]
    );
    let answer = resp.check(&[check("bob", "t")], TimeSource::Server).await;
    assert_eq!(
        answer.map(native("resp")).unwrap(),
        ("resp", (true, vec![9, 4]))
    );
    let answer = rest.check(&[check("alice", "t")], TimeSource::Server).await;
    assert_eq!(
        answer.map(native("rest")).unwrap(),
        ("rest", (true, vec![6, 3]))
    );
    let (status, field) = through_worker(&worker, "alice", "t").await;
    assert_eq!(status, 200, "{}", worker.logs());
    assert!(
        field.starts_with("\"per-user\";r=5;") && field.contains("\"per-team\";r=2;"),
        "{field}"
    );
    // The team has two left: the package takes one, RESP the last; then every decider is
    // refused, all or nothing, and alice's own quota is not charged by the refusals.
    assert_eq!(through_js(&url, &[("alice", "t")]), [(true, vec![4, 1])]);
    let answer = resp.check(&[check("carol", "t")], TimeSource::Server).await;
    assert_eq!(
        answer.map(native("resp")).unwrap(),
        ("resp", (true, vec![9, 0]))
    );
    let answer = rest.check(&[check("alice", "t")], TimeSource::Server).await;
    assert_eq!(
        answer.map(native("rest")).unwrap(),
        ("rest", (false, vec![4, 0]))
    );
    assert_eq!(through_worker(&worker, "alice", "t").await.0, 429);
    assert_eq!(through_js(&url, &[("alice", "t")]), [(false, vec![4, 0])]);
    // Another team: alice's standing is what the four charged her (3 + 1 + 1 + 1).
    assert_eq!(
        through_js(&url, &[("alice", "other")]),
        [(true, vec![3, 7])]
    );
}
