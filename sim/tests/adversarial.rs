//! The adversarial suite in a replay: `sim replay --config` reads a trace as the Worker reads its
//! requests, so an attack in the trace is counted as the Worker answers it — a field sent twice
//! (an NDJSON `header:`/`query:` key holding an array) refused and counted apart, every spelling
//! of a rule's path under the rule, a request without its identifier counted by its address —
//! never more than the limit (docs/security.md).

use std::process::Command;

use edgelimit_testkit::dir::TempDir as Dir;
use serde_json::{json, Value};

/// An hour boundary (epoch ms): every request below falls in one fixed window.
const T0: u64 = 1_699_999_200_000;

/// Replays `lines` (NDJSON objects) with `config`; the JSON report.
fn replay(config: &str, lines: &[Value]) -> Value {
    let dir = Dir::new("sim-adversarial");
    let trace: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let trace = dir.write("trace.ndjson", &trace);
    let config = dir.write("config.toml", config);
    let json = dir.join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_sim"))
        .arg("replay")
        .arg(&trace)
        .arg("--config")
        .arg(&config)
        .arg("-q")
        .arg("--json")
        .arg(&json)
        .output()
        .expect("sim runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

fn line(i: u64, ip: &str, path: &str) -> Value {
    json!({"timestamp_ms": T0 + i, "method": "GET", "host": "api.example.com", "path": path, "ip": ip})
}

const PER_TENANT: &str = r#"
[[rules]]
name = "api"
path_prefix = "/api/"
limits = [{ name = "per-tenant", policy = "fixed 3/1h", identifier = "header:x-tenant" }]
"#;

#[test]
fn a_field_sent_twice_is_refused_and_counted() {
    let lines: Vec<Value> = (0..10)
        .map(|i| {
            let mut l = line(i, "198.51.100.1", "/api/x");
            l["header:x-tenant"] = json!(["acme", format!("r{i}")]);
            l
        })
        .collect();
    let report = replay(PER_TENANT, &lines);
    assert_eq!(report["admitted"], 0, "{report}");
    assert_eq!(report["ambiguous_requests"], 10);
    assert_eq!(report["statuses"]["400"], 10);
    // One value holding a comma is two lines to the Worker, whose runtime joins them so.
    let joined: Vec<Value> = (0..10)
        .map(|i| {
            let mut l = line(i, "198.51.100.1", "/api/x");
            l["header:x-tenant"] = json!(format!("acme, r{i}"));
            l
        })
        .collect();
    assert_eq!(replay(PER_TENANT, &joined)["ambiguous_requests"], 10);
}

#[test]
fn every_spelling_of_a_rules_path_is_under_the_rule() {
    // Before: `sim` counted 5 of these 10 under the rule.
    let config = r#"
[[rules]]
name = "api"
path_prefix = "/api/"
limits = [{ name = "per-ip", policy = "fixed 2/1h", identifier = "ip" }]
"#;
    let spellings = [
        "/api/x",
        "/%61pi/x",
        "//api/x",
        "/a%70i/x",
        "/api//x",
        "/x/../api/x",
        "/%2e/api/x",
        "/ap%69/x",
        "/api/./x",
        "/API/../api/x",
    ];
    let lines: Vec<Value> = spellings
        .iter()
        .enumerate()
        .map(|(i, path)| line(i as u64, "198.51.100.2", path))
        .collect();
    let report = replay(config, &lines);
    assert_eq!(report["admitted"], 2, "{report}");
    assert_eq!(report["statuses"]["429"], 8);
}

#[test]
fn a_request_without_its_identifier_is_counted_by_its_address() {
    let mut lines: Vec<Value> = (0..10).map(|i| line(i, "198.51.100.3", "/api/x")).collect();
    lines.push(line(10, "198.51.100.4", "/api/x"));
    let report = replay(PER_TENANT, &lines);
    // Three of the first client's, and the other client's one.
    assert_eq!(report["admitted"], 4, "{report}");
}
