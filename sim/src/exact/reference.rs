//! The ground truth each policy is held against: an exact sliding window log.
//!
//! For the window algorithms it is the same limit over the same window (`fixed 60/1m` →
//! `sliding-log 60/1m`). A bucket's `L/W burst B` has no window of its own; its natural exact
//! reference is `B` per the time the bucket takes to refill from empty, `B·W/L` (so
//! `token-bucket 1/1s burst 60` and `gcra 60/1m` are both held against `sliding-log 60/1m`):
//! the same sustained rate and the same largest burst.

use edgelimit::{Algorithm, Policy};

use crate::error::SimError;

/// The exact sliding-window log a policy is compared with.
pub fn reference(policy: &Policy) -> Result<Policy, SimError> {
    let (limit, window) = if policy.algorithm().takes_burst() {
        let b = policy.burst();
        // ceil(B·W/L); Policy bounds B·W by 2^50 so this cannot overflow.
        (b, (b * policy.window_ms()).div_ceil(policy.limit()))
    } else {
        (policy.limit(), policy.window_ms())
    };
    Policy::new(Algorithm::SlidingLog, limit, window, None).map_err(|e| {
        SimError::Usage(format!(
            "policy `{policy}` has no exact sliding-log reference to compare with: {e}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_compare_with_their_refill_time() {
        let p = |s: &str| s.parse::<Policy>().unwrap();
        assert_eq!(
            reference(&p("fixed 60/1m")).unwrap(),
            p("sliding-log 60/1m")
        );
        assert_eq!(
            reference(&p("token-bucket 1/1s burst 60")).unwrap(),
            p("sliding-log 60/1m")
        );
        assert_eq!(reference(&p("gcra 60/1m")).unwrap(), p("sliding-log 60/1m"));
        assert_eq!(reference(&p("gcra 3/1s burst 2")).unwrap().window_ms(), 667);
    }
}
