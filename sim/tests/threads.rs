//! `--threads`: a memory replay split by client over threads reports exactly what one thread
//! does — the JSON, the page and the table byte for byte (the wall time aside, which differs
//! between any two runs) — on the bundled trace and on generated traces, with every algorithm,
//! a concurrency policy among them, and more threads than the machine has cores.

use std::io::Write;
use std::path::PathBuf;

use edgelimit::Policy;
use edgelimit_sim::bundled;
use edgelimit_sim::generate::{write_csv, Generator, Kind};
use edgelimit_sim::input::Source;
use edgelimit_sim::policy::{html, run, table, Report, RunOptions, StoreChoice};
use edgelimit_sim::readers::ReadOptions;

const POLICIES: [&str; 7] = [
    "fixed 10/10s",
    "sliding-log 10/10s",
    "sliding-counter 10/10s",
    "token-bucket 1/1s burst 10",
    "gcra 1/1s burst 10",
    "concurrency 3 timeout 2s",
    "sliding-log 100/1m",
];

fn replay(source: &Source, threads: usize) -> Report {
    let mut report = run(&RunOptions {
        source: source.clone(),
        read: ReadOptions::default(),
        policies: POLICIES
            .iter()
            .map(|s| s.parse::<Policy>().unwrap())
            .collect(),
        store: StoreChoice::Memory,
        progress: false,
        boundaries: true,
        threads,
    })
    .unwrap();
    report.elapsed_ms = 0;
    report
}

fn assert_same_on_any_threads(source: &Source) {
    let one = replay(source, 1);
    let (json, page, text) = (one.to_json(), html::render(&one), table::render(&one));
    // The run must bind, or equal reports would prove little.
    assert!(one
        .policies
        .iter()
        .any(|p| p.denied > 0 && p.false_allows > 0));
    for threads in [2, 3, 8] {
        let many = replay(source, threads);
        assert_eq!(json, many.to_json(), "{threads} threads: JSON");
        assert_eq!(page, html::render(&many), "{threads} threads: HTML");
        assert_eq!(text, table::render(&many), "{threads} threads: table");
    }
}

#[test]
fn the_bundled_trace_replays_the_same_on_any_number_of_threads() {
    assert_same_on_any_threads(&bundled::source());
}

#[test]
fn generated_traces_replay_the_same_on_any_number_of_threads() {
    for (seed, kind) in [
        Kind::HeavyTailed {
            rate: 500.0,
            clients: 3_000,
            alpha: 1.1,
        },
        Kind::Bursty {
            rate: 300.0,
            clients: 50,
            burst_factor: 20.0,
            period_ms: 3_000.0,
        },
    ]
    .into_iter()
    .enumerate()
    {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        let events = Generator::new(kind, seed as u64 + 3, 60_000, 1_700_000_000_000);
        write_csv(events, &mut file).unwrap();
        file.flush().unwrap();
        assert_same_on_any_threads(&Source::File(PathBuf::from(file.path())));
    }
}
