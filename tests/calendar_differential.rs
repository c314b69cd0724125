//! Differential test of the calendar fixed windows (`fixed 10000/month anchor 15 utc+02:00`):
//! random call sequences through `MemoryStore` (the Rust step, `Calendar::period_of`) and
//! through `RespStore` on a real redis-server (`fixed_window.lua`'s `calendar_period`) must give
//! identical verdicts, field for field.
//!
//! Policies are weeks, months (anchors 1–31, 29–31 clamping in short months) and years (anchors
//! such as 02-29 and 12-31) in offsets from −23:59 to +23:59; times probe each period's last and
//! first milliseconds, whole periods later, the years near the epoch (where a local period starts
//! before it) and far ahead (2^51 ms). Some sequences change the policy under a live key —
//! calendar to calendar, calendar to a window in ms and back — and some run with tiers and
//! overrides that are calendar policies, so the policy-change rule (docs/design.md §2) is compared
//! too; others check a calendar limit together with other algorithms' limits (the multi-limit
//! script). The harness is the other differential tests' (tests/common/differential.rs).
//!
//! Run with `--nocapture` to see the counts.

mod common;

use common::differential::{random_policy, run, Assign, Call, Sequence};
use edgelimit::algorithm::Charge;
use edgelimit::control::AssignmentKind;
use edgelimit::policy::{Calendar, Period, MAX_SCALED};
use edgelimit::script::Topology;
use edgelimit::{Algorithm, Assignment, Check, CheckItem, Identifier, Limit, Policy, RespStore};
use edgelimit_testkit::rng::Rng;
use edgelimit_testkit::RedisServer;

const SEQUENCES: u64 = 10_000;
const CONTROLLED_SEQUENCES: u64 = 5_000;
const CONCURRENCY: usize = 64;
const COMPARE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
const DAY_MS: u64 = 86_400_000;
const MAX_OFFSET: u64 = 23 * 60 + 59;

/// How a sequence's limits vary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// One calendar limit; now and then its policy changes under the live key.
    Single,
    /// Tiers and overrides on the identifier, calendar policies among them.
    Controlled,
    /// A calendar limit checked with 1–2 limits of other algorithms at once.
    Multi,
}

fn random_calendar(rng: &mut Rng) -> Calendar {
    let offset = match rng.range(0, 5) {
        0 | 1 => 0,
        2 => -(MAX_OFFSET as i16),
        3 => MAX_OFFSET as i16,
        _ => rng.range(0, 2 * MAX_OFFSET) as i16 - MAX_OFFSET as i16,
    };
    match rng.range(0, 2) {
        0 => Calendar::new(Period::Week, None, offset),
        1 => {
            let any = rng.range(1, 31) as u8;
            let day = *rng.pick(&[1, 15, 28, 29, 30, 31, any, any]);
            Calendar::new(Period::Month, Some((0, day)), offset)
        }
        _ => {
            let month = rng.range(1, 12) as u8;
            let day = rng.range(1, 28) as u8;
            let (month, day) = *rng.pick(&[(1, 1), (2, 29), (12, 31), (3, 31), (month, day)]);
            Calendar::new(Period::Year, Some((month, day)), offset)
        }
    }
    .expect("generated calendars are valid")
}

fn random_calendar_policy(rng: &mut Rng) -> Policy {
    let any = rng.range(1, 1_000);
    let any_large = rng.range(1, MAX_SCALED);
    let limit = *rng.pick(&[1, 2, 3, 5, 10, 100, any, any, MAX_SCALED, any_large]);
    Policy::new_calendar(limit, random_calendar(rng)).expect("generated policies are valid")
}

/// Another policy a calendar limit may change to: a calendar or a fixed window in ms.
fn random_fixed_policy(rng: &mut Rng) -> Policy {
    if rng.chance(60) {
        random_calendar_policy(rng)
    } else {
        random_policy(rng, Algorithm::FixedWindow)
    }
}

fn random_cost(rng: &mut Rng, capacity: u64) -> i64 {
    let capacity = capacity as i64;
    match rng.range(0, 14) {
        0..=4 => 1,
        5 => 0,
        6 => -1,
        7 => -(rng.range(1, capacity.min(1 << 40) as u64) as i64),
        8 => rng.range(1, capacity as u64) as i64,
        9 => capacity,
        10 => capacity + 1,
        11 => *rng.pick(&[i64::MAX, i64::MIN]),
        _ => rng.range(2, 5) as i64,
    }
}

fn random_item(rng: &mut Rng, limit: &Limit, id: Identifier, t: u64) -> CheckItem {
    let charge = match rng.range(0, 9) {
        0 => Charge::Settle,
        1 => Charge::Release {
            lease_ms: t + rng.range(0, 40 * DAY_MS),
        },
        _ => Charge::Request,
    };
    CheckItem::new(limit, id, random_cost(rng, limit.policy.capacity())).charged(charge)
}

/// The next time after `t`, probing the edges of the calendar period of `policy` containing it.
fn next_time(rng: &mut Rng, t: u64, policy: &Policy) -> u64 {
    let (start, end) = policy
        .calendar()
        .map(|c| c.period_of(t))
        .unwrap_or((t, t + policy.window_ms()));
    match rng.range(0, 11) {
        0 => t,
        1 => t + 1,
        2 => end - 1,
        3 => end,
        4 => end + 1,
        5 => end + rng.range(0, end - start),
        6 => t + rng.range(0, 3 * DAY_MS),
        7 => t.saturating_sub(rng.range(1, 30_000)),
        8 => t + rng.range(0, 70 * DAY_MS),
        _ => t + rng.range(0, 50),
    }
}

fn identifiers(rng: &mut Rng, seq: u64) -> Vec<Identifier> {
    (0..rng.range(1, 2))
        .map(|j| format!("c{seq}-{j}").into())
        .collect()
}

fn with_tiers(rng: &mut Rng, limit: Limit) -> Limit {
    let tiers: Vec<(String, Policy)> = (0..rng.range(1, 3))
        .map(|i| (format!("t{i}"), random_fixed_policy(rng)))
        .collect();
    limit.with_tiers(tiers).expect("generated tiers are valid")
}

fn random_assign(rng: &mut Rng, limit: &Limit, ids: &[Identifier], t: u64) -> Assign {
    let assignment = match rng.range(0, 12) {
        0..=4 => {
            let known: Vec<String> = limit.tiers.iter().map(|(n, _)| n.to_string()).collect();
            Some(Assignment::Tier(rng.pick(&known).as_str().into()))
        }
        5 => Some(Assignment::Tier("gold".into())),
        6..=9 => Some(Assignment::Override(random_fixed_policy(rng))),
        10 => {
            let other = *rng.pick(&Algorithm::EVERY);
            Some(Assignment::Override(random_policy(rng, other)))
        }
        _ => None,
    };
    let until_ms = match rng.range(0, 5) {
        0..=2 => None,
        3 => Some(t + rng.range(1, 10_000)),
        _ => Some(t.saturating_sub(rng.range(0, 1_000))),
    };
    let clear = match rng.range(0, 2) {
        0 => None,
        1 => Some(AssignmentKind::Tier),
        _ => Some(AssignmentKind::Override),
    };
    Assign {
        limit: limit.clone(),
        identifier: rng.pick(ids).clone(),
        assignment,
        until_ms,
        clear,
    }
}

fn generate(shape: Shape, seed: u64, count: u64) -> Vec<Sequence> {
    let mut rng = Rng::new(seed);
    (0..count)
        .map(|seq| {
            let first = random_calendar_policy(&mut rng);
            // A policy changing under a live key keeps the sequence's span short (as the other
            // differential tests do), so neither store collects state the other still holds:
            // such sequences start just before a period's end to cross it.
            let (limits, changing) = match shape {
                Shape::Single if rng.chance(25) => (
                    vec![
                        Limit::new("lim", first),
                        Limit::new("lim", random_fixed_policy(&mut rng)),
                    ],
                    true,
                ),
                Shape::Single => (vec![Limit::new("lim", first)], false),
                Shape::Controlled => (vec![with_tiers(&mut rng, Limit::new("lim", first))], true),
                Shape::Multi => {
                    let mut limits = vec![Limit::new("cal", first)];
                    for i in 0..rng.range(1, 2) {
                        let algorithm = *rng.pick(&Algorithm::EVERY);
                        limits.push(Limit::new(
                            format!("m{i}"),
                            random_policy(&mut rng, algorithm),
                        ));
                    }
                    (limits, false)
                }
            };
            let ids = identifiers(&mut rng, seq);
            let mut t = match rng.range(0, 9) {
                0 => rng.range(0, 3 * DAY_MS),
                1 => rng.range(0, 1 << 51),
                _ => rng.range(1_600_000_000_000, 1_900_000_000_000),
            };
            if changing {
                let end = first.calendar().expect("a calendar").period_of(t).1;
                t = end.saturating_sub(rng.range(0, 40_000)).max(t);
            }
            let max_calls = if changing { 8 } else { 16 };
            let calls = (0..rng.range(1, max_calls))
                .map(|_| {
                    let before = t;
                    t = next_time(&mut rng, t, &first);
                    if changing {
                        t = t.min(before + 5_000);
                    }
                    let assigns = if shape == Shape::Controlled && rng.chance(50) {
                        vec![random_assign(&mut rng, &limits[0], &ids, t)]
                    } else {
                        Vec::new()
                    };
                    let checks = (0..if rng.chance(15) { 2 } else { 1 })
                        .map(|_| {
                            let check = if shape == Shape::Multi {
                                limits.iter().fold(Check::new(), |check, limit| {
                                    let id = rng.pick(&ids).clone();
                                    check.with_item(random_item(&mut rng, limit, id, t))
                                })
                            } else {
                                let limit = rng.pick(&limits).clone();
                                let id = rng.pick(&ids).clone();
                                Check::new().with_item(random_item(&mut rng, &limit, id, t))
                            };
                            if rng.chance(20) {
                                check.with_request_id(*rng.pick(&["r1", "r2"]))
                            } else {
                                check
                            }
                        })
                        .collect();
                    Call {
                        time: t,
                        checks,
                        assigns,
                    }
                })
                .collect();
            Sequence { calls }
        })
        .collect()
}

async fn differential(shape: Shape, seed: u64, count: u64) {
    let server = RedisServer::start();
    let namespace = format!("cal-{seed}");
    let store = RespStore::connect_with_timeout(&server.url(), COMPARE_TIMEOUT)
        .await
        .expect("connect")
        .with_namespace(namespace.clone());
    let sequences = generate(shape, seed, count);
    let report = run(
        &store,
        sequences,
        &namespace,
        Topology::SingleNode,
        CONCURRENCY,
    )
    .await;
    report.assert_clean(&format!("calendar {shape:?}"));
    assert_eq!(report.sequences, count);
    if shape == Shape::Controlled {
        assert!(report.reassigned > 0, "no assignment decided: {report:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calendar_fixed_window_lua_matches_rust() {
    differential(Shape::Single, 39_001, SEQUENCES).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calendar_tiers_and_overrides_lua_match_rust() {
    differential(Shape::Controlled, 39_002, CONTROLLED_SEQUENCES).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calendar_among_other_limits_lua_matches_rust() {
    differential(Shape::Multi, 39_003, SEQUENCES).await;
}
