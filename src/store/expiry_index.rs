//! The expiry index of an [`super::ExpiringMap`] or a shard of [`super::MemoryStore`]:
//! records of `(bound, bucket)` — a lower bound of the expiry of the entry in that bucket of the
//! map's hash table — taken out soonest bound first, with duplicates and stale records allowed,
//! for only the entries that expire soonest.
//!
//! Two rules keep it cheap, and exact:
//!
//! - *Lower bounds.* An entry is filed under a lower bound of its expiry, and the index is not
//!   told when the expiry moves later (nearly every write: time goes forward), so a write costs
//!   no index update. A record is checked against its entry only when it reaches the front: the
//!   entry is dropped if it expires then, else filed again at its real expiry if the next rule
//!   asks for it.
//! - *A horizon.* Only entries expiring before the `horizon` must have a record; after a rescan
//!   the index holds records for the soonest eighth of the entries (at least 64), and the
//!   horizon is the latest of their expiries. Every other entry expires at or after it, so until
//!   the horizon is reached the front record is the soonest expiry of all, and an entry written
//!   with an expiry at or past the horizon — a new key, a key refreshed — files nothing. When no
//!   record is left and an expiry at or past the horizon is asked for, the map rescans its
//!   entries ([`ExpiryIndex::pop_soonest`] does, through [`Filed`]). A rescan reads every
//!   entry's expiry once per eighth of the entries taken out, in the order they lie in memory;
//!   records cost 16 bytes for an eighth of the entries instead of at least one each, and far
//!   fewer stale records reach the front, each a random read of its entry.
//!
//! A record names its entry's bucket, so checking it is one read, with no hash to compute or
//! probe sequence to follow. Whatever entry holds that bucket when the record reaches the front
//! is checked: an entry expiring at the bound is a soonest one, whichever it is. Buckets stay put
//! while the table neither grows nor rehashes; the map tells the index when it does
//! ([`ExpiryIndex::invalidate`]), and the next question rescans.
//!
//! Bounds are mostly written in time order (now plus a policy's horizon), so the index is a coarse
//! timing wheel: records are appended, unsorted, to buckets of 1024 ms, and only the
//! front bucket is sorted, once, when it becomes the front. Filing a record is an append to a
//! bucket whose end is hot in cache, and taking the soonest is reading the next element of a
//! sorted vector (a binary heap's removals sift through levels no longer in cache). Order is
//! exact: every record in the front is at or before every record in a later bucket.

use std::collections::{BTreeMap, BinaryHeap};

/// Bucket width: bounds are grouped by `bound >> SLOT_SHIFT` (1024 ms).
const SLOT_SHIFT: u32 = 10;

/// The bucket width in ms.
#[cfg(test)]
const SLOT_MS: u64 = 1 << SLOT_SHIFT;

/// How many emptied bucket vectors are kept for reuse.
const SPARE_BUCKETS: usize = 16;

/// A rescan keeps records for this share of the entries: the soonest `1/KEEP_SHARE`.
const KEEP_SHARE: usize = 8;

/// A rescan keeps records for at least this many entries (a small map keeps them all).
const MIN_KEEP: usize = 64;

/// Records beyond a quarter of the entries' count that trigger a rescan: stale and
/// re-filed records never make the index more than O(entries).
pub(crate) const STALE_RECORDS_SLACK: usize = 1024;

/// `(bound, bucket)`.
type Record = (u64, u64);

/// The entries of the map an index files, by bucket, as the index needs them.
pub(crate) trait Filed {
    /// How many entries there are.
    fn len(&self) -> usize;

    /// The expiry of the entry in `bucket`, if one is there.
    fn expiry_at(&self, bucket: u64) -> Option<u64>;

    /// Removes the entry in `bucket` (which holds one).
    fn remove_at(&mut self, bucket: u64);

    /// Calls `each` with every entry's expiry and bucket.
    fn every(&self, each: impl FnMut(u64, u64));
}

/// `(bound, bucket)` records; among equal bounds, in bucket order.
#[derive(Debug)]
pub(crate) struct ExpiryIndex {
    // Every record whose slot is at or before `front_slot`, sorted, from `head` on.
    front: Vec<Record>,
    head: usize,
    front_slot: u64,
    // Every other record, by slot (all after `front_slot`), unsorted. Empty while the front is.
    later: BTreeMap<u64, Vec<Record>>,
    records: usize,
    spare: Vec<Vec<Record>>,
    // Every entry expiring before this has a record at or before its expiry; every record's
    // bound is at or before it.
    horizon: u64,
    min_keep: usize,
    slack: usize,
}

impl Default for ExpiryIndex {
    fn default() -> Self {
        ExpiryIndex::with_limits(MIN_KEEP, STALE_RECORDS_SLACK)
    }
}

impl ExpiryIndex {
    pub(crate) fn new() -> ExpiryIndex {
        ExpiryIndex::default()
    }

    /// An index whose rescans keep records for at least `min_keep` entries and that rescans
    /// once records exceed a quarter of the entries by `slack` (tests use small values to reach
    /// the horizon with few entries).
    pub(crate) fn with_limits(min_keep: usize, slack: usize) -> ExpiryIndex {
        ExpiryIndex {
            front: Vec::new(),
            head: 0,
            front_slot: 0,
            later: BTreeMap::new(),
            records: 0,
            spare: Vec::new(),
            horizon: u64::MAX,
            min_keep: min_keep.max(1),
            slack,
        }
    }

    /// The number of records, stale ones included.
    pub(crate) fn records(&self) -> usize {
        self.records
    }

    /// The expiry of the entry in `bucket` became `expire_at` (it was `old`, `None` for a new
    /// entry): files it if it now expires before the horizon and sooner than before (a later
    /// expiry leaves its record a lower bound).
    #[inline]
    pub(crate) fn moved(&mut self, old: Option<u64>, expire_at: u64, bucket: usize) {
        if expire_at < self.horizon && old.is_none_or(|old| expire_at < old) {
            self.push(expire_at, bucket as u64);
        }
    }

    /// The map's entries moved to other buckets (its table grew or rehashed): every record is
    /// dropped, and the next question rescans.
    pub(crate) fn invalidate(&mut self) {
        self.rebuild(std::iter::empty());
        self.horizon = 0;
    }

    /// Whether an entry may expire at or before `until`: a record is due, or the horizon is
    /// reached (entries past it have no record to say).
    #[inline]
    pub(crate) fn due(&self, until: u64) -> bool {
        self.horizon <= until
            || self
                .front
                .get(self.head)
                .is_some_and(|&(bound, _)| bound <= until)
    }

    /// Drops the entry of `entries` that truly expires soonest, if it expires at or before
    /// `until`; returns whether one was dropped. Records met on the way whose entry is gone are
    /// discarded, those whose entry now expires later are filed again if it still expires
    /// before the horizon, and when none is left the entries are rescanned.
    pub(crate) fn pop_soonest(&mut self, until: u64, entries: &mut impl Filed) -> bool {
        let mut rescanned = false;
        loop {
            if let Some((bound, bucket)) = self.pop_due(until) {
                match entries.expiry_at(bucket) {
                    // Every entry expires at or after its records' bounds and every record is
                    // at or after this one: an entry expiring at `bound` expires soonest of all.
                    Some(expire_at) if expire_at <= bound => {
                        entries.remove_at(bucket);
                        return true;
                    }
                    Some(expire_at) if expire_at < self.horizon => self.push(expire_at, bucket),
                    _ => {}
                }
            } else if self.horizon <= until && !rescanned {
                self.rescan(entries);
                rescanned = true;
            } else {
                return false;
            }
        }
    }

    /// Rescans `entries` once stale records outnumber a quarter of them (plus a slack),
    /// so the index stays O(entries) whatever the pattern of removals and earlier expiries.
    pub(crate) fn compact(&mut self, entries: &mut impl Filed) {
        if self.records > entries.len() / 4 + self.slack {
            self.rescan(entries);
        }
    }

    /// Replaces every record by records of the soonest-expiring entries (a share of them, at
    /// least `min_keep`), and moves the horizon to the latest of their expiries (to the end of
    /// time if that is every entry).
    pub(crate) fn rescan(&mut self, entries: &mut impl Filed) {
        let keep = (entries.len() / KEEP_SHARE).max(self.min_keep);
        let mut soonest: BinaryHeap<Record> = BinaryHeap::with_capacity(keep.min(entries.len()));
        let mut seen = 0usize;
        entries.every(|expire_at, bucket| {
            seen += 1;
            let record = (expire_at, bucket);
            if soonest.len() < keep {
                soonest.push(record);
            } else if let Some(mut latest) = soonest.peek_mut() {
                if record < *latest {
                    *latest = record;
                }
            }
        });
        // Every entry left out expires at or after the latest kept.
        self.horizon = match soonest.peek() {
            Some(&(latest, _)) if seen > keep => latest,
            _ => u64::MAX,
        };
        self.rebuild(soonest.into_vec().into_iter());
    }

    /// Files `bucket` under `bound`.
    fn push(&mut self, bound: u64, bucket: u64) {
        let record = (bound, bucket);
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

    /// Takes out a record with the soonest bound, if that bound is at or before `until`.
    fn pop_due(&mut self, until: u64) -> Option<(u64, u64)> {
        let &(bound, _) = self.front.get(self.head)?;
        if bound > until {
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
    fn rebuild(&mut self, records: impl Iterator<Item = (u64, u64)>) {
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
        self.spare.truncate(SPARE_BUCKETS);
        self.front.clear();
        self.head = 0;
        self.records = 0;
        for (bound, bucket) in records {
            let spare = &mut self.spare;
            self.later
                .entry(bound >> SLOT_SHIFT)
                .or_insert_with(|| spare.pop().unwrap_or_default())
                .push((bound, bucket));
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
