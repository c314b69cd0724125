//! Concurrency limits replayed with request durations: a hand-computed trace
//! through `--policy 'concurrency 2 timeout 30s'` and through a configuration, bad `duration_ms`
//! values, and a property — never more than N in flight per identifier, computed here from the
//! admitted requests' `[ts, ts + duration)` intervals, independently of the simulator.

use std::io::Write;
use std::path::PathBuf;

use edgelimit::Policy;
use edgelimit_engine::Config;
use edgelimit_sim::config::outage::Outages;
use edgelimit_sim::config::whatif::Answered;
use edgelimit_sim::config::{run_config, EdgeReplay, EdgeRunOptions, RegionOptions};
use edgelimit_sim::input::Source;
use edgelimit_sim::policy::Replay;
use edgelimit_sim::policy::StoreChoice;
use edgelimit_sim::policy::{run, RunOptions};
use edgelimit_sim::readers::{Format, ReadOptions, Request, RequestOptions, TraceReader};
use edgelimit_sim::{Event, Interner, SimError};
use proptest::prelude::*;

/// The hand-computed trace: client `a` under `concurrency 2 timeout 30s`. `(ms, duration)`.
const TRACE: [(u64, Option<u64>); 10] = [
    (1_000, Some(5_000)),  // admitted, in flight until 6,000
    (2_000, Some(10_000)), // admitted, until 12,000: 2 in flight
    (3_000, Some(1_000)),  // denied: 2 in flight
    (5_999, Some(100)),    // denied: the first lands at 6,000, not before
    (6_000, Some(1_000)),  // admitted: the first landed at this very ms; until 7,000
    (6_500, Some(1)),      // denied: 2,000→12,000 and 6,000→7,000 in flight
    (7_000, None),         // admitted (6,000 landed at 7,000); no duration: held to 37,000
    (12_000, Some(0)),     // admitted (2,000 landed at 12,000); lands at once
    (12_000, Some(5)),     // admitted: the zero-length one landed at 12,000 first
    (12_001, Some(1)),     // denied: 7,000→37,000 (timeout) and 12,000→12,005
];
const EXPECTED: [bool; 10] = [
    true, true, false, false, true, false, true, true, true, false,
];

fn csv(rows: &[(u64, Option<u64>)]) -> String {
    let mut out = String::from("timestamp_ms,client,duration_ms\n");
    for (t, d) in rows {
        out.push_str(&format!(
            "{},a,{}\n",
            1_700_000_000_000 + t,
            d.map_or(String::new(), |d| d.to_string())
        ));
    }
    out
}

fn temp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sim-concurrency-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::File::create(&path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    path
}

fn read(text: &str, strict: bool) -> Result<Vec<Event>, SimError> {
    let options = ReadOptions {
        strict,
        format: Some(Format::Csv),
        ..ReadOptions::default()
    };
    let mut reader = TraceReader::from_reader(
        Box::new(std::io::Cursor::new(text.as_bytes().to_vec())),
        "trace.csv".into(),
        options,
    );
    reader.by_ref().collect()
}

#[test]
fn the_third_overlapping_request_is_denied_and_admitted_again_at_the_release_ms() {
    let policy: Policy = "concurrency 2 timeout 30s".parse().unwrap();
    let events = read(&csv(&TRACE), true).unwrap();
    assert_eq!(events[6].duration(), None);
    assert_eq!(events[7].duration(), Some(0));
    let mut replay = Replay::new(&[policy]).unwrap();
    let mut got = Vec::new();
    for ev in events {
        replay.step(ev);
        got.push(replay.last_admitted()[0]);
    }
    assert_eq!(got, EXPECTED);
    let mut names = Interner::new();
    names.intern(b"a");
    let r = &replay.finish(&names)[0];
    assert_eq!((r.admitted, r.denied), (6, 4));
    assert_eq!((r.false_allows, r.false_denies), (0, 0));
    assert_eq!(r.max_admitted_in_window, 2);
    let f = r.in_flight.as_ref().unwrap();
    assert_eq!(
        (
            f.peak_in_flight,
            f.requests_with_duration,
            f.requests_without_duration
        ),
        (2, 9, 1)
    );
    assert_eq!((f.top[0].client.as_str(), f.top[0].peak), ("a", 2));
    // Reached first when the second request started.
    assert_eq!(f.top[0].at_ms, 1_700_000_002_000);
}

#[test]
fn sim_replay_reports_concurrency_beside_the_rate_policies() {
    let path = temp("trace.csv", &csv(&TRACE));
    let policies: Vec<Policy> = ["fixed 100/1m", "concurrency 2 timeout 30s"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    let report = run(&RunOptions {
        source: Source::File(path),
        read: ReadOptions::default(),
        policies,
        store: StoreChoice::Memory,
        progress: false,
        boundaries: true,
        threads: 1,
    })
    .unwrap();
    assert_eq!(report.policies[0].admitted, 10);
    let c = &report.policies[1];
    // 30 s is the default timeout, which the canonical spec leaves out.
    assert_eq!(
        (c.spec.as_str(), c.admitted, c.denied),
        ("concurrency 2", 6, 4)
    );
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(json["policies"][1]["in_flight"]["peak_in_flight"], 2);
    assert_eq!(json["policies"][1]["in_flight"]["top"][0]["client"], "a");
    assert!(json["policies"][0].get("in_flight").is_none());
    let table = edgelimit_sim::policy::table::render(&report);
    assert!(table.contains("peak in flight 2"), "{table}");
    let html = edgelimit_sim::policy::html::render(&report);
    assert!(html.contains("Peak in flight"));
}

#[test]
fn a_lease_outliving_its_timeout_is_a_false_allow_against_the_exact_count() {
    // Timeout 1s, but each request runs 5s: the lease ends while the request is in flight.
    let rows = [(0, Some(5_000)), (1_000, Some(5_000)), (1_500, Some(5_000))];
    let policy: Policy = "concurrency 1 timeout 1s".parse().unwrap();
    let mut replay = Replay::new(&[policy]).unwrap();
    for ev in read(&csv(&rows), true).unwrap() {
        replay.step(ev);
    }
    let mut names = Interner::new();
    names.intern(b"a");
    let r = &replay.finish(&names)[0];
    // 0 admitted; 1,000 admitted (lease timed out, request still running: a false allow);
    // 1,500 denied (the 1,000 lease is live), and the exact count (2 running) denies too.
    assert_eq!((r.admitted, r.false_allows, r.false_denies), (2, 1, 0));
    assert_eq!(r.in_flight.as_ref().unwrap().peak_in_flight, 2);
    assert_eq!(r.max_window_multiple, 2.0);
}

#[test]
fn bad_durations_name_the_field_and_line() {
    for bad in ["-1", "1.5", "abc", "4294967295", "99999999999999999999999"] {
        let text =
            format!("timestamp_ms,client,duration_ms\n1700000000000,a,5\n1700000000001,a,{bad}\n");
        let err = read(&text, true).unwrap_err().to_string();
        assert!(
            err.contains("trace.csv:3") && err.contains("duration_ms"),
            "{bad}: {err}"
        );
        // Without --strict the line is counted and skipped.
        let events = read(&text, false).unwrap();
        assert_eq!(events.len(), 1, "{bad}");
    }
    // The longest duration allowed, and an empty column (no duration).
    let text = "timestamp_ms,client,duration_ms\n1700000000000,a,4294967294\n1700000000001,a,\n";
    let events = read(text, true).unwrap();
    assert_eq!(events[0].duration(), Some(4_294_967_294));
    assert_eq!(events[1].duration(), None);
    // NDJSON and Logpush.
    for (line, field) in [
        (
            r#"{"timestamp_ms":1700000000000,"client":"a","duration_ms":-3}"#,
            "duration_ms",
        ),
        (
            r#"{"timestamp_ms":1700000000000,"client":"a","duration_ms":2.5}"#,
            "duration_ms",
        ),
        (
            r#"{"timestamp_ms":1700000000000,"client":"a","duration_ms":true}"#,
            "duration_ms",
        ),
        (
            r#"{"ClientIP":"192.0.2.1","EdgeStartTimestamp":1700000000000000000,"OriginResponseDurationMs":-1}"#,
            "OriginResponseDurationMs",
        ),
    ] {
        let mut reader = TraceReader::from_reader(
            Box::new(std::io::Cursor::new(line.as_bytes().to_vec())),
            "trace.json".into(),
            ReadOptions {
                strict: true,
                ..ReadOptions::default()
            },
        );
        let err = reader.next().unwrap().unwrap_err().to_string();
        assert!(
            err.contains("trace.json:1") && err.contains(field),
            "{line}: {err}"
        );
    }
    let line = r#"{"ClientIP":"192.0.2.1","EdgeStartTimestamp":1700000000000000000,"OriginResponseDurationMs":250}"#;
    let mut reader = TraceReader::from_reader(
        Box::new(std::io::Cursor::new(line.as_bytes().to_vec())),
        "trace.json".into(),
        ReadOptions::default(),
    );
    assert_eq!(reader.next().unwrap().unwrap().duration(), Some(250));
}

fn config(limit: u64, timeout: &str) -> Config {
    Config::from_value(serde_json::json!({
        "rules": [
            { "name": "api", "limits": [
                { "name": "in-flight", "policy": format!("concurrency {limit} timeout {timeout}"),
                  "identifier": "ip" }
            ]}
        ]
    }))
    .unwrap()
}

/// Requests from `(ms, client, duration)` rows, as the CSV request reader builds them.
fn requests(rows: &[(u64, u8, Option<u64>)]) -> Vec<Request> {
    rows.iter()
        .map(|&(t, client, duration)| {
            let mut r = Request::default();
            r.time_ms = 1_700_000_000_000 + t;
            r.duration_ms = duration.map(|d| d as u32);
            r.set_method(b"GET");
            r.set_host(b"example.com");
            r.set_target(b"/");
            r.set_client_ip(format!("192.0.2.{client}").as_bytes());
            r
        })
        .collect()
}

#[test]
fn a_configuration_releases_leases_through_the_workers_settlement() {
    // The same trace through the Worker's code: the store's leases, released by its settlement.
    let rows: Vec<(u64, u8, Option<u64>)> = TRACE.iter().map(|&(t, d)| (t, 1, d)).collect();
    let mut replay = EdgeReplay::new(config(2, "30s"), Outages::new(Vec::new()), false).unwrap();
    let mut answered = Answered::default();
    let mut got = Vec::new();
    for r in requests(&rows) {
        replay.step(&r, &mut answered).unwrap();
        got.push(answered.status == 200);
    }
    assert_eq!(got, EXPECTED);
    let limit = &replay.rule_reports()[0].limits[0];
    assert_eq!((limit.checked, limit.denied), (10, 4));
    let b = &limit.boundary;
    assert_eq!(
        (b.max_admitted_in_window, b.false_allows, b.false_denies),
        (2, 0, 0)
    );
    let f = b.in_flight.as_ref().unwrap();
    assert_eq!(
        (f.top_peaks[0].identifier.as_str(), f.top_peaks[0].peak),
        ("192.0.2.1", 2)
    );
    assert_eq!(
        (f.requests_with_duration, f.requests_without_duration),
        (9, 1)
    );

    // End to end from a CSV file with a `duration_ms` column.
    let mut text = String::from("timestamp_ms,ip,path,duration_ms\n");
    for (t, d) in TRACE {
        text.push_str(&format!(
            "{},192.0.2.1,/,{}\n",
            1_700_000_000_000 + t,
            d.map_or(String::new(), |d| d.to_string())
        ));
    }
    let trace = temp("requests.csv", &text);
    let toml = temp(
        "concurrency.toml",
        "[[rules]]\nname = \"api\"\n[[rules.limits]]\nname = \"in-flight\"\npolicy = \"concurrency 2 timeout 30s\"\nidentifier = \"ip\"\n",
    );
    let report = run_config(&EdgeRunOptions {
        source: Source::File(trace),
        read: ReadOptions::default(),
        request: RequestOptions::default(),
        config: toml,
        baseline: None,
        overrides: None,
        baseline_overrides: None,
        outages: Vec::new(),
        progress: false,
        regions: RegionOptions::default(),
        decisions: None,
    })
    .unwrap();
    assert_eq!((report.admitted, report.denied), (6, 4));
    // One settlement per admitted request with a duration that landed before the trace ended:
    // 5 of the 6 admitted had one, and the last (12,000 + 5 ms) lands after the last request.
    let settled = report.settlements.as_ref().unwrap();
    assert_eq!((settled.settled, settled.failed), (4, 0));
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(
        json["rules"][0]["limits"][0]["boundary"]["in_flight"]["top_peaks"][0]["peak"],
        2
    );
}

/// The most admitted intervals `[start, end)` of one client overlapping at any instant, and
/// whether each request was admitted exactly when fewer than `limit` admitted ones covered its
/// start — computed with nothing but the intervals.
fn check_intervals(
    rows: &[(u64, u8, Option<u64>)],
    admitted: &[bool],
    limit: usize,
    timeout: u64,
) -> Result<(), TestCaseError> {
    let interval = |i: usize| {
        let (t, _, d) = rows[i];
        (t, t + d.unwrap_or(timeout))
    };
    for i in 0..rows.len() {
        let (t, client, _) = rows[i];
        // Admitted requests of the same client before this one still in flight at `t`.
        let in_flight = (0..i)
            .filter(|&j| admitted[j] && rows[j].1 == client)
            .filter(|&j| {
                let (s, e) = interval(j);
                s <= t && t < e
            })
            .count();
        prop_assert!(
            in_flight <= limit,
            "request {i} at {t}: {in_flight} in flight before it"
        );
        if admitted[i] {
            prop_assert!(
                in_flight < limit,
                "request {i} at {t} admitted over the limit"
            );
        } else {
            prop_assert_eq!(in_flight, limit, "request {} at {} denied with room", i, t);
        }
    }
    Ok(())
}

/// Rows in time order: a few clients, durations up to the timeout (so leases never end before
/// their requests), some without one.
fn rows() -> impl Strategy<Value = Vec<(u64, u8, Option<u64>)>> {
    prop::collection::vec(
        (
            0u64..400,
            0u8..3,
            prop::option::weighted(0.85, 0u64..=1_000),
        ),
        1..120,
    )
    .prop_map(|steps| {
        let mut t = 0;
        steps
            .into_iter()
            .map(|(gap, client, d)| {
                t += gap;
                (t, client, d)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn never_more_than_n_in_flight_per_identifier(rows in rows(), limit in 1u64..4) {
        let timeout = 1_000;
        let policy: Policy = format!("concurrency {limit} timeout 1s").parse().unwrap();
        let mut replay = Replay::new(&[policy]).unwrap();
        let mut admitted = Vec::new();
        for &(t, client, d) in &rows {
            let mut ev = Event::new(t, u32::from(client), 1);
            if let Some(d) = d {
                ev.duration_ms = d as u32;
            }
            replay.step(ev);
            admitted.push(replay.last_admitted()[0]);
        }
        check_intervals(&rows, &admitted, limit as usize, timeout)?;
        let mut names = Interner::new();
        for c in 0..3u8 {
            names.intern(&[c]);
        }
        let r = &replay.finish(&names)[0];
        prop_assert_eq!((r.false_allows, r.false_denies), (0, 0));
        prop_assert!(r.max_admitted_in_window <= limit);

        // The same requests through a configuration: the Worker's plan, the store's leases,
        // released by the Worker's settlement.
        let mut edge = EdgeReplay::new(config(limit, "1s"), Outages::new(Vec::new()), false).unwrap();
        let mut answered = Answered::default();
        let mut through_config = Vec::new();
        for r in requests(&rows) {
            edge.step(&r, &mut answered).unwrap();
            through_config.push(answered.status == 200);
        }
        prop_assert_eq!(&through_config, &admitted);
    }
}
