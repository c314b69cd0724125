//! The expiry index of an [`super::ExpiringMap`]: records of `(bound, key hash)`, soonest bound
//! first, with duplicates and stale records allowed.
//!
//! The map files an entry here under a *lower bound* of its expiry and does not come back when
//! the expiry moves later, so a write costs no index update; a record is checked against its entry
//! only when it reaches the front. The records form a binary min-heap in one vector: 16 bytes a
//! record, no allocation per record, and since bounds are mostly written in time order (now plus
//! a policy's horizon), a new record is usually no sooner than its parent and a push stops after
//! one comparison.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A min-heap of `(bound, hash)`; among equal bounds the order is that of the (seeded) hashes.
#[derive(Debug, Default)]
pub(crate) struct ExpiryIndex {
    heap: BinaryHeap<Reverse<(u64, u64)>>,
}

impl ExpiryIndex {
    pub(crate) fn new() -> ExpiryIndex {
        ExpiryIndex::default()
    }

    /// The number of records, stale ones included.
    pub(crate) fn records(&self) -> usize {
        self.heap.len()
    }

    /// Files `hash` under `bound`.
    pub(crate) fn push(&mut self, bound: u64, hash: u64) {
        self.heap.push(Reverse((bound, hash)));
    }

    /// Takes out a record with the soonest bound, if that bound is at or before `until`.
    #[inline]
    pub(crate) fn pop_due(&mut self, until: u64) -> Option<(u64, u64)> {
        match self.heap.peek() {
            Some(Reverse((bound, _))) if *bound <= until => self.heap.pop().map(|Reverse(r)| r),
            _ => None,
        }
    }

    /// Replaces every record by `records`.
    pub(crate) fn rebuild(&mut self, records: impl Iterator<Item = (u64, u64)>) {
        let mut heap = std::mem::take(&mut self.heap).into_vec();
        heap.clear();
        heap.extend(records.map(Reverse));
        heap.shrink_to(heap.len() * 2);
        self.heap = BinaryHeap::from(heap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_the_soonest_bounds_first_and_only_when_due() {
        let mut index = ExpiryIndex::new();
        index.push(300, 3);
        index.push(100, 1);
        index.push(200, 2);
        index.push(100, 11);
        assert_eq!(index.records(), 4);
        assert_eq!(index.pop_due(99), None);
        let mut first_two = [index.pop_due(100), index.pop_due(100)];
        first_two.sort();
        assert_eq!(first_two, [Some((100, 1)), Some((100, 11))]);
        assert_eq!(index.pop_due(150), None);
        assert_eq!(index.pop_due(u64::MAX), Some((200, 2)));
        index.push(50, 5);
        assert_eq!(index.pop_due(60), Some((50, 5)));
        index.rebuild([(7, 70), (5, 50)].into_iter());
        assert_eq!(index.records(), 2);
        assert_eq!(index.pop_due(u64::MAX), Some((5, 50)));
        assert_eq!(index.pop_due(u64::MAX), Some((7, 70)));
        assert_eq!(index.pop_due(u64::MAX), None);
        assert_eq!(index.records(), 0);
    }
}
