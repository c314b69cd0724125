//! Property tests of the concurrency limit (docs/design.md §2): never more than `N` live leases,
//! an ended lease frees its slot, a release frees once, and every decision against a brute-force
//! model that keeps each lease on its own (never the compact `(end, count)` state).

use edgelimit::algorithm::Charge;
use edgelimit::algorithm::State;
use edgelimit::{Algorithm, Policy, RETRY_NEVER};
use proptest::prelude::*;

/// What a caller does at a time: acquire `n` leases, or release `n` of the `k`-th lease it was
/// granted (possibly twice, possibly after it ended).
#[derive(Debug, Clone, Copy)]
enum Op {
    Acquire(u64),
    Release { grant: usize, n: u64 },
}

fn scenario() -> impl Strategy<Value = (Policy, Vec<(u64, Op)>)> {
    (1u64..6, 1u64..2_000).prop_flat_map(|(n, timeout)| {
        let policy = Policy::new(Algorithm::Concurrency, n, timeout, None).unwrap();
        let op = prop_oneof![
            3 => (1..=n + 1).prop_map(Op::Acquire),
            2 => (0usize..20, 1..=2u64).prop_map(|(grant, n)| Op::Release { grant, n }),
        ];
        let step = prop_oneof![3 => 0..timeout / 2 + 1, 1 => Just(0u64), 1 => 0..timeout * 2];
        (
            Just(policy),
            prop::collection::vec((step, op), 1..80).prop_map(|raw| {
                let mut t = 1_000_000;
                raw.into_iter()
                    .map(|(dt, op)| {
                        t += dt;
                        (t, op)
                    })
                    .collect()
            }),
        )
    })
}

/// The brute-force model: every granted lease as (end, released?), one per unit of cost.
#[derive(Default)]
struct Model {
    leases: Vec<(u64, bool)>,
}

impl Model {
    fn live(&self, t: u64) -> u64 {
        self.leases
            .iter()
            .filter(|&&(end, gone)| end > t && !gone)
            .count() as u64
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn decisions_match_a_lease_by_lease_model((p, ops) in scenario()) {
        let (n, timeout) = (p.limit(), p.window_ms());
        let mut state = State::fresh(Algorithm::Concurrency);
        let mut model = Model::default();
        let mut grants: Vec<u64> = Vec::new();
        for (i, &(t, op)) in ops.iter().enumerate() {
            match op {
                Op::Acquire(c) => {
                    let live = model.live(t);
                    let d = state.apply(&p, t, c as i64).decision;
                    prop_assert!(live <= n, "{} live leases under {}", live, p);
                    if c > n {
                        prop_assert!(!d.allowed);
                        prop_assert_eq!(d.retry_after_ms, RETRY_NEVER);
                    } else if live + c <= n {
                        prop_assert!(d.allowed, "op {}: {} live + {} under {}", i, live, c, p);
                        prop_assert_eq!(d.reset_at_ms, t + timeout);
                        prop_assert_eq!(d.remaining, n - live - c);
                        for _ in 0..c {
                            model.leases.push((t + timeout, false));
                        }
                        grants.push(t + timeout);
                    } else {
                        prop_assert!(!d.allowed, "op {}: {} live + {} under {}", i, live, c, p);
                        // Exact retry: the first time the model has room, absent releases.
                        let mut ends: Vec<u64> = model.leases.iter()
                            .filter(|&&(end, gone)| end > t && !gone)
                            .map(|&(end, _)| end)
                            .collect();
                        ends.sort_unstable();
                        let at = ends[(live + c - n - 1) as usize];
                        prop_assert_eq!(d.retry_after_ms, at - t, "op {}", i);
                        prop_assert_eq!(d.remaining, n.saturating_sub(live));
                    }
                }
                Op::Release { grant, n: count } => {
                    let Some(&lease_ms) = grants.get(grant) else { continue };
                    let d = state
                        .apply_charge(&p, t, count as i64, Charge::Release { lease_ms })
                        .decision;
                    let mut left = count;
                    for lease in model.leases.iter_mut() {
                        if left > 0 && lease.0 == lease_ms && lease.0 > t && !lease.1 {
                            lease.1 = true;
                            left -= 1;
                        }
                    }
                    prop_assert!(d.allowed);
                    prop_assert_eq!(d.remaining, n - model.live(t), "op {}", i);
                }
            }
        }
    }

    #[test]
    fn an_ended_lease_frees_its_slot((p, ops) in scenario()) {
        let mut state = State::fresh(Algorithm::Concurrency);
        let mut last = 0;
        for &(t, op) in &ops {
            if let Op::Acquire(c) = op {
                state.apply(&p, t, c as i64);
            }
            last = t;
        }
        // Whatever was taken and never released, every lease has ended one timeout later.
        let later = last + p.window_ms();
        let d = state.apply(&p, later, p.limit() as i64).decision;
        prop_assert!(d.allowed, "{:?}", d);
    }

    #[test]
    fn a_settlement_is_never_denied(
        (p, ops) in scenario(),
        settle in 1i64..10,
    ) {
        let mut state = State::fresh(Algorithm::Concurrency);
        let mut t = 0;
        for &(at, op) in &ops {
            if let Op::Acquire(c) = op {
                state.apply(&p, at, c as i64);
            }
            t = at;
        }
        let before = state.apply(&p, t, 0).decision.remaining;
        let d = state.apply_charge(&p, t, settle, Charge::Settle).decision;
        prop_assert!(d.allowed);
        prop_assert_eq!(d.remaining, before.saturating_sub(settle as u64));
    }
}
