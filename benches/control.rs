//! What tiers and overrides cost (docs/design.md §2, "Policy changes"): the same
//! decisions with and without the `ctl` option, in the same run against the same `redis-server` —
//! Redis's own script time per decision (`INFO commandstats`, so neither the client nor the network
//! is counted) and decisions per second at 8 clients. Rows per limit: the plain script
//! (`CheckPlan::new`), the controlled one (`CheckPlan::controlled`, what `RespStore` and
//! `RestStore` send) for identifiers holding no assignment, a tier, and a tier plus an override.
//! Every row is one script call per check — one round trip, as before. The modes run interleaved,
//! `ROUNDS` times, and each row reports its median, so a machine busy with other work skews every
//! mode alike. Run: `cargo bench --bench control`.

use std::sync::Arc;

use edgelimit::script::{CheckPlan, Script, Topology};
use edgelimit::store::DEFAULT_NAMESPACE;
use edgelimit::Control;
use edgelimit::{Assignment, Check, Identifier, Limit, Policy, TimeSource};
use redis::aio::MultiplexedConnection;

mod support;

const DECISIONS: usize = 10_000;
const ROUNDS: usize = 3;
const CLIENTS: usize = 8;
const IDENTIFIERS: usize = 100;
const T: u64 = 1_700_000_000_000;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// No `ctl` option: the script without live control.
    Plain,
    /// `ctl`, the identifier holding nothing (a `GET` of a missing key).
    Unassigned,
    /// `ctl`, the identifier holding a tier.
    Tier,
    /// `ctl`, the identifier holding a tier and an override (two lines to read).
    TierAndOverride,
}

impl Mode {
    /// The rows of a limit, in order; the first is the base of the ratios.
    const ALL: [Mode; 4] = [
        Mode::Plain,
        Mode::Unassigned,
        Mode::Tier,
        Mode::TierAndOverride,
    ];

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
    let (conn, limits) = (conn.clone(), limits.clone());
    support::rate(
        CLIENTS,
        DECISIONS / CLIENTS,
        (conn, limits),
        move |(mut conn, limits), c, i| async move {
            let check = check(&limits, mode, c, i);
            let (ns, at, topology) = (DEFAULT_NAMESPACE, TimeSource::At(T), Topology::SingleNode);
            let plan = match mode {
                Mode::Plain => CheckPlan::new(&check, ns, at, topology),
                _ => CheckPlan::controlled(&check, ns, at, topology),
            }
            .unwrap();
            assert_eq!(plan.invocations().len(), 1, "one script, one round trip");
            let inv = &plan.invocations()[0];
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(inv.script.sha1()).arg(inv.keys().len());
            for part in inv.keys().iter().chain(inv.args()) {
                cmd.arg(part);
            }
            let reply: redis::Value = cmd.query_async(&mut conn).await.expect("redis answers");
            match reply {
                redis::Value::Array(v) => {
                    assert_eq!(v[0], redis::Value::Int(1), "the bench admits everything")
                }
                other => panic!("unexpected reply {other:?}"),
            }
            (conn, limits)
        },
    )
    .await
}

fn main() {
    support::on_redis(|server, store| async move {
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
            let costs = support::interleaved(&server, ROUNDS, &Mode::ALL, |mode| {
                run(&conn, &limits, mode)
            })
            .await;
            for (mode, cost) in Mode::ALL.iter().zip(&costs) {
                println!("{}", cost.row(&costs[0], &label, mode.name()));
            }
        }
    });
}
