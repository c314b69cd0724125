//! The CLI against a real redis-server (`redis://`): every shared behaviour (common/suite.rs),
//! and the failures only a single server shows simply.

mod common;

use common::suite::Backend;
use common::{Admin, Stored, NAMESPACE};
use edgelimit::RespStore;
use edgelimit_testkit::RedisServer;

fn with_backend(body: fn(&Backend<'_>)) {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = rt
        .block_on(RespStore::connect(&server.url()))
        .unwrap()
        .with_namespace(NAMESPACE);
    body(&Backend {
        admin: Admin::new(&server.url()),
        store: Box::new(store),
        rt: &rt,
        stored: Stored::Redis(vec![&server]),
    });
}

shared_suite!(with_backend);

#[test]
fn a_missing_store_fails_with_exit_1_and_a_missing_config_with_exit_2() {
    let mut gone = RedisServer::start();
    let admin = Admin::new(&gone.url());
    gone.stop();
    let run = admin.run(&["tier", "get", "per-ip", "203.0.113.7"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.starts_with("edgelimit-admin: store: "),
        "{run:?}"
    );
    // Bad input is found before the store is contacted: exit 2 even with no store.
    let run = admin.run(&["tier", "set", "per-ip", "203.0.113.7", "gold"]);
    assert_eq!(run.code, 2, "{run:?}");

    let mut missing = admin.clone();
    missing.config = missing.config.with_file_name("absent.toml");
    let run = missing.run(&["peek", "per-ip", "203.0.113.7"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.starts_with("edgelimit-admin: --config: "),
        "{run:?}"
    );
    let mut tls = admin.clone();
    tls.store = "rediss://127.0.0.1:1".into();
    let run = tls.run(&["peek", "per-ip", "203.0.113.7"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("TLS"), "{run:?}");

    // With --json the error is JSON too, on stderr.
    let run = admin.run(&["--json", "tier", "set", "per-ip", "203.0.113.7", "gold"]);
    assert_eq!(run.code, 2, "{run:?}");
    let error: serde_json::Value = serde_json::from_str(&run.stderr).unwrap();
    assert_eq!(error["argument"], "TIER");
    assert_eq!(error["exit_code"], 2);
    assert!(
        error["error"].as_str().unwrap().starts_with("TIER: "),
        "{error}"
    );
}
