//! The bundled real trace: the default run completes and its numbers hang together.

use edgelimit::Policy;
use edgelimit_sim::bundled;
use edgelimit_sim::policy::StoreChoice;
use edgelimit_sim::policy::{html, table};
use edgelimit_sim::policy::{run, RunOptions};
use edgelimit_sim::readers::ReadOptions;

fn default_run() -> edgelimit_sim::policy::Report {
    run(&RunOptions {
        source: bundled::source(),
        read: ReadOptions::default(),
        policies: bundled::DEFAULT_POLICIES
            .iter()
            .map(|s| s.parse::<Policy>().unwrap())
            .collect(),
        store: StoreChoice::Memory,
        progress: false,
        boundaries: true,
        threads: 1,
    })
    .unwrap()
}

#[test]
fn the_default_run_is_consistent() {
    let report = default_run();
    let t = &report.trace;
    assert_eq!(
        (t.events, t.lines, t.bad_lines, t.clients),
        (10_000, 10_000, 0, 1_753)
    );
    // Lines are shuffled within each minute; the 60 s buffer puts every one back in place.
    assert!(t.reorder.reordered > 0);
    assert_eq!(t.reorder.late_clamped, 0);
    assert_eq!(report.policies.len(), 5);
    for p in &report.policies {
        assert_eq!(p.requests, 10_000, "{}", p.spec);
        assert_eq!(p.admitted + p.denied, p.requests, "{}", p.spec);
        assert!(p.denied > 0, "{} should bind on this trace", p.spec);
        assert_eq!(p.per_client.clients, 1_753);
        assert_eq!(
            p.per_client
                .histogram
                .iter()
                .map(|b| b.clients)
                .sum::<u64>(),
            1_753
        );
        assert!(p.worst_window.is_some());
    }
    let log = &report.policies[1];
    assert_eq!(log.spec, "sliding-log 10/10s");
    assert_eq!((log.false_allows, log.false_denies), (0, 0));
    assert_eq!(log.max_admitted_in_window, 10);
    assert_eq!(log.rate_error_pct, Some(0.0));
    let fixed = &report.policies[0];
    assert!(fixed.max_admitted_in_window > 10 && fixed.max_admitted_in_window <= 20);
    // Token bucket and GCRA decide identically (docs/design.md §2).
    let (tb, gcra) = (&report.policies[3], &report.policies[4]);
    assert_eq!(
        (
            tb.admitted,
            tb.false_allows,
            tb.false_denies,
            tb.max_admitted_in_window
        ),
        (
            gcra.admitted,
            gcra.false_allows,
            gcra.false_denies,
            gcra.max_admitted_in_window
        )
    );
    assert_eq!(report.boundaries.len(), 5);
}

#[test]
fn the_reports_render() {
    let report = default_run();
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    for key in [
        "spec",
        "requests",
        "admitted",
        "denied",
        "max_admitted_in_window",
        "false_allows",
        "false_denies",
    ] {
        assert!(json["policies"][0].get(key).is_some(), "missing {key}");
    }
    let text = table::render(&report);
    assert!(text.contains("fixed 10/10s"));
    let page = html::render(&report);
    assert!(page.starts_with("<!doctype html>"));
    assert_eq!(page.matches("<svg").count(), 1 + 5 + 5);
    // Self-contained: nothing is fetched.
    assert!(!page.contains("src=\"http") && !page.contains("href=\"http"));
}

#[test]
fn the_bundled_trace_is_the_documented_file() {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(bundled::TRACE)
        .read_to_end(&mut text)
        .unwrap();
    let digest: String = Sha256::digest(&text)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    // The sha256 given in sim/data/README.md (elastic/examples, commit 6d86454e).
    assert_eq!(
        digest,
        "f15c31e905f86c7b4b6ab44aee74d0a2086dce89f010187d983edea7ef0364ef"
    );
}
