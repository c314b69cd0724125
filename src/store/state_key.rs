//! The key of a state in [`super::MemoryStore`]: (limit name, algorithm, identifier), as the
//! Redis key is, with short identifiers kept inline.
//!
//! The identifier bytes sit inside the key, and so inside the hash table's slot, up to
//! [`INLINE_LEN`] bytes (any IPv4 address in text, short IPv6 ones, short ids): a lookup then
//! compares them without following a pointer, one cache miss fewer per decision in a map of
//! millions, and as a fixed-size array rather than through `memcmp`. Longer identifiers are
//! boxed. A lookup builds a [`KeyRef`] on the stack from borrowed parts: no allocation unless a
//! new state is stored.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use crate::policy::Algorithm;

/// Identifiers up to this many bytes are stored inline.
pub(crate) const INLINE_LEN: usize = 22;

/// An owned state key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StateKey {
    name: Arc<str>,
    id: Id,
}

// The algorithm rides in the identifier's spare bytes (the first boxed byte when boxed), and the
// inline form's algorithm doubles as the enum's tag, so the key is 40 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Id {
    Inline {
        algorithm: Algorithm,
        len: u8,
        // Zero past `len`, so two inline ids are equal exactly when their arrays are.
        bytes: [u8; INLINE_LEN],
    },
    Boxed(Box<[u8]>),
}

/// A key made of borrowed parts, to look a [`StateKey`] up without building one.
#[derive(Debug)]
pub(crate) struct KeyRef<'a> {
    name: &'a str,
    algorithm: Algorithm,
    identifier: &'a [u8],
    // The inline form of the identifier, when it has one.
    inline: Option<(u8, [u8; INLINE_LEN])>,
}

impl<'a> KeyRef<'a> {
    /// The key of `name`'s state under `algorithm` for `identifier`.
    #[inline]
    pub(crate) fn new(name: &'a str, algorithm: Algorithm, identifier: &'a [u8]) -> KeyRef<'a> {
        let inline = match u8::try_from(identifier.len()) {
            Ok(len) if identifier.len() <= INLINE_LEN => {
                let mut bytes = [0; INLINE_LEN];
                bytes[..identifier.len()].copy_from_slice(identifier);
                Some((len, bytes))
            }
            _ => None,
        };
        KeyRef {
            name,
            algorithm,
            identifier,
            inline,
        }
    }

    /// The hash of this key under `hasher`: that of the [`StateKey`] it makes.
    #[inline]
    pub(crate) fn hash(&self, hasher: &impl BuildHasher) -> u64 {
        let mut state = hasher.build_hasher();
        write_parts(&mut state, self.name, self.algorithm, self.identifier);
        state.finish()
    }

    /// The owned key, sharing `name`'s allocation (which must hold this key's name).
    pub(crate) fn to_owned(&self, name: &Arc<str>) -> StateKey {
        debug_assert_eq!(**name, *self.name);
        let id = match self.inline {
            Some((len, bytes)) => Id::Inline {
                algorithm: self.algorithm,
                len,
                bytes,
            },
            None => Id::Boxed([&[self.algorithm as u8], self.identifier].concat().into()),
        };
        StateKey {
            name: name.clone(),
            id,
        }
    }
}

impl StateKey {
    fn algorithm(&self) -> Algorithm {
        match &self.id {
            Id::Inline { algorithm, .. } => *algorithm,
            Id::Boxed(bytes) => Algorithm::EVERY[usize::from(bytes[0])],
        }
    }

    fn identifier(&self) -> &[u8] {
        match &self.id {
            Id::Inline { len, bytes, .. } => &bytes[..usize::from(*len)],
            Id::Boxed(bytes) => &bytes[1..],
        }
    }

    /// Whether this is the key `key` describes.
    #[inline]
    pub(crate) fn is(&self, key: &KeyRef<'_>) -> bool {
        let same_id = match (&self.id, &key.inline) {
            (
                Id::Inline {
                    algorithm,
                    len,
                    bytes,
                },
                Some((key_len, key_bytes)),
            ) => *algorithm == key.algorithm && len == key_len && bytes == key_bytes,
            (Id::Boxed(bytes), None) => {
                bytes[0] == key.algorithm as u8 && bytes[1..] == *key.identifier
            }
            _ => false,
        };
        same_id
            // Keys of one limit share its name's allocation: compare addresses before bytes.
            && (std::ptr::eq(self.name.as_ptr(), key.name.as_ptr())
                && self.name.len() == key.name.len()
                || *self.name == *key.name)
    }
}

impl std::hash::Hash for StateKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        write_parts(state, &self.name, self.algorithm(), self.identifier());
    }
}

#[inline]
fn write_parts(state: &mut impl Hasher, name: &str, algorithm: Algorithm, identifier: &[u8]) {
    // The name's length first, so no (name, identifier) split of the same bytes collides.
    state.write_u64((name.len() as u64) << 8 | algorithm as u64);
    state.write(name.as_bytes());
    state.write(identifier);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::key_hasher::KeyHasher;

    #[test]
    fn keys_match_and_hash_as_their_parts_inline_or_boxed() {
        let hasher = KeyHasher::random();
        let name: Arc<str> = Arc::from("per-ip");
        let other_alloc: Arc<str> = Arc::from("per-ip");
        let ids: [&[u8]; 6] = [
            b"",
            b"\0",
            b"203.0.113.7",
            &[7; INLINE_LEN],
            &[7; INLINE_LEN + 1],
            &[0xff; 300],
        ];
        for id in ids {
            let key = KeyRef::new("per-ip", Algorithm::Gcra, id).to_owned(&name);
            assert!(key.is(&KeyRef::new("per-ip", Algorithm::Gcra, id)));
            assert!(key.is(&KeyRef::new(&other_alloc, Algorithm::Gcra, id)));
            assert!(!key.is(&KeyRef::new("per-ip", Algorithm::TokenBucket, id)));
            assert!(!key.is(&KeyRef::new("per-ipx", Algorithm::Gcra, id)));
            let longer = [id, b"x"].concat();
            assert!(!key.is(&KeyRef::new("per-ip", Algorithm::Gcra, &longer)));
            for other in ids.iter().filter(|o| **o != id) {
                assert!(!key.is(&KeyRef::new("per-ip", Algorithm::Gcra, other)));
            }
            assert_eq!(
                hasher.hash_one(&key),
                KeyRef::new("per-ip", Algorithm::Gcra, id).hash(&hasher)
            );
        }
        assert_ne!(
            KeyRef::new("ab", Algorithm::Gcra, b"c").hash(&hasher),
            KeyRef::new("a", Algorithm::Gcra, b"bc").hash(&hasher)
        );
    }

    #[test]
    fn every_algorithm_round_trips_through_a_boxed_key() {
        let hasher = KeyHasher::random();
        let name: Arc<str> = Arc::from("l");
        let long = [b'x'; INLINE_LEN + 1];
        for a in Algorithm::EVERY {
            // A boxed key keeps its algorithm as a byte and reads it back to hash and compare.
            let key = KeyRef::new("l", a, &long).to_owned(&name);
            assert_eq!(key.algorithm(), a);
            assert!(key.is(&KeyRef::new("l", a, &long)));
            assert_eq!(
                hasher.hash_one(&key),
                KeyRef::new("l", a, &long).hash(&hasher)
            );
        }
    }

    #[test]
    fn a_key_is_forty_bytes() {
        assert_eq!(std::mem::size_of::<StateKey>(), 40);
    }
}
