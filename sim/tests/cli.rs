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

/// A trace on standard input gives the same report, charts included, as the same trace in a
/// file: the charts' second pass reads a copy kept of what came in.
#[test]
fn a_trace_on_standard_input_gets_its_charts() {
    use std::io::Write;
    use std::process::Stdio;
    let dir = std::env::temp_dir().join(format!("sim-cli-stdin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = sim()
        .args([
            "generate", "boundary", "--limit", "5", "--window", "1s", "--rounds", "3",
        ])
        .output()
        .unwrap()
        .stdout;
    let file = dir.join("trace.csv");
    std::fs::write(&file, &trace).unwrap();
    let report = |source: &str, html: &std::path::Path| {
        // Only a replay of `-` reads its standard input: one of a file may have exited before
        // anything is written to it (a broken pipe).
        let piped = source == "-";
        let mut child = sim()
            .args(["replay", source, "--policy", "fixed 5/1s", "-q", "--html"])
            .arg(html)
            .stdin(if piped { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if piped {
            child.stdin.take().unwrap().write_all(&trace).unwrap();
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let page = std::fs::read_to_string(html).unwrap();
        // The wall time is the page's one moving part; the trace's name is the one it was given.
        let timed = page.find("replayed in").unwrap();
        let end = timed + page[timed..].find('.').unwrap();
        format!("{}{}", &page[..timed], &page[end..])
            .replace(&format!("<b>{source}</b>"), "<b>TRACE</b>")
    };
    let piped = report("-", &dir.join("piped.html"));
    let filed = report(file.to_str().unwrap(), &dir.join("filed.html"));
    assert!(
        piped.contains("<svg") && piped.contains("peak"),
        "charts drawn"
    );
    assert_eq!(piped, filed);
    std::fs::remove_dir_all(&dir).unwrap();
}
