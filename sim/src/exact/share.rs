//! Disagreements with the exact limit as a share: the report's `wrongly_allowed_pct` and
//! `wrongly_limited_pct`, for a policy and for a configuration's limit alike.

/// `n` over `d` in percent; 0 when nothing was decided.
pub(crate) fn pct(n: u64, d: u64) -> f64 {
    if d == 0 {
        0.0
    } else {
        n as f64 * 100.0 / d as f64
    }
}
