//! A global limit's capacity lease in a region (docs/design.md §9): units the home granted from
//! its pool, kept beside the identifier's state, spent when the item's own policy — its static
//! share — denies a request.
//!
//! **Semantics** (docs/design.md §9, "In the stores"). A lease is `(b, u)`: a balance of `b`
//! units, live while `t < u` (a lease ending at `u` is over at `u` itself); no lease is `(0, 0)`,
//! and an ended lease reads as balance 0. Times are the caller's `now`, never the state's: a
//! lease carries its end, not the time it was written.
//!
//! - **Spending.** An item marked to spend its lease is decided by its policy's step first. Only
//!   when the step denies a request (a [`Charge::Request`] of cost `c > 0`) is the lease asked:
//!   the item is admitted iff the lease is live and `b ≥ c`; then the state is left as it was,
//!   `b ← b − c`, and the decision is [`Reason::Leased`] with `remaining = b − c`, the step's
//!   `reset_at` and `retry_after = 0`. Otherwise the step's denial stands. A look, a refund, a
//!   settlement and a release never spend.
//! - **Crediting.** A [`Charge::LeaseCredit`] of cost `a > 0` ending at `e` (read as at most
//!   [`MAX_LEASE_END_MS`]) never denies and leaves the state untouched: a live lease becomes
//!   `(min(b + a, MAX_LEASE_BALANCE), max(u, e))`; an ended one is replaced by `(min(a,
//!   MAX_LEASE_BALANCE), e)` when `e > t`, and otherwise stays as it is (a credit already over
//!   changes nothing, so nothing is written). A cost `a ≤ 0` credits nothing. The decision is
//!   admitted, with `limit` the policy's capacity, `remaining` the live balance after and
//!   `reset_at` the lease's end while it is live, else `t`.
//!
//! **Bounds.** A balance never exceeds [`MAX_LEASE_BALANCE`] = 2^52 − 1, one less than the
//! largest cost a script is sent (costs are clamped to ±2^52), so a cost the clamp changed is
//! beyond every balance in Rust and in Lua alike, and `b + a < 2^53` stays exact in Lua's
//! doubles. The Lua twin is `src/script/capacity_lease.lua`; the lease's text in Redis is
//! `"<balance> <until_ms>"` ([`CapacityLease`]'s `Display` and `FromStr`).

use std::fmt;
use std::str::FromStr;

use super::outcome::StepOutcome;
use super::state::{Charge, State};
use crate::decision::{Decision, Reason};
use crate::policy::Policy;

/// The largest balance a lease holds: credits beyond it are capped.
pub const MAX_LEASE_BALANCE: u64 = (1 << 52) - 1;

/// The latest end a lease has: a credit's `until_ms` is read as at most this, so every time the
/// scripts compute stays below 2^52 ms, as a check's time must.
pub const MAX_LEASE_END_MS: u64 = (1 << 52) - 1;

/// A capacity lease: a balance of units live until its end. `Default` is no lease.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CapacityLease {
    balance: u64,
    until_ms: u64,
}

/// Why a lease's stored text does not read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unreadable capacity lease `{0}`: expected \"<balance> <until_ms>\" in decimal, each below 2^52")]
pub struct LeaseTextError(String);

impl CapacityLease {
    /// A lease of `balance` units ending at `until_ms`; `None` beyond [`MAX_LEASE_BALANCE`] or
    /// [`MAX_LEASE_END_MS`].
    pub const fn new(balance: u64, until_ms: u64) -> Option<CapacityLease> {
        if balance > MAX_LEASE_BALANCE || until_ms > MAX_LEASE_END_MS {
            return None;
        }
        Some(CapacityLease { balance, until_ms })
    }

    /// The balance as held, ended or not.
    pub const fn balance(&self) -> u64 {
        self.balance
    }

    /// When the lease ends (epoch ms): it is over at this very millisecond.
    pub const fn until_ms(&self) -> u64 {
        self.until_ms
    }

    /// Whether the lease is live at `now_ms`.
    pub const fn is_live(&self, now_ms: u64) -> bool {
        now_ms < self.until_ms
    }

    /// The units the lease holds at `now_ms`: its balance while live, else 0.
    pub const fn live_balance(&self, now_ms: u64) -> u64 {
        if self.is_live(now_ms) {
            self.balance
        } else {
            0
        }
    }

    /// Takes `cost` units if the lease is live and holds them; the balance after, if it did.
    fn spend(&mut self, now_ms: u64, cost: u64) -> Option<u64> {
        if !self.is_live(now_ms) || self.balance < cost {
            return None;
        }
        self.balance -= cost;
        Some(self.balance)
    }

    /// Adds `amount` units ending at `until_ms`, merged as the module documents.
    fn credit(&mut self, now_ms: u64, amount: i64, until_ms: u64) {
        let Ok(amount @ 1..) = u64::try_from(amount) else {
            return;
        };
        let until_ms = until_ms.min(MAX_LEASE_END_MS);
        if self.is_live(now_ms) {
            self.balance = self.balance.saturating_add(amount).min(MAX_LEASE_BALANCE);
            self.until_ms = self.until_ms.max(until_ms);
        } else if until_ms > now_ms {
            *self = CapacityLease {
                balance: amount.min(MAX_LEASE_BALANCE),
                until_ms,
            };
        }
    }

    /// The lease as a credit's decision reports it, for a limit of `capacity`.
    fn decision(&self, capacity: u64, now_ms: u64) -> Decision {
        let live = self.is_live(now_ms);
        Decision {
            allowed: true,
            limit: capacity,
            remaining: self.live_balance(now_ms),
            reset_at_ms: if live { self.until_ms } else { now_ms },
            retry_after_ms: 0,
            reason: Reason::Admitted,
        }
    }

    /// The lease's decision as an outcome that changes no state.
    fn outcome(&self, capacity: u64, now_ms: u64) -> StepOutcome {
        StepOutcome {
            decision: self.decision(capacity, now_ms),
            changed: false,
            expire_at_ms: self.until_ms,
        }
    }

    /// An item of [`LeaseSpending::Only`]: a request of positive `cost` is admitted iff the
    /// lease holds it, and otherwise denied as over the limit, retry after the policy's window
    /// (when the region next asks the home is not the lease's to say); anything else looks.
    fn decide_alone(
        &mut self,
        policy: &Policy,
        now_ms: u64,
        cost: i64,
        charge: Charge,
    ) -> StepOutcome {
        let capacity = policy.capacity();
        let asked = match u64::try_from(cost) {
            Ok(cost @ 1..) if charge == Charge::Request => cost,
            _ => return self.outcome(capacity, now_ms),
        };
        let live = self.is_live(now_ms);
        let decision = match self.spend(now_ms, asked) {
            Some(left) => Decision {
                allowed: true,
                limit: capacity,
                remaining: left,
                reset_at_ms: self.until_ms,
                retry_after_ms: 0,
                reason: Reason::Leased,
            },
            None => Decision {
                allowed: false,
                limit: capacity,
                remaining: self.live_balance(now_ms),
                reset_at_ms: if live { self.until_ms } else { now_ms },
                retry_after_ms: policy.window_ms(),
                reason: Reason::OverLimit,
            },
        };
        StepOutcome {
            decision,
            changed: false,
            expire_at_ms: self.until_ms,
        }
    }
}

/// The text the scripts store: `"<balance> <until_ms>"`.
impl fmt::Display for CapacityLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.balance, self.until_ms)
    }
}

/// Reads the scripts' text strictly, as they do: two decimal integers (digits only) separated by
/// one space, each within its bound. Anything else was not written by them.
impl FromStr for CapacityLease {
    type Err = LeaseTextError;

    fn from_str(text: &str) -> Result<CapacityLease, LeaseTextError> {
        let bad = || LeaseTextError(text.chars().take(64).collect());
        let number = |part: &str| -> Result<u64, LeaseTextError> {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            part.parse().map_err(|_| bad())
        };
        let (balance, until_ms) = text.split_once(' ').ok_or_else(bad)?;
        CapacityLease::new(number(balance)?, number(until_ms)?).ok_or_else(bad)
    }
}

/// How an item uses its capacity lease when it is not a credit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum LeaseSpending {
    /// The item never touches a lease: its policy decides alone.
    #[default]
    Never,
    /// A request its policy (the region's static share) denies may be admitted from the lease.
    AfterPolicy,
    /// The lease alone decides, the state is neither read nor written: a region whose static
    /// share rounds down to nothing. A request is admitted iff the lease holds its cost; any
    /// other charge is a look at the lease.
    Only,
}

/// Whether an item of `charge` spending its lease as `spending` reads or writes it: a credit
/// always, a request spending after its policy, and every item deciding by its lease alone.
pub(crate) fn uses_lease(charge: Charge, spending: LeaseSpending) -> bool {
    match charge {
        Charge::LeaseCredit { .. } => true,
        Charge::Request => spending != LeaseSpending::Never,
        _ => spending == LeaseSpending::Only,
    }
}

/// Decides one item of `cost` charged as `charge` on its state and its lease, in place: the
/// step of its policy, then for a spending request the step denied, its lease (see the module);
/// a credit goes to the lease alone. The outcome's `changed` is the state's; the lease changed
/// when it differs from what was passed. A credit's outcome carries the lease's end as its
/// `expire_at_ms`.
///
/// A concurrency limit holds no capacity lease (docs/design.md §9): every store refuses such an
/// item as bad input before deciding it.
pub fn apply(
    policy: &Policy,
    state: &mut State,
    lease: &mut CapacityLease,
    now_ms: u64,
    cost: i64,
    charge: Charge,
    spending: LeaseSpending,
) -> StepOutcome {
    apply_delaying(policy, state, lease, now_ms, cost, charge, spending, 0)
}

/// [`apply`] with the state stepped as a limit delaying requests up to `max_delay_ms`
/// ([`State::apply_charge_delaying`]): an item of such a limit in a check beside items that
/// spend or credit their leases.
#[allow(clippy::too_many_arguments)]
pub(crate) fn apply_delaying(
    policy: &Policy,
    state: &mut State,
    lease: &mut CapacityLease,
    now_ms: u64,
    cost: i64,
    charge: Charge,
    spending: LeaseSpending,
    max_delay_ms: u64,
) -> StepOutcome {
    if let Charge::LeaseCredit { until_ms } = charge {
        lease.credit(now_ms, cost, until_ms);
        return lease.outcome(policy.capacity(), now_ms);
    }
    if spending == LeaseSpending::Only {
        return lease.decide_alone(policy, now_ms, cost, charge);
    }
    let outcome = state.apply_charge_delaying(policy, now_ms, cost, charge, max_delay_ms);
    let spends = spending == LeaseSpending::AfterPolicy && charge == Charge::Request && cost > 0;
    if outcome.decision.allowed || !spends {
        return outcome;
    }
    match lease.spend(now_ms, cost as u64) {
        Some(left) => StepOutcome {
            decision: Decision {
                allowed: true,
                remaining: left,
                retry_after_ms: 0,
                reason: Reason::Leased,
                ..outcome.decision
            },
            ..outcome
        },
        None => outcome,
    }
}

/// What an item reports when its check is denied though it would have admitted alone: a
/// zero-cost look that changes nothing — at its lease for a credit and for an item deciding by
/// its lease alone, at its state (the step's look, whatever the lease holds) otherwise.
pub(crate) fn look(
    policy: &Policy,
    state: &State,
    lease: &CapacityLease,
    now_ms: u64,
    charge: Charge,
    spending: LeaseSpending,
    max_delay_ms: u64,
) -> StepOutcome {
    if matches!(charge, Charge::LeaseCredit { .. }) || spending == LeaseSpending::Only {
        return lease.outcome(policy.capacity(), now_ms);
    }
    state
        .clone()
        .apply_charge_delaying(policy, now_ms, 0, Charge::Request, max_delay_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::RETRY_NEVER;

    const T: u64 = 1_700_000_000_000;

    fn policy(spec: &str) -> Policy {
        spec.parse().unwrap()
    }

    fn lease(balance: u64, until_ms: u64) -> CapacityLease {
        CapacityLease::new(balance, until_ms).unwrap()
    }

    /// One spending request of `cost` at `now` on `state` and `lease`.
    fn spend(
        p: &Policy,
        state: &mut State,
        l: &mut CapacityLease,
        now: u64,
        cost: i64,
    ) -> StepOutcome {
        apply(
            p,
            state,
            l,
            now,
            cost,
            Charge::Request,
            LeaseSpending::AfterPolicy,
        )
    }

    #[test]
    fn the_share_decides_first_and_the_lease_only_when_it_denies() {
        let p = policy("fixed 2/1s");
        let mut state = State::fresh(p.algorithm());
        let mut l = lease(5, T + 10_000);
        // Within the share: the step admits, the lease is not touched.
        for left in [1, 0] {
            let o = spend(&p, &mut state, &mut l, T, 1);
            assert_eq!(
                (o.decision.reason, o.decision.remaining),
                (Reason::Admitted, left)
            );
            assert!(o.changed);
            assert_eq!(l, lease(5, T + 10_000));
        }
        // The share denies: the lease admits, the state stays, remaining is the lease's.
        let before = state.clone();
        let o = spend(&p, &mut state, &mut l, T + 1, 2);
        assert!(o.decision.allowed && !o.changed);
        assert_eq!(o.decision.reason, Reason::Leased);
        assert_eq!(o.decision.remaining, 3);
        assert_eq!(o.decision.limit, 2);
        assert_eq!(o.decision.reset_at_ms, T + 1_000, "the step's reset");
        assert_eq!(o.decision.retry_after_ms, 0);
        assert_eq!(state, before);
        assert_eq!(l, lease(3, T + 10_000));
        // More than the lease holds: the step's denial stands, nothing spent.
        let o = spend(&p, &mut state, &mut l, T + 2, 4);
        assert_eq!(o.decision.reason, Reason::CostExceedsCapacity);
        assert_eq!(l, lease(3, T + 10_000));
        // Exactly what it holds: admitted, down to 0.
        assert_eq!(
            spend(&p, &mut state, &mut l, T + 3, 3).decision.remaining,
            0
        );
        assert_eq!(l, lease(0, T + 10_000));
        let o = spend(&p, &mut state, &mut l, T + 4, 1);
        assert_eq!(o.decision.reason, Reason::OverLimit);
        assert_eq!(o.decision.retry_after_ms, 996, "the step's retry");
        assert_eq!(l, lease(0, T + 10_000));
        // A new window: the share admits again, the lease is never asked.
        let o = spend(&p, &mut state, &mut l, T + 1_000, 1);
        assert_eq!(o.decision.reason, Reason::Admitted);
    }

    #[test]
    fn an_item_not_marked_spending_never_spends() {
        let p = policy("gcra 1/1s");
        let mut state = State::fresh(p.algorithm());
        let mut l = lease(9, T + 10_000);
        assert!(
            apply(
                &p,
                &mut state,
                &mut l,
                T,
                1,
                Charge::Request,
                LeaseSpending::Never
            )
            .decision
            .allowed
        );
        let o = apply(
            &p,
            &mut state,
            &mut l,
            T,
            1,
            Charge::Request,
            LeaseSpending::Never,
        );
        assert_eq!(o.decision.reason, Reason::OverLimit);
        assert_eq!(l.balance(), 9);
    }

    #[test]
    fn an_item_deciding_by_its_lease_alone_never_touches_its_state() {
        let only = LeaseSpending::Only;
        for spec in [
            "fixed 10/1s",
            "token-bucket 5/1s burst 10",
            "gcra 10/1s burst 5",
        ] {
            let p = policy(spec);
            let fresh = State::fresh(p.algorithm());
            let mut state = fresh.clone();
            let mut l = lease(3, T + 500);
            // Admitted while the lease holds the cost, the step never asked.
            let o = apply(&p, &mut state, &mut l, T, 2, Charge::Request, only);
            let d = o.decision;
            assert_eq!(
                (
                    d.allowed,
                    d.reason,
                    d.remaining,
                    d.reset_at_ms,
                    d.retry_after_ms
                ),
                (true, Reason::Leased, 1, T + 500, 0),
                "{spec}"
            );
            assert_eq!(d.limit, p.capacity());
            assert!(!o.changed);
            // Short of the cost: denied as over the limit, retry after the window, nothing spent.
            let o = apply(&p, &mut state, &mut l, T + 1, 2, Charge::Request, only);
            let d = o.decision;
            assert_eq!(
                (
                    d.allowed,
                    d.reason,
                    d.remaining,
                    d.reset_at_ms,
                    d.retry_after_ms
                ),
                (false, Reason::OverLimit, 1, T + 500, p.window_ms()),
                "{spec}"
            );
            assert_eq!(l, lease(1, T + 500));
            // A look, a refund, a settlement: the lease's look, nothing spent.
            for (cost, charge) in [
                (0, Charge::Request),
                (-4, Charge::Request),
                (1, Charge::Settle),
            ] {
                let o = apply(&p, &mut state, &mut l, T + 2, cost, charge, only);
                assert_eq!(
                    (o.decision.allowed, o.decision.remaining, o.decision.reason),
                    (true, 1, Reason::Admitted),
                    "{spec} {charge:?}"
                );
            }
            // An ended lease admits nothing, and reports no units and no end.
            let o = apply(&p, &mut state, &mut l, T + 500, 1, Charge::Request, only);
            let d = o.decision;
            assert_eq!(
                (d.allowed, d.remaining, d.reset_at_ms),
                (false, 0, T + 500),
                "{spec}"
            );
            assert_eq!(state, fresh, "{spec}: the state is never written");
            assert!(uses_lease(Charge::Settle, only));
            assert!(!uses_lease(Charge::Settle, LeaseSpending::AfterPolicy));
        }
    }

    #[test]
    fn a_cost_beyond_the_share_s_capacity_may_still_spend_the_lease() {
        // A static share smaller than the request: its step denies for good, the lease decides.
        let p = policy("token-bucket 1/1s burst 2");
        let mut state = State::fresh(p.algorithm());
        let mut l = lease(10, T + 1_000);
        let o = spend(&p, &mut state, &mut l, T, 5);
        assert_eq!(o.decision.reason, Reason::Leased);
        assert_eq!(o.decision.remaining, 5);
        let o = spend(&p, &mut state, &mut l, T, 6);
        assert_eq!(o.decision.reason, Reason::CostExceedsCapacity);
        assert_eq!(o.decision.retry_after_ms, RETRY_NEVER);
    }

    #[test]
    fn an_ended_lease_holds_nothing() {
        let p = policy("fixed 1/1m");
        let mut state = State::fresh(p.algorithm());
        spend(&p, &mut state, &mut CapacityLease::default(), T, 1);
        let mut l = lease(100, T + 50);
        assert_eq!(
            spend(&p, &mut state, &mut l, T + 49, 1).decision.reason,
            Reason::Leased
        );
        // At its end it is over.
        assert!(!spend(&p, &mut state, &mut l, T + 50, 1).decision.allowed);
        assert_eq!(l, lease(99, T + 50));
        assert_eq!(l.live_balance(T + 50), 0);
        // A clock behind the end still finds it live: the lease carries its end, not a clock.
        assert!(spend(&p, &mut state, &mut l, T + 10, 1).decision.allowed);
    }

    #[test]
    fn looks_refunds_settlements_and_releases_never_spend() {
        let p = policy("sliding-log 1/1s");
        let mut state = State::fresh(p.algorithm());
        let mut l = lease(50, T + 10_000);
        spend(&p, &mut state, &mut l, T, 1);
        for (cost, charge) in [
            (0, Charge::Request),
            (5, Charge::Settle),
            (-1, Charge::Settle),
            (3, Charge::Release { lease_ms: T }),
        ] {
            let mut copy = state.clone();
            let o = apply(
                &p,
                &mut copy,
                &mut l,
                T + 1,
                cost,
                charge,
                LeaseSpending::AfterPolicy,
            );
            assert_ne!(o.decision.reason, Reason::Leased, "{charge:?}");
            assert_eq!(l.balance(), 50, "{charge:?}");
        }
        // A zero-cost look at the spent share reports the share, whatever the lease holds.
        let o = spend(&p, &mut state.clone(), &mut l, T + 1, 0);
        assert_eq!((o.decision.allowed, o.decision.remaining), (true, 0));
        assert_eq!(o.decision.reason, Reason::Admitted);
        // A refund gives the share back, and the lease keeps its balance.
        let o = spend(&p, &mut state, &mut l, T + 1, -1);
        assert_eq!(o.decision.remaining, 1);
        assert_eq!(l.balance(), 50);
    }

    #[test]
    fn credits_merge_into_a_live_lease_and_replace_an_ended_one() {
        let p = policy("fixed 10/1s");
        let mut state = State::fresh(p.algorithm());
        let fresh = state.clone();
        let mut l = CapacityLease::default();
        let credit = |l: &mut CapacityLease, state: &mut State, now, amount, until_ms| {
            apply(
                &p,
                state,
                l,
                now,
                amount,
                Charge::LeaseCredit { until_ms },
                LeaseSpending::Never,
            )
        };
        // No lease: replaced.
        let o = credit(&mut l, &mut state, T, 7, T + 1_000);
        assert_eq!(l, lease(7, T + 1_000));
        assert!(o.decision.allowed && !o.changed);
        assert_eq!(o.decision.remaining, 7);
        assert_eq!(o.decision.reset_at_ms, T + 1_000);
        assert_eq!(o.decision.limit, 10);
        assert_eq!(state, fresh, "a credit never touches the state");
        // Live: the balances add and the later end is kept, whichever comes second.
        credit(&mut l, &mut state, T + 10, 3, T + 500);
        assert_eq!(l, lease(10, T + 1_000));
        let o = credit(&mut l, &mut state, T + 20, 1, T + 2_000);
        assert_eq!(l, lease(11, T + 2_000));
        assert_eq!(
            (o.decision.remaining, o.decision.reset_at_ms),
            (11, T + 2_000)
        );
        // Ended: what it held is lost, the credit replaces it.
        let o = credit(&mut l, &mut state, T + 2_000, 4, T + 3_000);
        assert_eq!(l, lease(4, T + 3_000));
        assert_eq!(o.decision.remaining, 4);
        // A credit already over changes nothing and reports no balance.
        let o = credit(&mut l, &mut state, T + 5_000, 9, T + 4_000);
        assert_eq!(l, lease(4, T + 3_000));
        assert_eq!(
            (o.decision.remaining, o.decision.reset_at_ms),
            (0, T + 5_000)
        );
        // Nothing to credit: a look.
        for nothing in [0, -5, i64::MIN] {
            let o = credit(&mut l, &mut state, T + 2_500, nothing, T + 9_000);
            assert_eq!(l, lease(4, T + 3_000));
            assert_eq!(o.decision.remaining, 4);
        }
    }

    #[test]
    fn balances_and_ends_stay_within_what_lua_holds_exactly() {
        let p = policy("gcra 10/1s");
        let mut state = State::fresh(p.algorithm());
        let mut l = CapacityLease::default();
        let credit = Charge::LeaseCredit { until_ms: u64::MAX };
        apply(
            &p,
            &mut state,
            &mut l,
            T,
            i64::MAX,
            credit,
            LeaseSpending::Never,
        );
        assert_eq!(l, lease(MAX_LEASE_BALANCE, MAX_LEASE_END_MS));
        apply(
            &p,
            &mut state,
            &mut l,
            T,
            1 << 52,
            credit,
            LeaseSpending::Never,
        );
        assert_eq!(l.balance(), MAX_LEASE_BALANCE);
        // A cost the scripts' clamp changes is beyond every balance, as it is in Lua.
        let mut exhausted = State::fresh(p.algorithm());
        apply(
            &p,
            &mut exhausted,
            &mut l,
            T,
            10,
            Charge::Request,
            LeaseSpending::Never,
        );
        let o = apply(
            &p,
            &mut exhausted,
            &mut l,
            T,
            1 << 52,
            Charge::Request,
            LeaseSpending::AfterPolicy,
        );
        assert!(!o.decision.allowed);
        let o = apply(
            &p,
            &mut exhausted,
            &mut l,
            T,
            i64::MAX,
            Charge::Request,
            LeaseSpending::AfterPolicy,
        );
        assert!(!o.decision.allowed);
        let o = apply(
            &p,
            &mut exhausted,
            &mut l,
            T,
            (1 << 52) - 1,
            Charge::Request,
            LeaseSpending::AfterPolicy,
        );
        assert_eq!(
            (o.decision.reason, o.decision.remaining),
            (Reason::Leased, 0)
        );
    }

    #[test]
    fn the_stored_text_reads_back_strictly() {
        for l in [
            lease(0, 0),
            lease(12, T),
            lease(MAX_LEASE_BALANCE, MAX_LEASE_END_MS),
        ] {
            assert_eq!(l.to_string().parse::<CapacityLease>(), Ok(l));
        }
        assert_eq!("007 0012".parse::<CapacityLease>(), Ok(lease(7, 12)));
        for bad in [
            "",
            "5",
            "5 ",
            " 5 6",
            "5  6",
            "5 6 ",
            "5 6 7",
            "+5 6",
            "-5 6",
            "5 -6",
            "5.0 6",
            "5\t6",
            "a b",
            "4503599627370496 1",
            "1 4503599627370496",
            "99999999999999999999999 1",
        ] {
            assert!(bad.parse::<CapacityLease>().is_err(), "{bad:?}");
        }
        assert_eq!(CapacityLease::new(MAX_LEASE_BALANCE + 1, 0), None);
        assert_eq!(CapacityLease::new(0, MAX_LEASE_END_MS + 1), None);
    }
}
