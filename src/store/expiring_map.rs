//! A map whose entries expire and whose size is bounded, because identifiers are chosen by
//! whoever sends the requests.
//!
//! Entries past their expiry are dropped as time goes by. When the map is full, the entry that
//! expires soonest is evicted: it is the one whose state matters for the shortest time, and
//! forgetting it can at worst admit that one identifier early (a fail-open for one key).

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;

/// A bounded map of values that stop mattering at a known time.
#[derive(Debug)]
pub struct ExpiringMap<K, V> {
    entries: HashMap<K, (V, u64, u64)>,
    by_expiry: BTreeSet<(u64, u64)>,
    keys_by_seq: HashMap<u64, K>,
    next_seq: u64,
    capacity: usize,
}

impl<K: Eq + Hash + Clone, V> ExpiringMap<K, V> {
    /// A map holding at most `capacity` entries (at least one).
    pub fn new(capacity: usize) -> Self {
        ExpiringMap {
            entries: HashMap::new(),
            by_expiry: BTreeSet::new(),
            keys_by_seq: HashMap::new(),
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
        self.entries.get(key).map(|(v, expire, _)| (v, *expire))
    }

    /// Removes and returns the value for `key` with its expiry.
    pub fn remove(&mut self, key: &K) -> Option<(V, u64)> {
        let (value, expire, seq) = self.entries.remove(key)?;
        self.by_expiry.remove(&(expire, seq));
        self.keys_by_seq.remove(&seq);
        Some((value, expire))
    }

    /// Inserts or replaces `key`, to be dropped once `now` passes `expire_at`. Evicts the entry
    /// that expires soonest when the map is full.
    pub fn insert(&mut self, key: K, value: V, expire_at: u64) {
        self.remove(&key);
        while self.entries.len() >= self.capacity {
            let Some(&(expire, seq)) = self.by_expiry.first() else {
                break;
            };
            let victim = self.keys_by_seq[&seq].clone();
            debug_assert_eq!(self.entries[&victim].1, expire);
            self.remove(&victim);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.by_expiry.insert((expire_at, seq));
        self.keys_by_seq.insert(seq, key.clone());
        self.entries.insert(key, (value, expire_at, seq));
    }

    /// Drops every entry whose expiry is at or before `now`; returns how many.
    pub fn purge_expired(&mut self, now: u64) -> usize {
        let mut dropped = 0;
        while let Some(&(expire, seq)) = self.by_expiry.first() {
            if expire > now {
                break;
            }
            let key = self.keys_by_seq[&seq].clone();
            self.remove(&key);
            dropped += 1;
        }
        dropped
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
