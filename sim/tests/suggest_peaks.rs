//! `sim suggest`'s recommendation against computations written here: per window, the number of
//! clients and the percentiles of their peak rates (p50, p90, p99, max; nearest rank) equal this
//! file's own, counted request by request over each client's requests; the sliding log's
//! suggestion is the peak it names; the configuration to paste parses as the Worker's, one shadow
//! rule per window; and replaying it through the binary, a window's shadow rule alone would
//! have refused exactly the requests its suggestion denies.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

use edgelimit_engine::config::file as config_file;
use edgelimit_sim::bundled;
use edgelimit_sim::generate::{Generator, Kind};
use edgelimit_sim::input::Source;
use edgelimit_sim::readers::{ReadOptions, RequestOptions, TraceReader};
use edgelimit_sim::suggest::{run_suggest, table, By, SuggestOptions, SuggestReport};
use edgelimit_testkit::dir::TempDir;

/// Each client's `(time_ms, cost)`s in trace order.
fn by_client(source: &Source) -> Vec<Vec<(u64, i64)>> {
    let reader = TraceReader::open(source, ReadOptions::default(), Default::default()).unwrap();
    let mut clients: BTreeMap<u32, Vec<(u64, i64)>> = BTreeMap::new();
    for ev in reader {
        let ev = ev.unwrap();
        clients
            .entry(ev.client)
            .or_default()
            .push((ev.time_ms, ev.cost));
    }
    clients.into_values().collect()
}

/// The most one client sent within `window` ms: at each of its requests, the cost of its
/// requests in the `window` ms up to and including it (one exactly `window` old no longer
/// counts).
fn peak(requests: &[(u64, i64)], window: u64) -> u64 {
    (0..requests.len())
        .map(|i| {
            let t = requests[i].0;
            requests[..=i]
                .iter()
                .filter(|&&(s, _)| s + window > t)
                .map(|&(_, c)| c as u64)
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0)
}

/// The least peak that at least `percent`% of the clients are at or below.
fn nearest_rank(peaks: &[u64], percent: u64) -> u64 {
    let n = peaks.len() as u64;
    let mut distinct: Vec<u64> = peaks.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    distinct
        .into_iter()
        .find(|&v| peaks.iter().filter(|&&p| p <= v).count() as u64 * 100 >= percent * n)
        .unwrap()
}

fn suggest(source: Source, windows: &[u64], by: By, spare: &str) -> SuggestReport {
    run_suggest(&SuggestOptions {
        source,
        read: ReadOptions::default(),
        request: RequestOptions::default(),
        config: None,
        windows: windows.to_vec(),
        by,
        spare: spare.parse().unwrap(),
        threads: 2,
        progress: false,
    })
    .unwrap()
}

/// Holds each window's peak rates to this file's own count of `clients`' peaks.
fn check(report: &SuggestReport, clients: &[Vec<(u64, i64)>], windows: &[u64]) {
    assert_eq!(report.peaks.len(), windows.len());
    for (rates, &window) in report.peaks.iter().zip(windows) {
        assert_eq!(rates.window_ms, window);
        let peaks: Vec<u64> = clients.iter().map(|c| peak(c, window)).collect();
        let what = format!("{} window", rates.window);
        assert_eq!(rates.clients, peaks.len() as u64, "{what}");
        assert_eq!(
            [rates.p50, rates.p90, rates.p99, rates.max],
            [
                nearest_rank(&peaks, 50),
                nearest_rank(&peaks, 90),
                nearest_rank(&peaks, 99),
                *peaks.iter().max().unwrap(),
            ],
            "{what}: p50, p90, p99, max"
        );
        for d in &rates.distribution {
            let n = peaks.iter().filter(|&&p| p == d.peak).count() as u64;
            assert_eq!(d.clients, n, "{what}: clients at peak {}", d.peak);
        }
        let listed: u64 = rates.distribution.iter().map(|d| d.clients).sum();
        assert_eq!(listed, peaks.len() as u64, "{what}: every client listed");
        // The suggestion drawn is the sliding log's at this window.
        let sliding = report
            .suggestions
            .iter()
            .find(|s| s.algorithm == "sliding-log" && s.window_ms == window)
            .unwrap();
        assert_eq!(rates.suggested, sliding.policy, "{what}");
        let limit = rates.suggested_limit.unwrap();
        let above = peaks.iter().filter(|&&p| p > limit).count() as u64;
        assert_eq!(rates.clients_above, Some(above), "{what}");
        // A sliding log denies exactly the clients whose peak is above its limit.
        assert_eq!(sliding.clients_denied, Some(above), "{what}");
    }
}

#[test]
fn the_bundled_trace_peaks_are_the_clients_own() {
    let clients = by_client(&bundled::source());
    let windows = [1_000, 10_000, 60_000, 3_600_000];
    let report = suggest(bundled::source(), &windows, By::Clients, "0.1%");
    check(&report, &clients, &windows);
    // 0.1% of the clients may be denied: the limit is the (allowed + 1)-th largest peak.
    let allowed = clients.len() as u64 / 1000;
    for rates in &report.peaks {
        let mut peaks: Vec<u64> = clients.iter().map(|c| peak(c, rates.window_ms)).collect();
        peaks.sort_unstable_by(|a, b| b.cmp(a));
        assert_eq!(rates.suggested_limit, Some(peaks[allowed as usize]));
    }
    // The terminal table shows them: `window clients p50 p90 p99 max suggested …`.
    let text = table::render(&report);
    let minute = &report.peaks[2];
    let shown: Vec<String> = [
        minute.clients,
        minute.p50,
        minute.p90,
        minute.p99,
        minute.max,
    ]
    .iter()
    .map(u64::to_string)
    .collect();
    assert!(
        text.lines().any(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words.first() == Some(&"1m") && words.len() > 5 && words[1..6] == shown[..]
        }),
        "no 1m row of {shown:?} in\n{text}"
    );
}

/// A generated trace as a CSV file, costs 1–3 when `costly`.
fn generated(kind: Kind, seed: u64, costly: bool) -> (tempfile::NamedTempFile, Source) {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "timestamp_ms,client,cost").unwrap();
    for (i, ev) in Generator::new(kind, seed, 3_000, 1_700_000_000_000).enumerate() {
        let cost = if costly { 1 + (i as u64 * 7 % 3) } else { 1 };
        writeln!(file, "{},c{},{cost}", ev.time_ms, ev.client).unwrap();
    }
    file.flush().unwrap();
    let source = Source::File(PathBuf::from(file.path()));
    (file, source)
}

#[test]
fn generated_traces_peaks_are_the_clients_own_with_unit_and_mixed_costs() {
    let kinds = [
        Kind::HeavyTailed {
            rate: 200.0,
            clients: 150,
            alpha: 1.1,
        },
        Kind::Bursty {
            rate: 100.0,
            clients: 40,
            burst_factor: 10.0,
            period_ms: 5_000.0,
        },
    ];
    for (seed, kind) in kinds.into_iter().enumerate() {
        for costly in [false, true] {
            let (_file, source) = generated(kind.clone(), seed as u64 + 3, costly);
            let clients = by_client(&source);
            let windows = [500, 1_000, 10_000];
            for spare in ["0", "5%"] {
                let report = suggest(source.clone(), &windows, By::Clients, spare);
                check(&report, &clients, &windows);
            }
        }
    }
}

#[test]
fn the_configuration_to_paste_is_one_shadow_rule_per_window() {
    let report = suggest(bundled::source(), &[1_000, 60_000], By::Clients, "0.1%");
    let block = report.configuration.as_deref().unwrap();
    let config = config_file::parse(block, "suggested").unwrap();
    assert_eq!(config.rules.len(), 2);
    for (rule, rates) in config.rules.iter().zip(&report.peaks) {
        assert_eq!(rule.name, format!("suggested-{}", rates.window));
        assert!(rule.shadow, "{}: in shadow", rule.name);
        assert_eq!(rule.limits.len(), 1);
        assert_eq!(
            Some(rule.limits[0].limit.policy.to_string()),
            rates.suggested
        );
    }
}

/// `sim suggest TRACE --window W… --write-config FILE`, then `sim replay TRACE --config FILE`:
/// the suggest JSON, the replay's JSON and the suggest text.
fn suggest_then_replay(
    dir: &TempDir,
    windows: &[&str],
) -> (serde_json::Value, serde_json::Value, String) {
    let trace = format!("{}/data/apache_logs.gz", env!("CARGO_MANIFEST_DIR"));
    let sim = || Command::new(env!("CARGO_BIN_EXE_sim"));
    let name = windows.join("-");
    let config = dir.join(&format!("suggested-{name}.toml"));
    let json = dir.join(&format!("suggest-{name}.json"));
    let mut suggest = sim();
    suggest.args(["suggest", &trace]);
    for w in windows {
        suggest.args(["--window", w]);
    }
    let out = suggest
        .arg("--write-config")
        .arg(&config)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let command = format!("sim replay {trace} --config {}", config.display());
    assert!(text.contains(&command), "no `{command}` in\n{text}");
    let replayed = dir.join(&format!("replay-{name}.json"));
    let out = sim()
        .args(["replay", &trace, "-q", "--config"])
        .arg(&config)
        .arg("--json")
        .arg(&replayed)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |path: &std::path::Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    (read(&json), read(&replayed), text)
}

/// The requests the sliding log's suggestion at `window` denies, and the replay's rule for it.
fn denied_and_rule(
    suggested: &serde_json::Value,
    replay: &serde_json::Value,
    window: &str,
) -> (serde_json::Value, serde_json::Value) {
    let denied = suggested["suggestions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["algorithm"] == "sliding-log" && s["window"] == window)
        .unwrap()["requests_denied"]
        .clone();
    let rule = replay["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == format!("suggested-{window}"))
        .unwrap()
        .clone();
    assert_eq!(rule["shadow"], true);
    (denied, rule)
}

#[test]
fn replaying_the_written_configuration_refuses_what_the_suggestion_denies() {
    let dir = TempDir::new("sim-suggest-paste");
    // One window alone: its shadow rule would have refused exactly what the suggestion denies,
    // and nothing is refused.
    for window in ["1m", "10s"] {
        let (suggested, replay, _) = suggest_then_replay(&dir, &[window]);
        // The only refusals are the trace's requests no origin reads unambiguously (refused
        // before any rule): the shadow rules add none.
        assert_eq!(
            replay["denied"], replay["ambiguous_requests"],
            "shadow rules refuse nothing"
        );
        let (denied, rule) = denied_and_rule(&suggested, &replay, window);
        assert_eq!(rule["denied"], denied, "{window}: {rule}");
    }
    // Several windows pasted together are decided together, as deployed: a request one shadow
    // limit denies is charged on none of the others, so each refuses at most what it does alone.
    let (suggested, replay, _) = suggest_then_replay(&dir, &["10s", "1m"]);
    assert_eq!(replay["denied"], replay["ambiguous_requests"]);
    for window in ["10s", "1m"] {
        let (denied, rule) = denied_and_rule(&suggested, &replay, window);
        assert!(
            rule["denied"].as_u64().unwrap() <= denied.as_u64().unwrap(),
            "{window}: {rule}"
        );
    }
}
