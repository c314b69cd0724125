//! `sim suggest` and `--threads` through the binary: the documented flags, the JSON's
//! `suggestions` array, replays alike on any thread count, and clear errors.

use std::process::Command;

use edgelimit_testkit::dir::TempDir;

fn sim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sim"))
}

fn trace() -> String {
    format!("{}/data/apache_logs.gz", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn suggest_writes_a_suggestion_per_algorithm_and_window() {
    let dir = TempDir::new("sim-suggest");
    let json = dir.join("s.json");
    let html = dir.join("s.html");
    let out = sim()
        .args(["suggest", &trace(), "--window", "10s", "--window", "1m"])
        .args(["--spare", "0.1%", "--by", "clients", "--threads", "2"])
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
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("sliding-log 75/1m"), "{text}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let suggestions = report["suggestions"].as_array().unwrap();
    assert_eq!(suggestions.len(), 10);
    for s in suggestions {
        for field in [
            "algorithm",
            "policy",
            "clients_denied",
            "requests_denied",
            "curve",
        ] {
            assert!(!s[field].is_null(), "{field} in {s}");
        }
        // The policy is a spec `--policy` takes.
        let spec = s["policy"].as_str().unwrap();
        let replay = sim()
            .args(["replay", &trace(), "-q", "--policy", spec])
            .output()
            .unwrap();
        assert!(replay.status.success(), "{spec}");
    }
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("Clients denied against the limit") && page.contains("<circle"));
}

#[test]
fn suggest_refuses_a_bad_share_naming_it() {
    let out = sim()
        .args(["suggest", &trace(), "--spare", "150%"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--spare `150%`"), "{err}");
    let out = sim()
        .args(["replay", &trace(), "--threads", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 or more"));
}

#[test]
fn replay_prints_the_same_on_one_and_many_threads() {
    let dir = TempDir::new("sim-threads");
    let run = |threads: &str| {
        let json = dir.join(&format!("r{threads}.json"));
        let out = sim()
            .args(["replay", &trace(), "--threads", threads, "--json"])
            .arg(&json)
            .output()
            .unwrap();
        assert!(out.status.success());
        let strip = |s: String| {
            s.lines()
                .filter(|l| {
                    !l.contains("replayed in")
                        && !l.contains("elapsed_ms")
                        && !l.contains("report:")
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        (
            strip(String::from_utf8(out.stdout).unwrap()),
            strip(std::fs::read_to_string(&json).unwrap()),
        )
    };
    assert_eq!(run("1"), run("4"));
}
