//! How a global limit's policy is split (docs/design.md §9, "The split"): each region's static
//! share, rounded down, and the home's pool, what the shares leave: the parts add up to the
//! whole.

use crate::policy::{Algorithm, Policy};

/// Parts per million: the unit of a region's weight and of the static share.
pub const MILLION: u64 = 1_000_000;

/// A global limit's policy split over regions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// Each region's static share, in the order the regions were given; `None` where the share
    /// rounds down to nothing (that region decides by leases alone).
    pub shares: Vec<Option<Policy>>,
    /// The home's pool; `None` when the static shares take it all.
    pub pool: Option<Policy>,
}

/// Why a policy cannot be split.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SplitError {
    /// Leases bound only these algorithms (§9, "What is global").
    #[error(
        "`{0}` cannot be global: a lease charged at one time and spent at another bounds a \
         fixed window and the buckets, not a sliding window or concurrent requests"
    )]
    NotGlobal(Algorithm),
    /// A calendar period: a lease's end and a denial's retry follow the policy's window, which
    /// a calendar period (`/month`) does not have.
    #[error(
        "a calendar period (`/{0}`) cannot be global: leases end with a window of fixed length"
    )]
    Calendar(crate::policy::Period),
    /// No region, or weights that are not positive.
    #[error("a global limit needs at least one region, each of positive weight")]
    NoRegions,
    /// A share above the whole.
    #[error("the static share is {0} parts per million, above the whole")]
    ShareAboveWhole(u64),
}

/// Whether `algorithm` can be held globally by leases.
pub const fn is_global(algorithm: Algorithm) -> bool {
    matches!(
        algorithm,
        Algorithm::FixedWindow | Algorithm::TokenBucket | Algorithm::Gcra
    )
}

impl Split {
    /// Splits `policy` over regions of `weights` (any positive numbers; each region's part of the
    /// static share is its weight over their sum), holding `static_share` parts per million of
    /// the limit in the regions and the rest in the home's pool.
    pub fn new(policy: &Policy, weights: &[u64], static_share: u64) -> Result<Split, SplitError> {
        if !is_global(policy.algorithm()) {
            return Err(SplitError::NotGlobal(policy.algorithm()));
        }
        if let Some(calendar) = policy.calendar() {
            return Err(SplitError::Calendar(calendar.period()));
        }
        if weights.is_empty() || weights.contains(&0) {
            return Err(SplitError::NoRegions);
        }
        if static_share > MILLION {
            return Err(SplitError::ShareAboveWhole(static_share));
        }
        let total: u128 = weights.iter().map(|&w| u128::from(w)).sum();
        // Region r's part of the whole, in parts of `total * MILLION`.
        let part = |w: u64| u128::from(w) * u128::from(static_share);
        let scale = |n: u64, num: u128, den: u128| (u128::from(n) * num / den) as u64;
        let whole = total * u128::from(MILLION);
        let mut used_limit = 0;
        let mut used_burst = 0;
        let mut shares = Vec::with_capacity(weights.len());
        for &w in weights {
            let limit = scale(policy.limit(), part(w), whole);
            let burst = scale(policy.burst(), part(w), whole);
            used_limit += limit;
            used_burst += burst;
            shares.push(part_policy(policy, limit, burst));
        }
        let pool = part_policy(
            policy,
            policy.limit() - used_limit,
            policy.burst() - used_burst,
        );
        Ok(Split { shares, pool })
    }
}

/// `policy` with another limit and burst (its algorithm and window kept), or `None` when the
/// limit is zero (no such part) — or the burst is, for the buckets.
fn part_policy(policy: &Policy, limit: u64, burst: u64) -> Option<Policy> {
    if limit == 0 || (policy.algorithm().takes_burst() && burst == 0) {
        return None;
    }
    let burst = policy.algorithm().takes_burst().then_some(burst);
    // A part keeps every bound the whole satisfied (it is no larger).
    Policy::new(policy.algorithm(), limit, policy.window_ms(), burst).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(spec: &str) -> Policy {
        spec.parse().unwrap()
    }

    #[test]
    fn three_equal_regions_hold_half_and_the_home_the_rest() {
        let split = Split::new(&p("fixed 100/1m"), &[1, 1, 1], MILLION / 2).unwrap();
        assert_eq!(split.shares, vec![Some(p("fixed 16/1m")); 3]);
        assert_eq!(split.pool, Some(p("fixed 52/1m")));
        let bucket = Split::new(&p("gcra 10/1s burst 30"), &[2, 1], MILLION / 2).unwrap();
        assert_eq!(
            bucket.shares,
            vec![Some(p("gcra 3/1s burst 10")), Some(p("gcra 1/1s burst 5"))]
        );
        assert_eq!(bucket.pool, Some(p("gcra 6/1s burst 15")));
    }

    #[test]
    fn tiny_limits_leave_regions_without_a_share_rather_than_exceed_the_whole() {
        let split = Split::new(&p("fixed 3/1m"), &[1, 1, 1], MILLION / 2).unwrap();
        assert_eq!(split.shares, vec![None, None, None]);
        assert_eq!(split.pool, Some(p("fixed 3/1m")));
        let all_static = Split::new(&p("fixed 9/1m"), &[1, 1, 1], MILLION).unwrap();
        assert_eq!(all_static.pool, None);
    }

    #[test]
    fn what_cannot_be_global_is_refused_by_name() {
        for spec in [
            "sliding-log 10/1m",
            "sliding-counter 10/1m",
            "concurrency 2",
        ] {
            let e = Split::new(&p(spec), &[1], MILLION / 2).unwrap_err();
            assert!(matches!(e, SplitError::NotGlobal(_)), "{spec}");
        }
        for spec in ["fixed 10/month", "fixed 10/week utc-05:00"] {
            let e = Split::new(&p(spec), &[1], MILLION).unwrap_err();
            assert!(matches!(e, SplitError::Calendar(_)), "{spec}: {e}");
        }
        assert_eq!(
            Split::new(&p("fixed 1/1s"), &[], 0),
            Err(SplitError::NoRegions)
        );
        assert_eq!(
            Split::new(&p("fixed 1/1s"), &[1, 0], 0),
            Err(SplitError::NoRegions)
        );
        assert!(Split::new(&p("fixed 1/1s"), &[1], MILLION + 1).is_err());
    }

    proptest! {
        /// The parts never add up to more than the whole, in limit and in burst, and keep its
        /// algorithm and window.
        #[test]
        fn the_parts_never_exceed_the_whole(
            limit in 1u64..100_000,
            extra_burst in 0u64..1_000,
            algorithm in 0usize..3,
            weights in proptest::collection::vec(1u64..10, 1..6),
            share in 0u64..=MILLION,
        ) {
            let spec = match algorithm {
                0 => format!("fixed {limit}/1m"),
                1 => format!("token-bucket {limit}/1m burst {}", limit + extra_burst),
                _ => format!("gcra {limit}/1m burst {}", limit + extra_burst),
            };
            let policy = p(&spec);
            let split = Split::new(&policy, &weights, share).unwrap();
            let parts: Vec<&Policy> = split.shares.iter().flatten().chain(&split.pool).collect();
            let limits: u64 = parts.iter().map(|q| q.limit()).sum();
            let bursts: u64 = parts.iter().map(|q| q.burst()).sum();
            prop_assert!(limits <= policy.limit(), "{limits} > {}", policy.limit());
            prop_assert!(bursts <= policy.burst(), "{bursts} > {}", policy.burst());
            for q in parts {
                prop_assert_eq!(q.algorithm(), policy.algorithm());
                prop_assert_eq!(q.window_ms(), policy.window_ms());
            }
            prop_assert_eq!(split.shares.len(), weights.len());
        }
    }
}
