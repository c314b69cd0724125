//! The key of a state in [`super::MemoryStore`]: (limit name, algorithm, identifier), as the
//! Redis key is, in 32 bytes.
//!
//! The key sits inside the hash table's slot, so a lookup compares it without following a
//! pointer. The limit name is a number: a shard numbers the names of the keys it holds
//! ([`super::state_map`]), and every key of one limit shares it. Identifiers up to
//! [`INLINE_LEN`] bytes are kept inline (every IPv4 address in text, an IPv6 `/64` network as
//! `net::AddressGrouping` writes it, short ids); a longer one is kept in the shard's spill table,
//! and the key holds its number and its first bytes. A lookup builds a [`KeyRef`] on the stack
//! from borrowed parts: no allocation unless a new state is stored.

use std::hash::{BuildHasher, Hasher};

use crate::policy::Algorithm;

/// Identifiers up to this many bytes are stored inline.
pub(crate) const INLINE_LEN: usize = 26;

/// The `len` of a key whose identifier is in the spill table.
const SPILLED: u8 = u8::MAX;

/// Bytes of a spilled key holding its spill's number; the rest hold the identifier's first bytes.
const SPILL_NUMBER: usize = 4;

/// A stored key: the name's number in its shard, the algorithm, and the identifier inline (zero
/// past `len`, so two inline keys are equal exactly when their fields are) or, when `len` is
/// [`SPILLED`], its spill's number and first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    name: u32,
    algorithm: Algorithm,
    len: u8,
    bytes: [u8; INLINE_LEN],
}

impl Key {
    /// The number of the limit's name in the shard holding the key.
    pub(crate) fn name(&self) -> u32 {
        self.name
    }

    /// The algorithm of the state.
    pub(crate) fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The identifier, when it is inline.
    pub(crate) fn inline_identifier(&self) -> Option<&[u8]> {
        (self.len != SPILLED).then(|| &self.bytes[..usize::from(self.len)])
    }

    /// The number of the spill holding the identifier, when it is not inline.
    pub(crate) fn spill(&self) -> Option<u32> {
        (self.len == SPILLED).then(|| {
            let mut number = [0; SPILL_NUMBER];
            number.copy_from_slice(&self.bytes[..SPILL_NUMBER]);
            u32::from_le_bytes(number)
        })
    }
}

/// A key made of borrowed parts, to look a [`Key`] up without building one.
#[derive(Debug)]
pub(crate) struct KeyRef<'a> {
    name: &'a str,
    identifier: &'a [u8],
    // The stored form, its name's number and spill's number still to be filled in.
    key: Key,
}

impl<'a> KeyRef<'a> {
    /// The key of `name`'s state under `algorithm` for `identifier`.
    #[inline]
    pub(crate) fn new(name: &'a str, algorithm: Algorithm, identifier: &'a [u8]) -> KeyRef<'a> {
        let mut bytes = [0; INLINE_LEN];
        let len = match u8::try_from(identifier.len()) {
            Ok(len) if identifier.len() <= INLINE_LEN => {
                bytes[..identifier.len()].copy_from_slice(identifier);
                len
            }
            _ => {
                let prefix = &identifier[..INLINE_LEN - SPILL_NUMBER];
                bytes[SPILL_NUMBER..].copy_from_slice(prefix);
                SPILLED
            }
        };
        KeyRef {
            name,
            identifier,
            key: Key {
                name: 0,
                algorithm,
                len,
                bytes,
            },
        }
    }

    /// The limit's name.
    pub(crate) fn name(&self) -> &'a str {
        self.name
    }

    /// The algorithm.
    pub(crate) fn algorithm(&self) -> Algorithm {
        self.key.algorithm
    }

    /// The identifier.
    pub(crate) fn identifier(&self) -> &'a [u8] {
        self.identifier
    }

    /// Whether the identifier is stored inline.
    pub(crate) fn is_inline(&self) -> bool {
        self.key.len != SPILLED
    }

    /// The hash of this key under `hasher`: that of its parts, as [`hash_parts`] computes it for
    /// a stored key.
    #[inline]
    pub(crate) fn hash(&self, hasher: &impl BuildHasher) -> u64 {
        hash_parts(hasher, self.name, self.key.algorithm, self.identifier)
    }

    /// The stored key, its name numbered `name` and (for an identifier that is not inline) its
    /// spill numbered `spill`.
    pub(crate) fn stored(&self, name: u32, spill: u32) -> Key {
        let mut key = self.key;
        key.name = name;
        if key.len == SPILLED {
            key.bytes[..SPILL_NUMBER].copy_from_slice(&spill.to_le_bytes());
        }
        key
    }

    /// Whether `stored` is this key, given its name's number `name` in the shard and, for a key
    /// that is not inline, the spilled identifiers by number.
    #[inline]
    pub(crate) fn is<'s>(
        &self,
        name: u32,
        stored: &Key,
        spilled: impl Fn(u32) -> &'s [u8],
    ) -> bool {
        if self.key.len != SPILLED {
            return *stored == self.stored(name, 0);
        }
        stored.name == name
            && stored.algorithm == self.key.algorithm
            && stored.len == SPILLED
            && stored.bytes[SPILL_NUMBER..] == self.key.bytes[SPILL_NUMBER..]
            && stored
                .spill()
                .is_some_and(|n| spilled(n) == self.identifier)
    }
}

/// The hash of a key given by its parts.
#[inline]
pub(crate) fn hash_parts(
    hasher: &impl BuildHasher,
    name: &str,
    algorithm: Algorithm,
    identifier: &[u8],
) -> u64 {
    let mut state = hasher.build_hasher();
    // The name's length first, so no (name, identifier) split of the same bytes collides.
    state.write_u64((name.len() as u64) << 8 | algorithm as u64);
    state.write(name.as_bytes());
    state.write(identifier);
    state.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::key_hasher::KeyHasher;

    /// Spilled identifiers by number, as a shard's spill table gives them.
    fn spills(ids: &[&[u8]]) -> impl Fn(u32) -> &'static [u8] {
        let owned: Vec<&'static [u8]> = ids
            .iter()
            .map(|id| &*Box::leak(id.to_vec().into_boxed_slice()))
            .collect();
        move |n| owned[n as usize]
    }

    #[test]
    fn keys_match_and_hash_as_their_parts_inline_or_spilled() {
        let hasher = KeyHasher::random();
        let long = [7; INLINE_LEN + 1];
        let longer = [0xff; 300];
        let ids: [&[u8]; 6] = [b"", b"\0", b"203.0.113.7", &[7; INLINE_LEN], &long, &longer];
        let spilled = spills(&ids);
        for (n, id) in ids.iter().enumerate() {
            let key = KeyRef::new("per-ip", Algorithm::Gcra, id).stored(3, n as u32);
            assert!(KeyRef::new("per-ip", Algorithm::Gcra, id).is(3, &key, &spilled));
            assert!(!KeyRef::new("per-ip", Algorithm::Gcra, id).is(4, &key, &spilled));
            assert!(!KeyRef::new("per-ip", Algorithm::TokenBucket, id).is(3, &key, &spilled));
            let longer_id = [*id, b"x"].concat();
            assert!(!KeyRef::new("per-ip", Algorithm::Gcra, &longer_id).is(3, &key, &spilled));
            for other in ids.iter().filter(|o| *o != id) {
                assert!(!KeyRef::new("per-ip", Algorithm::Gcra, other).is(3, &key, &spilled));
            }
            assert_eq!(key.inline_identifier().is_some(), id.len() <= INLINE_LEN);
            let identifier = key
                .inline_identifier()
                .unwrap_or_else(|| spilled(key.spill().unwrap()));
            assert_eq!(identifier, *id);
            assert_eq!(
                hash_parts(&hasher, "per-ip", key.algorithm(), identifier),
                KeyRef::new("per-ip", Algorithm::Gcra, id).hash(&hasher)
            );
        }
        // Two long identifiers sharing their first bytes differ by their spills.
        let a = [[1u8; 30].as_slice(), b"a"].concat();
        let b = [[1u8; 30].as_slice(), b"b"].concat();
        let spilled = spills(&[&a, &b]);
        let key_a = KeyRef::new("l", Algorithm::Gcra, &a).stored(0, 0);
        assert!(KeyRef::new("l", Algorithm::Gcra, &a).is(0, &key_a, &spilled));
        assert!(!KeyRef::new("l", Algorithm::Gcra, &b).is(0, &key_a, &spilled));
        assert_ne!(
            KeyRef::new("ab", Algorithm::Gcra, b"c").hash(&hasher),
            KeyRef::new("a", Algorithm::Gcra, b"bc").hash(&hasher)
        );
    }

    #[test]
    fn every_algorithm_round_trips_through_a_spilled_key() {
        let long = [b'x'; INLINE_LEN + 1];
        let spilled = spills(&[&long]);
        for a in Algorithm::EVERY {
            let key = KeyRef::new("l", a, &long).stored(9, 0);
            assert_eq!(key.algorithm(), a);
            assert_eq!(key.name(), 9);
            assert_eq!(key.spill(), Some(0));
            assert!(KeyRef::new("l", a, &long).is(9, &key, &spilled));
        }
    }

    #[test]
    fn a_key_is_thirty_two_bytes() {
        assert_eq!(std::mem::size_of::<Key>(), 32);
    }
}
