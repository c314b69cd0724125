//! The two statistics the benches report: medians of rounds and latency percentiles.

use std::time::Duration;

/// The median of `samples` (the upper one of an even count, as every bench has always taken it);
/// NaN for none, so an empty row shows in the table rather than stopping the bench.
pub fn median(mut samples: Vec<f64>) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// The `p` quantile (0–1) of `sorted` latencies, in µs: the sample at `len × p`, the last one at
/// most; NaN for none.
pub fn percentile_us(sorted: &[Duration], p: f64) -> f64 {
    let Some(last) = sorted.len().checked_sub(1) else {
        return f64::NAN;
    };
    sorted[((sorted.len() as f64 * p) as usize).min(last)].as_secs_f64() * 1e6
}
