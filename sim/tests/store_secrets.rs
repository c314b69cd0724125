//! A store's password never reaches what `sim` writes: a replay through a redis-server whose
//! ACL user has a password holding `@`, `:`, `%` and `/` names the store in its table, its JSON
//! and its HTML report with the password redacted, and so does the error of a wrong one.
//! Needs `redis-server` (`scripts/test` installs it).

use std::process::Command;

use edgelimit_testkit::dir::TempDir;
use edgelimit_testkit::RedisServer;

/// The ACL user's password, and as the URL carries it (percent-encoded).
const PASSWORD: &str = "S3cr@t:%pw/x";
const ENCODED: &str = "S3cr%40t%3A%25pw%2Fx";

fn sim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sim"))
}

/// Every form of the password a leak could take.
fn leaks(text: &str) -> bool {
    [PASSWORD, ENCODED, "S3cr"]
        .iter()
        .any(|form| text.contains(form))
}

#[test]
fn reports_name_the_store_without_its_password() {
    let redis = RedisServer::start();
    redis
        .command(&[
            "ACL",
            "SETUSER",
            "sim",
            "on",
            &format!(">{PASSWORD}"),
            "~*",
            "&*",
            "+@all",
        ])
        .expect("an ACL user");
    let dir = TempDir::new("sim-store-secrets");
    let trace = dir.join("trace.csv");
    let generated = sim()
        .args([
            "generate", "boundary", "--limit", "5", "--window", "1s", "--rounds", "2",
        ])
        .output()
        .unwrap();
    assert!(generated.status.success());
    std::fs::write(&trace, &generated.stdout).unwrap();
    let (json, html) = (dir.join("out.json"), dir.join("out.html"));
    let store = format!("redis://sim:{ENCODED}@127.0.0.1:{}", redis.port());
    let out = sim()
        .arg("replay")
        .arg(&trace)
        .args(["--format", "csv", "--key", "ip", "--policy", "fixed 5/1s"])
        .args(["--store", &store])
        .arg("--json")
        .arg(&json)
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    assert!(out.status.success(), "{stderr}");
    let shown = format!("redis://sim:***@127.0.0.1:{}", redis.port());
    let json = std::fs::read_to_string(&json).unwrap();
    let html = std::fs::read_to_string(&html).unwrap();
    for (what, text) in [("table", &stdout), ("JSON", &json), ("HTML", &html)] {
        assert!(!leaks(text), "the password is in the {what}:\n{text}");
    }
    assert!(stdout.contains(&shown), "{stdout}");
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(report["store"], shown.as_str());
    assert_eq!(
        report["store_mismatches"], 0,
        "the replay did run on the store"
    );
    assert!(html.contains(&shown), "the HTML names the store");
    assert!(!leaks(&stderr), "{stderr}");

    // A wrong password: the error names the store, not the password given.
    let wrong = format!("redis://sim:{ENCODED}9@127.0.0.1:{}", redis.port());
    let out = sim()
        .arg("replay")
        .arg(&trace)
        .args(["--format", "csv", "--key", "ip", "--policy", "fixed 5/1s"])
        .args(["--store", &wrong])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("sim:***@127.0.0.1"), "{stderr}");
    assert!(!leaks(&stderr), "{stderr}");
    // An unknown scheme is refused without quoting the password either.
    let out = sim()
        .arg("replay")
        .arg(&trace)
        .args(["--store", &format!("memcached://sim:{ENCODED}@127.0.0.1:1")])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("unknown store"),
        "{stderr}"
    );
    assert!(!leaks(&stderr), "{stderr}");
}
