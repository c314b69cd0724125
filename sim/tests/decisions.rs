//! `--decisions FILE`: one CSV row per request and limit decided, in trace order — a small trace
//! whose every row is worked out by hand here, and the bundled trace's rows against the
//! report's counts (docs/sim.md, "Every decision as CSV").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use edgelimit_sim::config::{run_config, ConfigReport, EdgeRunOptions, RegionOptions};
use edgelimit_sim::input::Source;
use edgelimit_sim::readers::{ReadOptions, RequestOptions};
use edgelimit_testkit::dir::TempDir;

fn options(trace: &Path, config: &Path, decisions: &Path) -> EdgeRunOptions {
    EdgeRunOptions {
        source: Source::File(trace.to_path_buf()),
        read: ReadOptions::default(),
        request: RequestOptions::default(),
        config: config.to_path_buf(),
        baseline: None,
        overrides: None,
        baseline_overrides: None,
        outages: Vec::new(),
        progress: false,
        regions: RegionOptions::default(),
        decisions: Some(decisions.to_path_buf()),
    }
}

/// The file's header and rows, read with the csv crate's own reader.
fn read_rows(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let mut reader = csv::Reader::from_path(path).unwrap();
    let header = reader
        .headers()
        .unwrap()
        .iter()
        .map(str::to_string)
        .collect();
    let rows = reader
        .records()
        .map(|r| r.unwrap().iter().map(str::to_string).collect())
        .collect();
    (header, rows)
}

const B: u64 = 1_700_000_001_000;

#[test]
fn every_row_of_a_small_trace_is_the_one_worked_out_by_hand() {
    let dir = TempDir::new("sim-decisions");
    // Per IP 2 a second and per user 3 a second (a request without a user refused), enforced
    // together; a shadow rule watching every path at 1 a second per IP.
    let config = dir.write(
        "api.toml",
        r#"
[[rules]]
name = "api"
path_prefix = "/api/"
limits = [
  { name = "per-ip", policy = "fixed 2/1s", identifier = "ip" },
  { name = "per-user", policy = "fixed 3/1s", identifier = "header:x-user", missing = "deny" },
]

[[rules]]
name = "watch"
shadow = true
limits = [{ name = "watch-ip", policy = "fixed 1/1s", identifier = "ip" }]
"#,
    );
    let at = |ms: u64| B + ms;
    let lines = [
        (at(0), "/api/a", "192.0.2.1", "alice"),
        (at(100), "/api/a", "192.0.2.1", "alice"),
        (at(200), "/api/a", "192.0.2.1", "bob"),
        (at(300), "/api/b", "192.0.2.1", "carol"),
        (at(400), "/home", "2001:db8::7", "dave"),
        (at(1500), "/api/a", "192.0.2.1", "alice"),
        (at(2500), "/api/a", "192.0.2.1", ""),
    ];
    let mut trace = String::from("timestamp_ms,path,ip,header:x-user\n");
    for (t, path, ip, user) in lines {
        trace.push_str(&format!("{t},{path},{ip},{user}\n"));
    }
    let trace = dir.write("trace.csv", &trace);
    let out = dir.join("decisions.csv");
    let report = run_config(&options(&trace, &config, &out)).unwrap();
    let (header, rows) = read_rows(&out);
    assert_eq!(
        header,
        [
            "time_ms",
            "region",
            "rule",
            "limit",
            "identifier",
            "status",
            "reason"
        ]
    );
    let t = |ms: u64| at(ms).to_string();
    let expected: Vec<[String; 7]> = [
        // 1st: every limit has room.
        (t(0), "api", "per-ip", "192.0.2.1", "200", "admitted"),
        (t(0), "api", "per-user", "alice", "200", "admitted"),
        (t(0), "watch", "watch-ip", "192.0.2.1", "200", "admitted"),
        // 2nd: per-ip takes its second; the shadow limit (1 a second) would refuse.
        (t(100), "api", "per-ip", "192.0.2.1", "200", "admitted"),
        (t(100), "api", "per-user", "alice", "200", "admitted"),
        (
            t(100),
            "watch",
            "watch-ip",
            "192.0.2.1",
            "200",
            "over_limit",
        ),
        // 3rd: per-ip is spent: 429; bob's own limit would have admitted (all or nothing);
        // the shadow denial is remembered by the isolate.
        (t(200), "api", "per-ip", "192.0.2.1", "429", "over_limit"),
        (t(200), "api", "per-user", "bob", "429", "admitted"),
        (
            t(200),
            "watch",
            "watch-ip",
            "192.0.2.1",
            "429",
            "cached_denial",
        ),
        // 4th: the isolate remembers per-ip's denial; carol's limit is not consulted.
        (t(300), "api", "per-ip", "192.0.2.1", "429", "cached_denial"),
        (t(300), "api", "per-user", "carol", "429", "skipped"),
        (
            t(300),
            "watch",
            "watch-ip",
            "192.0.2.1",
            "429",
            "cached_denial",
        ),
        // 5th: only the shadow rule matches. An IPv6 client is limited by its /64
        // (docs/design.md §8), escaped as the Worker logs identifiers.
        (
            t(400),
            "watch",
            "watch-ip",
            "2001%3Adb8%3A%3A%2F64",
            "200",
            "admitted",
        ),
        // 6th: the next second, all fresh.
        (t(1500), "api", "per-ip", "192.0.2.1", "200", "admitted"),
        (t(1500), "api", "per-user", "alice", "200", "admitted"),
        (t(1500), "watch", "watch-ip", "192.0.2.1", "200", "admitted"),
        // 7th: no user: 400 without asking the store, for the shadow rule too, so only the
        // limit that refused it has a row.
        (t(2500), "api", "per-user", "", "400", "missing_identifier"),
    ]
    .into_iter()
    .map(|(time, rule, limit, id, status, reason)| {
        [
            time,
            String::new(),
            rule.into(),
            limit.into(),
            id.into(),
            status.into(),
            reason.into(),
        ]
    })
    .collect();
    let rows: Vec<[String; 7]> = rows
        .into_iter()
        .map(|r| r.try_into().expect("seven columns"))
        .collect();
    assert_eq!(rows, expected);
    let written = report
        .decisions
        .as_ref()
        .expect("the report names the file");
    assert_eq!(written.rows, expected.len() as u64);
    assert_eq!(PathBuf::from(&written.file), out);
}

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("data")
        .join(name)
}

/// Per (rule, limit), the report's counts of the decisions a row is written for: those it
/// decided, those the denial cache skipped and the 400s of a missing identifier (three-rules.toml
/// has no lists, which settle a request with no limit deciding).
fn decided(report: &ConfigReport) -> BTreeMap<(String, String), u64> {
    report
        .rules
        .iter()
        .flat_map(|r| {
            r.limits.iter().map(|l| {
                (
                    (r.name.clone(), l.name.clone()),
                    l.checked + l.skipped + l.denied_by["missing_identifier"],
                )
            })
        })
        .collect()
}

#[test]
fn the_bundled_trace_has_a_row_per_limit_decided_and_the_reports_reasons() {
    let dir = TempDir::new("sim-decisions-bundled");
    let out = dir.join("decisions.csv");
    let report = run_config(&options(
        &data("apache_logs.gz"),
        &data("three-rules.toml"),
        &out,
    ))
    .unwrap();
    let (_, rows) = read_rows(&out);
    let expected = decided(&report);
    assert_eq!(rows.len() as u64, expected.values().sum::<u64>());
    assert_eq!(report.decisions.as_ref().unwrap().rows, rows.len() as u64);

    let mut per_limit: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut reasons: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    let mut last = 0u64;
    for row in &rows {
        let time: u64 = row[0].parse().unwrap();
        assert!(time >= last, "rows in trace order");
        last = time;
        assert_eq!(row[1], "", "no global section, no region");
        *per_limit
            .entry((row[2].clone(), row[3].clone()))
            .or_default() += 1;
        *reasons
            .entry((row[2].clone(), row[3].clone(), row[6].clone()))
            .or_default() += 1;
    }
    assert_eq!(per_limit, expected);
    // Every denial reason the report counts is as many rows.
    for rule in &report.rules {
        for limit in &rule.limits {
            for reason in ["over_limit", "cached_denial"] {
                let rows = reasons
                    .get(&(rule.name.clone(), limit.name.clone(), reason.to_string()))
                    .copied()
                    .unwrap_or(0);
                assert_eq!(
                    rows, limit.denied_by[reason],
                    "{} / {}",
                    rule.name, limit.name
                );
            }
            let skipped = reasons
                .get(&(rule.name.clone(), limit.name.clone(), "skipped".to_string()))
                .copied()
                .unwrap_or(0);
            assert_eq!(skipped, limit.skipped);
        }
    }
    // Every status a row carries is one the report counts requests under.
    for row in &rows {
        let status: u16 = row[5].parse().unwrap();
        assert!(report.statuses.contains_key(&status), "{row:?}");
    }
}
