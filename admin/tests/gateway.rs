//! The CLI over the Upstash REST protocol (`upstash+http://`), against edgelimit-gateway in
//! front of a real redis-server: every shared behaviour (common/suite.rs), and the token rules.

mod common;

use common::suite::{self, Backend};
use common::{Admin, NAMESPACE};
use edgelimit::store::REST_TOKEN_VAR;
use edgelimit::RestStore;
use edgelimit_gateway::{Config, Gateway};
use edgelimit_testkit::RedisServer;

const TOKEN: &str = "admin-test-token-8c1f2e";

fn with_backend(body: fn(&Backend<'_>)) {
    let server = RedisServer::start();
    // A runtime of its own for the gateway, so it serves while the test blocks on the binary.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let config = Config::new("127.0.0.1:0".parse().unwrap(), server.url(), TOKEN);
    let gateway = rt.block_on(Gateway::start(config)).expect("gateway starts");
    let url = format!("http://{}", gateway.local_addr());
    let store = RestStore::new(&url, TOKEN)
        .unwrap()
        .with_namespace(NAMESPACE);
    body(&Backend {
        admin: Admin::new(&format!("upstash+{url}")).with_env(REST_TOKEN_VAR, TOKEN),
        store: Box::new(store),
        rt: &rt,
        nodes: vec![&server],
    });
    drop(gateway);
}

#[test]
fn bad_input_writes_nothing() {
    with_backend(suite::bad_input_writes_nothing);
}

#[test]
fn tiers_and_overrides_decide_the_librarys_checks() {
    with_backend(suite::tiers_and_overrides_decide_the_librarys_checks);
}

#[test]
fn lists_gate_the_librarys_checks() {
    with_backend(suite::lists_gate_the_librarys_checks);
}

#[test]
fn peek_writes_nothing_and_reset_leaves_no_state_key() {
    with_backend(suite::peek_writes_nothing_and_reset_leaves_no_state_key);
}

#[test]
fn api_keys_are_keyed_as_the_worker_keys_them() {
    with_backend(suite::api_keys_are_keyed_as_the_worker_keys_them);
}

#[test]
fn the_token_comes_from_the_environment_and_a_wrong_one_is_a_store_failure() {
    with_backend(|b| {
        let mut no_token = b.admin.clone();
        no_token.env.clear();
        let run = no_token.run(&["deny", "list"]);
        assert_eq!(run.code, 2, "{run:?}");
        assert!(
            run.stderr
                .starts_with(&format!("edgelimit-admin: {REST_TOKEN_VAR}: is not set")),
            "{run:?}"
        );
        let wrong = no_token.with_env(REST_TOKEN_VAR, "wrong-token");
        let run = wrong.run(&["deny", "add", "country CN"]);
        assert_eq!(run.code, 1, "{run:?}");
        assert!(!run.stderr.contains("wrong-token"), "{run:?}");
        assert_eq!(common::keys(&b.nodes), Vec::<String>::new());
        // UPSTASH_REDIS_REST_URL stands in for a missing --store.
        let mut from_env = b.admin.clone();
        let url = from_env.store.trim_start_matches("upstash+").to_string();
        from_env.store.clear();
        let from_env = from_env.with_env("UPSTASH_REDIS_REST_URL", &url);
        let run = from_env.run(&["--json", "deny", "add", "country CN"]);
        assert_eq!(run.json()["entry"], "country CN");
    });
}
