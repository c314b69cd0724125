//! The proof that `sim` predicts the edge (docs/design.md §6, §7): a generated workload goes
//! through the built Worker under `wrangler dev` (against the gateway and a real `redis-server`,
//! or in its own Durable Objects: the test runs on both, `redis::…` and `durable_objects::…`)
//! with `log_sample = 1.0`; its log lines are then replayed by `sim replay --format edgelimit
//! --config` of the same configuration, and every request's replayed decision must be the one
//! the Worker logged — status, matched rules, each limit's identifier, decision, remaining quota
//! and reason, the shadow denials, the times.
//!
//! Needs the built Worker and wrangler, so it is `#[ignore]`d in a plain `cargo test`;
//! `scripts/test.d/worker.sh` runs it.

#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use edgelimit_sim::config::{run_config, ConfigReport, EdgeRunOptions, RegionOptions};
use edgelimit_sim::input::Source;
use edgelimit_sim::readers::{Format, ReadOptions, RequestOptions};
use edgelimit_testkit::dir::TempDir;
use edgelimit_testkit::edge::{EdgeStore, Stack};
use edgelimit_testkit::{on_every_store, wait};

/// Two rules of two limits each (one limit keyed by an API key, hashed), a rule a boundary attack
/// aims at (a fixed window), a shadow rule, and paths no rule matches. Small windows, so a few
/// hundred requests reach every limit.
const CONFIG: &str = r#"
namespace = "e2e-replay"
timeout_ms = 5000      # a loaded 2-core CI box
log_sample = 1.0

[[vars.EDGELIMIT_CONFIG.rules]]
name = "api"
path_prefix = "/api/"
limits = [
  { name = "api-user", policy = "sliding-counter 12/4s", identifier = "header:x-user" },
  { name = "api-ip", policy = "sliding-log 60/4s", identifier = "ip" },
]

[[vars.EDGELIMIT_CONFIG.rules]]
name = "keys"
path_prefix = "/keys/"
limits = [
  { name = "key-rate", policy = "gcra 8/4s burst 4", identifier = "api-key:header:authorization", missing = "deny" },
  { name = "key-user", policy = "token-bucket 5/2s burst 6", identifier = "header:x-user", missing = "allow" },
]

[[vars.EDGELIMIT_CONFIG.rules]]
name = "login"
path = "/login"
limits = [{ name = "login-user", policy = "fixed 10/2s", identifier = "header:x-user" }]

[[vars.EDGELIMIT_CONFIG.rules]]
name = "watch"
path_prefix = "/api/"
shadow = true
limits = [{ name = "watch-user", policy = "fixed 6/2s", identifier = "header:x-user" }]
"#;

/// Requests in the generated workload (the boundary attack adds its own).
const WORKLOAD: usize = 520;
/// Requests of the boundary attack on each side of the boundary (the limit is 10 per window).
const ATTACK: usize = 12;

/// A small deterministic generator (64-bit LCG, high bits): the workload is the same every run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// One generated request: a path and its headers.
struct Planned {
    path: String,
    headers: Vec<(&'static str, String)>,
}

/// Six users, one of them heavy (half the traffic); four API keys, one request in eight without
/// a key (a 400 on `/keys/`) and one in ten without a user on `/keys/` (`missing = "allow"`);
/// one request in ten on a path no rule matches.
fn workload() -> Vec<Planned> {
    let mut rng = Lcg(0x5eed_0e2e);
    (0..WORKLOAD)
        .map(|i| {
            let user = if rng.next(2) == 0 { 0 } else { rng.next(6) };
            let mut headers = vec![("x-user", format!("user-{user}"))];
            let path = match rng.next(10) {
                0 => format!("/static/{i}.css"),
                1..=5 => format!("/api/items/{}", rng.next(50)),
                _ => {
                    if rng.next(8) != 0 {
                        headers.push(("authorization", format!("Bearer key-{}", rng.next(4))));
                    }
                    if rng.next(10) == 0 {
                        headers.clear();
                        headers.push(("authorization", "Bearer key-0".into()));
                    }
                    format!("/keys/{}", rng.next(20))
                }
            };
            Planned { path, headers }
        })
        .collect()
}

/// Sends one request and returns its status.
async fn send(stack: &Stack, planned: &Planned) -> u16 {
    let headers: Vec<(&str, &str)> = planned
        .headers
        .iter()
        .map(|(n, v)| (*n, v.as_str()))
        .collect();
    stack.get(&planned.path, &headers).await.status().as_u16()
}

/// The next `window`-aligned boundary at least `lead` from now, on the wall clock (Redis's too:
/// same machine), as an instant.
fn next_boundary(window: Duration, lead: Duration) -> Instant {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let window_ms = window.as_millis();
    let boundary_ms = ((now + lead).as_millis() / window_ms + 1) * window_ms;
    Instant::now() + Duration::from_millis((boundary_ms - now.as_millis()) as u64)
}

/// The Worker's decision lines in wrangler's output so far.
fn decision_lines(logs: &str) -> usize {
    logs.matches(r#"{"edgelimit":"decision""#).count()
}

on_every_store!(sim_replay_predicts_every_decision_of_the_worker);

/// One run of the workload through the Worker and its replay by the simulator.
struct Replayed {
    /// Requests sent (one log line each).
    sent: usize,
    /// The workload's statuses, counted.
    statuses: BTreeMap<u16, usize>,
    /// The boundary attack's statuses, in order.
    attack_statuses: Vec<u16>,
    /// How many log lines say their check was split (`"atomic":false`).
    split: usize,
    /// The replay's report.
    report: ConfigReport,
}

/// Sends the workload and the boundary attack through the Worker on `store` configured with
/// `config`, one request at a time, and replays its log lines with `sim replay --format
/// edgelimit --config` of the same configuration.
async fn run_and_replay(store: EdgeStore, config: &str) -> Replayed {
    let stack = Stack::start_on(store, config).await;
    let mut sent = 0usize;
    let mut statuses = BTreeMap::<u16, usize>::new();
    // One at a time: the Worker's log order is then its decision order (concurrent requests of
    // one identifier decided in the same millisecond would have no order to replay).
    for planned in workload() {
        *statuses.entry(send(&stack, &planned).await).or_default() += 1;
        sent += 1;
    }
    // The boundary attack: a fresh user spends the fixed window's whole quota (and a little
    // more) just before a boundary and again just after it — twice the limit inside one
    // window's span.
    let lead = Duration::from_millis(600);
    let boundary = next_boundary(Duration::from_secs(2), lead);
    tokio::time::sleep_until((boundary - lead).into()).await;
    let attack = Planned {
        path: "/login".into(),
        headers: vec![("x-user", "attacker".into())],
    };
    let mut attack_statuses = Vec::new();
    for _ in 0..ATTACK {
        attack_statuses.push(send(&stack, &attack).await);
    }
    tokio::time::sleep_until((boundary + Duration::from_millis(20)).into()).await;
    for _ in 0..ATTACK {
        attack_statuses.push(send(&stack, &attack).await);
    }
    sent += 2 * ATTACK;
    eprintln!("workload statuses: {statuses:?}; attack: {attack_statuses:?}");
    assert!(
        statuses.get(&429).copied().unwrap_or(0) > 20 && statuses.contains_key(&400),
        "the workload should meet the limits and a missing key: {statuses:?}"
    );

    // The log lines reach wrangler's output shortly after the responses.
    let mut logs = String::new();
    wait::until_async(Duration::from_secs(20), Duration::from_millis(100), || {
        logs = stack.worker.logs();
        decision_lines(&logs) >= sent
    })
    .await;
    assert_eq!(
        decision_lines(&logs),
        sent,
        "one decision line per request expected in:\n{logs}"
    );

    // `sim replay --format edgelimit --config` of the same configuration: wrangler's output as it
    // is (its own lines are skipped) and the wrangler.toml the Worker ran with.
    let dir = TempDir::new("edgelimit-e2e-replay");
    let trace = dir.write("wrangler-dev.log", &logs);
    let config = dir.write(
        "wrangler.toml",
        &format!("[vars.EDGELIMIT_CONFIG]\n{config}"),
    );
    let report = run_config(&EdgeRunOptions {
        source: Source::File(trace.clone()),
        read: ReadOptions {
            format: Some(Format::Edgelimit),
            strict: true,
            ..ReadOptions::default()
        },
        request: RequestOptions::default(),
        config: config.clone(),
        baseline: None,
        overrides: None,
        baseline_overrides: None,
        outages: Vec::new(),
        progress: false,
        regions: RegionOptions::default(),
        decisions: None,
    })
    .expect("the Worker's log replays");
    let against = report
        .against_log
        .as_ref()
        .expect("an edgelimit-format replay compares with the log");
    eprintln!(
        "sim replay against the Worker on {}: {} requests compared, {} mismatches ({} in status)",
        store.as_str(),
        against.compared,
        against.mismatches,
        against.status_mismatches
    );
    let split = logs.matches(r#""atomic":false"#).count();
    Replayed {
        sent,
        statuses,
        attack_statuses,
        split,
        report,
    }
}

/// The configuration the proof runs on `store`. On the Durable Objects a check of limits on
/// different identifiers is split over objects, and with `time = "server"` each object decides
/// on its own clock: the log line carries one time (the latest), so the simulator, deciding every
/// item at it, is off by the milliseconds between them (dozens of the 544 requests:
/// `measure_split_checks_on_the_objects_own_clocks` counts them). One instant for the whole
/// check — the Worker's, `time = "local"` — makes every decision replayable.
fn proof_config(store: EdgeStore) -> String {
    match store {
        EdgeStore::Redis => CONFIG.to_string(),
        EdgeStore::DurableObjects => {
            CONFIG.replacen("log_sample = 1.0", "log_sample = 1.0\ntime = \"local\"", 1)
        }
    }
}

async fn sim_replay_predicts_every_decision_of_the_worker(store: EdgeStore) {
    let Replayed {
        sent,
        statuses,
        attack_statuses,
        report,
        ..
    } = run_and_replay(store, &proof_config(store)).await;
    let against = report
        .against_log
        .as_ref()
        .expect("an edgelimit-format replay compares with the log");
    assert_eq!(against.compared, sent as u64);
    assert_eq!(against.mismatches, 0, "{:#?}", against.samples);
    assert_eq!(report.requests, sent as u64);

    // The replay's totals are the Worker's answers, counted from the responses.
    let answered_429 = statuses.get(&429).copied().unwrap_or(0)
        + attack_statuses.iter().filter(|&&s| s == 429).count();
    assert_eq!(
        report.statuses.get(&429).copied().unwrap_or(0),
        answered_429 as u64
    );
    let rule = |name: &str| {
        report
            .rules
            .iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("rule {name} in the report"))
    };
    for name in ["api", "keys", "login", "watch"] {
        assert!(
            rule(name).denied > 0,
            "rule {name} never denied: {:#?}",
            rule(name)
        );
    }
    // Twice the fixed window's limit inside one window's span: the exact log would have denied
    // some of what the fixed window admitted.
    let login = &rule("login").limits[0].boundary;
    assert!(login.false_allows > 0, "{login:#?}");
    assert!(login.max_admitted_in_window > 10, "{login:#?}");
}

/// The proof's run on the objects with the configuration's own `time = "server"`: how many
/// decisions the simulator misses when a split check is decided on several objects' clocks. A
/// measurement, not part of the suite: `cargo test -p edgelimit-worker --test e2e_replay --
/// --ignored --nocapture measure_`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a measurement: run it by name"]
async fn measure_split_checks_on_the_objects_own_clocks() {
    let replayed = run_and_replay(EdgeStore::DurableObjects, CONFIG).await;
    let against = replayed.report.against_log.as_ref().expect("compared");
    println!(
        "| store | time | requests | split checks | mismatches | in status |\n\
         |---|---|---|---|---|---|\n\
         | durable-objects | server (each object's clock) | {} | {} | {} | {} |",
        against.compared, replayed.split, against.mismatches, against.status_mismatches
    );
    assert_eq!(against.compared, replayed.sent as u64);
}
