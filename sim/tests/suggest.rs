//! `sim suggest` against computations written here: on the bundled trace and on generated
//! traces, every suggestion meets its target and the policy one step smaller does not, counted
//! by this file's own replay with the library's `step`; for the windows, the suggested limit is
//! the one this file's own per-client peak counts give (the sliding log's largest count in any
//! `W` ms, the fixed window's largest aligned count, the sliding counter's largest weighted
//! estimate). And the report is the same on any number of threads.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use edgelimit::algorithm::{step, State};
use edgelimit::{Algorithm, Policy};
use edgelimit_sim::bundled;
use edgelimit_sim::generate::{Generator, Kind};
use edgelimit_sim::input::Source;
use edgelimit_sim::readers::{ReadOptions, RequestOptions, TraceReader};
use edgelimit_sim::suggest::{html, run_suggest, table, By, SuggestOptions, SuggestReport};

/// Each client's `(time_ms, cost)`s, read from `source` (the reader's ids; names do not matter).
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

/// Requests `policy` denies of one client's.
fn denied(policy: &Policy, requests: &[(u64, i64)]) -> u64 {
    let mut state: Option<State> = None;
    let mut denied = 0;
    for &(t, c) in requests {
        let s = step(policy, state.take(), t, c);
        denied += u64::from(!s.decision.allowed);
        state = s.state;
    }
    denied
}

/// Clients and requests `spec` denies.
fn count(spec: &str, clients: &[Vec<(u64, i64)>]) -> (u64, u64) {
    let policy: Policy = spec.parse().unwrap();
    let per: Vec<u64> = clients.iter().map(|c| denied(&policy, c)).collect();
    (
        per.iter().filter(|&&d| d > 0).count() as u64,
        per.iter().sum(),
    )
}

/// A client's peak under each window algorithm admitting everything: the least limit that never
/// denies it.
fn peak(algorithm: Algorithm, window: u64, requests: &[(u64, i64)]) -> u64 {
    let mut best = 0u64;
    match algorithm {
        Algorithm::SlidingLog => {
            for (i, &(t, _)) in requests.iter().enumerate() {
                let sum: i64 = requests[..=i]
                    .iter()
                    .filter(|&&(s, _)| s + window > t)
                    .map(|&(_, c)| c)
                    .sum();
                best = best.max(sum as u64);
            }
        }
        Algorithm::FixedWindow => {
            let mut windows: BTreeMap<u64, u64> = BTreeMap::new();
            for &(t, c) in requests {
                *windows.entry(t / window).or_default() += c as u64;
            }
            best = windows.into_values().max().unwrap_or(0);
        }
        Algorithm::SlidingCounter => {
            // p·(W − e) + (q + c)·W ≤ L·W at every request, everything admitted.
            let mut windows: BTreeMap<u64, u64> = BTreeMap::new();
            for &(t, c) in requests {
                let k = t / window;
                let e = t - k * window;
                let p = k.checked_sub(1).and_then(|k| windows.get(&k)).copied();
                let q = windows.get(&k).copied().unwrap_or(0);
                let need = p.unwrap_or(0) * (window - e) + (q + c as u64) * window;
                best = best.max(need.div_ceil(window));
                *windows.entry(k).or_default() += c as u64;
            }
        }
        _ => unreachable!("not a window"),
    }
    best.max(1)
}

fn suggest(source: Source, windows: &[u64], by: By, spare: &str, threads: usize) -> SuggestReport {
    run_suggest(&SuggestOptions {
        source,
        read: ReadOptions::default(),
        request: RequestOptions::default(),
        config: None,
        windows: windows.to_vec(),
        by,
        spare: spare.parse().unwrap(),
        threads,
        progress: false,
    })
    .unwrap()
}

/// Holds every suggestion of `report` to its target with this file's own counts.
fn check(report: &SuggestReport, clients: &[Vec<(u64, i64)>], by: By) {
    let requests: u64 = clients.iter().map(|c| c.len() as u64).sum();
    let total = match by {
        By::Clients => clients.len() as u64,
        By::Requests => requests,
    };
    let spare = report.spare_fraction;
    let allowed = (total as f64 * spare + 1e-9).floor() as u64;
    assert_eq!(report.suggestions.len() % 5, 0);
    for s in &report.suggestions {
        let spec = s.policy.as_deref().expect("a suggestion");
        let (c, r) = count(spec, clients);
        assert_eq!(
            (s.clients_denied, s.requests_denied),
            (Some(c), Some(r)),
            "{spec}"
        );
        let measure = |(c, r): (u64, u64)| if by == By::Clients { c } else { r };
        assert!(
            measure((c, r)) <= allowed,
            "{spec}: {c} clients, {r} requests"
        );
        match &s.one_less {
            Some(less) => {
                let (lc, lr) = count(&less.policy, clients);
                assert_eq!((less.clients_denied, less.requests_denied), (lc, lr));
                assert!(
                    measure((lc, lr)) > allowed,
                    "{}: meets the target",
                    less.policy
                );
            }
            None => assert_eq!(s.suggested_limit, Some(1), "{spec}: no one less"),
        }
        let algorithm: Algorithm = s.algorithm.parse().unwrap();
        if algorithm.takes_burst() || by == By::Requests {
            continue;
        }
        // The windows: the limit is the (allowed + 1)-th largest peak, the curve counts peaks.
        let mut peaks: Vec<u64> = clients
            .iter()
            .map(|c| peak(algorithm, s.window_ms, c))
            .collect();
        peaks.sort_unstable_by(|a, b| b.cmp(a));
        let expected = peaks.get(allowed as usize).copied().unwrap_or(1);
        assert_eq!(s.suggested_limit, Some(expected), "{spec}");
        for p in &s.curve {
            let above = peaks.iter().filter(|&&k| k > p.limit).count() as u64;
            assert_eq!(p.clients_denied, above, "{spec} curve at {}", p.limit);
        }
    }
}

#[test]
fn the_bundled_trace_suggestions_meet_the_target_and_one_less_does_not() {
    let clients = by_client(&bundled::source());
    for (by, spare) in [
        (By::Clients, "0.1%"),
        (By::Clients, "1%"),
        (By::Requests, "0.5%"),
    ] {
        let report = suggest(bundled::source(), &[10_000, 60_000], by, spare, 2);
        assert_eq!(report.suggestions.len(), 10);
        check(&report, &clients, by);
    }
}

/// A generated trace as a CSV file, costs 1–3 when `costly`.
fn generated(
    kind: Kind,
    seed: u64,
    events: u64,
    costly: bool,
) -> (tempfile::NamedTempFile, Source) {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "timestamp_ms,client,cost").unwrap();
    for (i, ev) in Generator::new(kind, seed, events, 1_700_000_000_000).enumerate() {
        let cost = if costly { 1 + (i as u64 * 7 % 3) } else { 1 };
        writeln!(file, "{},c{},{cost}", ev.time_ms, ev.client).unwrap();
    }
    file.flush().unwrap();
    let source = Source::File(PathBuf::from(file.path()));
    (file, source)
}

#[test]
fn generated_trace_suggestions_meet_the_target_and_one_less_does_not() {
    let kinds = [
        Kind::HeavyTailed {
            rate: 200.0,
            clients: 60,
            alpha: 1.1,
        },
        Kind::Bursty {
            rate: 100.0,
            clients: 30,
            burst_factor: 10.0,
            period_ms: 5_000.0,
        },
    ];
    for (seed, kind) in kinds.into_iter().enumerate() {
        for costly in [false, true] {
            let (_file, source) = generated(kind.clone(), seed as u64 + 1, 4_000, costly);
            let clients = by_client(&source);
            for (by, spare) in [
                (By::Clients, "0"),
                (By::Clients, "10%"),
                (By::Requests, "2%"),
            ] {
                let report = suggest(source.clone(), &[1_000, 10_000], by, spare, 3);
                check(&report, &clients, by);
            }
        }
    }
}

#[test]
fn by_requests_finds_the_least_limit_with_unit_and_mixed_costs() {
    // With mixed costs a larger limit can deny more requests (`suggest_monotone.rs`) and the
    // search scans; with unit costs it bisects. Either way every limit below the suggestion is
    // counted here and misses the target.
    for costly in [true, false] {
        let (_file, source) = generated(
            Kind::HeavyTailed {
                rate: 200.0,
                clients: 40,
                alpha: 1.1,
            },
            9,
            3_000,
            costly,
        );
        let clients = by_client(&source);
        let requests: u64 = clients.iter().map(|c| c.len() as u64).sum();
        let report = suggest(source, &[1_000], By::Requests, "1%", 2);
        let allowed = requests / 100;
        for s in &report.suggestions {
            let algorithm: Algorithm = s.algorithm.parse().unwrap();
            let limit = s.suggested_limit.unwrap();
            for l in 1..limit {
                let p = Policy::new(algorithm, l, 1_000, None).unwrap();
                let (_, r) = count(&p.to_string(), &clients);
                assert!(
                    r > allowed,
                    "{p} denies {r} requests, within {allowed}: a smaller answer"
                );
            }
        }
    }
}

#[test]
fn the_report_is_the_same_on_any_number_of_threads() {
    let (_file, source) = generated(
        Kind::HeavyTailed {
            rate: 300.0,
            clients: 200,
            alpha: 1.2,
        },
        4,
        6_000,
        false,
    );
    for src in [bundled::source(), source] {
        for by in [By::Clients, By::Requests] {
            let one = suggest(src.clone(), &[1_000, 60_000], by, "1%", 1);
            for threads in [2, 5] {
                let many = suggest(src.clone(), &[1_000, 60_000], by, "1%", threads);
                assert_eq!(one.to_json(), many.to_json(), "{threads} threads");
                assert_eq!(table::render(&one), table::render(&many));
                assert_eq!(html::render(&one), html::render(&many));
            }
        }
    }
}

#[test]
fn a_configuration_gets_a_policy_line_per_rate_limit() {
    let config = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/three-rules.toml");
    let report = run_suggest(&SuggestOptions {
        source: bundled::source(),
        read: ReadOptions::default(),
        request: RequestOptions::default(),
        config: Some(config),
        windows: Vec::new(),
        by: By::Clients,
        spare: "0.1%".parse().unwrap(),
        threads: 2,
        progress: false,
    })
    .unwrap();
    let limits: Vec<(&str, &str, &str)> = report
        .suggestions
        .iter()
        .map(|s| {
            (
                s.limit.as_deref().unwrap(),
                s.algorithm.as_str(),
                s.window.as_str(),
            )
        })
        .collect();
    assert_eq!(
        limits,
        vec![
            ("per-ip", "sliding-log", "10s"),
            ("per-ip-minute", "fixed", "1m"),
            ("images-ip", "fixed", "1m"),
            ("slides-agent", "fixed", "10s"),
        ]
    );
    // Every request is limited per IP by `per-ip`: the same stream as `--key ip`.
    let clients = by_client(&bundled::source());
    let per_ip = &report.suggestions[0];
    let mut peaks: Vec<u64> = clients
        .iter()
        .map(|c| peak(Algorithm::SlidingLog, 10_000, c))
        .collect();
    peaks.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(per_ip.suggested_limit, Some(peaks[1]));
    assert_eq!(
        per_ip.config_line().unwrap(),
        format!("policy = \"sliding-log {}/10s\"", peaks[1])
    );
    let text = table::render(&report);
    assert!(
        text.contains("per-ip (rules site): policy = \"sliding-log"),
        "{text}"
    );
}
