//! Clients' peak rates: for each client, the most it sent in any span of a window — every start
//! time, not only aligned windows: the requests at `s` with `t − W < s ≤ t`, the span the sliding
//! log counts (docs/design.md §2) — and their distribution over the clients. A client's peak is
//! the least `sliding-log` limit that never denies it, so the sliding log's suggestion is a
//! point of this distribution and the chart can draw it as a line across it.
//!
//! Percentiles are nearest-rank: the `p`-th percentile of `n` peaks is the `⌈p·n/100⌉`-th
//! smallest, a peak some client really reached (never an interpolation between two).

use super::parallel::per_client;
use super::traffic::Traffic;
use crate::report::words::window_text;

/// One client's peak: the most cost it sent within any `window_ms` (requests at `s` with
/// `t − window_ms < s ≤ t`). Times are taken as the library's steps take them: one earlier than
/// the latest so far counts as the latest ("no time passed", docs/design.md §2).
pub fn peak(requests: &[(u64, i64)], window_ms: u64) -> u64 {
    let mut latest = 0u64;
    let times: Vec<u64> = requests
        .iter()
        .map(|&(t, _)| {
            latest = latest.max(t);
            latest
        })
        .collect();
    let (mut best, mut sum, mut start) = (0i64, 0i64, 0usize);
    for (i, &(_, cost)) in requests.iter().enumerate() {
        sum += cost;
        while times[start].saturating_add(window_ms) <= times[i] {
            sum -= requests[start].1;
            start += 1;
        }
        best = best.max(sum);
    }
    best.max(0) as u64
}

/// The nearest-rank `percent`-th percentile of `sorted` (ascending): its `⌈percent·n/100⌉`-th
/// value; 0 when it is empty.
pub fn percentile(sorted: &[u64], percent: u64) -> u64 {
    let n = sorted.len() as u64;
    if n == 0 {
        return 0;
    }
    let rank = (percent * n).div_ceil(100).clamp(1, n);
    sorted[rank as usize - 1]
}

/// How many clients reached one peak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PeakCount {
    /// The peak: the most sent within the window.
    pub peak: u64,
    /// Clients whose peak it is.
    pub clients: u64,
}

/// The distribution of clients' peaks at one window of one stream, and the limit suggested there.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PeakRates {
    /// With `--config`: the limit's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// The window, as a spec writes it (`1m`).
    pub window: String,
    /// The window in ms.
    pub window_ms: u64,
    /// Clients in the stream.
    pub clients: u64,
    /// The median client's peak (nearest rank).
    pub p50: u64,
    /// The 90th percentile.
    pub p90: u64,
    /// The 99th percentile.
    pub p99: u64,
    /// The largest peak.
    pub max: u64,
    /// The policy suggested at this window: the sliding log's (its limit is a peak of this
    /// distribution), or with `--config` the limit's own algorithm's; `null` when none meets the
    /// target.
    pub suggested: Option<String>,
    /// Its limit.
    pub suggested_limit: Option<u64>,
    /// Clients whose peak is above that limit (for a sliding log: exactly those it denies).
    pub clients_above: Option<u64>,
    /// Clients per peak, ascending by peak: the whole distribution.
    pub distribution: Vec<PeakCount>,
}

impl PeakRates {
    /// The peaks of every client of `traffic` at `window_ms`, on `threads` threads, with the
    /// suggestion `suggested` (a policy and its limit) drawn against them.
    pub fn of(
        traffic: &Traffic,
        limit: Option<String>,
        window_ms: u64,
        suggested: Option<(String, u64)>,
        threads: usize,
    ) -> PeakRates {
        let mut peaks = per_client(traffic, threads, |c| peak(traffic.client(c), window_ms));
        peaks.sort_unstable();
        let mut distribution: Vec<PeakCount> = Vec::new();
        for &p in &peaks {
            match distribution.last_mut() {
                Some(last) if last.peak == p => last.clients += 1,
                _ => distribution.push(PeakCount {
                    peak: p,
                    clients: 1,
                }),
            }
        }
        let clients_above = suggested
            .as_ref()
            .map(|&(_, l)| (peaks.len() - peaks.partition_point(|&p| p <= l)) as u64);
        PeakRates {
            limit,
            window: window_text(window_ms),
            window_ms,
            clients: peaks.len() as u64,
            p50: percentile(&peaks, 50),
            p90: percentile(&peaks, 90),
            p99: percentile(&peaks, 99),
            max: peaks.last().copied().unwrap_or(0),
            suggested_limit: suggested.as_ref().map(|&(_, l)| l),
            suggested: suggested.map(|(p, _)| p),
            clients_above,
            distribution,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peak_counts_the_requests_of_any_span_shorter_than_the_window() {
        // At 0, 500, 999 and 1000 ms: within 1 s of 999 are 0, 500 and 999; 0 is exactly 1 s
        // before 1000 and no longer counts.
        let r = [(0, 1), (500, 1), (999, 1), (1000, 1)];
        assert_eq!(peak(&r, 1000), 3);
        assert_eq!(peak(&r, 1001), 4);
        assert_eq!(peak(&[(5, 2), (5, 3), (9, 1)], 1), 5);
        // A time going backwards counts as the latest.
        assert_eq!(peak(&[(1000, 1), (10, 1), (1999, 1)], 1000), 3);
        assert_eq!(peak(&[], 1000), 0);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u64> = (1..=10).collect();
        assert_eq!([50, 90, 99, 100].map(|p| percentile(&v, p)), [5, 9, 10, 10]);
        assert_eq!(percentile(&[7], 50), 7);
        assert_eq!(percentile(&[], 50), 0);
    }
}
