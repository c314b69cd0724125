//! The differential test body: random call sequences through `MemoryStore` (the Rust steps)
//! and through a Redis store (the Lua twins), which must agree verdict for verdict.
//!
//! Each sequence has its own identifiers, so sequences are independent and run concurrently
//! (their calls multiplex onto the store's connection, i.e. they are pipelined), while each
//! sequence's own calls run in order. Times probe exact window edges (±1 ms), emission
//! intervals, long gaps and small steps backwards; costs include peeks, refunds, the capacity,
//! capacity + 1 and the i64 extremes; policies reach the largest allowed limits and windows.
//!
//! Items are also charged as settlements and lease releases (naming the leases earlier calls may
//! have been granted), and some checks carry request ids from a small pool, so repeats of
//! admitted and denied checks, and ids reused by other checks, are all exercised.
//!
//! Half the rate limits of a sequence are global (docs/design.md §9): their items mostly spend
//! their capacity leases, and some credit them (amounts and ends at the extremes too), alone or
//! among other items, so spending, the merge of credits and all or nothing across leases are
//! compared with the rest.
//!
//! With [`generate_controlled`], limits name tiers and calls change identifiers' assignments
//! mid-stream (a known or unknown tier, an override of the limit's algorithm or of another, a
//! clear; until never, later in the sequence, or already past), on both stores alike, so the
//! effective policy and every algorithm's policy-change rule (docs/design.md §2) are compared.
//!
//! A third of the limits block an identifier they deny (`block_for`, docs/design.md §2,
//! "Blocks"), for durations from 1 ms to 366 days and at the window's edges, so blocks starting
//! on a denial (alone or among other items), requests refused during one, and its exact end are
//! compared too.
//!
//! A third of the GCRA limits delay a request rather than deny it (`exceed = "delay …"`,
//! docs/design.md §2, "Delays"), for longest waits from 1 ms to 366 days and at the emission
//! interval's and tolerance's edges, so queues forming, waits at their exact millisecond, the
//! denial beyond the longest wait and refunds and policy changes under a queue are compared.
//!
//! Steps backwards stay under `GC_GRACE_MS`: `MemoryStore` collects garbage on the caller's
//! clock and Redis on its own, so after a jump far back past a collected key the two could
//! legitimately differ (a clock skew that large is out of the design's scope).

use std::sync::Arc;

use edgelimit::algorithm::Charge;
use edgelimit::policy::{MAX_SCALED, MAX_WINDOW_MS};
use edgelimit::script::{CheckPlan, Topology};
use edgelimit::store::key::{encode_identifier, hash_slot, state_key};
use edgelimit::Control;
use edgelimit::{
    control::AssignmentKind, Algorithm, Assignment, Check, CheckItem, Identifier, Limit,
    MemoryStore, Policy, Reason, TimeSource, Verdict,
};

use edgelimit_testkit::rng::Rng;

/// What a sequence exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One limit of this algorithm per check.
    Single(Algorithm),
    /// Checks of 2–4 limits of mixed algorithms (the multi-limit script).
    Multi,
}

/// One store call: a batch of checks at one time, after the assignment changes of `assigns`.
#[derive(Debug, Clone)]
pub struct Call {
    pub time: u64,
    pub checks: Vec<Check>,
    pub assigns: Vec<Assign>,
}

/// A change of one identifier's assignments, made on both stores before a call's checks:
/// `assignment` replaces the one of its kind; `None` clears `clear` (both kinds when `None`).
#[derive(Debug, Clone)]
pub struct Assign {
    pub limit: Limit,
    pub identifier: Identifier,
    pub assignment: Option<Assignment>,
    pub until_ms: Option<u64>,
    pub clear: Option<AssignmentKind>,
}

/// Calls on identifiers no other sequence uses.
#[derive(Debug, Clone)]
pub struct Sequence {
    pub calls: Vec<Call>,
}

/// What a run saw.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub sequences: u64,
    pub calls: u64,
    pub checks: u64,
    pub items: u64,
    pub mismatches: u64,
    pub admitted: u64,
    pub over_limit: u64,
    pub too_costly: u64,
    /// Decisions admitted from a capacity lease.
    pub leased: u64,
    /// Items crediting a capacity lease.
    pub credits: u64,
    pub non_atomic: u64,
    /// Decisions whose capacity is not their limit's own: an assignment decided them.
    pub reassigned: u64,
    /// Items a block applies to (a request of positive cost on a limit with `block_for`).
    pub blocking: u64,
    /// Decisions refused by a block.
    pub blocked: u64,
    /// Items on a delaying GCRA limit.
    pub delaying: u64,
    /// Decisions admitted after a wait.
    pub delayed: u64,
    pub examples: Vec<String>,
}

impl Report {
    fn merge(&mut self, other: Report) {
        self.sequences += other.sequences;
        self.calls += other.calls;
        self.checks += other.checks;
        self.items += other.items;
        self.mismatches += other.mismatches;
        self.admitted += other.admitted;
        self.over_limit += other.over_limit;
        self.too_costly += other.too_costly;
        self.leased += other.leased;
        self.credits += other.credits;
        self.non_atomic += other.non_atomic;
        self.reassigned += other.reassigned;
        self.blocking += other.blocking;
        self.blocked += other.blocked;
        self.delaying += other.delaying;
        self.delayed += other.delayed;
        for e in other.examples {
            if self.examples.len() < 5 {
                self.examples.push(e);
            }
        }
    }

    /// Fails the test unless there were no mismatches and every kind of decision was seen
    /// (admissions from a capacity lease too, when leases were credited).
    pub fn assert_clean(&self, what: &str) {
        println!(
            "{what}: {} sequences, {} calls, {} checks, {} items, {} mismatches \
             (admitted {}, over limit {}, cost exceeds capacity {}, non-atomic {}, \
             decided by an assignment {}, lease credits {}, admitted from a lease {}, \
             items on blocking limits {}, blocked {}, items on delaying limits {}, delayed {})",
            self.sequences,
            self.calls,
            self.checks,
            self.items,
            self.mismatches,
            self.admitted,
            self.over_limit,
            self.too_costly,
            self.non_atomic,
            self.reassigned,
            self.credits,
            self.leased,
            self.blocking,
            self.blocked,
            self.delaying,
            self.delayed
        );
        assert_eq!(
            self.mismatches,
            0,
            "{what}: Lua and Rust disagree, e.g.:\n{}",
            self.examples.join("\n\n")
        );
        assert!(
            self.admitted > 0 && self.over_limit > 0 && self.too_costly > 0,
            "{what}: the sequences did not exercise every outcome: {self:?}"
        );
        assert!(
            self.credits == 0 || self.leased > 0,
            "{what}: leases were credited but never spent: {self:?}"
        );
        assert!(
            self.blocking < 100 || self.blocked > 0,
            "{what}: limits blocked but no request was ever refused by a block: {self:?}"
        );
        assert!(
            self.delaying < 100 || self.delayed > 0,
            "{what}: limits delayed but no request was ever admitted after a wait: {self:?}"
        );
    }
}

/// A random valid policy, often at the extremes: 1 ms to 366-day windows, limits up to
/// `MAX_SCALED / window`.
pub fn random_policy(rng: &mut Rng, algorithm: Algorithm) -> Policy {
    let any_window = rng.range(1, 1_000_000);
    let window = *rng.pick(&[
        1,
        2,
        3,
        7,
        10,
        100,
        999,
        1_000,
        1_000,
        60_000,
        3_600_000,
        86_400_000,
        MAX_WINDOW_MS,
        any_window,
    ]);
    let max = MAX_SCALED / window;
    let pick_count = |rng: &mut Rng| {
        let any = rng.range(1, 1_000);
        let any_large = rng.range(1, max);
        (*rng.pick(&[1, 2, 3, 5, 10, 100, any, any, max, any_large])).min(max)
    };
    let limit = if algorithm == Algorithm::Concurrency && rng.chance(70) {
        rng.range(1, 5).min(max)
    } else {
        pick_count(rng)
    };
    let burst = if algorithm.takes_burst() && rng.chance(50) {
        Some(pick_count(rng))
    } else {
        None
    };
    Policy::new(algorithm, limit, window, burst).expect("generated policies are valid")
}

fn random_cost(rng: &mut Rng, capacity: u64) -> i64 {
    let capacity = capacity as i64;
    match rng.range(0, 16) {
        0..=4 => 1,
        5 => 0,
        6 => -1,
        7 => -(rng.range(1, capacity.min(1 << 40) as u64) as i64),
        8 => rng.range(1, capacity as u64) as i64,
        9 => capacity,
        10 => capacity + 1,
        11 => i64::MAX,
        12 => i64::MIN,
        13 => rng.range(2, 5) as i64,
        _ => rng.range(1, (capacity as u64).min(3)) as i64,
    }
}

/// How an item's cost applies: mostly a request; sometimes a settlement, or the release of a
/// lease one of `leases` (ends earlier calls may have been granted) or a made-up one.
fn random_charge(rng: &mut Rng, leases: &[u64]) -> Charge {
    match rng.range(0, 10) {
        0 => Charge::Settle,
        1 | 2 if !leases.is_empty() => Charge::Release {
            lease_ms: *rng.pick(leases),
        },
        3 => Charge::Release {
            lease_ms: rng.range(0, 1 << 51),
        },
        _ => Charge::Request,
    }
}

/// An item of `limit` for `id`, charged at random. A `global` limit's item (a rate algorithm's)
/// mostly spends its capacity lease (after its policy, or now and then alone), and is now and
/// then a credit to it at `t`.
fn random_item(
    rng: &mut Rng,
    limit: &Limit,
    id: Identifier,
    leases: &[u64],
    global: bool,
    t: u64,
) -> CheckItem {
    if global && rng.chance(15) {
        return random_credit(rng, limit, id, t);
    }
    let cost = random_cost(rng, limit.policy.capacity());
    let item = CheckItem::new(limit, id, cost).charged(random_charge(rng, leases));
    // A region whose share rounds to nothing decides by its lease alone.
    match rng.range(0, 9) {
        _ if !global => item,
        0 | 1 => item,
        2 | 3 => item.spending_lease_only(),
        _ => item.spending_lease(),
    }
}

/// A credit to the capacity lease of (`limit`, `id`) at `t`: mostly a few times the capacity,
/// live for up to three windows; sometimes nothing, a huge amount, an end already past, at `t`
/// itself or beyond what a lease holds.
fn random_credit(rng: &mut Rng, limit: &Limit, id: Identifier, t: u64) -> CheckItem {
    let capacity = limit.policy.capacity();
    let w = limit.policy.window_ms();
    let amount = match rng.range(0, 9) {
        0 => 0,
        1 => -(rng.range(1, 5) as i64),
        2 => *rng.pick(&[i64::MAX, 1 << 52, (1 << 52) - 1, 1 << 51]),
        3 => capacity as i64,
        _ => rng.range(1, capacity.saturating_mul(3).min(1 << 50)) as i64,
    };
    let until_ms = match rng.range(0, 9) {
        0 => t,
        1 => t.saturating_sub(rng.range(1, 1_000)),
        2 => *rng.pick(&[0, u64::MAX, (1 << 52) - 1, 1 << 52]),
        3 => t + 1,
        _ => t + rng.range(1, w.saturating_mul(3).min(1 << 40)),
    };
    CheckItem::new(limit, id, amount).charged(Charge::LeaseCredit { until_ms })
}

/// A block duration for a limit of window `w`: at the window's edges, short, long, or the
/// longest allowed.
fn random_block(rng: &mut Rng, w: u64) -> u64 {
    let any = rng.range(1, w.saturating_mul(3).min(MAX_WINDOW_MS));
    *rng.pick(&[
        1,
        2,
        w.saturating_sub(1).max(1),
        w,
        (w + 1).min(MAX_WINDOW_MS),
        any,
        any,
        1_000,
        60_000,
        MAX_WINDOW_MS,
    ])
}

/// A longest wait for a GCRA `policy`: at the edges of its emission interval `T` and its
/// tolerance `B·T`, short, long, or the longest allowed.
fn random_delay(rng: &mut Rng, policy: &Policy) -> u64 {
    let w = policy.window_ms();
    let interval = (w / policy.limit()).max(1);
    let tolerance = (policy.capacity().saturating_mul(w) / policy.limit()).max(1);
    let any = rng.range(1, w.saturating_mul(3).min(MAX_WINDOW_MS));
    *rng.pick(&[
        1,
        2,
        interval.saturating_sub(1).max(1),
        interval.min(MAX_WINDOW_MS),
        (interval + 1).min(MAX_WINDOW_MS),
        (3 * interval).min(MAX_WINDOW_MS),
        tolerance.min(MAX_WINDOW_MS),
        (tolerance + 1).min(MAX_WINDOW_MS),
        any,
        500,
        MAX_WINDOW_MS,
    ])
}

/// The next time of a sequence after `t`, probing the edges of a policy with window `w`.
fn next_time(rng: &mut Rng, t: u64, w: u64, limit: u64) -> u64 {
    let edge = (t / w + 1) * w;
    match rng.range(0, 13) {
        0 => t,
        1 => t + 1,
        2 => edge - 1,
        3 => edge,
        4 => edge + 1,
        5 => t + w,
        6 => t + w - 1,
        7 => t + w + 1,
        8 => t + (w / limit).max(1),
        9 => t + rng.range(0, 3 * w),
        10 => t.saturating_sub(rng.range(1, w.min(30_000))),
        _ => t + rng.range(0, 50),
    }
}

/// Identifiers of one sequence: unique to it, some hostile.
fn identifiers(rng: &mut Rng, seq: u64) -> Vec<Identifier> {
    let n = rng.range(1, 3);
    (0..n)
        .map(|j| {
            let base = format!("s{seq}-{j}");
            match rng.range(0, 9) {
                0 => format!("{{{base}}}:x").into(),
                1 => format!("{base}\n*:{{}}").into(),
                2 => {
                    let mut b = base.into_bytes();
                    b.extend([0, 0xff, b'{', b'}']);
                    b.into()
                }
                3 => format!("{base}{}", "x".repeat(200)).into(),
                _ => base.into(),
            }
        })
        .collect()
}

/// `count` sequences of `kind`, from `seed`. For [`Kind::Multi`] with `same_slot`, each sequence
/// uses one identifier and limit names chosen so all its keys share a Cluster slot (so the
/// multi-limit script runs on a Cluster too); otherwise names are arbitrary.
pub fn generate(
    kind: Kind,
    seed: u64,
    count: u64,
    namespace: &str,
    same_slot: bool,
) -> Vec<Sequence> {
    generate_with(kind, seed, count, namespace, same_slot, false)
}

/// [`generate`] with tiers on every limit and assignment changes mid-stream before half the
/// calls; sequences are shorter (at most 6 calls), so many of them fit a bounded run.
pub fn generate_controlled(
    kind: Kind,
    seed: u64,
    count: u64,
    namespace: &str,
    same_slot: bool,
) -> Vec<Sequence> {
    generate_with(kind, seed, count, namespace, same_slot, true)
}

/// 1–3 random tiers of `limit`'s algorithm, named `t0`…
fn with_random_tiers(rng: &mut Rng, limit: Limit) -> Limit {
    let algorithm = limit.policy.algorithm();
    let tiers: Vec<(String, Policy)> = (0..rng.range(1, 3))
        .map(|i| (format!("t{i}"), random_policy(rng, algorithm)))
        .collect();
    limit.with_tiers(tiers).expect("generated tiers are valid")
}

/// A random assignment change for one of `limits` and `ids` at `t`.
fn random_assign(rng: &mut Rng, limits: &[Limit], ids: &[Identifier], t: u64) -> Assign {
    let limit = rng.pick(limits).clone();
    let identifier = rng.pick(ids).clone();
    let algorithm = limit.policy.algorithm();
    let assignment = match rng.range(0, 19) {
        0..=7 => {
            let known: Vec<String> = limit.tiers.iter().map(|(n, _)| n.to_string()).collect();
            Some(Assignment::Tier(rng.pick(&known).as_str().into()))
        }
        8 | 9 => Some(Assignment::Tier("gold".into())),
        10..=14 => Some(Assignment::Override(random_policy(rng, algorithm))),
        15 | 16 => {
            let other = *rng.pick(&Algorithm::EVERY);
            Some(Assignment::Override(random_policy(rng, other)))
        }
        _ => None,
    };
    let until_ms = match rng.range(0, 9) {
        0..=3 => None,
        4..=7 => Some(t + rng.range(1, 10_000)),
        _ => Some(t.saturating_sub(rng.range(0, 1_000))),
    };
    let clear = match rng.range(0, 2) {
        0 => None,
        1 => Some(AssignmentKind::Tier),
        _ => Some(AssignmentKind::Override),
    };
    Assign {
        limit,
        identifier,
        assignment,
        until_ms,
        clear,
    }
}

fn generate_with(
    kind: Kind,
    seed: u64,
    count: u64,
    namespace: &str,
    same_slot: bool,
    control: bool,
) -> Vec<Sequence> {
    let mut rng = Rng::new(seed);
    (0..count)
        .map(|seq| {
            // Some sequences change the policy under a live key (same name, another policy of
            // the same algorithm), as a redeploy does: the steps then read state written under
            // other bounds. Their span stays under 2·GC_GRACE_MS, so neither store collects
            // state that the other still holds.
            let mut changing = false;
            let limits: Vec<Limit> = match kind {
                Kind::Single(algorithm) if rng.chance(20) => {
                    changing = true;
                    vec![
                        Limit::new("lim", random_policy(&mut rng, algorithm)),
                        Limit::new("lim", random_policy(&mut rng, algorithm)),
                    ]
                }
                Kind::Single(algorithm) => {
                    vec![Limit::new("lim", random_policy(&mut rng, algorithm))]
                }
                Kind::Multi => {
                    let n = rng.range(2, 4);
                    (0..n)
                        .map(|i| {
                            let algorithm = *rng.pick(&Algorithm::EVERY);
                            Limit::new(format!("m{i}"), random_policy(&mut rng, algorithm))
                        })
                        .collect()
                }
            };
            let mut ids = identifiers(&mut rng, seq);
            let limits = if kind == Kind::Multi && same_slot {
                ids.truncate(1);
                same_slot_names(limits, namespace, &ids[0])
            } else {
                limits
            };
            let limits: Vec<Limit> = if control {
                // An assignment changes the policy under a live key: spans bounded as below.
                changing = true;
                limits
                    .into_iter()
                    .map(|l| with_random_tiers(&mut rng, l))
                    .collect()
            } else {
                limits
            };
            // A third of the limits block what they deny.
            let limits: Vec<Limit> = limits
                .into_iter()
                .map(|l| {
                    if rng.chance(33) {
                        let block_ms = random_block(&mut rng, l.policy.window_ms());
                        l.with_block_for(block_ms)
                    } else {
                        l
                    }
                })
                .collect();
            // A third of the GCRA limits delay what they would deny.
            let limits: Vec<Limit> = limits
                .into_iter()
                .map(|l| {
                    if l.policy.algorithm() == Algorithm::Gcra && rng.chance(33) {
                        let delay_ms = random_delay(&mut rng, &l.policy);
                        l.with_max_delay(delay_ms)
                    } else {
                        l
                    }
                })
                .collect();
            // Global limits (rate algorithms only: a concurrency limit holds no capacity lease)
            // spend and credit their leases; a limit renamed or replaced keeps its name's.
            let global: Vec<bool> = limits
                .iter()
                .map(|l| l.policy.algorithm() != Algorithm::Concurrency && rng.chance(50))
                .collect();
            let global_of = |limit: &Limit| {
                let i = limits.iter().position(|l| l.name == limit.name);
                i.is_some_and(|i| global[i])
            };
            let max_calls = if control { 6 } else { 16 };
            let w = limits[0].policy.window_ms();
            let l = limits[0].policy.limit();
            let mut t = if rng.chance(10) {
                rng.range(0, 1 << 51)
            } else {
                rng.range(1_600_000_000_000, 1_900_000_000_000)
            };
            // The names of leases earlier calls may have been granted: their time plus a timeout.
            let mut leases: Vec<u64> = Vec::new();
            let request_ids = ["r1", "r2", "r3"];
            let calls = (0..rng.range(1, max_calls))
                .map(|_| {
                    t = if changing {
                        next_time(&mut rng, t, w, l).min(t + 5_000)
                    } else {
                        next_time(&mut rng, t, w, l)
                    };
                    let assigns = if control && rng.chance(50) {
                        (0..rng.range(1, 2))
                            .map(|_| random_assign(&mut rng, &limits, &ids, t))
                            .collect()
                    } else {
                        Vec::new()
                    };
                    let n_checks = if rng.chance(15) { rng.range(2, 3) } else { 1 };
                    let checks = (0..n_checks)
                        .map(|_| {
                            let check = match kind {
                                Kind::Single(_) => {
                                    let limit = rng.pick(&limits).clone();
                                    let id = rng.pick(&ids).clone();
                                    let g = global_of(&limit);
                                    Check::new()
                                        .with_item(random_item(&mut rng, &limit, id, &leases, g, t))
                                }
                                Kind::Multi => {
                                    let mut check = Check::new();
                                    for limit in &limits {
                                        if check.items().len() >= 2 && rng.chance(30) {
                                            continue;
                                        }
                                        let id = rng.pick(&ids).clone();
                                        let g = global_of(limit);
                                        check = check.with_item(random_item(
                                            &mut rng, limit, id, &leases, g, t,
                                        ));
                                    }
                                    check
                                }
                            };
                            if rng.chance(25) {
                                check.with_request_id(*rng.pick(&request_ids))
                            } else if rng.chance(20) {
                                // Some items remembered under an id, the others not: a repeat
                                // answers those from memory and decides the rest anew.
                                let id = *rng.pick(&request_ids);
                                let mut mixed = Check::new();
                                for item in check.items() {
                                    mixed = mixed.with_item(if rng.chance(50) {
                                        item.clone().with_request_id(id)
                                    } else {
                                        item.clone()
                                    });
                                }
                                mixed
                            } else {
                                check
                            }
                        })
                        .collect();
                    for limit in &limits {
                        leases.push(t.saturating_add(limit.policy.window_ms()));
                    }
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

/// Renames limits so that their keys for `id` share the first one's Cluster slot.
///
/// A search over names: ~16384 candidates per limit, each a CRC16 over the few bytes after a
/// shared prefix (table-driven here, since this runs in debug builds). The result is checked
/// against the library's own `hash_slot`.
fn same_slot_names(limits: Vec<Limit>, namespace: &str, id: &Identifier) -> Vec<Limit> {
    let slot_of = |l: &Limit| hash_slot(&state_key(namespace, &l.name, l.policy.algorithm(), id));
    let target = slot_of(&limits[0]);
    let table = crc16_table();
    let tail = format!(":{}", encode_identifier(id));
    let mut out = vec![limits[0].clone()];
    for (i, limit) in limits.into_iter().enumerate().skip(1) {
        // The hash tag is "el:<namespace>:<name>:<identifier>"; only the name's digits vary.
        let head = crc16(0, format!("el:{namespace}:m{i}-").as_bytes(), &table);
        let k = (0..10_000_000u32)
            .find(|k| {
                let crc = crc16(head, k.to_string().as_bytes(), &table);
                crc16(crc, tail.as_bytes(), &table) % 16384 == target
            })
            .expect("a name in the same slot");
        let renamed = Limit {
            name: format!("m{i}-{k}").into(),
            ..limit
        };
        assert_eq!(slot_of(&renamed), target);
        out.push(renamed);
    }
    out
}

fn crc16_table() -> [u16; 256] {
    let mut table = [0u16; 256];
    for (i, entry) in table.iter_mut().enumerate() {
        let mut crc = (i as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
        *entry = crc;
    }
    table
}

/// CRC16/XMODEM (Redis Cluster's) continued from `crc` over `bytes`.
fn crc16(mut crc: u16, bytes: &[u8], table: &[u16; 256]) -> u16 {
    for &b in bytes {
        crc = (crc << 8) ^ table[((crc >> 8) as u8 ^ b) as usize];
    }
    crc
}

/// What `MemoryStore` says for a call: the same batch, except that a check the Redis store must
/// split across Cluster slots is decided item by item (not atomic), as the store does.
fn reference(
    memory: &MemoryStore,
    call: &Call,
    namespace: &str,
    topology: Topology,
) -> Vec<Verdict> {
    call.checks
        .iter()
        .map(|check| {
            let atomic = CheckPlan::new(check, namespace, TimeSource::At(call.time), topology)
                .expect("valid plan")
                .is_atomic();
            if atomic {
                return memory
                    .direct()
                    .check(std::slice::from_ref(check), call.time)
                    .remove(0);
            }
            let parts: Vec<Verdict> = check
                .items()
                .iter()
                .map(|item| {
                    let single = Check::new().with_item(item.clone());
                    memory.direct().check(&[single], call.time).remove(0)
                })
                .collect();
            // As the store joins the parts: the latest time any part decided at (a repeated
            // request id answers with the time it was first decided).
            let decided_at_ms = parts
                .iter()
                .map(|v| v.decided_at_ms)
                .fold(call.time, u64::max);
            let decisions: Vec<_> = parts.iter().map(|v| v.decisions[0]).collect();
            Verdict {
                allowed: decisions.iter().all(|d| d.allowed),
                decisions,
                atomic: false,
                decided_at_ms,
                listed: Vec::new(),
            }
        })
        .collect()
}

async fn run_one<S: Control>(
    store: &S,
    sequence: &Sequence,
    namespace: &str,
    topology: Topology,
) -> Report {
    let memory = MemoryStore::with_capacity(1024);
    let mut report = Report {
        sequences: 1,
        ..Report::default()
    };
    for (i, call) in sequence.calls.iter().enumerate() {
        let mut assigned = Ok(());
        for a in &call.assigns {
            let (limit, id) = (&a.limit, &a.identifier);
            let done = match (&a.assignment, a.clear) {
                (None, Some(kind)) => {
                    memory.direct().clear_assignment(limit, id, kind);
                    store.clear_assignment(limit, id, kind).await
                }
                (assignment, _) => {
                    memory
                        .direct()
                        .assign(limit, id, assignment.as_ref(), a.until_ms);
                    store
                        .assign(limit, id, assignment.as_ref(), a.until_ms)
                        .await
                }
            };
            assigned = assigned.and(done);
            // Both stores hold the same assignments, read back alike (every fourth call: each
            // read is one more round trip).
            if i % 4 != 0 {
                continue;
            }
            if let (Ok(()), Ok(held)) = (&assigned, store.assignments(limit, id).await) {
                if held != memory.direct().assignments(limit, id) {
                    assigned = Err(edgelimit::StoreError::Protocol(format!(
                        "assignments read back {held:?}, memory holds {:?}",
                        memory.direct().assignments(limit, id)
                    )));
                }
            }
        }
        if let Err(e) = assigned {
            report.mismatches += 1;
            report
                .examples
                .push(format!("call {i}: assign failed: {e}"));
            break;
        }
        let expected = reference(&memory, call, namespace, topology);
        let actual = store
            .check(&call.checks, TimeSource::At(call.time))
            .await
            .map_err(|e| format!("store error: {e}"));
        report.calls += 1;
        report.checks += call.checks.len() as u64;
        for check in &call.checks {
            report.items += check.items().len() as u64;
            report.blocking += check.items().iter().filter(|i| i.applies_block()).count() as u64;
            report.delaying += check
                .items()
                .iter()
                .filter(|i| i.max_delay_ms() > 0)
                .count() as u64;
            report.credits += check
                .items()
                .iter()
                .filter(|i| matches!(i.charge, Charge::LeaseCredit { .. }))
                .count() as u64;
        }
        for (v, check) in expected.iter().zip(&call.checks) {
            for (d, item) in v.decisions.iter().zip(check.items()) {
                report.reassigned += u64::from(d.limit != item.limit.policy.capacity());
            }
            report.non_atomic += (!v.atomic) as u64;
            for d in &v.decisions {
                match d.reason {
                    Reason::Admitted => report.admitted += 1,
                    Reason::OverLimit => report.over_limit += 1,
                    Reason::CostExceedsCapacity => report.too_costly += 1,
                    Reason::Leased => report.leased += 1,
                    Reason::Blocked => report.blocked += 1,
                    Reason::Delayed => report.delayed += 1,
                    _ => {}
                }
            }
        }
        if actual.as_ref() != Ok(&expected) {
            report.mismatches += 1;
            if report.examples.is_empty() {
                let history: Vec<String> = sequence.calls[..=i]
                    .iter()
                    .map(|c| {
                        let assigns: Vec<String> = c
                            .assigns
                            .iter()
                            .map(|a| {
                                format!(
                                    "{}/{:?} := {:?} until {:?} (clear {:?})",
                                    a.limit.name, a.identifier, a.assignment, a.until_ms, a.clear
                                )
                            })
                            .collect();
                        format!("  at {}: assigns {assigns:?}; {:?}", c.time, c.checks)
                    })
                    .collect();
                report.examples.push(format!(
                    "call {i}:\n{}\n  rust: {expected:?}\n  lua:  {actual:?}",
                    history.join("\n")
                ));
            }
            // Later calls of this sequence start from diverged states: stop here.
            break;
        }
    }
    report
}

/// Runs every sequence through `store` and a fresh `MemoryStore` each, `concurrency` sequences at
/// a time, and reports what it saw.
pub async fn run<S: Control + Clone + 'static>(
    store: &S,
    sequences: Vec<Sequence>,
    namespace: &str,
    topology: Topology,
    concurrency: usize,
) -> Report {
    let sequences = Arc::new(sequences);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (store, sequences, next) = (store.clone(), sequences.clone(), next.clone());
        let namespace = namespace.to_string();
        tasks.spawn(async move {
            let mut report = Report::default();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(sequence) = sequences.get(i) else {
                    break;
                };
                report.merge(run_one(&store, sequence, &namespace, topology).await);
            }
            report
        });
    }
    let mut report = Report::default();
    while let Some(part) = tasks.join_next().await {
        report.merge(part.expect("differential task panicked"));
    }
    report
}
