//! The official `@upstash/redis` and `@upstash/ratelimit` npm packages, unchanged, drive the
//! gateway from node: base64 results, pipelines, multi-exec, EVAL/EVALSHA, the NOSCRIPT fall
//! back, ratelimit's `#!lua flags=allow-key-locking` scripts, and every documented feature of
//! `@upstash/ratelimit` 2.2 (deny lists, dynamic limits, getRemaining/resetUsedTokens, analytics,
//! blockUntilReady, multi-region) through the allow-list an operator serving them sets (the
//! default widened by `UPSTASH_CLIENT_COMMANDS`, docs/gateway.md) and its ACL user.
//! `scripts/test` installs them (`npm ci` in `gateway/tests/js`).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use edgelimit_gateway::config::UPSTASH_CLIENT_COMMANDS;
use edgelimit_gateway::Gateway;
use edgelimit_testkit::{gateway, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_upstash_clients_pass_unchanged() {
    let js = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/js");
    assert!(
        js.join("node_modules/@upstash/redis").is_dir(),
        "the Upstash clients are not installed: run scripts/test, or `npm ci` in {}",
        js.display()
    );
    let server = RedisServer::start();
    let token = "official-client-token";
    let mut config = gateway::config(server.url(), token);
    config
        .allowed
        .extend(UPSTASH_CLIENT_COMMANDS.iter().map(|c| c.to_string()));
    let gateway = Gateway::start(config).await.expect("gateway starts");
    let child = tokio::process::Command::new("node")
        .arg("client.mjs")
        .arg(gateway::url(&gateway))
        .arg(token)
        .current_dir(&js)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs");
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the client finishes within 60 s")
        .expect("node output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "official client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
    gateway.shutdown().await;
}
