//! Per rule, admitted and denied requests over time, in at most [`MAX_BUCKETS`] buckets whatever
//! the trace's length: buckets start at one second and double (merging pairs) as the trace goes
//! on, so the series streams in constant memory.

/// The most buckets a series holds.
pub const MAX_BUCKETS: usize = 240;

/// Counts over time for every rule.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Series {
    /// The first bucket's start (UTC epoch ms).
    pub start_ms: u64,
    /// Each bucket's width (ms).
    pub bucket_ms: u64,
    /// Per rule (configuration order), per bucket: `[admitted, denied]`.
    pub rules: Vec<Vec<[u64; 2]>>,
}

impl Series {
    /// Empty series for `rules` rules.
    pub fn new(rules: usize) -> Series {
        Series {
            start_ms: 0,
            bucket_ms: 0,
            rules: vec![Vec::new(); rules],
        }
    }

    /// Counts one request of `rule` at `time_ms`.
    pub fn add(&mut self, rule: usize, time_ms: u64, denied: bool) {
        if self.bucket_ms == 0 {
            self.start_ms = time_ms;
            self.bucket_ms = 1_000;
        }
        let mut bucket = (time_ms.saturating_sub(self.start_ms) / self.bucket_ms) as usize;
        while bucket >= MAX_BUCKETS {
            self.bucket_ms *= 2;
            for counts in &mut self.rules {
                let merged: Vec<[u64; 2]> = counts
                    .chunks(2)
                    .map(|pair| {
                        pair.iter()
                            .fold([0, 0], |acc, c| [acc[0] + c[0], acc[1] + c[1]])
                    })
                    .collect();
                *counts = merged;
            }
            bucket = (time_ms.saturating_sub(self.start_ms) / self.bucket_ms) as usize;
        }
        let Some(counts) = self.rules.get_mut(rule) else {
            return;
        };
        if counts.len() <= bucket {
            counts.resize(bucket + 1, [0, 0]);
        }
        counts[bucket][usize::from(denied)] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_double_and_keep_every_count() {
        let mut s = Series::new(2);
        let hour = 3_600_000;
        for i in 0..hour / 500 {
            s.add((i % 2) as usize, 10_000 + i * 500, i % 7 == 0);
        }
        let total: u64 = s.rules.iter().flatten().map(|c| c[0] + c[1]).sum();
        assert_eq!(total, hour / 500);
        assert!(s.rules.iter().all(|r| r.len() <= MAX_BUCKETS));
        assert_eq!(s.bucket_ms, 16_000, "one hour in 240 buckets: 16 s each");
        assert_eq!(s.start_ms, 10_000);
    }
}
