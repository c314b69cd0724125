//! Fixed window: one counter per window, windows aligned to the epoch.
//!
//! **Semantics** (docs/design.md §2). With limit `L`, window `W` ms and a request of cost `c` at `t`:
//! the window is `k = floor(t / W)`; the request is admitted iff the cost already admitted in
//! window `k` plus `c` is at most `L`. `reset_at = (k+1)·W`; a denied request's retry time is the
//! start of the next window.
//!
//! **Calendar periods**: a policy with a [`crate::policy::Calendar`] (`fixed 10000/month`) counts
//! the same way in the calendar period containing `t` instead
//! ([`crate::policy::Calendar::period_of`]); `reset_at` is the period's end and a denial retries
//! then.
//!
//! **Guarantee**: at most `L` admitted in any one aligned window.
//! **Worst case**: `2·L` admitted within `W` ms straddling a boundary — `L` in the last
//! millisecond of window `k` and `L` more in the first of window `k+1`, two milliseconds apart.
//! The simulator shows this on real traffic; prefer a sliding window or GCRA when it matters.
//!
//! **State**: the last time seen and the count of that time's window (two integers). A clock that
//! steps back before `seen_ms` counts as no time passed.

use super::outcome::{admitted, over_limit, too_costly, Cost, StepOutcome, MAX_TIME_MS};
use super::words::word_state;
use crate::policy::{Calendar, Policy};

word_state! {
    /// The fixed window state of one (policy, identifier). `Default` is "no state yet".
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
    pub struct FixedWindowState {
        /// The latest time (epoch ms) at which the state was written.
        pub seen_ms: u64,
        /// Cost admitted in the window that contains `seen_ms`.
        pub count: u64,
    }
}

/// Applies one request of `cost` at `now_ms` to `state` in place (untouched unless `changed`).
pub fn step(policy: &Policy, state: &mut FixedWindowState, now_ms: u64, cost: i64) -> StepOutcome {
    let limit = policy.limit();
    let t = now_ms.min(MAX_TIME_MS).max(state.seen_ms);
    let (start, end) = match policy.calendar() {
        Some(calendar) => calendar_period(calendar, t),
        None => {
            let window = policy.window_ms();
            let start = t - t % window;
            (start, start.saturating_add(window))
        }
    };
    let used = if state.seen_ms >= start {
        state.count
    } else {
        0
    };
    let (decision, new_count) = match Cost::of(cost) {
        Cost::Take(c) if c > limit => (too_costly(policy, limit.saturating_sub(used), end), None),
        Cost::Take(c) if used + c <= limit => {
            (admitted(policy, limit - used - c, end), Some(used + c))
        }
        Cost::Take(_) => (
            over_limit(policy, limit.saturating_sub(used), end, end - t),
            None,
        ),
        Cost::Peek => (admitted(policy, limit.saturating_sub(used), end), None),
        Cost::Refund(r) | Cost::Release { count: r, .. } => {
            let left = used - used.min(r);
            (
                admitted(policy, limit.saturating_sub(left), end),
                (left != used).then_some(left),
            )
        }
    };
    if let Some(count) = new_count {
        *state = FixedWindowState { seen_ms: t, count };
    }
    StepOutcome {
        decision,
        changed: new_count.is_some(),
        expire_at_ms: end,
    }
}

/// The civil-date arithmetic kept out of line, so a window of fixed length steps as it did
/// before calendar periods existed.
#[inline(never)]
fn calendar_period(calendar: Calendar, t: u64) -> (u64, u64) {
    calendar.period_of(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::calendar::{Calendar, Period};
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn calendar_policies() -> impl Strategy<Value = Policy> {
        let offset = -(23 * 60 + 59)..=(23 * 60 + 59i16);
        let calendar = prop_oneof![
            offset
                .clone()
                .prop_map(|o| Calendar::new(Period::Week, None, o).unwrap()),
            (1u8..=31, offset.clone()).prop_map(|(d, o)| Calendar::new(
                Period::Month,
                Some((0, d)),
                o
            )
            .unwrap()),
            (1u8..=12, 1u8..=29, offset).prop_map(|(m, d, o)| Calendar::new(
                Period::Year,
                Some((m, d)),
                o
            )
            .unwrap()),
        ];
        (1u64..20, calendar).prop_map(|(l, c)| Policy::new_calendar(l, c).unwrap())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// Admits exactly while the calendar period's admitted cost plus the request's fits
        /// `L` (so never more than `L` per period), resets at the period's end, and a denial
        /// retries then.
        #[test]
        fn a_calendar_window_admits_at_most_its_limit_per_period(
            policy in calendar_policies(),
            start in 0u64..13_000_000_000_000,
            calls in proptest::collection::vec((0u64..3 * 86_400_000, 0i64..8), 1..120),
        ) {
            let calendar = policy.calendar().unwrap();
            let mut state = FixedWindowState::default();
            let mut admitted: HashMap<u64, u64> = HashMap::new();
            let mut t = start;
            for (gap, cost) in calls {
                t += gap;
                let (first, end) = calendar.period_of(t);
                let used = admitted.get(&first).copied().unwrap_or(0);
                let out = step(&policy, &mut state, t, cost);
                let d = out.decision;
                prop_assert_eq!(d.reset_at_ms, end);
                let c = cost as u64;
                let fits = used + c <= policy.limit();
                prop_assert_eq!(d.allowed, fits, "{} at {}: {} used, cost {}", policy, t, used, c);
                if d.allowed {
                    *admitted.entry(first).or_default() += c;
                    prop_assert_eq!(d.remaining, policy.limit() - used - c);
                } else if c <= policy.limit() {
                    prop_assert_eq!(d.retry_after_ms, end - t);
                }
                prop_assert!(admitted.get(&first).copied().unwrap_or(0) <= policy.limit());
            }
        }
    }

    #[test]
    fn the_ratelimit_fields_count_to_the_periods_end_and_advertise_the_longest_period() {
        use crate::http::LimitReport;
        // 2026-03-31 23:00 UTC: one hour before April.
        let t = 1_774_998_000_000;
        let policy: Policy = "fixed 1/month".parse().unwrap();
        let mut state = FixedWindowState::default();
        let admitted = step(&policy, &mut state, t, 1).decision;
        let denied = step(&policy, &mut state, t, 1).decision;
        let report = |decision| LimitReport {
            name: "quota",
            policy: &policy,
            decision,
            unit: None,
        };
        assert_eq!(report(&admitted).reset_seconds(t), Some(3_600));
        assert_eq!(report(&denied).reset_seconds(t), Some(3_600));
        assert_eq!(denied.retry_after_ms, 3_600_000);
        assert_eq!(report(&denied).window_seconds(), 31 * 86_400);
        let week: Policy = "fixed 1/week utc+01:00".parse().unwrap();
        // Sunday 2026-04-05 23:30 at UTC+01:00: half an hour before the ISO week's end.
        let d = step(
            &week,
            &mut FixedWindowState::default(),
            1_775_428_200_000,
            1,
        )
        .decision;
        assert_eq!(d.reset_at_ms - 1_775_428_200_000, 30 * 60_000);
    }

    #[test]
    fn a_count_carries_over_into_a_calendar_policy_while_its_period_is_current() {
        // 2026-03-10 12:00 UTC and 2026-04-02 00:00 UTC.
        let (march, april) = (1_773_144_000_000, 1_775_088_000_000);
        let hourly: Policy = "fixed 5/1h".parse().unwrap();
        let monthly: Policy = "fixed 5/month".parse().unwrap();
        let mut state = FixedWindowState::default();
        assert!(step(&hourly, &mut state, march, 4).decision.allowed);
        let d = step(&monthly, &mut state, march + 60_000, 2).decision;
        assert!(!d.allowed, "4 of 5 counted in March's period: {d:?}");
        assert!(
            step(&monthly, &mut state, march + 60_000, 1)
                .decision
                .allowed
        );
        let d = step(&monthly, &mut state, april, 5).decision;
        assert!(d.allowed, "April starts afresh: {d:?}");
        assert_eq!(d.reset_at_ms, 1_777_593_600_000, "2026-05-01 00:00 UTC");
    }
}
