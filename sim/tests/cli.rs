//! The `sim` binary's documented interface, which scripts depend on.

use std::process::Command;

use edgelimit_testkit::dir::TempDir;

fn sim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sim"))
}

#[test]
fn generate_then_replay_with_the_documented_flags() {
    let dir = TempDir::new("sim-cli");
    let trace = dir.join("attack.csv");
    let out = sim()
        .args([
            "generate", "boundary", "--limit", "5", "--window", "1s", "--rounds", "2",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&trace, &out.stdout).unwrap();
    let json = dir.join("out.json");
    let html = dir.join("out.html");
    let out = sim()
        .arg("replay")
        .arg(&trace)
        .args(["--format", "csv", "--key", "ip"])
        .args(["--policy", "fixed 5/1s", "--policy", "sliding-log 5/1s"])
        .args(["--store", "memory"])
        .arg("--json")
        .arg(&json)
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.contains("fixed 5/1s") && table.contains("2.00×"),
        "{table}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let p = &report["policies"];
    assert_eq!(p[0]["spec"], "fixed 5/1s");
    assert_eq!(p[0]["max_admitted_in_window"], 10);
    assert_eq!(p[1]["max_admitted_in_window"], 5);
    assert_eq!(p[0]["requests"], 20);
    assert!(std::fs::read_to_string(&html).unwrap().contains("<svg"));
}

#[test]
fn errors_name_the_problem() {
    let out = sim()
        .args(["replay", "/nonexistent/trace.log"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/trace.log"), "{err}");

    let out = sim()
        .args(["replay", "-", "--policy", "fixed 0/1s"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid policy `fixed 0/1s`"));

    let out = sim()
        .args(["replay", "x", "--store", "memcached://x"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown store"));
}
