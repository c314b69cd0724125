//! A configuration with a `global` section replayed in its regions (docs/design.md §9, the
//! bounds; docs/sim.md, "Global limits before you deploy"), on a small generated trace: three
//! regions, a fixed window and a GCRA limit held globally, every region bursting at each
//! window's start, one region busier than the others. What the regions decided is counted here
//! from `--decisions` — independently of the report — and held to the bounds, then to the
//! report's numbers.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use edgelimit::global::{Split, MILLION};
use edgelimit::Policy;
use edgelimit_testkit::dir::TempDir;

const REGIONS: [&str; 3] = ["eu", "us", "ap"];
/// The fixed window's limit and window.
const LIMIT: u64 = 30;
const WINDOW_MS: u64 = 10_000;
/// Window-aligned.
const T0: u64 = 1_700_000_000_000;
const WINDOWS: u64 = 6;
/// The identifier only `us` sends to.
const US_ONLY: &str = "192.0.2.9";

fn config(static_share: &str) -> String {
    let regions: String = REGIONS
        .iter()
        .map(|r| {
            format!(
                "\n[[global.regions]]\nname = \"{r}\"\nurl_var = \"{r}_URL\"\ntoken_var = \"{r}_TOKEN\"\n"
            )
        })
        .collect();
    format!(
        r#"
[global]
home = {{ url_var = "HOME_URL", token_var = "HOME_TOKEN" }}
static_share = "{static_share}"
{regions}
[[rules]]
name = "burst"
path_prefix = "/a"
limits = [{{ name = "per-ip-window", policy = "fixed {LIMIT}/10s", identifier = "ip" }}]

[[rules]]
name = "steady"
path_prefix = "/b"
limits = [{{ name = "per-ip-gcra", policy = "gcra 6/1s burst 12", identifier = "ip" }}]
"#
    )
}

/// The trace: per window, every region bursting in its first 40 ms on two identifiers (`us`
/// three times as hard), then a trickle from each region; an identifier only `us` sends to;
/// and a GCRA identifier every region sends to all along, `us` fastest.
fn trace() -> String {
    let mut events: Vec<(u64, &str, &str, &str)> = Vec::new();
    for w in 0..WINDOWS {
        let start = T0 + w * WINDOW_MS;
        for (r, region) in REGIONS.iter().enumerate() {
            let burst = if *region == "us" { 24 } else { 8 };
            for i in 0..burst {
                let ip = if i % 2 == 0 { "192.0.2.1" } else { "192.0.2.2" };
                events.push((start + (i * 40 / burst) as u64 + r as u64, "/a", ip, region));
            }
            for k in 1..20u64 {
                events.push((start + k * 500 + 7 * r as u64, "/a", "192.0.2.1", region));
            }
            // One identifier only `us` sends to, the whole limit in each window: the other
            // regions' static shares lie unused unless `us` borrows them (docs/design.md §9,
            // "Capacity follows demand").
            if *region == "us" {
                for k in 0..LIMIT {
                    events.push((start + 100 + k * 300, "/a", US_ONLY, region));
                }
            }
            let every = if *region == "us" { 40 } else { 150 };
            for t in (0..WINDOW_MS).step_by(every) {
                events.push((start + t + 3 * r as u64, "/b", "192.0.2.3", region));
            }
        }
    }
    events.sort_by_key(|e| e.0);
    let mut text = String::from("timestamp_ms,path,ip,region\n");
    for (t, path, ip, region) in events {
        text.push_str(&format!("{t},{path},{ip},{region}\n"));
    }
    text
}

/// One row of `--decisions`.
#[derive(Debug, Clone)]
struct Row {
    time_ms: u64,
    region: String,
    limit: String,
    identifier: String,
    status: u16,
    reason: String,
    exact_status: u16,
}

impl Row {
    fn admitted(&self) -> bool {
        self.status == 200 && matches!(self.reason.as_str(), "admitted" | "leased")
    }

    fn window(&self) -> u64 {
        self.time_ms / WINDOW_MS
    }
}

/// Replays the trace with `static_share`: the decisions and the JSON report.
fn replay(dir: &TempDir, static_share: &str) -> (Vec<Row>, serde_json::Value) {
    let name = static_share.trim_end_matches('%');
    let config = format!("global-{name}.toml");
    dir.write(&config, &self::config(static_share));
    dir.write("trace.csv", &trace());
    let (decisions, json, html) = (
        format!("d-{name}.csv"),
        format!("r-{name}.json"),
        format!("r-{name}.html"),
    );
    let text = sim(
        dir,
        &[
            "replay",
            "trace.csv",
            "--config",
            &config,
            "--rtt",
            "home=40,local=1",
            "--decisions",
            &decisions,
            "--json",
            &json,
            "--html",
            &html,
        ],
    );
    assert!(text.contains("global limits in 3 regions"), "{text}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(&json)).unwrap()).unwrap();
    // The HTML report says what the JSON does.
    let page = std::fs::read_to_string(dir.join(&html)).unwrap();
    let global = &report["global"];
    let said = format!(
        "<b>{}</b> falsely denied, {} over admitted",
        global["false_denied"], global["over_admitted"]
    );
    assert!(page.contains("Global limits in 3 regions"), "{page}");
    assert!(page.contains(&said), "{said} missing from the HTML report");
    (rows(&dir.join(&decisions)), report)
}

/// Runs `sim` with `args` in `dir`: what it printed.
fn sim(dir: &TempDir, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn rows(path: &Path) -> Vec<Row> {
    let mut reader = csv::Reader::from_path(path).unwrap();
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(
        header,
        [
            "time_ms",
            "region",
            "rule",
            "limit",
            "identifier",
            "status",
            "reason",
            "exact_status"
        ]
    );
    reader
        .records()
        .map(|r| {
            let r = r.unwrap();
            Row {
                time_ms: r[0].parse().unwrap(),
                region: r[1].to_string(),
                limit: r[3].to_string(),
                identifier: r[4].to_string(),
                status: r[5].parse().unwrap(),
                reason: r[6].to_string(),
                exact_status: r[7].parse().unwrap(),
            }
        })
        .collect()
}

/// The fixed window's admissions per (identifier, window), every region together, and per
/// region within them.
fn per_window(rows: &[Row]) -> BTreeMap<(String, u64), BTreeMap<String, u64>> {
    let mut windows: BTreeMap<(String, u64), BTreeMap<String, u64>> = BTreeMap::new();
    for row in rows
        .iter()
        .filter(|r| r.limit == "per-ip-window" && r.admitted())
    {
        *windows
            .entry((row.identifier.clone(), row.window()))
            .or_default()
            .entry(row.region.clone())
            .or_default() += 1;
    }
    windows
}

#[test]
fn no_fixed_window_admits_more_than_its_limit_across_the_regions() {
    let dir = TempDir::new("sim-global-bound");
    for share in ["50%", "100%", "0%"] {
        let (rows, report) = replay(&dir, share);
        let windows = per_window(&rows);
        assert_eq!(windows.len(), 3 * WINDOWS as usize, "{share}");
        let mut max = 0;
        for ((identifier, window), regions) in &windows {
            let sum: u64 = regions.values().sum();
            assert!(
                sum <= LIMIT,
                "{share}: {identifier} window {window}: {sum} admitted ({regions:?}), limit {LIMIT}"
            );
            // Every region sending to it admitted in it: the limit is held across them, not per
            // region.
            let sending = if identifier == US_ONLY { 1 } else { 3 };
            assert_eq!(
                regions.len(),
                sending,
                "{share}: {identifier} {window}: {regions:?}"
            );
            max = max.max(sum);
        }
        // The exact reference admits the limit in the burst identifier's windows; so do the
        // regions once their leases are spent.
        let exact_max = rows
            .iter()
            .filter(|r| r.limit == "per-ip-window" && r.exact_status == 200)
            .fold(BTreeMap::<(String, u64), u64>::new(), |mut m, r| {
                *m.entry((r.identifier.clone(), r.window())).or_default() += 1;
                m
            })
            .into_values()
            .max()
            .unwrap();
        assert_eq!(exact_max, LIMIT, "{share}");
        let limit = &report["global"]["limits"][0];
        assert_eq!(limit["name"], "per-ip-window");
        assert_eq!(limit["limit"], LIMIT, "{share}");
        assert_eq!(limit["max_admitted_in_window"], max, "{share}");
        assert_eq!(limit["windows_over_limit"], 0, "{share}");
    }
}

/// docs/design.md §9: false denials are at most the units other regions hold unspent — in their
/// static shares and in leases. Per window and region `r`: the requests the reference admits
/// and `r` refuses are at most the other regions' shares plus the pool less what `r` itself
/// spent from leases (the pool's units `r` spent are held by no other region), plus what the
/// split's rounding left out. And since capacity follows demand, the identifier only `us` sends
/// to is admitted its whole limit in every window, as one store admits it.
#[test]
fn false_denials_stay_within_what_the_other_regions_hold() {
    let dir = TempDir::new("sim-global-false");
    let policy: Policy = format!("fixed {LIMIT}/10s").parse().unwrap();
    let mut seen = 0;
    for (share, ppm) in [("50%", MILLION / 2), ("20%", MILLION / 5)] {
        let (rows, _) = replay(&dir, share);
        let split = Split::new(&policy, &[1, 1, 1], ppm).unwrap();
        let part = |p: Option<Policy>| p.map_or(0, |p| p.limit());
        let shares: Vec<u64> = split.shares.iter().map(|&s| part(s)).collect();
        let pool = part(split.pool);
        let slack = LIMIT - shares.iter().sum::<u64>() - pool;
        let mut false_denied: BTreeMap<(String, u64, String), u64> = BTreeMap::new();
        let mut leased: BTreeMap<(String, u64, String), u64> = BTreeMap::new();
        for row in rows.iter().filter(|r| r.limit == "per-ip-window") {
            let key = (row.identifier.clone(), row.window(), row.region.clone());
            if row.exact_status == 200 && row.status != 200 {
                *false_denied.entry(key.clone()).or_default() += 1;
            }
            if row.admitted() && row.reason == "leased" {
                *leased.entry(key).or_default() += 1;
            }
        }
        for (key, denied) in &false_denied {
            let r = REGIONS.iter().position(|n| *n == key.2).unwrap();
            let others: u64 = shares
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != r)
                .map(|(_, s)| s)
                .sum();
            let own_leases = leased.get(key).copied().unwrap_or(0);
            let bound = others + pool.saturating_sub(own_leases) + slack;
            assert!(
                *denied <= bound,
                "{share}: {key:?}: {denied} falsely denied; the others' shares {others}, pool \
                 {pool}, spent from leases here {own_leases}"
            );
            seen += denied;
        }
        // The identifier only `us` sends to: the whole limit in each window, in `us`.
        for window in T0 / WINDOW_MS..T0 / WINDOW_MS + WINDOWS {
            let admitted = rows
                .iter()
                .filter(|r| r.identifier == US_ONLY && r.window() == window && r.admitted())
                .count() as u64;
            assert_eq!(admitted, LIMIT, "{share}: window {window}");
        }
    }
    // Every region lends what it does not spend: on this trace the fixed window denies nothing
    // one store admits.
    assert_eq!(seen, 0);
}

#[test]
fn with_every_unit_in_a_static_share_nothing_waits_for_the_home() {
    let dir = TempDir::new("sim-global-static");
    let (rows, report) = replay(&dir, "100%");
    let global = &report["global"];
    assert_eq!(global["waited"], 0, "{global:#}");
    assert_eq!(global["home_round_trips"], 0);
    assert!(rows.iter().all(|r| r.reason != "leased"));
    for region in global["regions"].as_array().unwrap() {
        assert_eq!(region["waited"], 0, "{region}");
        assert_eq!(region["granted"], 0, "{region}");
        // Decided locally: a local round trip (2 ms), no more.
        assert_eq!(region["latency"]["p99_ms"], 2, "{region}");
    }
    // With a pool, the bursts wait for the home and pay its round trip.
    let (rows, report) = replay(&dir, "50%");
    let global = &report["global"];
    assert!(global["waited"].as_u64().unwrap() > 0, "{global}");
    assert!(rows.iter().any(|r| r.reason == "leased"));
    let us = &global["regions"][1];
    assert_eq!(us["name"], "us");
    assert_eq!(us["home_round_trip_ms"], 80);
}

#[test]
fn the_report_counts_what_the_decisions_file_holds() {
    let dir = TempDir::new("sim-global-counts");
    let (rows, report) = replay(&dir, "50%");
    let global = &report["global"];
    // One rule, one limit per request: a row is a request.
    let count = |pick: &dyn Fn(&Row) -> bool| rows.iter().filter(|r| pick(r)).count() as u64;
    assert_eq!(global["requests"], rows.len() as u64);
    assert_eq!(global["requests"], report["requests"]);
    assert_eq!(global["admitted"], count(&|r| r.status == 200));
    assert_eq!(global["admitted_exact"], count(&|r| r.exact_status == 200));
    assert_eq!(
        global["admitted_exact"], report["admitted"],
        "the reference"
    );
    let false_denied = count(&|r| r.exact_status == 200 && r.status != 200);
    let over = count(&|r| r.status == 200 && r.exact_status != 200);
    assert_eq!(global["false_denied"], false_denied);
    assert_eq!(global["over_admitted"], over);
    assert!(false_denied > 0);
    for limit in global["limits"].as_array().unwrap() {
        let name = limit["name"].as_str().unwrap();
        let mine = |pick: &dyn Fn(&Row) -> bool| count(&|r| r.limit == name && pick(r));
        assert_eq!(limit["requests"], mine(&|_| true), "{name}");
        assert_eq!(limit["admitted"], mine(&|r| r.admitted()), "{name}");
        assert_eq!(limit["admitted_exact"], mine(&|r| r.exact_status == 200));
        assert_eq!(
            limit["false_denied"],
            mine(&|r| r.exact_status == 200 && r.status != 200),
            "{name}"
        );
        assert_eq!(
            limit["over_admitted"],
            mine(&|r| r.status == 200 && r.exact_status != 200),
            "{name}"
        );
    }
    let mut waited = 0;
    for region in global["regions"].as_array().unwrap() {
        let name = region["name"].as_str().unwrap();
        let mine = |pick: &dyn Fn(&Row) -> bool| count(&|r| r.region == name && pick(r));
        assert_eq!(region["requests"], mine(&|_| true), "{name}");
        assert_eq!(region["admitted"], mine(&|r| r.status == 200), "{name}");
        assert_eq!(
            region["false_denied"],
            mine(&|r| r.exact_status == 200 && r.status != 200),
            "{name}"
        );
        let w = region["waited"].as_u64().unwrap();
        waited += w;
        // The added latency: a local round trip, or with the home's between two of them, for
        // the requests that asked a store (a cached denial asks none); a request that also
        // borrowed from other regions adds one more, taken as long as the home's (164 ms).
        let asked = region["latency"]["requests"].as_u64().unwrap();
        // Nearest rank: the waiting requests' latency once fewer than `rank` were local.
        let at = |p: u64| {
            let rank = (p * asked).div_ceil(100);
            if asked - w < rank {
                2 + 80 + 2
            } else {
                2
            }
        };
        assert_eq!(region["latency"]["p50_ms"], at(50), "{name}: {region:#}");
        let p99 = region["latency"]["p99_ms"].as_u64().unwrap();
        assert!(p99 == at(99) || (w > 0 && p99 == 164), "{name}: {region:#}");
        let max = region["latency"]["max_ms"].as_u64().unwrap();
        assert!(
            if w > 0 {
                [84, 164].contains(&max)
            } else {
                max == 2
            },
            "{name}: {region:#}"
        );
    }
    assert_eq!(global["waited"], waited);
}

/// The Workers' decisions of one run of the Worker's global latency e2e (`fixed 40/5s` in
/// `eu`, `us` and `ap`; every region bursting on three identifiers at the same moment of each
/// window, then trickling; a fourth identifier only `us` sends to), each time moved by up to
/// 10 ms (`tests/data/README.md`). Regions that see each other once a window, at the same
/// moment of it, must not take each other for gone: one that did would take the whole pool
/// from under the others' requests of that moment and strand it in its lease. Replayed as the
/// e2e replays it, every (identifier, window) admits what one store admits, and no more.
#[test]
fn regions_bursting_at_the_same_moment_of_every_window_strand_nothing() {
    const E2E_LIMIT: u64 = 40;
    const E2E_WINDOW_MS: u64 = 5_000;
    let dir = TempDir::new("sim-global-periodic");
    dir.write(
        "global.toml",
        &format!(
            r#"
[global]
home = {{ url_var = "HOME_URL", token_var = "HOME_TOKEN" }}
static_share = "50%"
regions = [
  {{ name = "eu", url_var = "EU_URL", token_var = "EU_TOKEN" }},
  {{ name = "us", url_var = "US_URL", token_var = "US_TOKEN" }},
  {{ name = "ap", url_var = "AP_URL", token_var = "AP_TOKEN" }},
]

[[rules]]
name = "api"
path_prefix = "/api/"
limits = [{{ name = "per-user", policy = "fixed {E2E_LIMIT}/5s", identifier = "header:x-user" }}]
"#
        ),
    );
    let trace = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/periodic_bursts.csv.gz");
    let trace = trace.to_str().unwrap();
    sim(
        &dir,
        &[
            "replay",
            trace,
            "--config",
            "global.toml",
            "--rtt",
            "home=40,local=1",
            "--decisions",
            "d.csv",
        ],
    );
    let rows = rows(&dir.join("d.csv"));
    assert_eq!(rows.len(), 700);
    // (identifier, window): admitted in the regions, by the reference.
    let mut admitted: BTreeMap<(String, u64), (u64, u64)> = BTreeMap::new();
    for row in &rows {
        let cell = admitted
            .entry((row.identifier.clone(), row.time_ms / E2E_WINDOW_MS))
            .or_default();
        cell.0 += u64::from(row.admitted());
        cell.1 += u64::from(row.exact_status == 200);
    }
    assert_eq!(admitted.len(), 4 * 4, "four identifiers in four windows");
    for (cell, (regions, exact)) in &admitted {
        assert_eq!(
            exact, &E2E_LIMIT,
            "{cell:?}: every window asks beyond the limit"
        );
        assert_eq!(
            regions, exact,
            "{cell:?}: admitted in the regions, by one store"
        );
    }
}
