//! https from the default build: `upstash+https://` to the gateway serving TLS (a certificate
//! authority made at test time, trusted through `SSL_CERT_FILE` as an operator trusts a private
//! CA), and a certificate the CLI does not trust refused as a store failure.

mod common;

use common::{Admin, NAMESPACE};
use edgelimit::store::REST_TOKEN_VAR;
use edgelimit_testkit::dir::TempDir;
use edgelimit_testkit::tls::Authority;
use edgelimit_testkit::{gateway, task, RedisServer};

const TOKEN: &str = "admin-https-token-41d0";

#[test]
fn upstash_https_works_from_the_default_build() {
    let server = RedisServer::start();
    let dir = TempDir::new("admin-https");
    let authority = Authority::new("admin");
    let files = authority.server_pair().gateway_files(&dir);
    let ca = authority.write_pem(&dir);
    let rt = task::runtime();
    let mut config = gateway::config(server.url(), TOKEN);
    config.tls = Some(files);
    let gateway = rt
        .block_on(edgelimit_gateway::Gateway::start(config))
        .expect("gateway starts");
    let store = format!("upstash+https://127.0.0.1:{}", gateway.local_addr().port());
    let admin = Admin::new(&store).with_env(REST_TOKEN_VAR, TOKEN);

    let trusting = admin
        .clone()
        .with_env("SSL_CERT_FILE", ca.to_str().unwrap());
    let run = trusting.run(&["--json", "deny", "add", "country CN"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.json()["entry"], "country CN");
    // The deny list, written through https.
    assert_eq!(
        common::keys(&[&server]),
        vec![format!("{{el:{NAMESPACE}:list:deny}}")]
    );

    // The system's roots alone do not know the test's authority: a store failure (exit 1).
    let stranger = TempDir::new("admin-https-stranger");
    let other = Authority::new("stranger").write_pem(&stranger);
    let untrusting = admin.with_env("SSL_CERT_FILE", other.to_str().unwrap());
    let run = untrusting.run(&["deny", "list"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(!run.stderr.contains("needs TLS"), "{run:?}");
    drop(gateway);
}

#[test]
fn https_worker_urls_are_taken_by_the_default_build() {
    // The Worker's admin route over https is refused only by a build without TLS; this one
    // gets as far as connecting (nothing listens on port 1).
    let config = common::CONFIG.replace(
        "namespace = \"admtest\"",
        "namespace = \"admtest\"\nadmin_path = \"/__edgelimit/admin\"",
    );
    let admin =
        Admin::worker("https://127.0.0.1:1", &config).with_env("EDGELIMIT_ADMIN_TOKEN", "t");
    let run = admin.run(&["deny", "list"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(!run.stderr.contains("needs TLS"), "{run:?}");
}
