//! The CLI over the Upstash REST protocol (`upstash+http://`), against edgelimit-gateway in
//! front of a real redis-server: every shared behaviour (common/suite.rs), and the token rules.

mod common;

use common::suite::Backend;
use common::{Admin, Stored, NAMESPACE};
use edgelimit::store::{Shard, ShardedStore, REST_TOKEN_VAR};
use edgelimit::{Check, RestStore, Store, TimeSource};
use edgelimit_gateway::Gateway;
use edgelimit_testkit::{gateway, task, RedisServer};

const TOKEN: &str = "admin-test-token-8c1f2e";

fn with_backend(body: fn(&Backend<'_>)) {
    let server = RedisServer::start();
    // A runtime of its own for the gateway, so it serves while the test blocks on the binary.
    let rt = task::runtime();
    let gateway = rt.block_on(gateway::start(&server, TOKEN));
    let url = gateway::url(&gateway);
    let store = gateway::rest_store(&gateway, TOKEN).with_namespace(NAMESPACE);
    body(&Backend {
        admin: Admin::new(&format!("upstash+{url}")).with_env(REST_TOKEN_VAR, TOKEN),
        store: Box::new(store),
        rt: &rt,
        stored: Stored::Redis(vec![&server]),
    });
    drop(gateway);
}

shared_suite!(with_backend);

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
        assert_eq!(b.stored.keys(), Vec::<String>::new());
        // UPSTASH_REDIS_REST_URL stands in for a missing --store.
        let mut from_env = b.admin.clone();
        let url = from_env.store.trim_start_matches("upstash+").to_string();
        from_env.store.clear();
        let from_env = from_env.with_env("UPSTASH_REDIS_REST_URL", &url);
        let run = from_env.run(&["--json", "deny", "add", "country CN"]);
        assert_eq!(run.json()["entry"], "country CN");
    });
}

/// `shards` in the configuration: the CLI writes each identifier's assignment where the Worker's
/// sharded store looks for it, and lists on every shard.
#[test]
fn a_sharded_configuration_is_written_shard_by_shard() {
    let servers = [RedisServer::start(), RedisServer::start()];
    let rt = task::runtime();
    let gateways: Vec<Gateway> = servers
        .iter()
        .map(|s| rt.block_on(gateway::start(s, TOKEN)))
        .collect();
    let urls: Vec<String> = gateways.iter().map(gateway::url).collect();
    let sharded = common::CONFIG.replace(
        "namespace = \"admtest\"",
        "namespace = \"admtest\"\nshards = [\n  { name = \"eu\", url_var = \"EU_URL\", token_var = \"EU_TOKEN\" },\n  { name = \"us\", url_var = \"US_URL\", token_var = \"US_TOKEN\" },\n]",
    );
    let mut admin = Admin::new("");
    admin.config = common::config_file_of(&sharded);
    let admin = admin
        .with_env("EU_URL", &urls[0])
        .with_env("EU_TOKEN", TOKEN)
        .with_env("US_URL", &urls[1]);

    // Every shard's variables are needed, and --store would miss the other shards.
    let run = admin.run(&["tier", "get", "per-ip", "203.0.113.7"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr
            .starts_with("edgelimit-admin: US_TOKEN: is not set"),
        "{run:?}"
    );
    let admin = admin.with_env("US_TOKEN", TOKEN);
    let mut single = admin.clone();
    single.store = format!("upstash+{}", urls[0]);
    let run = single.run(&["tier", "get", "per-ip", "203.0.113.7"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("2 shards (eu, us)"), "{run:?}");

    // The library's sharded store, as the Worker builds it, sees what the CLI wrote.
    let store = ShardedStore::new(
        ["eu", "us"]
            .iter()
            .zip(&urls)
            .map(|(name, url)| {
                Shard::new(
                    *name,
                    RestStore::new(url, TOKEN)
                        .unwrap()
                        .with_namespace(NAMESPACE),
                )
            })
            .collect(),
    )
    .unwrap();
    let ids: Vec<String> = (1..=12).map(|i| format!("198.51.100.{i}")).collect();
    for id in &ids {
        assert_eq!(
            admin.json(&["tier", "set", "per-ip", id, "pro"])["policy"],
            "gcra 200/1h"
        );
    }
    let limit = common::limit("per-ip");
    for id in &ids {
        let verdict = rt
            .block_on(store.check(&[Check::single(&limit, id.as_str(), 1)], TimeSource::Server))
            .unwrap();
        assert_eq!(verdict[0].decisions[0].limit, 200, "{id}");
    }
    for server in &servers {
        assert!(
            common::keys(&[server]).iter().any(|k| k.ends_with("}:ctl")),
            "12 identifiers land on both shards"
        );
    }
    admin.json(&["deny", "add", "country XX"]);
    for server in &servers {
        assert!(
            common::keys(&[server])
                .iter()
                .any(|k| k.contains(":list:deny")),
            "a list is kept on every shard"
        );
    }
    assert_eq!(
        admin.json(&["deny", "list"])["entries"][0]["entry"],
        "country XX"
    );
    drop(gateways);
}
