//! The all-or-nothing rule for one check over in-memory states and capacity leases, shared by
//! every store that runs the Rust steps (and mirrored by the multi-limit Lua script).

use smallvec::SmallVec;

use super::check::{Check, CheckItem, Verdict};
use super::error::StoreError;
use crate::algorithm::{capacity_lease, CapacityLease, Charge, State, StepOutcome};
use crate::control::list::{self, Listed};
use crate::decision::{Decision, Reason};

/// Items a check decides without allocating: a request's check has one per limit of its matched
/// rules, rarely more than a few.
const INLINE_ITEMS: usize = 4;

/// Each item's outcome from [`decide`], in the check's order.
pub type StepOutcomes = SmallVec<[StepOutcome; INLINE_ITEMS]>;

/// Decides `check` at `now_ms` over `states` (one per item, in order) and `leases`, all or
/// nothing: the states and leases change only if every item admits. Returns the verdict and each
/// item's outcome.
///
/// `leases` holds each item's capacity lease (docs/design.md §9), one per item in order, or is
/// empty when no item spends or credits one; a lease changed exactly when it differs afterwards.
/// When the check is denied, items that would have admitted alone report a zero-cost look at
/// their unchanged state — a credit at its unchanged lease — since nothing was taken.
///
/// # Panics
///
/// When an item spends or credits its lease and `leases` does not hold one per item.
pub fn decide(
    check: &Check,
    states: &mut [State],
    leases: &mut [CapacityLease],
    now_ms: u64,
) -> (Verdict, StepOutcomes) {
    let mut verdict = Verdict::empty();
    let outcomes = decide_into(check, states, leases, now_ms, &mut verdict);
    (verdict, outcomes)
}

/// [`decide`] writing its verdict into `verdict`, whatever it held: its decisions and lists are
/// replaced, their allocations kept (see [`Verdict::reuse`]). Blocks are not consulted: the
/// stores keep them beside the states and honour them (docs/design.md §2, "Blocks").
///
/// # Panics
///
/// As [`decide`].
pub fn decide_into(
    check: &Check,
    states: &mut [State],
    leases: &mut [CapacityLease],
    now_ms: u64,
    verdict: &mut Verdict,
) -> StepOutcomes {
    decide_blocking_into(check, states, leases, &mut [], now_ms, verdict)
}

/// [`decide_into`] honouring its items' blocks (docs/design.md §2, "Blocks"). `blocks` is empty
/// when no item applies a block ([`CheckItem::applies_block`]: no limit of the check has a
/// block duration), else it holds per item, in order, the end (epoch ms) of the identifier's
/// block on the item's limit, 0 for none; an item that applies no block ignores its entry.
///
/// An item blocked at `now_ms` (`now_ms < end`) is denied [`Reason::Blocked`] without being
/// charged, and so denies the check (all or nothing): its decision is the one its step would
/// give on copies of its state and lease, with nothing left (`remaining` 0), `reset_at_ms` at
/// the later of the step's and the block's end, and `retry_after_ms` at the later of the
/// block's end and the step's own retry — still exact; a cost above capacity stays
/// [`Reason::CostExceedsCapacity`]. An item applying a block whose own decision is
/// [`Reason::OverLimit`] (its step's denial, not another item's) starts one: its entry becomes
/// `now_ms + block_ms`, even though the check writes nothing else. A block to write is an entry
/// that differs afterwards; a blocked item never changes its entry, so a block is not extended.
///
/// # Panics
///
/// As [`decide`], and when `blocks` is neither empty nor one per item.
pub(crate) fn decide_blocking_into(
    check: &Check,
    states: &mut [State],
    leases: &mut [CapacityLease],
    blocks: &mut [u64],
    now_ms: u64,
    verdict: &mut Verdict,
) -> StepOutcomes {
    let items = check.items();
    debug_assert_eq!(items.len(), states.len());
    // Most checks spend and credit no lease: their items are stepped on their states alone.
    let leased = !leases.is_empty();
    assert!(
        if leased {
            leases.len() == items.len()
        } else {
            !items.iter().any(CheckItem::uses_lease)
        },
        "a check spending or crediting capacity leases is decided with one lease per item"
    );
    assert!(
        blocks.is_empty() || blocks.len() == items.len(),
        "a check honouring blocks is decided with one block end per item"
    );
    // The end of each item's live block (`None`: the item is not blocked now).
    let live: SmallVec<[Option<u64>; INLINE_ITEMS]> = if blocks.is_empty() {
        SmallVec::new()
    } else {
        items
            .iter()
            .zip(blocks.iter())
            .map(|(item, &end)| (item.applies_block() && now_ms < end).then_some(end))
            .collect()
    };
    let step = |item: &CheckItem, state: &mut State, lease: Option<&mut CapacityLease>| {
        let policy = &item.limit.policy;
        match lease {
            Some(lease) => capacity_lease::apply_delaying(
                policy,
                state,
                lease,
                now_ms,
                item.cost,
                item.charge,
                item.spend_lease,
                item.max_delay_ms(),
            ),
            None => state.apply_charge_delaying(
                policy,
                now_ms,
                item.cost,
                item.charge,
                item.max_delay_ms(),
            ),
        }
    };
    let decide_item =
        |i: usize, item: &CheckItem, state: &mut State, lease: Option<&mut CapacityLease>| {
            match live.get(i).copied().flatten() {
                Some(end) => {
                    // Tried on copies: a blocked item changes nothing.
                    let mut tried = state.clone();
                    let mut tried_lease = lease.map(|l| *l);
                    blocked(step(item, &mut tried, tried_lease.as_mut()), end, now_ms)
                }
                None => step(item, state, lease),
            }
        };
    let mut outcomes = StepOutcomes::new();
    if let ([item], [state]) = (items, &mut *states) {
        // A single item needs no rollback: a denial never changes its state or its lease.
        outcomes.push(decide_item(0, item, state, leases.first_mut()));
    } else {
        // Decided on copies, kept only if every item admits.
        let mut scratch: SmallVec<[State; INLINE_ITEMS]> = SmallVec::with_capacity(items.len());
        let mut scratch_leases: SmallVec<[CapacityLease; INLINE_ITEMS]> =
            SmallVec::from_slice(leases);
        for (i, (item, state)) in items.iter().zip(states.iter()).enumerate() {
            let mut copy = state.clone();
            outcomes.push(decide_item(i, item, &mut copy, scratch_leases.get_mut(i)));
            scratch.push(copy);
        }
        if outcomes.iter().all(|o| o.decision.allowed) {
            for (state, new) in states.iter_mut().zip(scratch) {
                *state = new;
            }
            leases.copy_from_slice(&scratch_leases);
        } else {
            for (i, ((item, state), outcome)) in items
                .iter()
                .zip(states.iter())
                .zip(&mut outcomes)
                .enumerate()
            {
                if outcome.decision.allowed {
                    let policy = &item.limit.policy;
                    *outcome = match leases.get(i) {
                        Some(lease) => capacity_lease::look(
                            policy,
                            state,
                            lease,
                            now_ms,
                            item.charge,
                            item.spend_lease,
                            item.max_delay_ms(),
                        ),
                        None => state.clone().apply_charge_delaying(
                            policy,
                            now_ms,
                            0,
                            Charge::Request,
                            item.max_delay_ms(),
                        ),
                    };
                }
            }
        }
    }
    if !blocks.is_empty() {
        for ((item, outcome), end) in items.iter().zip(outcomes.iter_mut()).zip(blocks.iter_mut()) {
            if item.applies_block() && outcome.decision.reason == Reason::OverLimit {
                *end = now_ms.saturating_add(item.limit.block_ms);
                // The denial that starts a block tells the client its end: it is refused
                // until then, whatever its window says.
                let d = &mut outcome.decision;
                d.retry_after_ms = d.retry_after_ms.max(item.limit.block_ms);
                d.reset_at_ms = d.reset_at_ms.max(*end);
            }
        }
    }
    verdict.allowed = outcomes.iter().all(|o| o.decision.allowed);
    verdict.decisions.clear();
    verdict
        .decisions
        .extend(outcomes.iter().map(|o| o.decision));
    verdict.atomic = true;
    verdict.decided_at_ms = now_ms;
    verdict.listed.clear();
    outcomes
}

/// What an item blocked until `end` reports at `now_ms`, from the outcome its step would give
/// (see [`decide_blocking_into`]): nothing changed.
fn blocked(tried: StepOutcome, end: u64, now_ms: u64) -> StepOutcome {
    let step = tried.decision;
    if step.reason == Reason::CostExceedsCapacity {
        return StepOutcome {
            changed: false,
            ..tried
        };
    }
    let wait = end - now_ms;
    StepOutcome {
        decision: Decision {
            allowed: false,
            limit: step.limit,
            remaining: 0,
            reset_at_ms: step.reset_at_ms.max(end),
            retry_after_ms: if step.allowed {
                wait
            } else {
                wait.max(step.retry_after_ms)
            },
            reason: Reason::Blocked,
        },
        changed: false,
        expire_at_ms: tried.expire_at_ms,
    }
}

/// A gated check once its lists have answered (docs/design.md §"Deny and allow lists").
#[derive(Debug)]
pub(crate) enum Gated {
    /// A deny list matched: the verdict, every item denylisted, nothing charged.
    Denied(Verdict),
    /// What is left to decide: the items no allow list let through, as an ungated check, and
    /// per item of the original check its allowlisted decision (`None`: decided in `rest`).
    Decide {
        rest: Check,
        allowlisted: Vec<Option<Decision>>,
        listed: Vec<Listed>,
    },
}

/// Applies what the gates found (`listed`, one per gate, from [`resolve`]) to `check` at
/// `now_ms`: the rule every store shares, and multi.lua's gate section mirrors.
///
/// [`resolve`]: crate::control::list::resolve
pub(crate) fn split_gated(check: &Check, listed: Vec<Listed>, now_ms: u64) -> Gated {
    let items = check.items();
    if listed.iter().any(Listed::is_denied) {
        return Gated::Denied(Verdict {
            allowed: false,
            decisions: items
                .iter()
                .map(|item| list::denylisted(item.limit.policy.capacity(), now_ms))
                .collect(),
            atomic: true,
            decided_at_ms: now_ms,
            listed,
        });
    }
    let allowlisted: Vec<Option<Decision>> = items
        .iter()
        .map(|item| {
            let gate = item.gate.and_then(|g| listed.get(g))?;
            gate.is_allowed()
                .then(|| list::allowlisted(item.limit.policy.capacity(), now_ms))
        })
        .collect();
    let mut rest = check.ungated();
    rest.retain_items(|i| allowlisted[i].is_none());
    Gated::Decide {
        rest,
        allowlisted,
        listed,
    }
}

/// The verdict of a gated check from the verdict of what was left to decide (see
/// [`split_gated`]): the allowlisted decisions put back in their places.
pub(crate) fn merge_gated(
    allowlisted: Vec<Option<Decision>>,
    listed: Vec<Listed>,
    rest: Verdict,
) -> Result<Verdict, StoreError> {
    let missing = || StoreError::Protocol("a verdict lacks a decision for an item".to_string());
    let mut decided = rest.decisions.into_iter();
    let decisions = allowlisted
        .into_iter()
        .map(|a| a.or_else(|| decided.next()).ok_or_else(missing))
        .collect::<Result<Vec<Decision>, _>>()?;
    if decided.next().is_some() {
        return Err(missing());
    }
    Ok(Verdict {
        allowed: rest.allowed,
        decisions,
        atomic: rest.atomic,
        decided_at_ms: rest.decided_at_ms,
        listed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Charge;
    use crate::store::{CheckItem, Limit};
    use crate::Policy;

    const T: u64 = 1_700_000_000_000;

    fn limit(name: &str, spec: &str) -> Limit {
        Limit::new(name, spec.parse::<Policy>().unwrap())
    }

    fn lease(balance: u64, until_ms: u64) -> CapacityLease {
        CapacityLease::new(balance, until_ms).unwrap()
    }

    fn fresh(check: &Check) -> Vec<State> {
        check
            .items()
            .iter()
            .map(|i| State::fresh(i.limit.policy.algorithm()))
            .collect()
    }

    #[test]
    fn a_denied_check_spends_and_credits_nothing_and_reports_looks() {
        let global = limit("global", "fixed 1/1s");
        let daily = limit("daily", "fixed 1/1d");
        let credited = limit("credited", "gcra 10/1s");
        let spend = CheckItem::new(&global, "u", 1).spending_lease();
        let credit =
            CheckItem::new(&credited, "u", 5).charged(Charge::LeaseCredit { until_ms: T + 500 });
        // The share is spent; the lease would admit.
        let check = Check::new().with_item(spend.clone());
        let mut states = fresh(&check);
        let mut leases = [lease(3, T + 1_000)];
        decide(&check, &mut states, &mut leases, T);
        let share = states.clone();

        let check = Check::new()
            .with_item(spend)
            .with(&daily, "u", 2) // too costly: the whole check is denied
            .with_item(credit);
        let mut states = vec![share[0].clone(), State::fresh(daily.policy.algorithm())];
        states.push(State::fresh(credited.policy.algorithm()));
        let before_states = states.clone();
        let mut leases = [lease(3, T + 1_000), lease(0, 0), lease(7, T + 100)];
        let before_leases = leases;
        let (verdict, outcomes) = decide(&check, &mut states, &mut leases, T + 1);
        assert!(!verdict.allowed);
        assert_eq!(states, before_states, "no state written");
        assert_eq!(leases, before_leases, "no lease spent or credited");
        // The spending item reports the share's look (spent), not the lease it would have used.
        let d = verdict.decisions[0];
        assert_eq!(
            (d.allowed, d.remaining, d.reason),
            (true, 0, Reason::Admitted)
        );
        assert_eq!(d.reset_at_ms, T + 1_000);
        assert_eq!(verdict.decisions[1].reason, Reason::CostExceedsCapacity);
        // The credit reports its unchanged lease.
        let d = verdict.decisions[2];
        assert_eq!((d.allowed, d.remaining, d.reset_at_ms), (true, 7, T + 100));
        assert!(outcomes.iter().all(|o| !o.changed));
    }

    #[test]
    fn an_admitted_check_spends_and_credits_together() {
        let global = limit("global", "token-bucket 1/1s burst 1");
        let other = limit("other", "sliding-log 5/1s");
        let check = Check::new()
            .with_item(CheckItem::new(&global, "u", 2).spending_lease())
            .with(&other, "u", 1)
            .with_item(
                CheckItem::new(&global, "v", 4).charged(Charge::LeaseCredit { until_ms: T + 9 }),
            );
        let mut states = fresh(&check);
        let mut leases = [lease(5, T + 10), lease(0, 0), lease(1, T)];
        let (verdict, outcomes) = decide(&check, &mut states, &mut leases, T);
        assert!(verdict.allowed);
        assert_eq!(verdict.decisions[0].reason, Reason::Leased);
        assert_eq!(verdict.decisions[0].remaining, 3);
        assert_eq!(leases, [lease(3, T + 10), lease(0, 0), lease(4, T + 9)]);
        // The bucket was not charged (the lease paid); the log was.
        assert!(!outcomes[0].changed && outcomes[1].changed);
        assert_eq!(states[0], State::fresh(global.policy.algorithm()));
    }

    #[test]
    fn a_block_starts_on_the_items_own_denial_and_a_blocked_item_changes_nothing() {
        let strict = limit("strict", "fixed 1/1s").with_block_for(2_000);
        let loose = limit("loose", "fixed 5/1s").with_block_for(2_000);
        let check = Check::new().with(&strict, "u", 1).with(&loose, "u", 1);
        let mut states = fresh(&check);
        let mut blocks = [0, 0];
        let mut verdict = Verdict::empty();
        decide_blocking_into(&check, &mut states, &mut [], &mut blocks, T, &mut verdict);
        assert!(verdict.allowed);
        assert_eq!(blocks, [0, 0]);
        // The strict limit denies on its own; the loose one is denied by it and not blocked.
        let before = states.clone();
        decide_blocking_into(
            &check,
            &mut states,
            &mut [],
            &mut blocks,
            T + 1,
            &mut verdict,
        );
        assert!(!verdict.allowed);
        assert_eq!(blocks, [T + 2_001, 0]);
        assert_eq!(states, before);
        // Blocked: a later window has room, yet nothing is charged and the block is not moved.
        let later = T + 1_500;
        let outcomes = decide_blocking_into(
            &check,
            &mut states,
            &mut [],
            &mut blocks,
            later,
            &mut verdict,
        );
        let d = verdict.decisions[0];
        assert_eq!(
            (
                d.allowed,
                d.reason,
                d.remaining,
                d.retry_after_ms,
                d.reset_at_ms
            ),
            (false, Reason::Blocked, 0, 501, T + 2_001)
        );
        assert_eq!(blocks, [T + 2_001, 0]);
        assert_eq!(states, before);
        assert!(outcomes.iter().all(|o| !o.changed));
        // Decided without blocks, the same check is admitted: only the block denied it.
        let mut copies = states.clone();
        assert!(decide(&check, &mut copies, &mut [], later).0.allowed);
        // At the block's end the check is decided normally.
        decide_blocking_into(
            &check,
            &mut states,
            &mut [],
            &mut blocks,
            T + 2_001,
            &mut verdict,
        );
        assert!(verdict.allowed);
    }

    #[test]
    #[should_panic(expected = "one lease per item")]
    fn a_lease_item_without_its_lease_is_a_caller_s_error() {
        let global = limit("global", "fixed 1/1s");
        let check = Check::single(&global, "u", 1).with_item(
            CheckItem::new(&global, "v", 1).charged(Charge::LeaseCredit { until_ms: T }),
        );
        decide(&check, &mut fresh(&check), &mut [], T);
    }
}
