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

    /// Empty series for `rules` rules whose first bucket starts at `start_ms`: where a whole
    /// replay's would start (its first counted request's time), so that series counted over
    /// shares of the requests [`Series::merge`] into the whole replay's.
    pub fn starting_at(rules: usize, start_ms: u64) -> Series {
        Series {
            start_ms,
            bucket_ms: 1_000,
            rules: vec![Vec::new(); rules],
        }
    }

    /// Doubles the buckets' width (merging pairs) until they are `bucket_ms` wide.
    fn widen_to(&mut self, bucket_ms: u64) {
        while self.bucket_ms < bucket_ms {
            self.widen();
        }
    }

    /// Doubles the buckets' width, merging pairs.
    fn widen(&mut self) {
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
    }

    /// Adds `other`'s counts, both started at the same time ([`Series::starting_at`]): the
    /// narrower is widened to the wider's buckets, as one series counting both would have been.
    pub fn merge(&mut self, mut other: Series) {
        if other.bucket_ms == 0 {
            return;
        }
        if self.bucket_ms == 0 {
            *self = other;
            return;
        }
        debug_assert_eq!(
            self.start_ms, other.start_ms,
            "series merged from one start"
        );
        self.widen_to(other.bucket_ms);
        other.widen_to(self.bucket_ms);
        for (mine, theirs) in self.rules.iter_mut().zip(other.rules) {
            if mine.len() < theirs.len() {
                mine.resize(theirs.len(), [0, 0]);
            }
            for (m, t) in mine.iter_mut().zip(theirs) {
                m[0] += t[0];
                m[1] += t[1];
            }
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
            self.widen();
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

    #[test]
    fn series_counted_apart_merge_into_one_counted_whole() {
        let hour = 3_600_000;
        let times: Vec<u64> = (0..5000u64).map(|i| 10_000 + i * i * 17 % hour).collect();
        let mut whole = Series::new(2);
        let mut parts = [
            Series::starting_at(2, times[0]),
            Series::starting_at(2, times[0]),
        ];
        for (i, &t) in times.iter().enumerate() {
            whole.add(i % 2, t, i % 3 == 0);
            // One share sees only the first 100 requests: its buckets stay narrow.
            parts[usize::from(i >= 100 && i % 5 != 0)].add(i % 2, t, i % 3 == 0);
        }
        let [mut merged, other] = parts;
        merged.merge(other);
        assert!(whole.bucket_ms > 1_000);
        assert_eq!(merged, whole);
    }
}
