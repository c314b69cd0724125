//! The boundary attack: a fixed window admits exactly 2×limit within one window's span, as its
//! documentation predicts, while the sliding log admits exactly the limit.

use edgelimit::Policy;
use edgelimit_sim::generate::{write_csv, Generator, Kind};
use edgelimit_sim::policy::Replay;
use edgelimit_sim::readers::{ReadOptions, TraceReader};
use edgelimit_sim::Interner;

fn attack(limit: u64, window_ms: u64, rounds: u64) -> Generator {
    Generator::new(
        Kind::Boundary {
            limit,
            window_ms,
            rounds,
        },
        0,
        0,
        1_700_000_000_000,
    )
}

#[test]
fn fixed_window_admits_twice_the_limit_sliding_log_exactly_the_limit() {
    for (limit, window_ms) in [(100, 60_000), (1, 1_000), (7, 10)] {
        let policies: Vec<Policy> = [
            format!("fixed {limit}/{window_ms}ms"),
            format!("sliding-log {limit}/{window_ms}ms"),
            format!("sliding-counter {limit}/{window_ms}ms"),
            format!("gcra {limit}/{window_ms}ms"),
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        let mut replay = Replay::new(&policies).unwrap();
        for ev in attack(limit, window_ms, 3) {
            replay.step(ev);
        }
        let mut names = Interner::new();
        names.intern(b"attacker");
        let r = replay.finish(&names);
        assert_eq!(
            r[0].max_admitted_in_window,
            2 * limit,
            "fixed {limit}/{window_ms}"
        );
        assert_eq!(r[0].max_window_multiple, 2.0);
        assert_eq!(r[0].admitted, 2 * limit * 3);
        assert_eq!(r[0].false_allows, limit * 3);
        assert_eq!(
            r[1].max_admitted_in_window, limit,
            "sliding-log {limit}/{window_ms}"
        );
        assert_eq!(r[1].admitted, limit * 3);
        assert_eq!((r[1].false_allows, r[1].false_denies), (0, 0));
        for p in &r {
            assert_eq!(p.admitted + p.denied, p.requests);
            assert_eq!(p.requests, 2 * limit * 3);
        }
        // The counter's weighted previous window stops the second burst; GCRA with burst = limit
        // admits the limit at once and nothing more until it drips back.
        assert!(r[2].max_admitted_in_window <= limit + 1, "{:?}", r[2]);
        assert_eq!(r[3].max_admitted_in_window, limit);
    }
}

#[test]
fn the_generated_csv_replays_the_same() {
    let mut csv = Vec::new();
    write_csv(attack(50, 60_000, 2), &mut csv).unwrap();
    let reader = TraceReader::from_reader(
        Box::new(std::io::Cursor::new(csv)),
        "attack.csv".into(),
        ReadOptions::default(),
    );
    let mut replay = Replay::new(&[
        "fixed 50/1m".parse().unwrap(),
        "sliding-log 50/1m".parse().unwrap(),
    ])
    .unwrap();
    let mut reader = reader;
    for ev in reader.by_ref() {
        replay.step(ev.unwrap());
    }
    let stats = reader.stats();
    assert_eq!((stats.events, stats.bad_lines, stats.clients), (200, 0, 1));
    let r = replay.finish(reader.interner());
    assert_eq!(r[0].max_admitted_in_window, 100);
    assert_eq!(r[1].max_admitted_in_window, 50);
    let worst = r[0].worst_window.as_ref().unwrap();
    assert_eq!(worst.client, "c0");
    // The worst span runs from the last millisecond before an edge to the edge itself.
    assert_eq!(worst.end_ms - worst.start_ms, 1);
    assert_eq!(worst.end_ms % 60_000, 0);
}
