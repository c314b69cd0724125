//! The expiry index of an [`super::ExpiringMap`]: records of `(bound, key hash)`, taken out
//! soonest bound first, with duplicates and stale records allowed.
//!
//! The map files an entry here under a *lower bound* of its expiry and does not come back when
//! the expiry moves later, so a write costs no index update; a record is checked against its entry
//! only when it reaches the front, and then usually filed again further on.
//!
//! Bounds are mostly written in time order (now plus a policy's horizon), so the index is a coarse
//! timing wheel: records are appended, unsorted, to buckets of 1024 ms, and only the
//! front bucket is sorted, once, when it becomes the front. Filing a record is an append to a
//! bucket whose end is hot in cache, and taking the soonest is reading the next element of a
//! sorted vector. (A binary heap was measured first: each removal sifted through ~14 levels that
//! no longer sat in cache, and refiling was a tenth of a decision's time at 1M keys.) Order is
//! exact: every record in the front is at or before every record in a later bucket.

use std::collections::BTreeMap;

/// Bucket width: bounds are grouped by `bound >> SLOT_SHIFT` (1024 ms).
const SLOT_SHIFT: u32 = 10;

/// The bucket width in ms.
#[cfg(test)]
const SLOT_MS: u64 = 1 << SLOT_SHIFT;

/// How many emptied bucket vectors are kept for reuse.
const SPARE_BUCKETS: usize = 16;

type Record = (u64, u64);

/// `(bound, hash)` records; among equal bounds the order is that of the (seeded) hashes.
#[derive(Debug, Default)]
pub(crate) struct ExpiryIndex {
    // Every record whose slot is at or before `front_slot`, sorted, from `head` on.
    front: Vec<Record>,
    head: usize,
    front_slot: u64,
    // Every other record, by slot (all after `front_slot`), unsorted. Empty while the front is.
    later: BTreeMap<u64, Vec<Record>>,
    records: usize,
    spare: Vec<Vec<Record>>,
}

impl ExpiryIndex {
    pub(crate) fn new() -> ExpiryIndex {
        ExpiryIndex::default()
    }

    /// The number of records, stale ones included.
    pub(crate) fn records(&self) -> usize {
        self.records
    }

    /// Files `hash` under `bound`.
    pub(crate) fn push(&mut self, bound: u64, hash: u64) {
        let record = (bound, hash);
        let slot = bound >> SLOT_SHIFT;
        self.records += 1;
        if self.head == self.front.len() {
            // Nothing is filed (the front is only empty when every bucket is).
            self.front.clear();
            self.head = 0;
            self.front.push(record);
            self.front_slot = slot;
        } else if slot <= self.front_slot {
            // Usually at or near the end: a binary search, a short move.
            let at = self.head + self.front[self.head..].partition_point(|r| *r <= record);
            self.front.insert(at, record);
        } else {
            let spare = &mut self.spare;
            self.later
                .entry(slot)
                .or_insert_with(|| spare.pop().unwrap_or_default())
                .push(record);
        }
    }

    /// Whether a record's bound is at or before `until`.
    #[inline]
    pub(crate) fn due(&self, until: u64) -> bool {
        self.front
            .get(self.head)
            .is_some_and(|&(bound, _)| bound <= until)
    }

    /// Takes out a record with the soonest bound, if that bound is at or before `until`.
    pub(crate) fn pop_due(&mut self, until: u64) -> Option<(u64, u64)> {
        if !self.due(until) {
            return None;
        }
        let record = self.front[self.head];
        self.head += 1;
        self.records -= 1;
        if self.head == self.front.len() {
            self.advance();
        }
        Some(record)
    }

    /// Replaces every record by `records`.
    pub(crate) fn rebuild(&mut self, records: impl Iterator<Item = (u64, u64)>) {
        let emptied = std::mem::take(&mut self.later);
        self.spare.extend(
            emptied
                .into_values()
                .map(|mut v| {
                    v.clear();
                    v
                })
                .take(SPARE_BUCKETS),
        );
        self.front.clear();
        self.head = 0;
        self.records = 0;
        for (bound, hash) in records {
            let spare = &mut self.spare;
            self.later
                .entry(bound >> SLOT_SHIFT)
                .or_insert_with(|| spare.pop().unwrap_or_default())
                .push((bound, hash));
            self.records += 1;
        }
        self.advance();
    }

    /// Makes the next bucket the front, sorted.
    fn advance(&mut self) {
        self.head = 0;
        self.front.clear();
        let Some((slot, mut bucket)) = self.later.pop_first() else {
            return;
        };
        bucket.sort_unstable();
        let emptied = std::mem::replace(&mut self.front, bucket);
        if self.spare.len() < SPARE_BUCKETS {
            self.spare.push(emptied);
        }
        self.front_slot = slot;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    #[test]
    fn pops_the_soonest_bounds_first_and_only_when_due() {
        let mut index = ExpiryIndex::new();
        index.push(300, 3);
        index.push(100, 1);
        index.push(5 * SLOT_MS, 2);
        index.push(100, 11);
        assert_eq!(index.records(), 4);
        assert_eq!(index.pop_due(99), None);
        assert_eq!(index.pop_due(100), Some((100, 1)));
        assert_eq!(index.pop_due(100), Some((100, 11)));
        assert_eq!(index.pop_due(150), None);
        assert_eq!(index.pop_due(u64::MAX), Some((300, 3)));
        index.push(50, 5);
        assert_eq!(index.pop_due(60), Some((50, 5)));
        assert_eq!(index.pop_due(u64::MAX), Some((5 * SLOT_MS, 2)));
        assert_eq!(index.pop_due(u64::MAX), None);
        index.rebuild([(7 * SLOT_MS, 70), (5, 50)].into_iter());
        assert_eq!(index.records(), 2);
        assert_eq!(index.pop_due(u64::MAX), Some((5, 50)));
        assert_eq!(index.pop_due(u64::MAX), Some((7 * SLOT_MS, 70)));
        assert_eq!(index.pop_due(u64::MAX), None);
        assert_eq!(index.records(), 0);
    }

    /// Random pushes (around a moving "now", sometimes far back or ahead) and pops against a
    /// binary heap: the same records must come out in the same order.
    #[test]
    fn matches_a_heap_on_random_operations() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut index = ExpiryIndex::new();
        let mut model = BinaryHeap::new();
        let mut now = 1_000_000u64;
        for i in 0..200_000u64 {
            match next(8) {
                0..=3 => {
                    let bound = match next(10) {
                        0 => now.saturating_sub(next(5 * SLOT_MS)),
                        1 => now + next(1 << 30),
                        _ => now + next(4 * SLOT_MS),
                    };
                    index.push(bound, i);
                    model.push(Reverse((bound, i)));
                }
                4 => now += next(SLOT_MS),
                5 if next(1000) == 0 => {
                    let all: Vec<_> = model.iter().map(|Reverse(r)| *r).collect();
                    index.rebuild(all.into_iter());
                }
                _ => {
                    let until = now + next(SLOT_MS);
                    let expected = match model.peek() {
                        Some(Reverse((bound, _))) if *bound <= until => model.pop().map(|r| r.0),
                        _ => None,
                    };
                    assert_eq!(index.pop_due(until), expected);
                }
            }
            assert_eq!(index.records(), model.len());
        }
        while let Some(Reverse(record)) = model.pop() {
            assert_eq!(index.pop_due(u64::MAX), Some(record));
        }
        assert_eq!(index.pop_due(u64::MAX), None);
    }
}
