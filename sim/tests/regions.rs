//! The regions of a configuration with global limits, through `sim replay`'s command line: each
//! request's region by what its line says (a region, a colo, a country or continent), else
//! `--assign-regions`, else the first region — the configuration's forced `region` ignored —
//! seen in `--decisions`' region column and the JSON report; `--rtt`; and the errors.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use edgelimit_sim::regions::rtt::{DEFAULT_HOME_ONE_WAY_MS, DEFAULT_LOCAL_ONE_WAY_MS};
use edgelimit_testkit::dir::TempDir;

/// Three regions, and `region = "us"`, which pins a `wrangler dev` test's requests and which
/// the replay does not apply.
const GLOBAL: &str = r#"
[global]
home = { url_var = "HOME_URL", token_var = "HOME_TOKEN" }
region = "us"

[[global.regions]]
name = "eu"
url_var = "EU_URL"
token_var = "EU_TOKEN"
continents = ["EU", "AF"]

[[global.regions]]
name = "us"
url_var = "US_URL"
token_var = "US_TOKEN"
continents = ["NA", "SA"]

[[global.regions]]
name = "ap"
url_var = "AP_URL"
token_var = "AP_TOKEN"
continents = ["AS", "OC"]
colos = ["SYD"]
"#;

const RULES: &str = r#"
[[rules]]
name = "api"
limits = [{ name = "per-ip", policy = "fixed 100/1m", identifier = "ip" }]
"#;

/// Each line, and the region it goes to with `--assign-regions eu=0.5,us=0.25,ap=0.25`.
const TRACE: [(&str, &str); 8] = [
    // Named outright: the colo and country say otherwise.
    ("1700000000000,/a,192.0.2.10,ap,LHR,DE,", "ap"),
    // The colo a region lists, over the country.
    ("1700000000100,/a,192.0.2.11,,SYD,US,", "ap"),
    // A colo no region lists: the country's continent (DE: Europe).
    ("1700000000200,/a,192.0.2.12,,FRA,DE,", "eu"),
    ("1700000000300,/a,192.0.2.13,,,br,", "us"),
    ("1700000000400,/a,192.0.2.14,,,,OC", "ap"),
    // Nothing that places them: by the SHA-256 of the client (coreutils' sha256sum; the cuts
    // are at 0x80… and 0xc0…): 198.51.100.1 → 7f60…, 192.0.2.2 → 9a6b…, 203.0.113.7 → fec5….
    ("1700000000500,/a,198.51.100.1,,DFW,,", "eu"),
    ("1700000000600,/a,192.0.2.2,,,,", "us"),
    // Tor has no continent.
    ("1700000000700,/a,203.0.113.7,,,T1,", "ap"),
];

fn trace() -> String {
    let mut text = String::from("timestamp_ms,path,ip,region,colo,country,continent\n");
    for (line, _) in TRACE {
        text.push_str(line);
        text.push('\n');
    }
    text
}

fn sim(args: &[&str], dir: &TempDir, stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn failed(out: &Output, code: i32) -> String {
    assert_eq!(out.status.code(), Some(code), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The decisions file's region column.
fn regions_column(path: &Path) -> Vec<String> {
    let mut reader = csv::Reader::from_path(path).unwrap();
    assert_eq!(&reader.headers().unwrap()[1], "region");
    reader
        .records()
        .map(|r| r.unwrap()[1].to_string())
        .collect()
}

#[test]
fn each_request_goes_to_the_region_its_line_places_it_in_else_its_assigned_one() {
    let dir = TempDir::new("sim-regions");
    dir.write("global.toml", &format!("{GLOBAL}{RULES}"));
    // From standard input, with both reports: the decisions come through all the same.
    let out = sim(
        &[
            "replay",
            "-",
            "--config",
            "global.toml",
            "--assign-regions",
            "eu=0.5,us=0.25,ap=0.25",
            "--rtt",
            "home=40,eu=20",
            "--decisions",
            "d.csv",
            "--json",
            "r.json",
            "--html",
            "r.html",
        ],
        &dir,
        &trace(),
    );
    let text = ok(&out);
    let expected: Vec<&str> = TRACE.iter().map(|(_, region)| *region).collect();
    assert_eq!(regions_column(&dir.join("d.csv")), expected);
    assert!(text.contains("regions eu 2, us 2, ap 4"), "{text}");
    assert!(text.contains("decisions d.csv: 8 rows"), "{text}");

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("r.json")).unwrap()).unwrap();
    let regions = &json["regions"];
    assert_eq!(
        regions["regions"],
        serde_json::json!([
            {"name": "eu", "requests": 2, "home_one_way_ms": 20},
            {"name": "us", "requests": 2, "home_one_way_ms": 40},
            {"name": "ap", "requests": 4, "home_one_way_ms": 40},
        ])
    );
    assert_eq!(
        regions["attributed_by"],
        serde_json::json!({"region": 1, "colo": 1, "continent": 3, "assigned": 3, "first": 0})
    );
    assert_eq!(regions["unknown_places"], 1);
    assert_eq!(regions["local_one_way_ms"], DEFAULT_LOCAL_ONE_WAY_MS);
    assert_eq!(json["decisions"]["rows"], 8);
    assert!(std::fs::read_to_string(dir.join("r.html"))
        .unwrap()
        .contains("<svg"));

    // Without --assign-regions, what nothing places goes to the first region; with no --rtt,
    // the default latencies.
    let out = sim(
        &[
            "replay",
            "-",
            "--config",
            "global.toml",
            "--decisions",
            "first.csv",
            "--json",
            "first.json",
        ],
        &dir,
        &trace(),
    );
    ok(&out);
    let first: Vec<&str> = TRACE
        .iter()
        .enumerate()
        .map(|(i, (_, region))| if i >= 5 { "eu" } else { *region })
        .collect();
    assert_eq!(regions_column(&dir.join("first.csv")), first);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("first.json")).unwrap()).unwrap();
    assert_eq!(json["regions"]["attributed_by"]["first"], 3);
    for region in json["regions"]["regions"].as_array().unwrap() {
        assert_eq!(region["home_one_way_ms"], DEFAULT_HOME_ONE_WAY_MS);
    }
}

#[test]
fn a_region_the_configuration_lacks_stops_the_replay_at_its_line() {
    let dir = TempDir::new("sim-regions-unknown");
    dir.write("global.toml", &format!("{GLOBAL}{RULES}"));
    let mut text = trace();
    text.push_str("1700000000800,/a,192.0.2.20,mars,,,\n");
    dir.write("trace.csv", &text);
    // Not a damaged line to count and skip: a mismatch with the configuration, with or
    // without --strict.
    let out = sim(
        &["replay", "trace.csv", "--config", "global.toml"],
        &dir,
        "",
    );
    assert_eq!(
        failed(&out, 1).trim(),
        "sim: trace.csv:10: region: `mars` is not a region of the configuration (its regions: \
         eu, us, ap)"
    );
    // Without a global section the column is not read.
    dir.write("plain.toml", RULES);
    ok(&sim(
        &["replay", "trace.csv", "--config", "plain.toml"],
        &dir,
        "",
    ));
}

#[test]
fn region_flags_are_checked_and_need_a_global_section() {
    let dir = TempDir::new("sim-regions-flags");
    dir.write("global.toml", &format!("{GLOBAL}{RULES}"));
    dir.write("plain.toml", RULES);
    dir.write("trace.csv", &trace());
    let run = |extra: &[&str]| {
        let mut args = vec!["replay", "trace.csv", "--config"];
        args.extend_from_slice(extra);
        sim(&args, &dir, "")
    };
    for flag in [["--assign-regions", "eu=1"], ["--rtt", "home=10"]] {
        let e = failed(&run(&["plain.toml", flag[0], flag[1]]), 1);
        assert!(
            e.contains(&format!("{} applies to the regions", flag[0]))
                && e.contains("plain.toml has none"),
            "{e}"
        );
    }
    let e = failed(
        &run(&["global.toml", "--assign-regions", "eu=0.5,mars=0.5"]),
        1,
    );
    assert!(
        e.contains(
            "`mars=0.5`: `mars` is not a region of the configuration (its regions: eu, us, ap)"
        ),
        "{e}"
    );
    let e = failed(&run(&["global.toml", "--rtt", "ap=120,mars=40"]), 1);
    assert!(e.contains("`mars=40`: `mars` is not a region"), "{e}");
    // Bad syntax is a usage error, naming the part.
    let e = failed(&run(&["global.toml", "--assign-regions", "eu=half"]), 2);
    assert!(e.contains("`eu=half`: `half` is not a number"), "{e}");
    let e = failed(&run(&["global.toml", "--rtt", "eu=5m"]), 2);
    assert!(e.contains("`eu=5m`"), "{e}");
    // And the flags need --config at all.
    let e = failed(
        &sim(&["replay", "trace.csv", "--rtt", "home=1"], &dir, ""),
        2,
    );
    assert!(e.contains("--config"), "{e}");
}

#[test]
fn the_help_states_the_latencies_used_by_default() {
    let dir = TempDir::new("sim-regions-help");
    let help = ok(&sim(&["replay", "--help"], &dir, ""));
    let defaults = format!("home={DEFAULT_HOME_ONE_WAY_MS},local={DEFAULT_LOCAL_ONE_WAY_MS}");
    assert!(help.contains(&defaults), "{help}");
    for flag in ["--decisions", "--assign-regions", "--rtt"] {
        assert!(help.contains(flag), "{help}");
    }
}

/// The regions of a replay's JSON report: requests per region, and how they were placed.
fn placed(json_path: &Path) -> (serde_json::Value, serde_json::Value) {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json_path).unwrap()).unwrap();
    let requests = json["regions"]["regions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["requests"].clone(),
            )
        })
        .collect::<serde_json::Map<_, _>>();
    (
        serde_json::Value::Object(requests),
        json["regions"]["attributed_by"].clone(),
    )
}

#[test]
fn logpush_places_by_edge_colo_code_then_client_country() {
    let dir = TempDir::new("sim-regions-logpush");
    dir.write("global.toml", &format!("{GLOBAL}{RULES}"));
    // Each line's place, and the region it goes to.
    let lines = [
        // SYD is ap's colo: the country (the US, America) does not count.
        (r#""EdgeColoCode":"SYD","ClientCountry":"US""#, "ap"),
        // FRA is no region's colo: Brazil is in South America.
        (r#""EdgeColoCode":"FRA","ClientCountry":"br""#, "us"),
        (r#""ClientCountry":"JP""#, "ap"),
        // A colo alone, and a country of no continent: nothing places them.
        (r#""EdgeColoCode":"DFW""#, "eu"),
        (r#""ClientCountry":"XX""#, "eu"),
    ];
    let mut trace = String::new();
    for (i, (place, _)) in lines.iter().enumerate() {
        trace.push_str(&format!(
            r#"{{"EdgeStartTimestamp":"2023-11-14T22:13:2{i}Z","ClientIP":"192.0.2.{i}","ClientRequestMethod":"GET","ClientRequestHost":"a.example","ClientRequestURI":"/a",{place}}}"#
        ));
        trace.push('\n');
    }
    dir.write("logpush.ndjson", &trace);
    ok(&sim(
        &[
            "replay",
            "logpush.ndjson",
            "--config",
            "global.toml",
            "--decisions",
            "d.csv",
            "--json",
            "r.json",
        ],
        &dir,
        "",
    ));
    let expected: Vec<&str> = lines.iter().map(|(_, region)| *region).collect();
    assert_eq!(regions_column(&dir.join("d.csv")), expected);
    let (requests, by) = placed(&dir.join("r.json"));
    assert_eq!(requests, serde_json::json!({"eu": 2, "us": 1, "ap": 2}));
    assert_eq!(
        by,
        serde_json::json!({"region": 0, "colo": 1, "continent": 2, "assigned": 0, "first": 2})
    );
}

#[test]
fn the_workers_own_log_places_by_its_colo_then_its_continent() {
    let dir = TempDir::new("sim-regions-edgelimit");
    dir.write("global.toml", &format!("{GLOBAL}{RULES}"));
    let lines = [
        (r#""colo":"SYD","continent":"NA","#, "ap"),
        (r#""continent":"NA","#, "us"),
        // LHR is no region's colo: Asia is ap's.
        (r#""colo":"LHR","continent":"AS","#, "ap"),
        (r#""continent":"EU","#, "eu"),
        // A line logged without them: the first region.
        ("", "eu"),
    ];
    let mut trace = String::new();
    for (i, (place, _)) in lines.iter().enumerate() {
        let t = 1_700_000_000_000u64 + 1_000 * i as u64;
        trace.push_str(&format!(
            r#"{{"edgelimit":"decision","time_ms":{t},"local_ms":{t},"method":"GET","host":"a.example","path":"/a",{place}"rules":["api"],"allowed":true,"status":200,"limits":[{{"name":"per-ip","identifier":"192.0.2.{i}","cost":1,"allowed":true,"remaining":99,"reason":"admitted","shadow":false}}],"shadow_denied":[],"atomic":true}}"#
        ));
        trace.push('\n');
    }
    dir.write("worker.log", &trace);
    let text = ok(&sim(
        &[
            "replay",
            "worker.log",
            "--config",
            "global.toml",
            "--decisions",
            "d.csv",
            "--json",
            "r.json",
        ],
        &dir,
        "",
    ));
    // The replay agrees with what the Worker logged: placing a line changes no decision.
    assert!(text.contains("5 requests compared, 0 differ"), "{text}");
    let expected: Vec<&str> = lines.iter().map(|(_, region)| *region).collect();
    assert_eq!(regions_column(&dir.join("d.csv")), expected);
    let (requests, by) = placed(&dir.join("r.json"));
    assert_eq!(requests, serde_json::json!({"eu": 2, "us": 1, "ap": 2}));
    assert_eq!(
        by,
        serde_json::json!({"region": 0, "colo": 1, "continent": 3, "assigned": 0, "first": 1})
    );
}
