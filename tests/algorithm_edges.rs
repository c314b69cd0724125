//! The edges, one named test each: first request, ±1 ms around window edges, costs above
//! capacity, clocks stepping back, and the end of `u64` time. Also the counter-examples the
//! property tests found, kept as named regressions.

use edgelimit::algorithm::{State, MAX_TIME_MS};
use edgelimit::{Algorithm, Decision, Policy, Reason, RETRY_NEVER};

fn policy(spec: &str) -> Policy {
    spec.parse().unwrap()
}

fn run(policy: &Policy, calls: &[(u64, i64)]) -> Vec<Decision> {
    let mut state = State::fresh(policy.algorithm());
    calls
        .iter()
        .map(|&(at, cost)| state.apply(policy, at, cost).decision)
        .collect()
}

fn allowed(decisions: &[Decision]) -> Vec<bool> {
    decisions.iter().map(|d| d.allowed).collect()
}

#[test]
fn first_request_is_admitted_with_the_quota_less_its_cost() {
    for spec in [
        "fixed 10/1s",
        "sliding-log 10/1s",
        "sliding-counter 10/1s",
        "token-bucket 10/1s",
        "gcra 10/1s",
    ] {
        let p = policy(spec);
        let d = run(&p, &[(5_000, 3)])[0];
        assert!(d.allowed, "{spec}");
        assert_eq!(
            (d.limit, d.remaining, d.retry_after_ms),
            (10, 7, 0),
            "{spec}"
        );
        assert_eq!(d.reason, Reason::Admitted);
    }
}

#[test]
fn fixed_window_resets_exactly_at_the_edge_and_admits_twice_the_limit_across_it() {
    let p = policy("fixed 3/1s");
    let d = run(&p, &[(1_999, 3), (1_999, 1), (2_000, 3), (2_000, 1)]);
    assert_eq!(allowed(&d), [true, false, true, false]);
    // Denied 1 ms before the edge: retry in exactly 1 ms.
    assert_eq!(d[1].retry_after_ms, 1);
    assert_eq!(d[0].reset_at_ms, 2_000);
    assert_eq!(d[2].reset_at_ms, 3_000);
    // 6 admitted within 2 ms: the documented 2×limit worst case.
}

#[test]
fn sliding_log_forgets_a_request_exactly_one_window_later() {
    let p = policy("sliding-log 2/1s");
    let d = run(
        &p,
        &[(1_000, 1), (1_500, 1), (1_999, 1), (2_000, 1), (2_001, 1)],
    );
    assert_eq!(allowed(&d), [true, true, false, true, false]);
    assert_eq!(d[2].retry_after_ms, 1, "the request at 1000 leaves at 2000");
    assert_eq!(
        d[4].retry_after_ms, 499,
        "the request at 1500 leaves at 2500"
    );
    assert_eq!(d[3].reset_at_ms, 3_000);
}

#[test]
fn sliding_counter_weights_the_previous_window_by_its_overlap() {
    let p = policy("sliding-counter 10/1s");
    // 10 in window 1; at offset e of window 2 the previous counts 10·(1000−e)/1000.
    let mut calls = vec![(1_000, 10)];
    calls.push((2_000, 1)); // 10·1000 + 1·1000 > 10·1000: denied
    calls.push((2_099, 1)); // 10·901 + 1000 = 10010 > 10000: denied
    calls.push((2_100, 1)); // 10·900 + 1000 = 10000: admitted
    let d = run(&p, &calls);
    assert_eq!(allowed(&d), [true, false, false, true]);
    assert_eq!(d[1].retry_after_ms, 100);
    assert_eq!(d[2].retry_after_ms, 1);
    assert_eq!(
        d[0].reset_at_ms, 3_000,
        "the weighted count reaches zero at the end of window 2"
    );
}

#[test]
fn gcra_spaces_requests_by_the_emission_interval_with_fractions_kept_exact() {
    // 3 per 1000 ms: T = 333⅓ ms, burst 1 — the fraction must not drift.
    let p = policy("gcra 3/1s burst 1");
    // TAT after each admission: 333⅓, 667⅓ (from 334), 1001⅓ (from 668), 1335⅓ (from 1002).
    let d = run(
        &p,
        &[
            (0, 1),
            (333, 1),
            (334, 1),
            (667, 1),
            (668, 1),
            (1_001, 1),
            (1_002, 1),
        ],
    );
    assert_eq!(allowed(&d), [true, false, true, false, true, false, true]);
    assert_eq!(d[1].retry_after_ms, 1);
    assert_eq!(d[3].retry_after_ms, 1);
    assert_eq!(d[6].reset_at_ms, 1_336, "reset is the TAT rounded up");
}

#[test]
fn token_bucket_refills_continuously_up_to_its_burst() {
    let p = policy("token-bucket 10/1s burst 5");
    let d = run(&p, &[(0, 5), (0, 1), (99, 1), (100, 1), (10_000, 0)]);
    assert_eq!(allowed(&d), [true, false, false, true, true]);
    assert_eq!(d[1].retry_after_ms, 100);
    assert_eq!(d[4].remaining, 5, "never more than the burst");
}

#[test]
fn a_cost_above_capacity_is_denied_for_good_and_takes_nothing() {
    for spec in [
        "fixed 5/1s",
        "sliding-log 5/1s",
        "sliding-counter 5/1s",
        "token-bucket 1/1s burst 5",
        "gcra 1/1s burst 5",
    ] {
        let p = policy(spec);
        let d = run(&p, &[(0, 6), (0, 5)]);
        assert!(!d[0].allowed);
        assert_eq!(d[0].reason, Reason::CostExceedsCapacity, "{spec}");
        assert_eq!(d[0].retry_after_ms, RETRY_NEVER, "{spec}");
        assert!(d[0].is_permanent_denial());
        assert!(d[1].allowed, "{spec}: the denial took nothing");
    }
}

#[test]
fn a_clock_stepping_back_counts_as_no_time_passed() {
    for spec in [
        "fixed 2/1s",
        "sliding-log 2/1s",
        "sliding-counter 2/1s",
        "token-bucket 2/1s",
        "gcra 2/1s",
    ] {
        let p = policy(spec);
        // Quota used up at 10.5 s; a caller whose clock reads 9 s is not let in early, and the
        // retry time is measured from the state's own 10.5 s.
        let d = run(&p, &[(10_500, 2), (9_000, 1)]);
        assert!(!d[1].allowed, "{spec}");
        let from_state = run(&p, &[(10_500, 2), (10_500, 1)])[1];
        assert_eq!(d[1], from_state, "{spec}");
    }
}

#[test]
fn the_end_of_time_reads_as_max_time_and_nothing_overflows() {
    for algorithm in Algorithm::ALL {
        let burst = algorithm.takes_burst().then_some(3);
        let p = Policy::new(algorithm, 3, 86_400_000, burst).unwrap();
        let end = u64::MAX - 5;
        let d = run(&p, &[(end, 3), (end, 1), (u64::MAX, 1), (u64::MAX, -3)]);
        assert!(d[0].allowed, "{algorithm}: {d:?}");
        assert!(!d[1].allowed, "{algorithm}: {d:?}");
        assert!(d[1].retry_after_ms >= 1, "{algorithm}: {d:?}");
        assert!(d[0].reset_at_ms >= MAX_TIME_MS, "{algorithm}: {d:?}");
        assert!(
            d[3].allowed,
            "{algorithm}: a refund at the end of time: {d:?}"
        );
    }
}

#[test]
fn the_largest_policies_compute_without_overflow() {
    // limit × window at the 2^50 bound, with a one-day window.
    let day = 86_400_000u64;
    let limit = (1u64 << 50) / day;
    for algorithm in Algorithm::ALL {
        let p = Policy::new(
            algorithm,
            limit,
            day,
            algorithm.takes_burst().then_some(limit),
        )
        .unwrap();
        let d = run(&p, &[(day - 1, limit as i64), (day, 1), (day + day / 2, 1)]);
        assert!(d[0].allowed, "{algorithm}");
        assert_eq!(d[0].remaining, 0, "{algorithm}");
    }
}

/// Found by `sliding_log_matches_history`: a look after the window had passed used to drop the
/// log's entries, losing the time it was written, so a clock stepping back then saw an empty log.
#[test]
fn regression_sliding_log_look_does_not_forget_when_it_was_written() {
    let p = policy("sliding-log 1/2ms");
    let d = run(&p, &[(2_000, 1), (2_001, 1), (2_002, 0), (2_001, 1)]);
    assert_eq!(allowed(&d), [true, false, true, false]);
}

/// Found by `sliding_log_matches_history`: a refund of cost that had already left the window
/// reported the expired cost as still in use.
#[test]
fn regression_sliding_log_refund_of_expired_cost_changes_nothing() {
    let p = policy("sliding-log 1/1ms");
    let d = run(&p, &[(1_000, 1), (1_001, -1)]);
    assert_eq!(d[1].remaining, 1);
}
