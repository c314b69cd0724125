//! A map whose entries expire and whose size is bounded, because identifiers are chosen by
//! whoever sends the requests.
//!
//! Entries past their expiry are dropped as time goes by. When the map is full, the entry that
//! expires soonest is evicted: it is the one whose state matters for the shortest time, and
//! forgetting it can at worst admit that one identifier early (a fail-open for one key). Entries
//! expiring in the same millisecond are evicted in no particular order.
//!
//! Entries live inline in a hash table (one probe reaches key, value and expiry). The expiry
//! index ([`ExpiryIndex`]) holds lower bounds of the soonest entries' expiries, by the entry's
//! bucket in the table rather than a copy of its key; a write that moves an expiry later, nearly
//! all of them, does not touch it (see its docs).

use std::fmt;
use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;

#[cfg(test)]
use super::expiry_index::STALE_RECORDS_SLACK;
use super::expiry_index::{ExpiryIndex, Filed};
use super::key_hasher::KeyHasher;

/// A bounded map of values that stop mattering at a known time.
pub(crate) struct ExpiringMap<K, V> {
    entries: Entries<K, V>,
    index: ExpiryIndex,
    capacity: usize,
}

/// The table and its hasher: what the index reads and drops entries from.
struct Entries<K, V> {
    table: HashTable<Slot<K, V>>,
    hasher: KeyHasher,
}

struct Slot<K, V> {
    key: K,
    value: V,
    expire_at: u64,
}

impl<K, V> fmt::Debug for ExpiringMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExpiringMap")
            .field("len", &self.entries.table.len())
            .field("capacity", &self.capacity)
            .field("index_records", &self.index.records())
            .finish_non_exhaustive()
    }
}

/// A held entry found by [`ExpiringMap::find_mut`]: its value, and its expiry to move.
pub(crate) struct SlotMut<'a, V> {
    value: &'a mut V,
    expire_at: &'a mut u64,
    index: &'a mut ExpiryIndex,
    bucket: usize,
}

impl<V> SlotMut<'_, V> {
    /// The value.
    pub(crate) fn value(&mut self) -> &mut V {
        self.value
    }

    /// Moves the expiry to `expire_at`.
    pub(crate) fn set_expiry(&mut self, expire_at: u64) {
        self.index
            .moved(Some(*self.expire_at), expire_at, self.bucket);
        *self.expire_at = expire_at;
    }
}

impl<K: Eq + Hash, V> Filed for Entries<K, V> {
    fn len(&self) -> usize {
        self.table.len()
    }

    fn expiry_at(&self, bucket: u64) -> Option<u64> {
        let slot = self.table.get_bucket(usize::try_from(bucket).ok()?)?;
        Some(slot.expire_at)
    }

    fn remove_at(&mut self, bucket: u64) {
        if let Ok(found) = self.table.get_bucket_entry(bucket as usize) {
            found.remove();
        }
    }

    fn every(&self, mut each: impl FnMut(u64, u64)) {
        for bucket in self.table.iter_buckets() {
            if let Some(slot) = self.table.get_bucket(bucket) {
                each(slot.expire_at, bucket as u64);
            }
        }
    }
}

impl<K: Eq + Hash, V> ExpiringMap<K, V> {
    /// A map holding at most `capacity` entries (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        ExpiringMap::with_hasher(capacity, KeyHasher::random())
    }

    /// A map hashing with `hasher`, so that a caller holding a clone can compute hashes for
    /// [`Self::find_mut`] and [`Self::insert_absent`].
    pub(crate) fn with_hasher(capacity: usize, hasher: KeyHasher) -> Self {
        ExpiringMap {
            entries: Entries {
                table: HashTable::new(),
                hasher,
            },
            index: ExpiryIndex::new(),
            capacity: capacity.max(1),
        }
    }

    /// A map whose index keeps records for as few as `min_keep` entries and rescans once
    /// records exceed a quarter of the entries by `slack`, so that tests reach its horizon
    /// with a handful of entries.
    #[cfg(test)]
    fn with_index_limits(capacity: usize, min_keep: usize, slack: usize) -> Self {
        let mut map = ExpiringMap::new(capacity);
        map.index = ExpiryIndex::with_limits(min_keep, slack);
        map
    }

    /// The number of entries held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.table.len()
    }

    /// Moves the expiry of a held `key` to `expire_at`; does nothing if `key` is not held.
    #[cfg(test)]
    fn set_expiry(&mut self, key: &K, expire_at: u64) {
        let hash = self.entries.hasher.hash_one(key);
        if let Some(mut slot) = self.find_mut(hash, |k| k == key) {
            slot.set_expiry(expire_at);
        }
    }

    /// Whether the map is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.table.is_empty()
    }

    /// The value for `key` and its expiry, if held.
    pub(crate) fn get(&self, key: &K) -> Option<(&V, u64)> {
        let hash = self.entries.hasher.hash_one(key);
        self.entries
            .table
            .find(hash, |s| s.key == *key)
            .map(|s| (&s.value, s.expire_at))
    }

    /// Removes and returns the value for `key` with its expiry.
    pub(crate) fn remove(&mut self, key: &K) -> Option<(V, u64)> {
        let hash = self.entries.hasher.hash_one(key);
        let (slot, _) = self
            .entries
            .table
            .find_entry(hash, |s| s.key == *key)
            .ok()?
            .remove();
        // Its index record, if any, goes stale; it is skipped when it reaches the front.
        self.index.compact(&mut self.entries);
        Some((slot.value, slot.expire_at))
    }

    /// Inserts or replaces `key`, to be dropped once `now` passes `expire_at`. Evicts the entry
    /// that expires soonest when the map is full.
    pub(crate) fn insert(&mut self, key: K, value: V, expire_at: u64) {
        let hash = self.entries.hasher.hash_one(&key);
        if let Some(mut slot) = self.find_mut(hash, |k| *k == key) {
            *slot.value() = value;
            slot.set_expiry(expire_at);
            self.index.compact(&mut self.entries);
            return;
        }
        self.insert_absent(hash, key, value, expire_at);
    }

    /// Drops every entry whose expiry is at or before `now`; returns how many.
    #[inline]
    pub(crate) fn purge_expired(&mut self, now: u64) -> usize {
        // Every decision asks; almost always nothing is due.
        if !self.index.due(now) {
            return 0;
        }
        let mut dropped = 0;
        while self.index.pop_soonest(now, &mut self.entries) {
            dropped += 1;
        }
        dropped
    }

    /// The held entry whose key satisfies `is_key`, given the key's `hash` under this map's
    /// hasher.
    pub(crate) fn find_mut(
        &mut self,
        hash: u64,
        mut is_key: impl FnMut(&K) -> bool,
    ) -> Option<SlotMut<'_, V>> {
        let found = self
            .entries
            .table
            .find_entry(hash, |s| is_key(&s.key))
            .ok()?;
        let bucket = found.bucket_index();
        let slot = found.into_mut();
        Some(SlotMut {
            value: &mut slot.value,
            expire_at: &mut slot.expire_at,
            index: &mut self.index,
            bucket,
        })
    }

    /// Inserts `key`, which must not be held, with its `hash` under this map's hasher. Evicts the
    /// entry that expires soonest when the map is full.
    pub(crate) fn insert_absent(&mut self, hash: u64, key: K, value: V, expire_at: u64) {
        while self.entries.table.len() >= self.capacity
            && self.index.pop_soonest(u64::MAX, &mut self.entries)
        {}
        let hasher = &self.entries.hasher;
        let table = &mut self.entries.table;
        if table.capacity() == table.len() {
            // The table grows or rehashes now, before the insertion, and its entries move.
            table.reserve(1, |s| hasher.hash_one(&s.key));
            self.index.invalidate();
        }
        let slot = Slot {
            key,
            value,
            expire_at,
        };
        let bucket = table
            .insert_unique(hash, slot, |s| hasher.hash_one(&s.key))
            .bucket_index();
        self.index.moved(None, expire_at, bucket);
        self.index.compact(&mut self.entries);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_soonest_expiring_entry_when_full() {
        let mut map = ExpiringMap::new(2);
        map.insert("late", 1, 300);
        map.insert("soon", 2, 100);
        map.insert("new", 3, 200);
        assert_eq!(map.len(), 2);
        assert!(map.get(&"soon").is_none());
        assert_eq!(map.get(&"late"), Some((&1, 300)));
        assert_eq!(map.get(&"new"), Some((&3, 200)));
    }

    #[test]
    fn a_later_expiry_is_honoured_by_purge_and_eviction() {
        let mut map = ExpiringMap::new(2);
        map.insert("a", 1, 100);
        map.insert("b", 2, 200);
        map.set_expiry(&"a", 300);
        assert_eq!(map.purge_expired(150), 0, "a now expires at 300");
        map.insert("c", 3, 250);
        assert!(
            map.get(&"b").is_none(),
            "b expires soonest, so b is evicted"
        );
        assert_eq!(map.get(&"a"), Some((&1, 300)));
        map.set_expiry(&"a", 50);
        assert_eq!(
            map.purge_expired(60),
            1,
            "an earlier expiry takes effect at once"
        );
        assert!(map.get(&"a").is_none());
        assert_eq!(map.purge_expired(1_000), 1);
        assert!(map.is_empty());
    }

    #[test]
    fn purges_expired_entries_and_replaces_in_place() {
        let mut map = ExpiringMap::new(10);
        map.insert(1, "a", 100);
        map.insert(2, "b", 200);
        map.insert(1, "c", 300);
        assert_eq!(map.len(), 2);
        assert_eq!(map.purge_expired(200), 1);
        assert_eq!(map.get(&1), Some((&"c", 300)));
        assert_eq!(map.purge_expired(1000), 1);
        assert!(map.is_empty());
    }

    #[test]
    fn a_removed_and_reinserted_key_is_purged_at_its_new_expiry_only() {
        let mut map = ExpiringMap::new(10);
        map.insert("k", 1, 100);
        assert_eq!(map.remove(&"k"), Some((1, 100)));
        map.insert("k", 2, 500);
        assert_eq!(map.purge_expired(100), 0, "the old record is stale");
        assert_eq!(map.get(&"k"), Some((&2, 500)));
        assert_eq!(map.purge_expired(500), 1);
        assert!(map.is_empty());
    }

    #[test]
    fn stale_records_are_bounded_by_the_live_entries() {
        let mut map = ExpiringMap::new(10);
        map.insert(0u64, (), 1_000_000);
        // Each earlier expiry files a new record; removals leave theirs behind.
        for i in 0..50_000u64 {
            map.set_expiry(&0, 999_999 - i);
            map.insert(i + 1, (), 2_000_000 + i);
            map.remove(&(i + 1));
        }
        assert!(map.index.records() <= 2 * map.len() + STALE_RECORDS_SLACK + 1);
        assert_eq!(map.get(&0), Some((&(), 949_999 + 1)));
        assert_eq!(map.purge_expired(949_999), 0);
        assert_eq!(map.purge_expired(950_000), 1);
    }

    /// Random operations against a plain model that evicts by scanning for the soonest expiry:
    /// the lazy index must drop and evict exactly what the model does, up to ties.
    #[test]
    fn matches_a_scanning_model_on_random_operations() {
        follows_a_scanning_model(ExpiringMap::new(16));
    }

    /// The same with an index that keeps records for only the soonest two entries after a
    /// rescan, so that most entries live past its horizon, unfiled.
    #[test]
    fn matches_a_scanning_model_past_the_horizon() {
        follows_a_scanning_model(ExpiringMap::with_index_limits(16, 2, 2));
    }

    fn follows_a_scanning_model(mut map: ExpiringMap<u64, u64>) {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        // Expiries are `64·t + key`: distinct keys never tie, so the victim is unique.
        let mut model: Vec<(u64, u64)> = Vec::new();
        let mut now = 0;
        for _ in 0..20_000 {
            let key = next(40);
            match next(10) {
                0 => {
                    now += next(50);
                    let until = now * 64 + next(64);
                    let dropped = map.purge_expired(until);
                    let before = model.len();
                    model.retain(|&(_, e)| e > until);
                    assert_eq!(dropped, before - model.len());
                }
                1 => {
                    let got = map.remove(&key).map(|(_, e)| e);
                    let pos = model.iter().position(|&(k, _)| k == key);
                    assert_eq!(got, pos.map(|p| model.remove(p).1));
                }
                2..=4 => {
                    let expiry = (now + next(400)) * 64 + key;
                    map.set_expiry(&key, expiry);
                    if let Some(e) = model.iter_mut().find(|(k, _)| *k == key) {
                        e.1 = expiry;
                    }
                }
                _ => {
                    let expiry = (now + next(400)) * 64 + key;
                    map.insert(key, key, expiry);
                    if let Some(e) = model.iter_mut().find(|(k, _)| *k == key) {
                        e.1 = expiry;
                    } else {
                        if model.len() == 16 {
                            let soonest = (0..model.len()).min_by_key(|&i| model[i].1).unwrap();
                            model.swap_remove(soonest);
                        }
                        model.push((key, expiry));
                    }
                }
            }
            assert_eq!(map.len(), model.len());
            for &(k, e) in &model {
                assert_eq!(map.get(&k), Some((&k, e)));
            }
        }
    }
}
