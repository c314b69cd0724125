//! Identifiers by dense id, shared by the replay's store and its truths: an identifier is looked
//! up by its bytes once per request, and every state of it — each limit's state in the store,
//! each limit's exact log in the truth — is then found by indexing with its id, not by hashing
//! again.

use std::hash::BuildHasher;

use edgelimit::Identifier;
use rustc_hash::FxBuildHasher;

use super::prefetch::prefetch_bytes;
use super::slots::IdSlots;

/// Identifiers up to this many bytes keep a copy of their bytes beside their id: any address,
/// and a hashed API key's 64 hex digits.
const INLINE_LEN: usize = 64;

/// An identifier's bytes where its id's lookup compares them: inline when short, so comparing
/// reads no allocation of its own (an `Identifier` is an `Arc`, whose bytes live elsewhere).
#[derive(Clone)]
enum Key {
    Inline { len: u8, bytes: [u8; INLINE_LEN] },
    Shared(Identifier),
}

impl Key {
    fn of(identifier: &Identifier) -> Key {
        let b = identifier.as_bytes();
        if b.len() <= INLINE_LEN {
            let mut bytes = [0; INLINE_LEN];
            bytes[..b.len()].copy_from_slice(b);
            Key::Inline {
                len: b.len() as u8,
                bytes,
            }
        } else {
            Key::Shared(identifier.clone())
        }
    }

    fn is(&self, b: &[u8]) -> bool {
        match self {
            Key::Inline { len, bytes } => usize::from(*len) == b.len() && bytes[..b.len()] == *b,
            Key::Shared(identifier) => identifier.as_bytes() == b,
        }
    }
}

/// The identifiers seen so far, each with a dense id (0, 1, 2, … in order of first sight).
///
/// The table holds only the ids and a few bits of their hashes (8 bytes a slot, not a key and
/// its id), so the slots of 100,000s of identifiers stay in cache; the keys sit in `keys` by id,
/// in order of first sight, so the most frequent identifiers (seen first) are packed together.
#[derive(Default)]
pub struct Identifiers {
    table: IdSlots,
    keys: Vec<Key>,
    names: Vec<Identifier>,
    /// The ids looked up in this request: its limits mostly share one or two identifiers, and
    /// these are found by their bytes (in `keys`, just read) without touching the table, and
    /// without holding a clone of each (an `Identifier` is an `Arc`: a clone and its drop are two
    /// atomic operations).
    recent: Vec<u32>,
}

impl std::fmt::Debug for Identifiers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identifiers")
            .field("len", &self.names.len())
            .finish_non_exhaustive()
    }
}

/// The hash of an identifier's bytes: the table's, for lookups, growth and prefetching.
pub fn hash(bytes: &[u8]) -> u64 {
    FxBuildHasher.hash_one(bytes)
}

impl Identifiers {
    /// Forgets the per-request memory (call before each request).
    pub fn next_request(&mut self) {
        self.recent.clear();
    }

    /// The dense id of `identifier`.
    pub fn id(&mut self, identifier: &Identifier) -> u32 {
        let bytes = identifier.as_bytes();
        if let Some(&id) = self
            .recent
            .iter()
            .find(|&&id| self.keys[id as usize].is(bytes))
        {
            return id;
        }
        let hashed = hash(bytes);
        let keys = &self.keys;
        let id = match self.table.find(hashed, |id| keys[id as usize].is(bytes)) {
            Some(id) => id,
            None => {
                let id = u32::try_from(self.names.len()).expect("fewer than 2^32 identifiers");
                let names = &self.names;
                self.table
                    .insert(hashed, id, |id| hash(names[id as usize].as_bytes()));
                self.keys.push(Key::of(identifier));
                self.names.push(identifier.clone());
                id
            }
        };
        self.recent.push(id);
        id
    }

    /// The id the identifier of hash `hashed` ([`hash`]) most likely has, found without reading
    /// a key: the first stored under the same hash bits (rarely another identifier's; `None`
    /// when none is, as for an identifier not seen yet). A hint for prefetching only.
    pub fn likely_id(&self, hashed: u64) -> Option<u32> {
        self.table.likely(hashed)
    }

    /// Starts fetching into cache the table's slot for hash `hashed` (a hint, ahead of
    /// [`Identifiers::likely_id`]).
    pub fn prefetch_slot(&self, hashed: u64) {
        self.table.prefetch(hashed);
    }

    /// Starts fetching into cache the key of `id`, which [`Identifiers::id`] compares (a hint).
    pub fn prefetch_key(&self, id: u32) {
        if let Some(key) = self.keys.get(id as usize) {
            prefetch_bytes((key as *const Key).cast(), std::mem::size_of::<Key>());
        }
    }

    /// The identifier of a dense id.
    pub fn name(&self, id: u32) -> &Identifier {
        &self.names[id as usize]
    }

    /// How many identifiers have an id.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether none has.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_get_one_dense_id_each() {
        let mut ids = Identifiers::default();
        let a = ids.id(&Identifier::from("a"));
        let b = ids.id(&Identifier::from("b"));
        assert_eq!(ids.id(&Identifier::from("a")), a);
        ids.next_request();
        assert_eq!(
            (
                ids.id(&Identifier::from("a")),
                ids.id(&Identifier::from("b"))
            ),
            (a, b)
        );
        assert_ne!(a, b);
        assert_eq!(ids.name(b), &Identifier::from("b"));
        assert_eq!(ids.len(), 2);
        // Long identifiers (past the inline copy) are keyed by their bytes too.
        let long = "k".repeat(65);
        let l = ids.id(&Identifier::from(long.as_str()));
        ids.next_request();
        assert_eq!(ids.id(&Identifier::from(long.as_str())), l);
        assert_ne!(ids.id(&Identifier::from("k".repeat(66).as_str())), l);
    }

    #[test]
    fn ids_are_equal_exactly_when_the_bytes_are_through_growth() {
        // Enough identifiers to grow the table many times (its slots rehashed from the keys),
        // with lengths on both sides of the inline copy and bytes that pad with zeros.
        let text = |i: usize| -> Vec<u8> {
            let mut b = format!("{i}").into_bytes();
            b.resize(i % 70, 0);
            b.extend_from_slice(format!("/{i}").as_bytes());
            b
        };
        let mut ids = Identifiers::default();
        let first: Vec<u32> = (0..5000)
            .map(|i| {
                ids.next_request();
                ids.id(&Identifier::from(text(i)))
            })
            .collect();
        assert_eq!(first, (0..5000).collect::<Vec<u32>>());
        for i in (0..5000).rev() {
            ids.next_request();
            assert_eq!(ids.id(&Identifier::from(text(i))), i as u32);
            assert_eq!(ids.name(i as u32).as_bytes(), &text(i)[..]);
        }
    }

    #[test]
    fn a_key_is_its_bytes_exactly() {
        // The table only compares keys whose hashes meet, so the comparison is held here: a
        // key is never its bytes padded with zeros, a prefix, or a longer text.
        let key = |b: &[u8]| Key::of(&Identifier::from(b));
        for bytes in [&b"a"[..], b"", &[b'x'; 64], &[b'y'; 65], b"10.0.0.1"] {
            assert!(key(bytes).is(bytes));
            let mut padded = bytes.to_vec();
            padded.push(0);
            assert!(!key(bytes).is(&padded), "{bytes:?} + NUL");
            assert!(!key(&padded).is(bytes), "{bytes:?} against itself + NUL");
            if let Some((_, prefix)) = bytes.split_last() {
                assert!(!key(bytes).is(prefix));
            }
        }
        assert!(!key(&[b'x'; 64]).is(&[b'x'; 65]));
        assert!(!key(b"a").is(b"b"));
    }
}
