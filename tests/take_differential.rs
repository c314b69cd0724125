//! Differential test of "take up to x" (docs/design.md §9, `edgelimit::global::take`): random
//! sequences of requests, lease credits and takes — from a state or from a lease alone, some
//! identifiers on a tier — through
//! `MemoryStore` (the Rust step) and through `RespStore` on a real redis-server (the take script,
//! `src/script/take.lua`) must give identical answers, field for field; and a take grants what
//! the batch of requests of its parts grants (`take_by_checks`, the default every other store
//! has), leaving the same state.
//!
//! Run with `--nocapture` to see the counts.

use std::cell::Cell;
use std::sync::Arc;

use edgelimit::algorithm::Charge;
use edgelimit::global::take::{take_by_checks, Take};
use edgelimit::{
    Assignment, Check, CheckItem, Control, Identifier, Limit, MemoryStore, Policy, RespStore,
    Store, TimeSource,
};
use edgelimit_testkit::RedisServer;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const T0: u64 = 1_700_000_000_000;

/// One step of a sequence.
#[derive(Debug, Clone)]
enum Op {
    /// Time moves on by this many ms.
    Wait(u64),
    /// A request of this cost on the state (spending the lease after it, or not).
    Request { cost: i64, spend: bool },
    /// A credit of this many units to the lease, ending this many ms from now.
    Credit { units: i64, for_ms: u64 },
    /// A take of up to `want`, needing `need`, from the state or the lease alone.
    Take { want: i64, need: u64, lease: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0u64..1_500).prop_map(Op::Wait),
        3 => (-2i64..6, any::<bool>()).prop_map(|(cost, spend)| Op::Request { cost, spend }),
        1 => (0i64..12, 1u64..3_000).prop_map(|(units, for_ms)| Op::Credit { units, for_ms }),
        4 => (-1i64..40, 0u64..45, any::<bool>())
            .prop_map(|(want, need, lease)| Op::Take { want, need, lease }),
    ]
}

/// A policy, and another of its algorithm for a tier.
fn policies() -> impl Strategy<Value = (Policy, Policy)> {
    let spec = |algorithm: u8, (a, b): (u64, u64)| match algorithm {
        0 => format!("fixed {a}/{}s", b % 3 + 1),
        1 => format!("token-bucket {a}/1s burst {b}"),
        _ => format!("gcra {a}/1s burst {b}"),
    };
    (0u8..3, (1u64..30, 1u64..30), (1u64..30, 1u64..30)).prop_map(move |(k, own, tier)| {
        let parse = |s: String| s.parse::<Policy>().expect("a policy");
        (parse(spec(k, own)), parse(spec(k, tier)))
    })
}

/// The checks or takes of one op on `limit` for `id`, at `now`.
enum Call {
    Checks(Vec<Check>),
    Takes(Vec<Take>),
}

fn call(op: &Op, limit: &Arc<Limit>, id: &str, now: u64) -> Option<Call> {
    Some(match *op {
        Op::Wait(_) => return None,
        Op::Request { cost, spend } => {
            let item = CheckItem::new(limit.clone(), id, cost);
            let item = if spend { item.spending_lease() } else { item };
            Call::Checks(vec![Check::new().with_item(item)])
        }
        Op::Credit { units, for_ms } => Call::Checks(vec![Check::new().with_item(
            CheckItem::new(limit.clone(), id, units).charged(Charge::LeaseCredit {
                until_ms: now + for_ms,
            }),
        )]),
        Op::Take { want, need, lease } => {
            let item = CheckItem::new(limit.clone(), id, want);
            let item = if lease {
                item.spending_lease_only()
            } else {
                item
            };
            Call::Takes(vec![Take::new(item, need)])
        }
    })
}

/// Runs `ops` on `limit` through `memory` and `redis` side by side; the first difference, if
/// any. Also checks each take against its parts run as checks on a third store kept in step.
async fn compare(
    limit: Arc<Limit>,
    ops: &[Op],
    id: &str,
    memory: &MemoryStore,
    redis: &RespStore,
    parts: &MemoryStore,
) -> Result<u64, String> {
    let mut now = T0;
    let mut takes = 0;
    for (at, op) in ops.iter().enumerate() {
        if let Op::Wait(ms) = op {
            now += ms;
        }
        let time = TimeSource::At(now);
        match call(op, &limit, id, now) {
            None => {}
            Some(Call::Checks(checks)) => {
                let m = memory
                    .check(&checks, time)
                    .await
                    .map_err(|e| e.to_string())?;
                let r = redis
                    .check(&checks, time)
                    .await
                    .map_err(|e| e.to_string())?;
                let p = parts
                    .check(&checks, time)
                    .await
                    .map_err(|e| e.to_string())?;
                if m[0].decisions != r[0].decisions || m[0].decisions != p[0].decisions {
                    return Err(format!(
                        "op {at} {op:?}: memory {:?}, redis {:?}, parts {:?}",
                        m[0].decisions, r[0].decisions, p[0].decisions
                    ));
                }
            }
            Some(Call::Takes(t)) => {
                takes += 1;
                let m = memory.take(&t, time).await.map_err(|e| e.to_string())?;
                let r = redis.take(&t, time).await.map_err(|e| e.to_string())?;
                let p = take_by_checks(parts, &t, time)
                    .await
                    .map_err(|e| e.to_string())?;
                if m != r {
                    return Err(format!("op {at} {op:?}: memory {m:?}, redis {r:?}"));
                }
                if m[0].granted != p[0].granted {
                    return Err(format!("op {at} {op:?}: took {m:?}, its parts {p:?}"));
                }
                if m[0].granted > t[0].want() {
                    return Err(format!("op {at} {op:?}: took more than asked: {m:?}"));
                }
            }
        }
    }
    Ok(takes)
}

#[test]
fn the_take_script_matches_the_rust_step_and_the_parts() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let redis = runtime.block_on(async {
        RespStore::connect_with_timeout(&server.url(), std::time::Duration::from_secs(30))
            .await
            .expect("connect")
            .with_namespace("take-diff")
    });
    let mut runner = TestRunner::new(Config {
        cases: 400,
        failure_persistence: None,
        ..Config::default()
    });
    let (case, takes) = (Cell::new(0u64), Cell::new(0u64));
    runner
        .run(
            &(
                policies(),
                any::<bool>(),
                proptest::collection::vec(op(), 1..40),
            ),
            |((policy, tier), tiered, ops)| {
                case.set(case.get() + 1);
                // Each case its own identifier: what earlier cases stored never meets it.
                let id = format!("id{}", case.get());
                let limit = Limit::new("taken", policy)
                    .with_tiers([("gold", tier)])
                    .expect("a tier of the same algorithm");
                let limit = Arc::new(limit);
                let (memory, parts) = (MemoryStore::new(), MemoryStore::new());
                let found = runtime.block_on(async {
                    // A tiered identifier takes under the tier's policy, as it is decided.
                    if tiered {
                        let gold = Assignment::Tier("gold".into());
                        let identifier = Identifier::from(id.as_str());
                        for store in [&memory as &dyn Control, &redis, &parts] {
                            store
                                .assign(&limit, &identifier, Some(&gold), None)
                                .await
                                .expect("assigned");
                        }
                    }
                    compare(limit.clone(), &ops, &id, &memory, &redis, &parts).await
                });
                match found {
                    Ok(n) => {
                        takes.set(takes.get() + n);
                        Ok(())
                    }
                    Err(e) => Err(TestCaseError::fail(e)),
                }
            },
        )
        .unwrap();
    let (case, takes) = (case.get(), takes.get());
    eprintln!("{case} sequences, {takes} takes: Lua, Rust and the parts agree");
    assert!(takes > 1_000, "only {takes} takes compared");
}
