//! The exact search for the smallest limit that meets the target.
//!
//! **Clients** (`--by clients`): a client is denied under a policy iff, replayed alone with every
//! request admitted, some request would not fit — before its first denial a client's state is
//! exactly the admit-everything state, and whether that state fits a request grows with the
//! limit (the windows' counts do not depend on it; the buckets' tokens only grow with rate and
//! burst). So each client has a threshold, the least limit that never denies it, found by
//! bisection over its own requests with the library's step; the clients denied at a limit are
//! those whose threshold exceeds it, and the whole curve follows from the sorted thresholds.
//!
//! **Requests** (`--by requests`): requests denied at a limit have no such closed form. When
//! every request costs one, the count only falls as the limit (or a bucket's burst) grows —
//! property-tested against a brute force for every algorithm (`tests/suggest_monotone.rs`), not
//! proven — and the least limit is found by bisection, each limit tried counted by replaying the
//! clients whose threshold exceeds it (the others are never denied). Once costs differ it is
//! *not* monotone (a larger limit can admit a costly request a smaller one refused, then be full
//! for the cheap ones after it: the same test file), so limits are tried upward and the first
//! that meets the target is the least — exact, at the price of one replay of the denied clients
//! per limit tried. Either way the first limit tried is the least that denies at most as many
//! *clients* as requests may be denied: below it more clients than that are denied, each at
//! least once.
//!
//! **Buckets**: the limit (the refill per window) is searched with a burst equal to it, then the
//! burst is lowered to the least that still meets the target at that rate (whether a client is
//! ever denied is monotone in the burst too). One less is then one less burst; when the burst
//! is already 1, one less limit with the burst equal to it.

use edgelimit::algorithm::State;
use edgelimit::{Algorithm, Policy};

use super::parallel::{per_client, sum_clients};
use super::target::By;
use super::traffic::Traffic;

/// The policy of `algorithm` at `limit` per `window_ms`, with `burst` for the buckets; `None`
/// where the library refuses it (a limit too large for the window).
pub fn policy(algorithm: Algorithm, limit: u64, window_ms: u64, burst: u64) -> Option<Policy> {
    let burst = algorithm.takes_burst().then_some(burst);
    Policy::new(algorithm, limit, window_ms, burst).ok()
}

/// The largest limit the library accepts for `window_ms` (its Lua twin computes `limit × window`
/// exactly only up to 2^50).
pub fn max_limit(window_ms: u64) -> u64 {
    let (mut ok, mut too_big) = (0u64, (1u64 << 50) / window_ms.max(1) + 2);
    while too_big - ok > 1 {
        let mid = ok + (too_big - ok) / 2;
        if Policy::new(Algorithm::FixedWindow, mid, window_ms, None).is_ok() {
            ok = mid;
        } else {
            too_big = mid;
        }
    }
    ok
}

/// Requests of `requests` (one client's, in order) that `policy` denies, replayed with the
/// library's step.
pub fn denied(policy: &Policy, requests: &[(u64, i64)]) -> u64 {
    let mut state = State::fresh(policy.algorithm());
    requests
        .iter()
        .filter(|&&(t, c)| !state.apply(policy, t, c).decision.allowed)
        .count() as u64
}

/// Whether `policy` admits every one of `requests`.
pub fn never_denies(policy: &Policy, requests: &[(u64, i64)]) -> bool {
    let mut state = State::fresh(policy.algorithm());
    requests
        .iter()
        .all(|&(t, c)| state.apply(policy, t, c).decision.allowed)
}

/// The least `n` in `[1, cap]` for which `passes(n)`, `passes` being false below some point and
/// true from it; `None` when it fails at `cap`. Tries `hint` first.
fn least(cap: u64, hint: u64, passes: impl Fn(u64) -> bool) -> Option<u64> {
    if cap == 0 {
        return None;
    }
    let (mut fails, mut holds) = (0u64, hint.clamp(1, cap));
    while !passes(holds) {
        if holds == cap {
            return None;
        }
        fails = holds;
        holds = holds.saturating_mul(2).min(cap);
    }
    while holds - fails > 1 {
        let mid = fails + (holds - fails) / 2;
        if passes(mid) {
            holds = mid;
        } else {
            fails = mid;
        }
    }
    Some(holds)
}

/// One point of a curve: at `limit` (burst equal to it), `clients_denied` clients would have
/// been denied at least once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CurvePoint {
    /// The limit.
    pub limit: u64,
    /// Clients denied at least once under it.
    pub clients_denied: u64,
}

/// What the search found for one algorithm and window.
#[derive(Debug, Clone)]
pub struct Found {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// The window.
    pub window_ms: u64,
    /// The least policy meeting the target; `None` when no limit the library accepts does.
    pub policy: Option<Policy>,
    /// The policy one step smaller (one less limit; for the buckets, one less burst), which
    /// does not meet the target; `None` when there is none (the least limit is 1).
    pub one_less: Option<Policy>,
    /// Clients denied against the limit (burst equal to it): a step function given at 1 and
    /// at each client's threshold, so the value at any limit is that of the last point at or
    /// below it.
    pub curve: Vec<CurvePoint>,
    /// Each client's threshold (burst equal to the limit), `None` beyond the largest limit.
    pub thresholds: Vec<Option<u64>>,
}

/// Searches one algorithm and window over `traffic` for the least policy denying at most
/// `allowed` clients or requests (`by`), on `threads` threads.
pub fn search(
    traffic: &Traffic,
    algorithm: Algorithm,
    window_ms: u64,
    by: By,
    allowed: u64,
    threads: usize,
) -> Found {
    let cap = max_limit(window_ms);
    let unit_costs = traffic.events().iter().all(|e| e.cost == 1);
    let at = |limit: u64, burst: u64| policy(algorithm, limit, window_ms, burst);
    let thresholds = per_client(traffic, threads, |c| {
        let requests = traffic.client(c);
        // Upward from 1: a limit that denies stops at the first denial, so the failing steps
        // are cheap, and a heavy client's threshold is far below its total.
        least(cap, 1, |l| {
            at(l, l).is_some_and(|p| never_denies(&p, requests))
        })
    });
    let curve = curve(&thresholds);
    let requests_denied = |p: &Policy| {
        sum_clients(traffic, threads, |c| {
            // A client whose threshold is at most the limit is never denied at burst = limit.
            match thresholds[c] {
                Some(t) if p.burst() == p.limit() && t <= p.limit() => 0,
                _ => denied(p, traffic.client(c)),
            }
        })
    };
    let limit = match by {
        By::Clients => least_by_clients(&thresholds, allowed),
        By::Requests => {
            let top = thresholds
                .iter()
                .map(|t| t.unwrap_or(cap))
                .max()
                .unwrap_or(1);
            // Below the least limit denying at most `allowed` clients, more than `allowed`
            // clients are denied, each at least once: no need to count those limits.
            least_by_clients(&thresholds, allowed).and_then(|from| {
                let meets = |l: u64| at(l, l).is_some_and(|p| requests_denied(&p) <= allowed);
                if unit_costs {
                    least(top.max(from), from, meets)
                } else {
                    (from..=top.max(from)).find(|&l| meets(l))
                }
            })
        }
    };
    let Some(limit) = limit else {
        return Found {
            algorithm,
            window_ms,
            policy: None,
            one_less: None,
            curve,
            thresholds,
        };
    };
    let burst = if algorithm.takes_burst() {
        let burst = match by {
            By::Clients => {
                let bursts = per_client(traffic, threads, |c| {
                    let requests = traffic.client(c);
                    least(limit, 1, |b| {
                        at(limit, b).is_some_and(|p| never_denies(&p, requests))
                    })
                });
                least_by_clients(&bursts, allowed)
            }
            By::Requests => {
                let meets = |b: u64| at(limit, b).is_some_and(|p| requests_denied(&p) <= allowed);
                if unit_costs {
                    least(limit, 1, meets)
                } else {
                    (1..=limit).find(|&b| meets(b))
                }
            }
        };
        burst.unwrap_or(limit)
    } else {
        limit
    };
    let one_less = match (algorithm.takes_burst(), burst > 1, limit > 1) {
        (true, true, _) => at(limit, burst - 1),
        (true, false, true) => at(limit - 1, limit - 1),
        (false, _, true) => at(limit - 1, limit - 1),
        _ => None,
    };
    Found {
        algorithm,
        window_ms,
        policy: at(limit, burst),
        one_less,
        curve,
        thresholds,
    }
}

/// The least value denying at most `allowed` clients, given each client's threshold (`None`:
/// denied at every value): the `allowed + 1`-th largest threshold, or 1 when there are no more
/// clients than that.
fn least_by_clients(thresholds: &[Option<u64>], allowed: u64) -> Option<u64> {
    let mut sorted: Vec<Option<u64>> = thresholds.to_vec();
    // `None` (never met) sorts above every limit.
    sorted.sort_unstable_by(|a, b| b.map_or(u64::MAX, |v| v).cmp(&a.map_or(u64::MAX, |v| v)));
    match sorted.get(allowed as usize) {
        None => Some(1),
        Some(t) => t.map(|t| t.max(1)),
    }
}

/// The clients-denied curve of the thresholds: a point at 1 and at each distinct threshold.
fn curve(thresholds: &[Option<u64>]) -> Vec<CurvePoint> {
    let mut finite: Vec<u64> = thresholds.iter().flatten().copied().collect();
    finite.sort_unstable();
    let total = thresholds.len() as u64;
    let mut points = Vec::new();
    let mut limits: Vec<u64> = vec![1];
    limits.extend(finite.iter().copied().filter(|&t| t > 1));
    limits.dedup();
    for limit in limits {
        // Thresholds at most `limit` are never denied.
        let met = finite.partition_point(|&t| t <= limit) as u64;
        points.push(CurvePoint {
            limit,
            clients_denied: total - met,
        });
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_finds_the_boundary_from_any_hint() {
        for boundary in 1..40u64 {
            for hint in [1, 3, 17, 39, 100] {
                assert_eq!(least(40, hint, |n| n >= boundary), Some(boundary));
            }
        }
        assert_eq!(least(40, 5, |_| false), None);
    }

    #[test]
    fn the_curve_counts_thresholds_above_each_limit() {
        let t = [Some(1), Some(3), Some(3), Some(7), None];
        let c = curve(&t);
        let pairs: Vec<(u64, u64)> = c.iter().map(|p| (p.limit, p.clients_denied)).collect();
        assert_eq!(pairs, vec![(1, 4), (3, 2), (7, 1)]);
        assert_eq!(least_by_clients(&t, 0), None);
        assert_eq!(least_by_clients(&t, 1), Some(7));
        assert_eq!(least_by_clients(&t, 2), Some(3));
        assert_eq!(least_by_clients(&t, 3), Some(3));
        assert_eq!(least_by_clients(&t, 5), Some(1));
    }
}
