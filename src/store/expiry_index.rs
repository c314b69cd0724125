//! The expiry index of an [`super::ExpiringMap`]: records of `(bound, key hash)`, soonest bound
//! first, with duplicates and stale records allowed.
//!
//! The map files an entry here under a *lower bound* of its expiry and does not come back when
//! the expiry moves later, so a write costs no index update; a record is checked against its entry
//! only when it reaches the front. Records are bucketed by bound (whole milliseconds): bounds
//! written at about the same time are about equal, so a push usually lands in a bucket that is
//! already hot in cache, and a pop takes from the first bucket without searching.

use std::collections::BTreeMap;

/// Bound → hashes of the entries filed under it. Order within a bucket is not meaningful.
#[derive(Debug, Default)]
pub(crate) struct ExpiryIndex {
    buckets: BTreeMap<u64, Vec<u64>>,
    records: usize,
    // The first bucket's bound (`u64::MAX` when empty): the "is anything due" test of every
    // decision reads this field, not the tree.
    front: u64,
    // Drained buckets' vectors, kept for reuse: bounds advance with the clock, so a bucket is
    // opened and emptied every millisecond under steady traffic.
    spare: Vec<Vec<u64>>,
}

/// How many drained bucket vectors are kept for reuse.
const SPARE_BUCKETS: usize = 64;

impl ExpiryIndex {
    pub(crate) fn new() -> ExpiryIndex {
        ExpiryIndex {
            front: u64::MAX,
            ..ExpiryIndex::default()
        }
    }

    /// The number of records, stale ones included.
    pub(crate) fn records(&self) -> usize {
        self.records
    }

    /// Files `hash` under `bound`.
    pub(crate) fn push(&mut self, bound: u64, hash: u64) {
        let spare = &mut self.spare;
        self.buckets
            .entry(bound)
            .or_insert_with(|| spare.pop().unwrap_or_default())
            .push(hash);
        self.records += 1;
        self.front = self.front.min(bound);
    }

    /// Takes out a record with the soonest bound, if that bound is at or before `until`.
    pub(crate) fn pop_due(&mut self, until: u64) -> Option<(u64, u64)> {
        if self.front > until {
            return None;
        }
        let mut first = self.buckets.first_entry()?;
        let bound = *first.key();
        let hashes = first.get_mut();
        let hash = hashes.pop().expect("empty buckets are removed");
        if hashes.is_empty() {
            let emptied = first.remove();
            if self.spare.len() < SPARE_BUCKETS {
                self.spare.push(emptied);
            }
            self.front = self.buckets.first_key_value().map_or(u64::MAX, |(&b, _)| b);
        }
        self.records -= 1;
        Some((bound, hash))
    }

    /// Drops every record.
    pub(crate) fn clear(&mut self) {
        self.buckets.clear();
        self.records = 0;
        self.front = u64::MAX;
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
        assert_eq!(index.pop_due(u64::MAX), Some((300, 3)));
        assert_eq!(index.pop_due(u64::MAX), None);
        assert_eq!(index.records(), 0);
    }
}
