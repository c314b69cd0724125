//! One client's admissions within one reference window, for every policy held against that
//! window: the exact trailing counts behind `max_admitted_in_window` and the rate error.

use std::collections::VecDeque;

/// One admission: when, what it cost, and which of the window's policies admitted it (one bit
/// each).
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    time_ms: u64,
    /// Larger costs take several entries.
    cost: u32,
    mask: u32,
}

/// Exact counts over *every* window, not only aligned ones (two pointers: push at the back, drop
/// from the front). Each policy's count lives outside, in the client's record (`sums`, indexed by
/// the policy's bit), so reading it needs no pass over the entries.
///
/// The oldest time is kept inline: most requests leave nothing to drop, and answering that from
/// the inline copy avoids touching the heap buffer. The newest entry is kept inline too, and
/// reaches the buffer only when a later one starts, so admissions in the same millisecond by the
/// same policies merge without reading the buffer, and an append is a store, not a load.
#[derive(Debug, Clone)]
#[repr(align(64))]
pub(super) struct Ring {
    /// Entries older than `open`, oldest first.
    entries: VecDeque<Entry>,
    /// The newest entry (`mask` 0: none).
    open: Entry,
    /// The oldest entry's time, `u64::MAX` when there is none.
    front_ms: u64,
}

impl Default for Ring {
    fn default() -> Self {
        Ring {
            entries: VecDeque::new(),
            open: Entry::default(),
            front_ms: u64::MAX,
        }
    }
}

impl Ring {
    /// Drops what left the window `(now − window, now]`, taking its cost off the counts in
    /// `sums` of the policies that had admitted it (`words[sum_words[bit]]`).
    #[inline]
    pub(super) fn advance(
        &mut self,
        now_ms: u64,
        window_ms: u64,
        sum_words: &[usize],
        words: &mut [u64],
    ) {
        if now_ms < window_ms || self.front_ms > now_ms - window_ms {
            return;
        }
        let cutoff = now_ms - window_ms;
        if self.open.mask == 0 || self.open.time_ms <= cutoff {
            // Even the newest entry has left (times do not decrease): every policy's count is
            // back to zero, and the buffer need not be read.
            for &word in sum_words {
                words[word] = 0;
            }
            self.entries.clear();
            self.open = Entry::default();
            self.front_ms = u64::MAX;
            return;
        }
        while let Some(e) = self.entries.front() {
            if e.time_ms > cutoff {
                break;
            }
            let mut mask = e.mask;
            while mask != 0 {
                words[sum_words[mask.trailing_zeros() as usize]] -= u64::from(e.cost);
                mask &= mask - 1;
            }
            self.entries.pop_front();
        }
        // `open` is still in the window (see above).
        self.front_ms = self
            .entries
            .front()
            .map_or(self.open.time_ms, |e| e.time_ms);
    }

    /// Records an admission of `cost` at `now_ms` by the policies in `mask` (times must not
    /// decrease).
    #[inline]
    pub(super) fn push(&mut self, now_ms: u64, mut cost: u64, mask: u32) {
        if self.open.mask == mask && self.open.time_ms == now_ms {
            let add = cost.min(u64::from(u32::MAX - self.open.cost));
            self.open.cost += add as u32;
            cost -= add;
        }
        while cost > 0 {
            let part = cost.min(u64::from(u32::MAX));
            if self.open.mask != 0 {
                self.entries.push_back(self.open);
            }
            self.open = Entry {
                time_ms: now_ms,
                cost: part as u32,
                mask,
            };
            cost -= part;
        }
        self.front_ms = self.front_ms.min(now_ms);
    }

    /// The oldest admission still in the window by the policy with `bit`.
    pub(super) fn oldest(&self, bit: u32) -> Option<u64> {
        self.entries
            .iter()
            .chain(std::iter::once(&self.open))
            .find(|e| e.mask & bit != 0)
            .map(|e| e.time_ms)
    }

    /// The time of the oldest entry, `u64::MAX` if none (what [`Ring::advance`] reads first).
    #[inline]
    pub(super) fn front_ms(&self) -> u64 {
        self.front_ms
    }

    /// The oldest buffered entry's time (what [`Ring::advance`] reads when one leaves), read
    /// ahead of time to bring its line into cache.
    #[inline]
    pub(super) fn touch(&self) -> u64 {
        self.entries.front().map_or(0, |e| e.time_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two policies (bits 1 and 2) whose counts live in words 1 and 2.
    const SUMS: [usize; 2] = [1, 2];

    fn sums(words: &[u64]) -> (u64, u64) {
        (words[1], words[2])
    }

    /// Advances, then admits `cost` by `mask` as the engine does.
    fn admit(ring: &mut Ring, window: u64, words: &mut [u64], now: u64, cost: u64, mask: u32) {
        ring.advance(now, window, &SUMS, words);
        ring.push(now, cost, mask);
        for (bit, &word) in SUMS.iter().enumerate() {
            if mask & (1 << bit) != 0 {
                words[word] += cost;
            }
        }
    }

    #[test]
    fn a_request_exactly_one_window_old_no_longer_counts() {
        let mut words = [0; 3];
        let mut ring = Ring::default();
        admit(&mut ring, 1000, &mut words, 1000, 1, 0b11);
        ring.advance(1999, 1000, &SUMS, &mut words);
        assert_eq!(sums(&words), (1, 1));
        ring.advance(2000, 1000, &SUMS, &mut words);
        assert_eq!(sums(&words), (0, 0));
        assert_eq!(ring.oldest(1), None);
        // Before the first whole window nothing can have left.
        let mut early = Ring::default();
        let mut words = [0; 3];
        admit(&mut early, 1000, &mut words, 5, 2, 0b01);
        early.advance(10, 1000, &SUMS, &mut words);
        assert_eq!(sums(&words), (2, 0));
    }

    #[test]
    fn entries_leave_one_by_one_and_only_from_the_policies_that_admitted_them() {
        let mut words = [0; 3];
        let mut ring = Ring::default();
        admit(&mut ring, 100, &mut words, 1000, 1, 0b01);
        admit(&mut ring, 100, &mut words, 1000, 2, 0b01); // merges with the open entry
        admit(&mut ring, 100, &mut words, 1000, 4, 0b10); // same time, other policy
        admit(&mut ring, 100, &mut words, 1050, 8, 0b11);
        admit(&mut ring, 100, &mut words, 1060, 16, 0b10);
        assert_eq!(sums(&words), (11, 28));
        assert_eq!(
            (ring.oldest(0b01), ring.oldest(0b10)),
            (Some(1000), Some(1000))
        );
        ring.advance(1100, 100, &SUMS, &mut words);
        assert_eq!(sums(&words), (8, 24));
        assert_eq!(
            (ring.oldest(0b01), ring.oldest(0b10)),
            (Some(1050), Some(1050))
        );
        ring.advance(1150, 100, &SUMS, &mut words);
        assert_eq!(sums(&words), (0, 16));
        assert_eq!((ring.oldest(0b01), ring.oldest(0b10)), (None, Some(1060)));
        assert_eq!(ring.front_ms(), 1060);
        // Everything has left: the ring empties without reading its buffer.
        admit(&mut ring, 100, &mut words, 5000, 1, 0b01);
        assert_eq!(sums(&words), (1, 0));
        assert!(ring.entries.is_empty());
        assert_eq!(ring.front_ms(), 5000);
    }

    #[test]
    fn costs_beyond_an_entry_take_several_and_leave_together() {
        let mut words = [0; 3];
        let mut ring = Ring::default();
        let big = (1u64 << 33) + 5;
        admit(
            &mut ring,
            100,
            &mut words,
            1000,
            u64::from(u32::MAX) - 1,
            0b01,
        );
        admit(&mut ring, 100, &mut words, 1000, big, 0b01);
        admit(&mut ring, 100, &mut words, 1001, big, 0b11);
        assert_eq!(sums(&words), (u64::from(u32::MAX) - 1 + 2 * big, big));
        assert_eq!(ring.oldest(0b10), Some(1001));
        ring.advance(1100, 100, &SUMS, &mut words);
        assert_eq!(sums(&words), (big, big));
        ring.advance(1101, 100, &SUMS, &mut words);
        assert_eq!(sums(&words), (0, 0));
    }
}
