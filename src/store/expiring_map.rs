//! A map whose entries expire and whose size is bounded, because identifiers are chosen by
//! whoever sends the requests.
//!
//! Entries past their expiry are dropped as time goes by. When the map is full, the entry that
//! expires soonest is evicted: it is the one whose state matters for the shortest time, and
//! forgetting it can at worst admit that one identifier early (a fail-open for one key).
//!
//! The expiry index holds a *lower bound* of each entry's expiry. Expiries almost always move
//! later (time goes forward), and updating an ordered index on every write costs more than the
//! rest of a decision; so a later expiry only updates the entry, and the index catches up when
//! the stale bound reaches the front (re-indexed then, not dropped). An earlier expiry, which is
//! rare, re-indexes at once, keeping every bound a true lower bound.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// A bounded map of values that stop mattering at a known time.
#[derive(Debug)]
pub struct ExpiringMap<K, V> {
    entries: HashMap<K, Slot<V>>,
    // (expiry, insertion sequence) → key: the soonest expiry first; the sequence breaks ties.
    by_expiry: BTreeMap<(u64, u64), K>,
    next_seq: u64,
    capacity: usize,
}

#[derive(Debug)]
struct Slot<V> {
    value: V,
    expire_at: u64,
    // The expiry under which the index holds this entry: never after `expire_at`.
    indexed_at: u64,
    seq: u64,
}

impl<K: Eq + Hash + Clone, V> ExpiringMap<K, V> {
    /// A map holding at most `capacity` entries (at least one).
    pub fn new(capacity: usize) -> Self {
        ExpiringMap {
            entries: HashMap::new(),
            by_expiry: BTreeMap::new(),
            next_seq: 0,
            capacity: capacity.max(1),
        }
    }

    /// The number of entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The value for `key` and its expiry, if held.
    pub fn get(&self, key: &K) -> Option<(&V, u64)> {
        self.entries.get(key).map(|s| (&s.value, s.expire_at))
    }

    /// The value for `key`, mutably, if held. Change its expiry with [`Self::set_expiry`].
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.entries.get_mut(key).map(|s| &mut s.value)
    }

    /// Moves the expiry of a held `key` to `expire_at`; does nothing if `key` is not held.
    pub fn set_expiry(&mut self, key: &K, expire_at: u64) {
        let Some(slot) = self.entries.get_mut(key) else {
            return;
        };
        if expire_at < slot.indexed_at {
            if let Some(k) = self.by_expiry.remove(&(slot.indexed_at, slot.seq)) {
                self.by_expiry.insert((expire_at, slot.seq), k);
            }
            slot.indexed_at = expire_at;
        }
        slot.expire_at = expire_at;
    }

    /// Removes and returns the value for `key` with its expiry.
    pub fn remove(&mut self, key: &K) -> Option<(V, u64)> {
        let slot = self.entries.remove(key)?;
        self.by_expiry.remove(&(slot.indexed_at, slot.seq));
        Some((slot.value, slot.expire_at))
    }

    /// Inserts or replaces `key`, to be dropped once `now` passes `expire_at`. Evicts the entry
    /// that expires soonest when the map is full.
    pub fn insert(&mut self, key: K, value: V, expire_at: u64) {
        self.remove(&key);
        while self.entries.len() >= self.capacity {
            if let Some(victim) = self.pop_soonest(u64::MAX) {
                self.entries.remove(&victim);
            } else {
                break;
            }
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.by_expiry.insert((expire_at, seq), key.clone());
        self.entries.insert(
            key,
            Slot {
                value,
                expire_at,
                indexed_at: expire_at,
                seq,
            },
        );
    }

    /// Drops every entry whose expiry is at or before `now`; returns how many.
    pub fn purge_expired(&mut self, now: u64) -> usize {
        let mut dropped = 0;
        while let Some(victim) = self.pop_soonest(now) {
            self.entries.remove(&victim);
            dropped += 1;
        }
        dropped
    }

    /// Takes out of the index the key that truly expires soonest, if it expires at or before
    /// `until`; stale bounds met on the way are re-indexed at their entry's real expiry.
    fn pop_soonest(&mut self, until: u64) -> Option<K> {
        loop {
            let entry = self.by_expiry.first_entry()?;
            let (bound, seq) = *entry.key();
            if bound > until {
                return None;
            }
            let key = entry.remove();
            let slot = self.entries.get_mut(&key).expect("indexed keys are held");
            if slot.expire_at == bound {
                return Some(key);
            }
            // All other bounds are ≥ this one, so this entry's real expiry must be compared
            // again in order: put it back where it truly belongs.
            slot.indexed_at = slot.expire_at;
            self.by_expiry.insert((slot.expire_at, seq), key);
        }
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
}
