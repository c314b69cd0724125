//! One shard of [`super::MemoryStore`]: limiter states by key, bounded and expiring, laid out
//! for maps of millions of keys (docs/decisions.md, "Memory").
//!
//! Each state has one 64-byte slot, aligned to a cache line, so a lookup reads one line besides
//! the table's control bytes: the key (32 bytes, [`Key`]), a fixed-size state as its three words
//! (fixed window, sliding counter, token bucket, GCRA: [`Words`]) and the expiry. What does not
//! fit — an identifier longer than the key holds, and the states that grow (the sliding log,
//! concurrency leases) — is kept in the shard's spill table, numbered from the slot. Names are
//! numbered by the shard, each held once with a count of the keys using it, and dropped with the
//! last of them. Eviction and expiry are [`super::ExpiringMap`]'s, through the same
//! [`ExpiryIndex`]: when full, the entry that expires soonest is evicted.

use std::fmt;
use std::sync::Arc;

use hashbrown::HashTable;

use super::expiry_index::{ExpiryIndex, Filed};
use super::key_hasher::KeyHasher;
use super::state_key::{hash_parts, Key, KeyRef};
use crate::algorithm::{
    FixedWindowState, GcraState, SlidingCounterState, State, TokenBucketState, Words,
};
use crate::policy::Algorithm;

/// A bounded, expiring map of limiter states.
pub(crate) struct StateMap {
    entries: Entries,
    index: ExpiryIndex,
    capacity: usize,
}

/// Everything but the index: what the index reads and drops entries from.
struct Entries {
    table: HashTable<Slot>,
    names: Names,
    spills: Spills,
    hasher: KeyHasher,
}

/// One state: 64 bytes on a cache line of its own.
#[repr(C, align(64))]
struct Slot {
    key: Key,
    // A fixed-size state's words; for a sliding log or concurrency leases, the first is the
    // number of the spill holding the state.
    words: [u64; 3],
    expire_at: u64,
}

/// What a slot keeps out of line: a long identifier, a growing state, or both.
#[derive(Default)]
struct Spill {
    identifier: Box<[u8]>,
    state: Option<State>,
}

impl fmt::Debug for StateMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateMap")
            .field("len", &self.entries.table.len())
            .field("capacity", &self.capacity)
            .field("names", &self.entries.names.len())
            .field("spills", &self.entries.spills.len())
            .field("index_records", &self.index.records())
            .finish_non_exhaustive()
    }
}

/// A held state found by [`StateMap::find_mut`]: to read, change in place, or replace, and its
/// expiry to move.
pub(crate) struct Held<'a> {
    slot: &'a mut Slot,
    spills: &'a mut Spills,
    index: &'a mut ExpiryIndex,
    bucket: usize,
}

impl Held<'_> {
    /// A copy of the state.
    pub(crate) fn state(&self) -> State {
        let algorithm = self.slot.key.algorithm();
        match decode(algorithm, &self.slot.words) {
            Some(state) => state,
            None => self
                .spills
                .get(spill_of(self.slot))
                .state
                .clone()
                .unwrap_or_else(|| State::fresh(algorithm)),
        }
    }

    /// Runs `change` on the state in place.
    #[inline]
    pub(crate) fn update<R>(&mut self, change: impl FnOnce(&mut State) -> R) -> R {
        let algorithm = self.slot.key.algorithm();
        if let Some(mut state) = decode(algorithm, &self.slot.words) {
            let result = change(&mut state);
            encode(&state, &mut self.slot.words);
            return result;
        }
        let spill = self.spills.get_mut(spill_of(self.slot));
        change(spill.state.get_or_insert_with(|| State::fresh(algorithm)))
    }

    /// Replaces the state (of the key's algorithm).
    pub(crate) fn set(&mut self, state: State) {
        self.update(|held| *held = state);
    }

    /// When the state may be dropped.
    pub(crate) fn expire_at(&self) -> u64 {
        self.slot.expire_at
    }

    /// Moves the expiry to `expire_at`.
    pub(crate) fn set_expiry(&mut self, expire_at: u64) {
        self.index
            .moved(Some(self.slot.expire_at), expire_at, self.bucket);
        self.slot.expire_at = expire_at;
    }
}

impl StateMap {
    /// A map holding at most `capacity` states (at least one), hashing keys with `hasher`.
    pub(crate) fn new(capacity: usize, hasher: KeyHasher) -> StateMap {
        StateMap {
            entries: Entries {
                table: HashTable::new(),
                names: Names::default(),
                spills: Spills::default(),
                hasher,
            },
            index: ExpiryIndex::new(),
            capacity: capacity.max(1),
        }
    }

    /// The number of states held.
    pub(crate) fn len(&self) -> usize {
        self.entries.table.len()
    }

    /// Drops every state whose expiry is at or before `now`; returns how many.
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
        self.index.compact(&mut self.entries);
        dropped
    }

    /// The held state of `key`, whose hash under this map's hasher is `hash`.
    #[inline]
    pub(crate) fn find_mut(&mut self, hash: u64, key: &KeyRef<'_>) -> Option<Held<'_>> {
        let entries = &mut self.entries;
        let name = entries.names.find(key.name())?;
        let found = if key.is_inline() {
            let probe = key.stored(name, 0);
            entries.table.find_entry(hash, |s| s.key == probe)
        } else {
            let spills = &entries.spills;
            entries.table.find_entry(hash, |s| {
                key.is(name, &s.key, |n| &spills.get(n).identifier)
            })
        };
        let found = found.ok()?;
        let bucket = found.bucket_index();
        Some(Held {
            slot: found.into_mut(),
            spills: &mut entries.spills,
            index: &mut self.index,
            bucket,
        })
    }

    /// Stores `state` for `key`, which must not be held, whose hash is `hash` and whose name is
    /// `name` (the allocation the map keeps), to be dropped once time passes `expire_at`. Evicts
    /// the state that expires soonest when the map is full.
    pub(crate) fn insert_absent(
        &mut self,
        hash: u64,
        key: &KeyRef<'_>,
        name: &Arc<str>,
        state: State,
        expire_at: u64,
    ) {
        debug_assert_eq!(**name, *key.name());
        debug_assert_eq!(state.algorithm(), key.algorithm());
        while self.entries.table.len() >= self.capacity
            && self.index.pop_soonest(u64::MAX, &mut self.entries)
        {}
        let entries = &mut self.entries;
        let number = entries.names.intern(name);
        let mut words = [0; 3];
        let spill = if encode(&state, &mut words) {
            (!key.is_inline()).then(|| Spill {
                identifier: key.identifier().into(),
                state: None,
            })
        } else {
            Some(Spill {
                identifier: if key.is_inline() {
                    Box::default()
                } else {
                    key.identifier().into()
                },
                state: Some(state),
            })
        };
        let spill = spill.map_or(0, |spill| entries.spills.add(spill));
        if !is_fixed(key.algorithm()) {
            words[0] = u64::from(spill);
        }
        let slot = Slot {
            key: key.stored(number, spill),
            words,
            expire_at,
        };
        let (names, spills, hasher) = (&entries.names, &entries.spills, &entries.hasher);
        let rehash = |s: &Slot| slot_hash(s, names, spills, hasher);
        if entries.table.capacity() == entries.table.len() {
            // The table grows or rehashes now, before the insertion, and its slots move.
            entries.table.reserve(1, rehash);
            self.index.invalidate();
        }
        let bucket = entries
            .table
            .insert_unique(hash, slot, rehash)
            .bucket_index();
        self.index.moved(None, expire_at, bucket);
        self.index.compact(&mut self.entries);
    }

    /// Drops the state of `key`, whose hash is `hash`; whether it was held.
    pub(crate) fn remove(&mut self, hash: u64, key: &KeyRef<'_>) -> bool {
        let entries = &mut self.entries;
        let Some(name) = entries.names.find(key.name()) else {
            return false;
        };
        let spills = &entries.spills;
        let found = entries.table.find_entry(hash, |s| {
            key.is(name, &s.key, |n| &spills.get(n).identifier)
        });
        let Ok(found) = found else {
            return false;
        };
        let (slot, _) = found.remove();
        entries.release(&slot);
        // Its index record, if any, goes stale; it is skipped when it reaches the front.
        self.index.compact(&mut self.entries);
        true
    }
}

impl Entries {
    /// Lets go of what a removed slot held: its name's use and its spill.
    fn release(&mut self, slot: &Slot) {
        self.names.release(slot.key.name());
        if has_spill(slot) {
            self.spills.remove(spill_of(slot));
        }
    }
}

impl Filed for Entries {
    fn len(&self) -> usize {
        self.table.len()
    }

    fn expiry_at(&self, bucket: u64) -> Option<u64> {
        let slot = self.table.get_bucket(usize::try_from(bucket).ok()?)?;
        Some(slot.expire_at)
    }

    fn remove_at(&mut self, bucket: u64) {
        if let Ok(found) = self.table.get_bucket_entry(bucket as usize) {
            let (slot, _) = found.remove();
            self.release(&slot);
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

/// The hash of a stored key: that of its parts, as [`KeyRef::hash`] computes it.
fn slot_hash(slot: &Slot, names: &Names, spills: &Spills, hasher: &KeyHasher) -> u64 {
    let key = &slot.key;
    let identifier = match key.inline_identifier() {
        Some(identifier) => identifier,
        None => &spills.get(spill_of(slot)).identifier,
    };
    hash_parts(hasher, names.get(key.name()), key.algorithm(), identifier)
}

/// Whether the slot has a spill: a long identifier or a growing state.
fn has_spill(slot: &Slot) -> bool {
    slot.key.spill().is_some() || !is_fixed(slot.key.algorithm())
}

/// The number of the slot's spill (meaningful when [`has_spill`]).
fn spill_of(slot: &Slot) -> u32 {
    slot.key.spill().unwrap_or(slot.words[0] as u32)
}

/// Whether the algorithm's state is a fixed number of words.
fn is_fixed(algorithm: Algorithm) -> bool {
    !matches!(algorithm, Algorithm::SlidingLog | Algorithm::Concurrency)
}

/// The state of a fixed-size algorithm from its words; `None` for the others.
#[inline]
fn decode(algorithm: Algorithm, words: &[u64; 3]) -> Option<State> {
    Some(match algorithm {
        Algorithm::FixedWindow => State::FixedWindow(FixedWindowState::from_words(words)),
        Algorithm::SlidingCounter => State::SlidingCounter(SlidingCounterState::from_words(words)),
        Algorithm::TokenBucket => State::TokenBucket(TokenBucketState::from_words(words)),
        Algorithm::Gcra => State::Gcra(GcraState::from_words(words)),
        Algorithm::SlidingLog | Algorithm::Concurrency => return None,
    })
}

/// Writes a fixed-size state's words; whether it is one.
#[inline]
fn encode(state: &State, words: &mut [u64; 3]) -> bool {
    match state {
        State::FixedWindow(s) => s.to_words(words),
        State::SlidingCounter(s) => s.to_words(words),
        State::TokenBucket(s) => s.to_words(words),
        State::Gcra(s) => s.to_words(words),
        State::SlidingLog(_) | State::Concurrency(_) => return false,
    }
    true
}

/// The names of the limits whose keys a shard holds, numbered, each with how many keys use it.
#[derive(Default)]
struct Names {
    names: Vec<Option<(Arc<str>, u32)>>,
    free: Vec<u32>,
    // The number found last: most lookups are for the same limit as the one before.
    last: u32,
}

impl Names {
    fn len(&self) -> usize {
        self.names.len() - self.free.len()
    }

    /// The number of `name`, if a key uses it. A scan: a shard holds the names of the limits in
    /// use — a configuration's handful — and most lookups hit the one found last.
    #[inline]
    fn find(&mut self, name: &str) -> Option<u32> {
        if let Some(Some((held, _))) = self.names.get(self.last as usize) {
            if same(held, name) {
                return Some(self.last);
            }
        }
        let found = self
            .names
            .iter()
            .position(|held| held.as_ref().is_some_and(|(held, _)| same(held, name)))?;
        self.last = found as u32;
        Some(self.last)
    }

    /// The number of `name`, counting one more key using it.
    fn intern(&mut self, name: &Arc<str>) -> u32 {
        let number = match self.find(name) {
            Some(number) => number,
            None => {
                let entry = Some((name.clone(), 0));
                match self.free.pop() {
                    Some(number) => {
                        self.names[number as usize] = entry;
                        number
                    }
                    None => {
                        self.names.push(entry);
                        (self.names.len() - 1) as u32
                    }
                }
            }
        };
        if let Some((_, keys)) = &mut self.names[number as usize] {
            *keys += 1;
        }
        number
    }

    /// One key less uses name `number`; the last one lets it go.
    fn release(&mut self, number: u32) {
        let held = &mut self.names[number as usize];
        if let Some((_, keys)) = held {
            *keys -= 1;
            if *keys == 0 {
                *held = None;
                self.free.push(number);
            }
        }
    }

    /// Name `number`, which a held key uses.
    fn get(&self, number: u32) -> &str {
        self.names[number as usize]
            .as_ref()
            .map_or("", |(name, _)| name)
    }
}

/// Whether `held` is `name`: keys of one limit share its name's allocation, so addresses are
/// compared before bytes.
#[inline]
fn same(held: &str, name: &str) -> bool {
    std::ptr::eq(held.as_ptr(), name.as_ptr()) && held.len() == name.len() || held == name
}

/// What slots keep out of line, numbered.
#[derive(Default)]
struct Spills {
    spills: Vec<Spill>,
    free: Vec<u32>,
}

impl Spills {
    fn len(&self) -> usize {
        self.spills.len() - self.free.len()
    }

    fn add(&mut self, spill: Spill) -> u32 {
        match self.free.pop() {
            Some(number) => {
                self.spills[number as usize] = spill;
                number
            }
            None => {
                self.spills.push(spill);
                (self.spills.len() - 1) as u32
            }
        }
    }

    fn get(&self, number: u32) -> &Spill {
        &self.spills[number as usize]
    }

    fn get_mut(&mut self, number: u32) -> &mut Spill {
        &mut self.spills[number as usize]
    }

    fn remove(&mut self, number: u32) {
        self.spills[number as usize] = Spill::default();
        self.free.push(number);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;

    fn policy(spec: &str) -> Policy {
        spec.parse().unwrap()
    }

    #[test]
    fn a_slot_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Slot>(), 64);
        assert_eq!(std::mem::align_of::<Slot>(), 64);
    }

    /// Every algorithm, with a short and a long identifier, under two names: stored, changed
    /// in place, read back, removed — and the names and spills are let go with the last key.
    #[test]
    fn every_state_round_trips_inline_or_spilled() {
        let hasher = KeyHasher::random();
        let mut map = StateMap::new(100, hasher.clone());
        let names: [Arc<str>; 2] = [Arc::from("a"), Arc::from("b")];
        let long = [b'x'; 40];
        let ids: [&[u8]; 2] = [b"203.0.113.7", &long];
        let mut held = Vec::new();
        for algorithm in Algorithm::EVERY {
            let spec = match algorithm {
                Algorithm::Concurrency => "concurrency 5 timeout 10s".to_string(),
                other => format!("{other} 5/1s"),
            };
            let policy = policy(&spec);
            for name in &names {
                for id in ids {
                    let key = KeyRef::new(name, algorithm, id);
                    let hash = key.hash(&hasher);
                    let mut state = State::fresh(algorithm);
                    let outcome = state.apply(&policy, 1_000, 2);
                    map.insert_absent(hash, &key, name, state.clone(), outcome.expire_at_ms);
                    let mut found = map.find_mut(hash, &key).expect("just stored");
                    assert_eq!(found.state(), state);
                    found.update(|s| s.apply(&policy, 1_001, 1));
                    state.apply(&policy, 1_001, 1);
                    assert_eq!(found.state(), state);
                    held.push((name.clone(), algorithm, id, state));
                }
            }
        }
        assert_eq!(map.len(), held.len());
        assert_eq!(map.entries.names.len(), 2);
        for (name, algorithm, id, state) in &held {
            let key = KeyRef::new(name, *algorithm, id);
            let hash = key.hash(&hasher);
            assert_eq!(map.find_mut(hash, &key).unwrap().state(), *state);
        }
        for (name, algorithm, id, _) in &held {
            let key = KeyRef::new(name, *algorithm, id);
            assert!(map.remove(key.hash(&hasher), &key));
            assert!(map.find_mut(key.hash(&hasher), &key).is_none());
        }
        assert_eq!(map.len(), 0);
        assert_eq!(map.entries.names.len(), 0);
        assert_eq!(map.entries.spills.len(), 0);
    }

    /// Random operations against a plain model that evicts by scanning for the soonest expiry:
    /// the map must drop and evict exactly what the model does, and keep only the names and
    /// spills its keys use.
    #[test]
    fn matches_a_scanning_model_on_random_operations() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let hasher = KeyHasher::random();
        let mut map = StateMap::new(16, hasher.clone());
        map.index = ExpiryIndex::with_limits(2, 2);
        let names: Vec<Arc<str>> = (0..3).map(|i| Arc::from(format!("limit-{i}"))).collect();
        let ids: Vec<Vec<u8>> = (0..14)
            .map(|i| format!("{i:0width$}", width = if i % 2 == 0 { 3 } else { 40 }).into())
            .collect();
        let algorithms = [Algorithm::Gcra, Algorithm::SlidingLog];
        // A key is (name, algorithm, id) by its number below 84; expiries are
        // `128·t + key number`, so no two keys tie and the victim is unique.
        let mut model: Vec<(usize, u64)> = Vec::new();
        let parts = |k: usize| (k % 3, (k / 3) % 2, k / 6);
        let mut now = 0;
        for _ in 0..20_000 {
            let k = next(3 * 2 * 14) as usize;
            let (n, a, i) = parts(k);
            let key = KeyRef::new(&names[n], algorithms[a], &ids[i]);
            let hash = key.hash(&hasher);
            match next(10) {
                0 => {
                    now += next(50);
                    let until = now * 128 + next(128);
                    let dropped = map.purge_expired(until);
                    let before = model.len();
                    model.retain(|&(_, e)| e > until);
                    assert_eq!(dropped, before - model.len());
                }
                1 => {
                    let pos = model.iter().position(|&(m, _)| m == k);
                    assert_eq!(map.remove(hash, &key), pos.is_some());
                    if let Some(p) = pos {
                        model.remove(p);
                    }
                }
                2..=4 => {
                    let expiry = (now + next(400)) * 128 + k as u64;
                    if let Some(mut held) = map.find_mut(hash, &key) {
                        held.set_expiry(expiry);
                    }
                    if let Some(e) = model.iter_mut().find(|(m, _)| *m == k) {
                        e.1 = expiry;
                    }
                }
                _ => {
                    let expiry = (now + next(400)) * 128 + k as u64;
                    if let Some(mut held) = map.find_mut(hash, &key) {
                        held.set_expiry(expiry);
                        model.iter_mut().find(|(m, _)| *m == k).unwrap().1 = expiry;
                    } else {
                        let state = State::fresh(algorithms[a]);
                        map.insert_absent(hash, &key, &names[n], state, expiry);
                        if model.len() == 16 {
                            let soonest = (0..model.len()).min_by_key(|&i| model[i].1).unwrap();
                            model.swap_remove(soonest);
                        }
                        model.push((k, expiry));
                    }
                }
            }
            assert_eq!(map.len(), model.len());
            let spilled = model
                .iter()
                .filter(|&&(m, _)| parts(m).1 == 1 || parts(m).2 % 2 == 1)
                .count();
            assert_eq!(map.entries.spills.len(), spilled);
            let mut used: Vec<usize> = model.iter().map(|&(m, _)| parts(m).0).collect();
            used.sort_unstable();
            used.dedup();
            assert_eq!(map.entries.names.len(), used.len());
            for &(m, e) in &model {
                let (n, a, i) = parts(m);
                let key = KeyRef::new(&names[n], algorithms[a], &ids[i]);
                let held = map.find_mut(key.hash(&hasher), &key);
                assert_eq!(held.map(|h| h.slot.expire_at), Some(e));
            }
        }
    }
}
