//! "Take up to x" (docs/design.md §9, "Capacity follows demand"): what a region asks of the
//! home's pool, a lender's static share or a lender's lease — as many units as the source holds,
//! at most `x`, in one step — so that an ask is one script call per store, not one per part.
//!
//! **Semantics.** A take of up to `want` units, needing `need`, from an item's state or its
//! lease alone ([`LeaseSpending::Never`] or [`LeaseSpending::Only`]: one source, decided as a
//! request of that cost would be) at `now`:
//!
//! - `granted` is the largest `k ≤ want` whose request the step admits (0 when none does — a
//!   zero-cost request is a look, always admitted). Every algorithm a global limit may have
//!   (fixed window, token bucket, GCRA) and a lease admit a cost iff it is at most what they
//!   hold, so `k = min(want, held)`: exactly what a batch of requests of `r, 2^m, …, 2, 1` units
//!   takes, one after another, each admitted as far as the source still holds it.
//! - The state and lease become what a request of `k` leaves them (a look when `k = 0`).
//! - The decision is that request's when `k ≥ need`; otherwise the decision a request of the
//!   shortfall `need − k` would get from the state and lease the take left (a denial, its
//!   retry time when the shortfall may fit; nothing more is taken).
//!
//! `k` is found the same way in Rust and in Lua (`src/script/take.lua`): `want` itself when it
//! is admitted, else a bisection of `[0, want)` on trial copies, so both twins try the same costs
//! in the same order. A `want` beyond `2^52` is taken as `2^52`, as every script cost is.

use crate::algorithm::{capacity_lease, CapacityLease, Charge, LeaseSpending, State, StepOutcome};
use crate::decision::{Decision, Reason};
use crate::policy::{Algorithm, Policy};
use crate::script::MAX_SCRIPT_COST;
use crate::store::{Check, CheckItem, Store, StoreError, TimeSource};

/// One take: up to `item.cost` units of `item`'s limit for its identifier (a request charge;
/// `item.spend_lease` says whether its state or its lease is taken from), needing `need`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Take {
    /// What is taken from, and up to how much (its cost).
    pub item: CheckItem,
    /// What the asker must have: below it, the decision says when the shortfall may fit.
    pub need: u64,
}

impl Take {
    /// A take of up to `want` units of `item`'s limit, needing `need`.
    pub fn new(item: CheckItem, need: u64) -> Take {
        Take { item, need }
    }

    /// Up to how many units.
    pub fn want(&self) -> u64 {
        self.item.cost.clamp(0, MAX_SCRIPT_COST) as u64
    }

    /// Refuses a take no store decides: one of a concurrency limit (it holds no capacity, only
    /// leases that are returned), one spending its lease after its state (two sources, which a
    /// batch of parts may draw on where one request of their sum may not), one charged other
    /// than as a request, carrying a request id, or on a limit that blocks or delays (a take is
    /// neither a denial to block nor a wait).
    pub fn refuse_bad(&self) -> Result<(), StoreError> {
        let item = &self.item;
        let bad = if item.limit.policy.algorithm() == Algorithm::Concurrency {
            Some("a concurrency limit")
        } else if item.spend_lease == LeaseSpending::AfterPolicy {
            Some("a lease spent after its state (two sources: a take is from one)")
        } else if item.charge != Charge::Request {
            Some("a charge other than a request")
        } else if item.request_id.is_some() {
            Some("a request id")
        } else if item.limit.block_ms > 0 || item.max_delay_ms() > 0 {
            Some("a limit that blocks or delays")
        } else {
            None
        };
        match bad {
            Some(what) => Err(StoreError::InvalidInput(format!(
                "a take of limit `{}` names {what}: a take is a plain request for units",
                item.limit.name
            ))),
            None => Ok(()),
        }
    }
}

/// What a take took, and the decision the module describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    /// Units taken.
    pub granted: u64,
    /// The request of `granted` units' decision when it covers the need, else the shortfall's.
    pub decision: Decision,
}

/// Takes up to `want` units (at most 2^52), needing `need`, from `state` and `lease` under
/// `policy` at `now_ms`, in place (see the module). The outcome's `changed` is the state's; the
/// lease changed when it differs from what was passed.
pub fn take(
    policy: &Policy,
    state: &mut State,
    lease: &mut CapacityLease,
    now_ms: u64,
    want: u64,
    need: u64,
    spending: LeaseSpending,
) -> (u64, StepOutcome) {
    let (want, need) = (
        want.min(MAX_SCRIPT_COST as u64),
        need.min(MAX_SCRIPT_COST as u64),
    );
    let trial = |cost: u64| {
        capacity_lease::apply(
            policy,
            &mut state.clone(),
            &mut lease.clone(),
            now_ms,
            cost as i64,
            Charge::Request,
            spending,
        )
        .decision
        .allowed
    };
    let granted = if trial(want) {
        want
    } else {
        // Admitted at `low`, denied at `high`.
        let (mut low, mut high) = (0, want);
        while high - low > 1 {
            let mid = low + (high - low) / 2;
            if trial(mid) {
                low = mid;
            } else {
                high = mid;
            }
        }
        low
    };
    let taken = capacity_lease::apply(
        policy,
        state,
        lease,
        now_ms,
        granted as i64,
        Charge::Request,
        spending,
    );
    if granted >= need {
        return (granted, taken);
    }
    let short = capacity_lease::apply(
        policy,
        &mut state.clone(),
        &mut lease.clone(),
        now_ms,
        (need - granted) as i64,
        Charge::Request,
        spending,
    );
    (
        granted,
        StepOutcome {
            decision: short.decision,
            ..taken
        },
    )
}

/// The parts of an ask for up to `units`, largest first: a source admitting each part that fits
/// in what it still holds takes exactly `min(units, held)` — the remainder `r` above
/// `2^(m+1) − 1 ≤ units`, then `2^m, …, 2, 1`: when `r` does not fit, what is held is below
/// `r < 2^(m+1)` and the powers of two take all of it.
pub(crate) fn up_to(units: u64) -> impl Iterator<Item = u64> {
    // The largest m with 2^(m+1) − 1 ≤ units (none for 0).
    let powers = u128::BITS - (u128::from(units) + 1).leading_zeros() - 1;
    let remainder = units - ((1u64 << powers) - 1);
    std::iter::once(remainder)
        .filter(|&r| r > 0)
        .chain((0..powers).rev().map(|k| 1u64 << k))
}

/// [`Store::take`]'s default: each take as request checks of its parts (a remainder and powers
/// of two) and a look, one batch for all (see [`Store::take`] for how its decisions differ when
/// short).
pub async fn take_by_checks<S: Store + ?Sized>(
    store: &S,
    takes: &[Take],
    time: TimeSource,
) -> Result<Vec<Taken>, StoreError> {
    let mut checks = Vec::new();
    let mut ranges = Vec::with_capacity(takes.len());
    for take in takes {
        take.refuse_bad()?;
        let from = checks.len();
        for part in up_to(take.want()).chain([0]) {
            let mut item = take.item.clone();
            item.cost = part as i64;
            checks.push(Check::new().with_item(item));
        }
        ranges.push(from..checks.len());
    }
    let verdicts = store.check(&checks, time).await?;
    let mut taken = Vec::with_capacity(takes.len());
    for (take, range) in takes.iter().zip(ranges) {
        let look = verdicts[range.end - 1].decisions[0];
        let parts: Vec<(u64, Decision)> = range
            .clone()
            .take(range.len() - 1)
            .map(|i| (checks[i].items()[0].cost as u64, verdicts[i].decisions[0]))
            .collect();
        let granted: u64 = parts
            .iter()
            .filter(|(_, d)| d.allowed)
            .map(|(u, _)| u)
            .sum();
        let decision = if granted >= take.need {
            parts
                .iter()
                .rev()
                .find(|(_, d)| d.allowed)
                .map_or(look, |&(_, d)| d)
        } else {
            let short = take.need - granted;
            let refused = parts
                .iter()
                .filter(|(_, d)| !d.allowed && d.reason == Reason::OverLimit);
            refused
                .clone()
                .filter(|(units, _)| *units >= short)
                .min_by_key(|(units, _)| *units)
                .or_else(|| refused.max_by_key(|(units, _)| *units))
                .map_or(look, |&(_, d)| d)
        };
        taken.push(Taken { granted, decision });
    }
    Ok(taken)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const T: u64 = 1_700_000_000_000;

    fn policy(spec: &str) -> Policy {
        spec.parse().unwrap()
    }

    #[test]
    fn a_take_grants_what_the_source_holds_up_to_the_want() {
        let p = policy("fixed 10/1s");
        let mut state = State::fresh(p.algorithm());
        let mut lease = CapacityLease::default();
        let never = LeaseSpending::Never;
        let (k, o) = take(&p, &mut state, &mut lease, T, 4, 1, never);
        assert_eq!((k, o.decision.allowed, o.decision.remaining), (4, true, 6));
        let (k, o) = take(&p, &mut state, &mut lease, T, 9, 1, never);
        assert_eq!((k, o.decision.allowed, o.decision.remaining), (6, true, 0));
        // Empty: nothing granted, and the need's retry is the window's end.
        let (k, o) = take(&p, &mut state, &mut lease, T + 10, 3, 2, never);
        assert_eq!(k, 0);
        assert_eq!(o.decision.reason, Reason::OverLimit);
        assert_eq!(o.decision.retry_after_ms, 990);
        // No need: the look.
        let (k, o) = take(&p, &mut state, &mut lease, T + 10, 3, 0, never);
        assert_eq!((k, o.decision.allowed), (0, true));
    }

    #[test]
    fn a_take_from_a_lease_alone_spends_what_it_holds() {
        let p = policy("gcra 10/1s burst 10");
        let mut state = State::fresh(p.algorithm());
        let mut lease = CapacityLease::new(5, T + 100).unwrap();
        let only = LeaseSpending::Only;
        let (k, o) = take(&p, &mut state, &mut lease, T, 8, 8, only);
        assert_eq!(k, 5);
        assert!(
            !o.decision.allowed,
            "short of the need: the shortfall's denial"
        );
        assert_eq!(lease.balance(), 0);
        assert_eq!(state, State::fresh(p.algorithm()));
    }

    fn any_policy() -> impl Strategy<Value = Policy> {
        prop_oneof![
            (1u64..40, 1u64..4).prop_map(|(l, s)| format!("fixed {l}/{s}s")),
            (1u64..30, 1u64..40).prop_map(|(r, b)| format!("token-bucket {r}/1s burst {b}")),
            (1u64..30, 1u64..40).prop_map(|(r, b)| format!("gcra {r}/1s burst {b}")),
        ]
        .prop_map(|spec| spec.parse::<Policy>().unwrap())
    }

    fn any_spending() -> impl Strategy<Value = LeaseSpending> {
        prop_oneof![Just(LeaseSpending::Never), Just(LeaseSpending::Only)]
    }

    proptest! {
        /// A source holding `held` admits the parts that fit, largest first, and gives exactly
        /// `min(units, held)`.
        #[test]
        fn the_parts_take_all_they_can(
            units in prop_oneof![0u64..300, any::<u64>()],
            held in prop_oneof![0u64..300, any::<u64>()],
        ) {
            let parts: Vec<u64> = up_to(units).collect();
            prop_assert!(parts.len() <= 65);
            prop_assert_eq!(parts.iter().map(|&p| u128::from(p)).sum::<u128>(), u128::from(units));
            let mut left = held;
            for part in parts {
                if part <= left {
                    left -= part;
                }
            }
            prop_assert_eq!(held - left, units.min(held));
        }

        /// A take leaves the state and the lease as its parts `r, 2^m, …, 1` requested one
        /// after another leave them, grants what they admit — never more than asked — and
        /// leaves nothing a request of one unit could still take when it grants less.
        #[test]
        fn a_take_is_its_parts_in_one_step(
            policy in any_policy(),
            history in proptest::collection::vec((0u64..800, 0i64..8), 0..12),
            lease in (0u64..30, 0u64..4_000),
            (want, need) in (prop_oneof![0u64..80, any::<u64>()], 0u64..90),
            spending in any_spending(),
            wait in 0u64..2_000,
        ) {
            let mut state = State::fresh(policy.algorithm());
            let mut now = T;
            for (dt, cost) in history {
                now += dt;
                state.apply_charge(&policy, now, cost, Charge::Request);
            }
            let mut lease = CapacityLease::new(lease.0, T + lease.1).unwrap();
            now += wait;
            let (mut by_parts, mut parts_lease) = (state.clone(), lease);
            let mut parts_granted = 0;
            for part in up_to(want.min(MAX_SCRIPT_COST as u64)) {
                let o = capacity_lease::apply(
                    &policy, &mut by_parts, &mut parts_lease, now, part as i64,
                    Charge::Request, spending,
                );
                if o.decision.allowed {
                    parts_granted += part;
                }
            }
            let (granted, outcome) =
                take(&policy, &mut state, &mut lease, now, want, need, spending);
            prop_assert!(granted <= want);
            prop_assert_eq!(granted, parts_granted);
            prop_assert_eq!(&state, &by_parts);
            prop_assert_eq!(lease, parts_lease);
            // Short of a need it asked for, the shortfall is denied.
            if want >= need {
                prop_assert_eq!(outcome.decision.allowed, granted >= need);
            }
            if granted < want {
                let o = capacity_lease::apply(
                    &policy, &mut state.clone(), &mut lease.clone(), now, 1,
                    Charge::Request, spending,
                );
                prop_assert!(!o.decision.allowed, "a unit was left: {:?}", o.decision);
            }
        }
    }

    #[test]
    fn a_take_beyond_the_capacity_takes_the_capacity() {
        let p = policy("token-bucket 5/1s burst 7");
        let mut state = State::fresh(p.algorithm());
        let mut lease = CapacityLease::default();
        let (k, o) = take(
            &p,
            &mut state,
            &mut lease,
            T,
            u64::MAX,
            1,
            LeaseSpending::Never,
        );
        assert_eq!((k, o.decision.allowed, o.decision.remaining), (7, true, 0));
    }
}
