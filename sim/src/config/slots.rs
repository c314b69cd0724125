//! The dense-id table's slots: open addressing with linear probing over 8-byte slots, each an id
//! and 32 bits of its key's hash, kept at most half full.
//!
//! Its own rather than hashbrown's `HashTable` (which it replaced) for one reason: a replay
//! fetches a slot into cache a few requests before it reads it ([`IdSlots::prefetch`]), which
//! needs the slot's address from the hash alone, and hashbrown names no address before looking.
//! The keys live with the caller; a probe asks it to compare only where the stored hash bits
//! agree, so a lookup usually reads one slot and one key.

use super::prefetch::prefetch_bytes;

/// A slot no id holds.
const EMPTY: u64 = u64::MAX;

/// Slots in a table's first allocation.
const FIRST_CAPACITY: usize = 64;

/// Ids by the hash of their keys (see the module).
#[derive(Debug, Default)]
pub struct IdSlots {
    /// `tag << 32 | id`, or [`EMPTY`]; a power of two of them, or none yet.
    slots: Vec<u64>,
    len: usize,
}

/// The bits of a hash a slot keeps, to compare before the key.
fn tag(hash: u64) -> u64 {
    hash & 0xffff_ffff
}

impl IdSlots {
    /// The slot a hash's probe starts at (its high bits, mixed: the low ones are the tag).
    fn home(&self, hash: u64) -> usize {
        let bits = self.slots.len().trailing_zeros();
        (hash.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize
    }

    /// The id whose key `is_key` accepts among those stored under `hash`.
    pub fn find(&self, hash: u64, mut is_key: impl FnMut(u32) -> bool) -> Option<u32> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut at = self.home(hash);
        loop {
            let slot = self.slots[at];
            if slot == EMPTY {
                return None;
            }
            if slot >> 32 == tag(hash) && is_key(slot as u32) {
                return Some(slot as u32);
            }
            at = (at + 1) & mask;
        }
    }

    /// The first id stored under `hash`'s bits, without comparing keys: most likely the id of
    /// the key hashed, though possibly another's. A hint for prefetching only.
    pub fn likely(&self, hash: u64) -> Option<u32> {
        self.find(hash, |_| true)
    }

    /// Adds `id` under `hash` (not already there); `hash_of` gives any stored id's hash again,
    /// for when the table grows.
    pub fn insert(&mut self, hash: u64, id: u32, hash_of: impl Fn(u32) -> u64) {
        assert!(id != u32::MAX, "ids stay below 2^32 - 1");
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow(&hash_of);
        }
        self.place(hash, id);
        self.len += 1;
    }

    fn place(&mut self, hash: u64, id: u32) {
        let mask = self.slots.len() - 1;
        let mut at = self.home(hash);
        while self.slots[at] != EMPTY {
            at = (at + 1) & mask;
        }
        self.slots[at] = tag(hash) << 32 | u64::from(id);
    }

    fn grow(&mut self, hash_of: &impl Fn(u32) -> u64) {
        let capacity = (self.slots.len() * 2).max(FIRST_CAPACITY);
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; capacity]);
        for slot in old.into_iter().filter(|&s| s != EMPTY) {
            let id = slot as u32;
            self.place(hash_of(id), id);
        }
    }

    /// Starts fetching into cache the slot `hash`'s probe starts at (a hint).
    pub fn prefetch(&self, hash: u64) {
        if !self.slots.is_empty() {
            prefetch_bytes((&self.slots[self.home(hash)] as *const u64).cast(), 8);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_found_by_their_keys_through_growth_and_collisions() {
        // Keys are the ids' own numbers; hashes are made to collide in groups of three (same
        // home, same tag), so probes must compare keys to tell them apart.
        let hash = |key: u32| u64::from(key / 3).wrapping_mul(0x0123_4567_89ab_cdef);
        let mut slots = IdSlots::default();
        assert_eq!(slots.find(hash(0), |_| true), None);
        for id in 0..5000u32 {
            assert_eq!(
                slots.find(hash(id), |k| k == id),
                None,
                "{id} before insert"
            );
            slots.insert(hash(id), id, hash);
        }
        for id in 0..5000u32 {
            assert_eq!(slots.find(hash(id), |k| k == id), Some(id));
            // The likely id is one of the three sharing its hash.
            let likely = slots.likely(hash(id)).unwrap();
            assert_eq!(likely / 3, id / 3);
        }
        assert_eq!(slots.find(hash(6000), |k| k == 6000), None);
        assert!(slots.slots.len() >= 2 * 5000);
    }
}
