//! What tiers and overrides cost (docs/design.md §2, "Policy changes"; issue 12): the same
//! decisions with and without the `ctl` option, in the same run against the same `redis-server` —
//! Redis's own script time per decision (`INFO commandstats`, so neither the client nor the network
//! is counted) and decisions per second at 8 clients. Rows per limit: the plain script
//! (`CheckPlan::new`), the controlled one (`CheckPlan::controlled`, what `RespStore` and
//! `RestStore` send) for identifiers holding no assignment, a tier, and a tier plus an override.
//! Every row is one script call per check — one round trip, as before. The modes run interleaved,
//! `ROUNDS` times, and each row reports its median, so a machine busy with other work skews every
//! mode alike. Run: `cargo bench --bench control`.

use std::sync::Arc;
use std::time::Instant;

use edgelimit::script::{CheckPlan, Script, Topology};
use edgelimit::store::DEFAULT_NAMESPACE;
use edgelimit::{Assignment, Check, Identifier, Limit, Policy, RespStore, Store, TimeSource};
use edgelimit_testkit::RedisServer;
use redis::aio::MultiplexedConnection;

const DECISIONS: usize = 10_000;
const ROUNDS: usize = 3;
const CLIENTS: usize = 8;
const IDENTIFIERS: usize = 100;
const T: u64 = 1_700_000_000_000;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// No `ctl` option: the script as before issue 12.
    Plain,
    /// `ctl`, the identifier holding nothing (a `GET` of a missing key).
    Unassigned,
    /// `ctl`, the identifier holding a tier.
    Tier,
    /// `ctl`, the identifier holding a tier and an override (two lines to read).
    TierAndOverride,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain (no ctl)",
            Mode::Unassigned => "ctl, no assignment",
            Mode::Tier => "ctl, a tier",
            Mode::TierAndOverride => "ctl, tier + override",
        }
    }

    /// Each mode its own identifiers, so the rows' states and assignments are apart.
    fn id(self, n: usize) -> String {
        let prefix = match self {
            Mode::Plain => "plain",
            Mode::Unassigned => "none",
            Mode::Tier => "tier",
            Mode::TierAndOverride => "both",
        };
        format!("{prefix}-{n}")
    }
}

fn check(limits: &[Limit], mode: Mode, c: usize, i: usize) -> Check {
    let id = mode.id((c * 7 + i) % IDENTIFIERS);
    let mut check = Check::new();
    for limit in limits {
        check = check.with(limit, id.clone(), 1);
    }
    check
}

/// Decisions (checks) per second with `CLIENTS` concurrent clients, each check one `EVALSHA`.
async fn run(conn: &MultiplexedConnection, limits: &Arc<Vec<Limit>>, mode: Mode) -> f64 {
    let per_client = DECISIONS / CLIENTS;
    let started = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (mut conn, limits) = (conn.clone(), limits.clone());
            tokio::spawn(async move {
                for i in 0..per_client {
                    let check = check(&limits, mode, c, i);
                    let (ns, at, topology) =
                        (DEFAULT_NAMESPACE, TimeSource::At(T), Topology::SingleNode);
                    let plan = match mode {
                        Mode::Plain => CheckPlan::new(&check, ns, at, topology),
                        _ => CheckPlan::controlled(&check, ns, at, topology),
                    }
                    .unwrap();
                    assert_eq!(plan.invocations().len(), 1, "one script, one round trip");
                    let inv = &plan.invocations()[0];
                    let reply: redis::Value = redis::cmd("EVALSHA")
                        .arg(inv.script.sha1())
                        .arg(inv.keys.len())
                        .arg(&inv.keys)
                        .arg(&inv.args)
                        .query_async(&mut conn)
                        .await
                        .expect("redis answers");
                    match reply {
                        redis::Value::Array(v) => {
                            assert_eq!(v[0], redis::Value::Int(1), "the bench admits everything")
                        }
                        other => panic!("unexpected reply {other:?}"),
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    (per_client * CLIENTS) as f64 / started.elapsed().as_secs_f64()
}

/// Microseconds Redis spent per script call since the last `CONFIG RESETSTAT`.
fn script_usec_per_call(server: &RedisServer) -> f64 {
    let info = server
        .command(&["INFO", "commandstats"])
        .ok()
        .and_then(|r| r.text())
        .expect("INFO answers");
    let (mut calls, mut usec) = (0.0, 0.0);
    for line in info.lines() {
        let Some(stats) = line.strip_prefix("cmdstat_evalsha:") else {
            continue;
        };
        for field in stats.split(',') {
            match field.split_once('=') {
                Some(("calls", n)) => calls += n.parse::<f64>().unwrap_or(0.0),
                Some(("usec", n)) => usec += n.parse::<f64>().unwrap_or(0.0),
                _ => {}
            }
        }
    }
    usec / calls
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = redis::Client::open(server.url()).unwrap();
        let conn = client.get_multiplexed_async_connection().await.unwrap();
        for script in Script::all() {
            let _: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(script.source())
                .query_async(&mut conn.clone())
                .await
                .unwrap();
        }
        let store = RespStore::connect(&server.url()).await.unwrap();
        println!(
            "\n{DECISIONS} checks per run, {ROUNDS} interleaved runs per row (medians), \
             {CLIENTS} clients, {IDENTIFIERS} identifiers; loopback; one redis-server; same run; \
             one EVALSHA per check in every row"
        );
        println!("| limits | check | script µs/check (Redis) | ratio | checks/s | ratio |");
        println!("|---|---|---|---|---|---|");
        let rows: [&[&str]; 4] = [
            &["fixed 1000000/1h"],
            &["token-bucket 1000000/1h"],
            &["gcra 1000000/1h"],
            &[
                "fixed 1000000/1h",
                "gcra 1000000/1h",
                "concurrency 1000000 timeout 1h",
            ],
        ];
        for specs in rows {
            let limits: Vec<Limit> = specs
                .iter()
                .enumerate()
                .map(|(i, spec)| {
                    let policy: Policy = spec.parse().unwrap();
                    let tier: Policy = spec.replace("1000000", "2000000").parse().unwrap();
                    Limit::new(format!("bench-{i}-{}", policy.algorithm()), policy)
                        .with_tiers(vec![("free", policy), ("pro", tier)])
                        .unwrap()
                })
                .collect();
            for limit in &limits {
                for n in 0..IDENTIFIERS {
                    let pro = Assignment::Tier("pro".into());
                    let over = Assignment::Override(limit.policy);
                    let tier_id = Identifier::from(Mode::Tier.id(n));
                    store
                        .assign(limit, &tier_id, Some(&pro), None)
                        .await
                        .unwrap();
                    let both_id = Identifier::from(Mode::TierAndOverride.id(n));
                    store
                        .assign(limit, &both_id, Some(&pro), None)
                        .await
                        .unwrap();
                    store
                        .assign(limit, &both_id, Some(&over), Some(T + 3_600_000))
                        .await
                        .unwrap();
                }
            }
            let limits = Arc::new(limits);
            let label = specs.join(" + ");
            // Warm up: states created for every mode.
            for mode in [
                Mode::Plain,
                Mode::Unassigned,
                Mode::Tier,
                Mode::TierAndOverride,
            ] {
                run(&conn, &limits, mode).await;
            }
            let modes = [
                Mode::Plain,
                Mode::Unassigned,
                Mode::Tier,
                Mode::TierAndOverride,
            ];
            let mut seen: Vec<Vec<(f64, f64)>> = vec![Vec::new(); modes.len()];
            for _ in 0..ROUNDS {
                for (m, &mode) in modes.iter().enumerate() {
                    server.command(&["CONFIG", "RESETSTAT"]).expect("RESETSTAT");
                    let rate = run(&conn, &limits, mode).await;
                    seen[m].push((script_usec_per_call(&server), rate));
                }
            }
            let median = |mut v: Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let rows: Vec<(f64, f64)> = seen
                .into_iter()
                .map(|s| {
                    (
                        median(s.iter().map(|r| r.0).collect()),
                        median(s.iter().map(|r| r.1).collect()),
                    )
                })
                .collect();
            let base = rows[0];
            for (mode, (usec, rate)) in modes.iter().zip(rows) {
                println!(
                    "| `{label}` | {} | {usec:.2} | {:.2} | {rate:.0} | {:.2} |",
                    mode.name(),
                    usec / base.0,
                    rate / base.1
                );
            }
        }
    });
}
