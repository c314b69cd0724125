//! `sim replay --config --threads N`: a configuration replay split over threads reports exactly
//! what one thread does — the JSON, the page, the table and the `--decisions` file byte for byte
//! (the wall time aside, which differs between any two runs) — on the bundled trace through the
//! repository's configurations, and on a generated trace through a configuration whose limits
//! key on different identifiers (an address, an API key, a user), so that requests of many
//! addresses share state through their keys. A configuration whose state spans identifiers (a
//! `global` section) replays on one thread, says why, and reports the same.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use edgelimit_sim::config::parallel::{one_thread_reason, run_threads};
use edgelimit_sim::config::{html, run_config_on, table, EdgeRunOptions, RegionOptions};
use edgelimit_sim::input::Source;
use edgelimit_sim::readers::{ReadOptions, RequestOptions};
use edgelimit_testkit::dir::TempDir;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("data")
        .join(name)
}

fn options(trace: &Path, config: &Path, decisions: Option<&Path>) -> EdgeRunOptions {
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
        decisions: decisions.map(Path::to_path_buf),
    }
}

/// The replay's JSON, page, table and decisions file on `threads` threads (the wall time set
/// to 0; the decisions written to one path, so the reports name the same file).
fn outputs(options: &EdgeRunOptions, threads: usize) -> [String; 4] {
    let mut report = run_config_on(options, threads).expect("the trace replays");
    report.elapsed_ms = 0;
    let decisions = options
        .decisions
        .as_ref()
        .map(|path| std::fs::read_to_string(path).expect("the decisions file"))
        .unwrap_or_default();
    [
        report.to_json(),
        html::render(&report),
        table::render(&report),
        decisions,
    ]
}

/// One thread and 2, 3 and 8 write the same bytes; the split replay really ran split, each of
/// two threads with requests of its own.
fn assert_same_on_any_threads(options: &EdgeRunOptions) -> String {
    let config = edgelimit_engine::config::file::load(&options.config).unwrap();
    assert_eq!(one_thread_reason(&config, options), None);
    let run = run_threads(options, config, 2)
        .unwrap()
        .expect("the replay splits");
    assert!(
        run.requests_per_thread.iter().all(|&n| n > 0),
        "{:?}",
        run.requests_per_thread
    );
    let one = outputs(options, 1);
    assert!(one[0].contains("\"denied\""));
    for threads in [2, 3, 8] {
        let many = outputs(options, threads);
        for (what, (a, b)) in ["JSON", "HTML", "table", "decisions"]
            .iter()
            .zip(one.iter().zip(&many))
        {
            assert!(a == b, "{threads} threads: the {what} differs");
        }
    }
    one[0].clone()
}

/// The report's JSON as a value.
fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap()
}

#[test]
fn the_bundled_trace_replays_the_same_on_any_number_of_threads() {
    let dir = TempDir::new("sim-config-threads");
    let decisions = dir.path().join("decisions.csv");
    let trace = data("apache_logs.gz");
    let report = json(&assert_same_on_any_threads(&options(
        &trace,
        &data("three-rules.toml"),
        Some(&decisions),
    )));
    // It must bind, or equal reports would prove little.
    assert!(report["denied"].as_u64().unwrap() > 0);
    assert!(report["shadow_would_deny"].as_u64().unwrap() > 0);
    // The repository's own configuration refuses nothing of this trace; its shadow rule's
    // worst window is still found among every address's.
    let report = json(&assert_same_on_any_threads(&options(
        &trace,
        &data("../../wrangler.toml"),
        Some(&decisions),
    )));
    let shadow = &report["rules"][2]["limits"][0]["boundary"];
    assert!(
        shadow["max_admitted_in_window"].as_u64().unwrap() > 100,
        "{shadow}"
    );
}

/// A configuration like the benchmark's: limits on the address, an API key and a user, with
/// small limits so that many requests are denied.
const MULTI: &str = r#"
denial_cache_ms = 2000

[[rules]]
name = "api"
path_prefix = "/api/"
limits = [
  { name = "per-ip", policy = "gcra 5/1s burst 5", identifier = "ip" },
  { name = "per-key", policy = "sliding-counter 40/10s", identifier = "api-key:header:authorization" },
]

[[rules]]
name = "writes"
methods = ["POST"]
path_prefix = "/api/"
limits = [
  { name = "write-ip", policy = "fixed 3/1s", identifier = "ip" },
  { name = "write-user", policy = "sliding-log 1/10s", identifier = "header:x-user", missing = "allow" },
]

[[rules]]
name = "watch"
shadow = true
limits = [{ name = "watch-ip", policy = "token-bucket 2/1s burst 4", identifier = "ip" }]
"#;

/// A CSV trace of `n` requests from `clients` addresses, a few of them busy: each client's
/// API key shared with other clients (`client % keys`), a user on some writes, some requests
/// without a key (counted in the shared bucket).
fn generated_trace(n: u64, clients: u64, keys: u64) -> String {
    let mut text = String::from("timestamp_ms,method,path,ip,header:authorization,header:x-user\n");
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut t = 1_700_000_000_000u64;
    for _ in 0..n {
        t += next() % 40;
        let r = next();
        // A quarter of the requests from the four busiest clients.
        let client = if r % 4 == 0 {
            r / 4 % 4
        } else {
            r / 4 % clients
        };
        let write = next() % 6 == 0;
        let path = if next() % 10 == 0 {
            "/static/a.css"
        } else {
            "/api/items"
        };
        let key = if client % 50 == 7 {
            String::new()
        } else {
            format!("Bearer key-{}", client % keys)
        };
        let user = if write && next() % 2 == 0 {
            format!("user-{}", client % 30)
        } else {
            String::new()
        };
        let _ = writeln!(
            text,
            "{t},{},{path},10.0.{}.{},{key},{user}",
            if write { "POST" } else { "GET" },
            client / 256,
            client % 256
        );
    }
    text
}

#[test]
fn a_generated_trace_keyed_on_several_identifiers_replays_the_same_on_any_number_of_threads() {
    let dir = TempDir::new("sim-config-threads-multi");
    let config = dir.write("multi.toml", MULTI);
    let trace = dir.write("trace.csv", &generated_trace(30_000, 600, 150));
    let decisions = dir.path().join("decisions.csv");
    let options = options(&trace, &config, Some(&decisions));
    let report = json(&assert_same_on_any_threads(&options));
    for rule in report["rules"].as_array().unwrap() {
        for limit in rule["limits"].as_array().unwrap() {
            assert!(
                limit["denied"].as_u64().unwrap() > 0,
                "every limit binds: {}",
                limit["name"]
            );
        }
    }
    // Without the shared bucket and the keys, the addresses split: many groups.
    let loaded = edgelimit_engine::config::file::load(&config).unwrap();
    let run = run_threads(&options, loaded, 3).unwrap().unwrap();
    assert!(run.largest_group < 30_000 / 2, "{}", run.largest_group);
}

#[test]
fn a_configuration_with_a_global_section_replays_on_one_thread_and_says_why() {
    let options = EdgeRunOptions {
        regions: RegionOptions {
            assign: Some("eu=0.5,us=0.3,ap=0.2".parse().unwrap()),
            rtt: None,
        },
        ..options(&data("apache_logs.gz"), &data("global.toml"), None)
    };
    let config = edgelimit_engine::config::file::load(&options.config).unwrap();
    let reason = one_thread_reason(&config, &options).expect("a reason");
    assert!(reason.contains("global"), "{reason}");
    let one = outputs(&options, 1);
    assert_eq!(one, outputs(&options, 2));
}

#[test]
fn a_denial_cache_that_could_fill_replays_on_one_thread_and_says_why() {
    let dir = TempDir::new("sim-config-threads-cache");
    // Room for three denials: the busy clients fill it, and then it drops denials of any of
    // them, which a split over threads would not see.
    let config = dir.write(
        "small-cache.toml",
        &MULTI.replace("denial_cache_ms", "denial_cache = 3\ndenial_cache_ms"),
    );
    let trace = dir.write("trace.csv", &generated_trace(5_000, 200, 50));
    let options = options(&trace, &config, None);
    let loaded = edgelimit_engine::config::file::load(&config).unwrap();
    assert_eq!(one_thread_reason(&loaded, &options), None);
    let reason = run_threads(&options, loaded, 2)
        .unwrap()
        .expect_err("one thread");
    assert!(reason.contains("denial cache"), "{reason}");
    assert_eq!(outputs(&options, 1), outputs(&options, 2));
}

/// Standard input is kept in a temporary file for the split's second pass (`sim replay -`).
#[test]
fn standard_input_over_threads_reports_what_one_thread_does() {
    let dir = TempDir::new("sim-config-threads-stdin");
    let json_path = dir.path().join("report.json");
    let trace = data("apache_logs.gz");
    let config = data("three-rules.toml");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(["replay", "-", "--config"])
        .arg(&config)
        .args(["--threads", "2", "-q", "--json"])
        .arg(&json_path)
        .stdin(std::fs::File::open(&trace).unwrap())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let mut piped = json(&std::fs::read_to_string(&json_path).unwrap());
    let mut report = run_config_on(&options(&trace, &config, None), 1).unwrap();
    report.elapsed_ms = 0;
    let mut one = json(&report.to_json());
    for value in [&mut piped, &mut one] {
        value["elapsed_ms"] = 0.into();
        value["trace"]["name"] = "".into();
    }
    assert_eq!(piped, one);
}
