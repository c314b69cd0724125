//! Property tests: each algorithm against a brute-force reference that recomputes every decision
//! from the full history of admitted requests (never from the compact state), plus the
//! guarantees the algorithm docs state — exact retry times, stable reset times, exact refunds,
//! worst-case admission counts, and GCRA ≡ token bucket.

use edgelimit::algorithm::State;
use edgelimit::{Algorithm, Decision, Policy, Reason, RETRY_NEVER};
use proptest::prelude::*;

/// One call: time and cost.
#[derive(Debug, Clone, Copy)]
struct Call {
    at: u64,
    cost: i64,
}

/// Times cluster around window edges (`k·W − 1`, `k·W`, `k·W + 1`) as well as anywhere.
fn calls(
    window: u64,
    capacity: u64,
    len: usize,
    backwards: bool,
) -> impl Strategy<Value = Vec<Call>> {
    let step = prop_oneof![
        4 => 0..window,
        2 => Just(0u64),
        1 => Just(1u64),
        1 => 0..window * 3,
    ];
    let edge = prop_oneof![3 => Just(None), 1 => (-1i64..=1).prop_map(Some)];
    let cap = capacity as i64;
    let cost = prop_oneof![
        10 => Just(1i64),
        3 => 1..=cap,
        1 => Just(0i64),
        1 => (cap + 1)..=(cap + 3),
        2 => -cap..0,
    ];
    let back = if backwards { 0..window } else { 0..1 };
    prop::collection::vec((step, edge, cost, prop::bool::weighted(0.1), back), 1..len).prop_map(
        move |raw| {
            let mut t = 1_000 * window;
            raw.into_iter()
                .map(|(dt, edge, cost, go_back, back)| {
                    t += dt;
                    let mut at = t;
                    if let Some(off) = edge {
                        // Snap to the next window edge, ±1 ms.
                        at = (t / window + 1) * window;
                        at = (at as i64 + off) as u64;
                        t = t.max(at);
                    }
                    if go_back {
                        at = at.saturating_sub(back);
                    }
                    Call { at, cost }
                })
                .collect()
        },
    )
}

fn policy(algorithm: Algorithm) -> impl Strategy<Value = Policy> {
    (1u64..8, 1u64..40, 1u64..12).prop_map(move |(limit, window, burst)| {
        let burst = algorithm.takes_burst().then_some(burst);
        Policy::new(algorithm, limit, window, burst).expect("small policies are valid")
    })
}

fn policy_and_calls(
    algorithm: Algorithm,
    backwards: bool,
) -> impl Strategy<Value = (Policy, Vec<Call>)> {
    policy(algorithm)
        .prop_flat_map(move |p| (Just(p), calls(p.window_ms(), p.capacity(), 80, backwards)))
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(400)
}

fn any_policy_and_calls(backwards: bool) -> impl Strategy<Value = (Policy, Vec<Call>)> {
    prop::sample::select(Algorithm::ALL.to_vec())
        .prop_flat_map(move |a| policy_and_calls(a, backwards))
}

/// The history-based reference for the three window algorithms: the list of admitted
/// `(time, cost)` and the time the state was last written (for "backwards is no time passed").
#[derive(Debug, Default, Clone)]
struct History {
    admitted: Vec<(u64, u64)>,
    written: u64,
}

impl History {
    fn cost_in(&self, from_exclusive: Option<u64>, to: u64) -> u64 {
        self.admitted
            .iter()
            .filter(|(s, _)| from_exclusive.is_none_or(|f| *s > f) && *s <= to)
            .map(|(_, c)| c)
            .sum()
    }

    /// Removes `r` of cost from the newest entries at or after `floor`.
    fn refund(&mut self, mut r: u64, floor: u64) -> u64 {
        let mut given = 0;
        while r > 0 {
            let Some(last) = self.admitted.last_mut() else {
                break;
            };
            if last.0 < floor {
                break;
            }
            let take = r.min(last.1);
            last.1 -= take;
            r -= take;
            given += take;
            if last.1 == 0 {
                self.admitted.pop();
            }
        }
        given
    }
}

/// Reference decisions (allowed, remaining) for the window algorithms, recomputed from history.
fn reference_window(policy: &Policy, calls: &[Call]) -> Vec<(bool, u64)> {
    let (l, w) = (policy.limit(), policy.window_ms());
    let mut h = History::default();
    let mut out = Vec::new();
    for call in calls {
        let t = call.at.max(h.written);
        let k_start = t - t % w;
        // What counts against the limit at t, in the algorithm's own measure (scaled by W for
        // the counter so nothing rounds).
        let used_scaled = |h: &History| -> u64 {
            match policy.algorithm() {
                Algorithm::FixedWindow => h.cost_in(k_start.checked_sub(1), t) * w,
                Algorithm::SlidingLog => h.cost_in(t.checked_sub(w), t) * w,
                Algorithm::SlidingCounter => {
                    let q = h.cost_in(k_start.checked_sub(1), t).min(l);
                    let p = match k_start.checked_sub(w) {
                        Some(prev) => h.cost_in(prev.checked_sub(1), k_start - 1).min(l),
                        None => 0,
                    };
                    p * (w - (t - k_start)) + q * w
                }
                _ => unreachable!(),
            }
        };
        let used = used_scaled(&h);
        let (allowed, after) = match call.cost {
            c if c > 0 && c as u64 > l => (false, used),
            c if c > 0 => {
                let c = c as u64;
                if used + c * w <= l * w {
                    h.admitted.push((t, c));
                    h.written = t;
                    (true, used + c * w)
                } else {
                    (false, used)
                }
            }
            0 => (true, used),
            c => {
                let floor = match policy.algorithm() {
                    Algorithm::FixedWindow => k_start,
                    Algorithm::SlidingLog => t.saturating_sub(w - 1).min(t),
                    _ => k_start.saturating_sub(w),
                };
                if h.refund(c.unsigned_abs(), floor) > 0 {
                    h.written = t;
                }
                (true, used_scaled(&h))
            }
        };
        out.push((allowed, (l * w - after.min(l * w)) / w));
    }
    out
}

/// The token bucket's min-plus form: admitted iff for every earlier admission time `s`,
/// `(A[s, t] + c)·W ≤ B·W + (t − s)·L` — a formula over the whole history, with no bucket state.
/// Valid for non-decreasing times and no refunds.
fn reference_bucket(policy: &Policy, calls: &[Call]) -> Vec<bool> {
    let (l, w, b) = (
        policy.limit() as u128,
        policy.window_ms() as u128,
        policy.burst() as u128,
    );
    let mut admitted: Vec<(u64, u64)> = Vec::new();
    calls
        .iter()
        .map(|call| {
            let t = call.at;
            let c = call.cost.max(0) as u128;
            let mut starts: Vec<u64> = admitted.iter().map(|a| a.0).collect();
            starts.push(t);
            let fits = starts.iter().all(|&s| {
                let in_span: u128 = admitted
                    .iter()
                    .filter(|a| a.0 >= s)
                    .map(|a| a.1 as u128)
                    .sum();
                (in_span + c) * w <= b * w + (t - s) as u128 * l
            });
            let allowed = call.cost == 0 || (call.cost > 0 && fits);
            if allowed && call.cost > 0 {
                admitted.push((t, call.cost as u64));
            }
            allowed
        })
        .collect()
}

fn run(policy: &Policy, calls: &[Call]) -> (Vec<Decision>, State) {
    let mut state = State::fresh(policy.algorithm());
    let decisions = calls
        .iter()
        .map(|c| state.apply(policy, c.at, c.cost).decision)
        .collect();
    (decisions, state)
}

fn check_window_reference(policy: Policy, calls: Vec<Call>) -> Result<(), TestCaseError> {
    let (decisions, _) = run(&policy, &calls);
    let expected = reference_window(&policy, &calls);
    for (i, (d, (allowed, remaining))) in decisions.iter().zip(expected).enumerate() {
        prop_assert_eq!(
            (d.allowed, d.remaining),
            (allowed, remaining),
            "call {} {:?} under {}",
            i,
            calls[i],
            policy
        );
    }
    Ok(())
}

/// Every admitted request's time, expanded by cost, with refunds taken off the newest.
fn admitted_times(calls: &[Call], decisions: &[Decision]) -> Vec<u64> {
    let mut times: Vec<u64> = Vec::new();
    let mut clock = 0;
    for (call, d) in calls.iter().zip(decisions) {
        clock = clock.max(call.at);
        if d.allowed && call.cost > 0 {
            times.extend(std::iter::repeat_n(clock, call.cost as usize));
        }
    }
    times
}

/// The most admitted within any span of `window` ms (`[s, s + window)`), by two pointers.
fn max_in_any_window(times: &[u64], window: u64) -> u64 {
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    let (mut lo, mut best) = (0, 0);
    for hi in 0..sorted.len() {
        while sorted[hi] - sorted[lo] >= window {
            lo += 1;
        }
        best = best.max(hi + 1 - lo);
    }
    best as u64
}

proptest! {
    // 400 cases in CI; `PROPTEST_CASES=20000` for a soak.
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn fixed_window_matches_history((p, calls) in policy_and_calls(Algorithm::FixedWindow, true)) {
        check_window_reference(p, calls)?;
    }

    #[test]
    fn sliding_log_matches_history((p, calls) in policy_and_calls(Algorithm::SlidingLog, true)) {
        check_window_reference(p, calls)?;
    }

    #[test]
    fn sliding_counter_matches_history(
        (p, calls) in policy_and_calls(Algorithm::SlidingCounter, true)
    ) {
        check_window_reference(p, calls)?;
    }

    #[test]
    fn sliding_log_never_admits_more_than_the_limit_in_any_window(
        (p, calls) in policy_and_calls(Algorithm::SlidingLog, false)
    ) {
        let calls: Vec<Call> = calls.into_iter().map(|c| Call { cost: c.cost.max(0), ..c }).collect();
        let (decisions, _) = run(&p, &calls);
        let times = admitted_times(&calls, &decisions);
        prop_assert!(max_in_any_window(&times, p.window_ms()) <= p.limit());
    }

    #[test]
    fn worst_cases_are_as_documented(
        (p, calls) in any_policy_and_calls(false)
    ) {
        let calls: Vec<Call> = calls.into_iter().map(|c| Call { cost: c.cost.clamp(0, 1), ..c }).collect();
        let (decisions, _) = run(&p, &calls);
        let most = max_in_any_window(&admitted_times(&calls, &decisions), p.window_ms());
        let (l, w, b) = (p.limit(), p.window_ms(), p.burst());
        let bound = match p.algorithm() {
            Algorithm::FixedWindow => 2 * l,
            Algorithm::SlidingLog => l,
            Algorithm::SlidingCounter => l + l * w.saturating_sub(2) / w,
            Algorithm::TokenBucket | Algorithm::Gcra => b + l * (w - 1) / w,
            Algorithm::Concurrency => unreachable!("not a rate: tests/concurrency_properties.rs"),
        };
        prop_assert!(most <= bound, "{} admitted {} in a window, documented bound {}", p, most, bound);
    }

    #[test]
    fn token_bucket_matches_the_min_plus_formula(
        (p, calls) in policy_and_calls(Algorithm::TokenBucket, false)
    ) {
        let calls: Vec<Call> = calls.into_iter().map(|c| Call { cost: c.cost.max(0), ..c }).collect();
        let (decisions, _) = run(&p, &calls);
        let expected = reference_bucket(&p, &calls);
        for (i, (d, allowed)) in decisions.iter().zip(expected).enumerate() {
            prop_assert_eq!(d.allowed, allowed, "call {} {:?} under {}", i, calls[i], p);
        }
    }

    #[test]
    fn gcra_decides_exactly_as_the_token_bucket(
        (p, calls) in policy_and_calls(Algorithm::Gcra, true)
    ) {
        let bucket = Policy::new(Algorithm::TokenBucket, p.limit(), p.window_ms(), Some(p.burst())).unwrap();
        let (gcra, _) = run(&p, &calls);
        let (tb, _) = run(&bucket, &calls);
        prop_assert_eq!(gcra, tb);
    }

    #[test]
    fn retry_after_is_exact(
        (p, calls) in any_policy_and_calls(false),
        probe in 1i64..6,
    ) {
        let probe = probe.min(p.capacity() as i64);
        // The request `probe` sent at `at` against `state`: when denied, the same request is
        // admitted exactly `retry_after_ms` later and not one ms sooner.
        let exact = |state: &State, at: u64| -> Result<bool, TestCaseError> {
            let d = state.clone().apply(&p, at, probe).decision;
            if !d.allowed {
                prop_assert_ne!(d.retry_after_ms, RETRY_NEVER);
                let retry = d.retry_after_ms;
                prop_assert!(retry >= 1);
                let at_retry = state.clone().apply(&p, at + retry, probe).decision;
                prop_assert!(at_retry.allowed, "{}: cost {} still denied {} ms after {}", p, probe, retry, at);
                let before = state.clone().apply(&p, at + retry - 1, probe).decision;
                prop_assert!(!before.allowed, "{}: cost {} admitted 1 ms before {} ms after {}", p, probe, retry, at);
            }
            Ok(!d.allowed)
        };
        let mut state = State::fresh(p.algorithm());
        let mut denials = 0;
        for call in &calls {
            denials += usize::from(exact(&state, call.at)?);
            state.apply(&p, call.at, call.cost);
        }
        // Whatever the sequence did, fill the quota at its last instant until a probe is denied,
        // so every case checks at least one retry time.
        let end = calls.last().map_or(0, |c| c.at);
        for _ in 0..=p.capacity() {
            if exact(&state, end)? {
                denials += 1;
                break;
            }
            state.apply(&p, end, probe);
        }
        prop_assert!(denials > 0, "{}: no probe was ever denied", p);
    }

    #[test]
    fn reset_at_holds_still_while_nothing_is_admitted_and_then_the_quota_is_whole(
        (p, calls) in any_policy_and_calls(false)
    ) {
        let mut state = State::fresh(p.algorithm());
        let mut last: Option<Decision> = None;
        for call in &calls {
            let d = state.apply(&p, call.at, call.cost).decision;
            let changed_quota = d.allowed && call.cost != 0;
            if let Some(prev) = last {
                if !changed_quota && call.at < prev.reset_at_ms {
                    prop_assert_eq!(d.reset_at_ms, prev.reset_at_ms, "{} at {:?}", p, call);
                }
            }
            // At reset time, with nothing admitted meanwhile, the whole quota is back.
            let mut probe = state.clone();
            let whole = probe.apply(&p, d.reset_at_ms.max(call.at), 0).decision;
            prop_assert_eq!(whole.remaining, p.capacity(), "{} after {:?}: {:?}", p, call, d);
            last = Some(d);
        }
    }

    #[test]
    fn refunds_restore_exactly_and_never_give_more(
        (p, calls) in any_policy_and_calls(false),
        take in 1i64..5,
    ) {
        let split = calls.len() / 2;
        let (mut state, _) = (State::fresh(p.algorithm()), ());
        for c in &calls[..split] {
            state.apply(&p, c.at, c.cost);
        }
        let t = calls[split].at;
        // Take no more than stands, so the take is admitted (`remaining` is exact).
        let standing = state.clone().apply(&p, t, 0).decision.remaining as i64;
        let take = take.min(standing);
        if take == 0 {
            return Ok(());
        }
        let mut refunded = state.clone();
        let taken = refunded.apply(&p, t, take).decision;
        prop_assert!(taken.allowed, "{} refused {} with {} remaining", p, take, standing);
        let back = refunded.apply(&p, t, -take).decision;
        prop_assert!(back.allowed);
        // From here on, the refunded state behaves exactly as if nothing had been taken at t.
        let mut original = state.clone();
        original.apply(&p, t, 0);
        for c in &calls[split..] {
            let a = original.apply(&p, c.at, c.cost).decision;
            let b = refunded.apply(&p, c.at, c.cost).decision;
            prop_assert_eq!(a, b, "{} diverged at {:?}", p, c);
        }
        // A refund never lifts the quota above its capacity.
        let mut fresh = State::fresh(p.algorithm());
        let d = fresh.apply(&p, t, -(p.capacity() as i64) - 5).decision;
        prop_assert_eq!(d.remaining, p.capacity());
        prop_assert_eq!(fresh.apply(&p, t, p.capacity() as i64 + 1).decision.reason, Reason::CostExceedsCapacity);
    }
}
