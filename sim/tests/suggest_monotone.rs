//! What makes `sim suggest`'s searches exact, counted here with the library's own `step`, limit
//! by limit, with no search:
//! - whether a client is ever denied only turns from yes to no as the limit grows (the burst
//!   with it, for the buckets) or as a bucket's burst alone grows, whatever the costs — so the
//!   per-client thresholds are found by bisection;
//! - with every request costing one, the number of requests denied only falls as the limit or
//!   a bucket's burst grows (on every case tried: evidence, not a proof) — so `--by requests`
//!   bisects then;
//! - the number of requests denied is *not* monotone once requests cost more than one: a
//!   larger limit can admit a costly request that a smaller one refused, and be full for the
//!   cheap ones after it — so `--by requests` scans limits upward then.

use edgelimit::algorithm::{step, State};
use edgelimit::{Algorithm, Policy};
use proptest::prelude::*;

/// Requests denied replaying `requests` under `policy`.
fn denied(policy: &Policy, requests: &[(u64, i64)]) -> u64 {
    let mut state: Option<State> = None;
    let mut denied = 0;
    for &(t, c) in requests {
        let s = step(policy, state.take(), t, c);
        denied += u64::from(!s.decision.allowed);
        state = s.state;
    }
    denied
}

/// Times in ascending order from gaps (several requests may share a millisecond), costs 1–3.
fn trace() -> impl Strategy<Value = Vec<(u64, i64)>> {
    prop::collection::vec((0u64..40, 1i64..4), 1..60).prop_map(|gaps| {
        let mut t = 1_000_000u64;
        gaps.into_iter()
            .map(|(gap, cost)| {
                t += gap;
                (t, cost)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn a_larger_limit_never_denies_a_spared_client(requests in trace(), window in 1u64..120) {
        for algorithm in Algorithm::ALL {
            let burst = algorithm.takes_burst();
            let mut denied_before = true;
            for limit in 1..=60u64 {
                let p = Policy::new(algorithm, limit, window, burst.then_some(limit)).unwrap();
                let now = denied(&p, &requests) > 0;
                prop_assert!(denied_before || !now, "{p} denies, one less spared the client");
                denied_before = now;
            }
        }
    }

    #[test]
    fn a_larger_burst_never_denies_a_spared_client(
        requests in trace(),
        window in 1u64..120,
        limit in 1u64..20,
    ) {
        for algorithm in [Algorithm::TokenBucket, Algorithm::Gcra] {
            let mut denied_before = true;
            for burst in 1..=60u64 {
                let p = Policy::new(algorithm, limit, window, Some(burst)).unwrap();
                let now = denied(&p, &requests) > 0;
                prop_assert!(denied_before || !now, "{p} denies, one less burst spared the client");
                denied_before = now;
            }
        }
    }
}

/// Times in ascending order from gaps, every request costing one.
fn unit_trace() -> impl Strategy<Value = Vec<(u64, i64)>> {
    prop::collection::vec(0u64..40, 1..80).prop_map(|gaps| {
        let mut t = 1_000_000u64;
        gaps.into_iter()
            .map(|gap| {
                t += gap;
                (t, 1)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn with_unit_costs_a_larger_limit_never_denies_more_requests(
        requests in unit_trace(),
        window in 1u64..120,
    ) {
        for algorithm in Algorithm::ALL {
            let burst = algorithm.takes_burst();
            let mut before = u64::MAX;
            for limit in 1..=50u64 {
                let p = Policy::new(algorithm, limit, window, burst.then_some(limit)).unwrap();
                let now = denied(&p, &requests);
                prop_assert!(now <= before, "{p}: {now} denied, {before} at one less");
                before = now;
            }
        }
    }

    #[test]
    fn with_unit_costs_a_larger_burst_never_denies_more_requests(
        requests in unit_trace(),
        window in 1u64..120,
        limit in 1u64..20,
    ) {
        for algorithm in [Algorithm::TokenBucket, Algorithm::Gcra] {
            let mut before = u64::MAX;
            for burst in 1..=50u64 {
                let p = Policy::new(algorithm, limit, window, Some(burst)).unwrap();
                let now = denied(&p, &requests);
                prop_assert!(now <= before, "{p}: {now} denied, {before} at one less burst");
                before = now;
            }
        }
    }
}

#[test]
fn requests_denied_can_grow_with_the_limit() {
    // Six requests in one millisecond; the fourth costs 3. At 5 the costly one is refused and
    // both cheap ones after it fit (1 denied); at 6 it fits and fills the window (2 denied).
    let requests: Vec<(u64, i64)> = [1, 1, 1, 3, 1, 1].iter().map(|&c| (1_000_000, c)).collect();
    let at = |limit| Policy::new(Algorithm::FixedWindow, limit, 1_000, None).unwrap();
    assert_eq!(denied(&at(5), &requests), 1);
    assert_eq!(denied(&at(6), &requests), 2);
}
