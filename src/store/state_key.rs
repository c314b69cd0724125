//! The key of a state in [`super::MemoryStore`]: (limit name, algorithm, identifier), as the
//! Redis key is, with short identifiers kept inline.
//!
//! The identifier bytes sit inside the key, and so inside the hash table's slot, up to
//! [`INLINE_LEN`] bytes (any IPv4 address, most IPv6 ones, short ids): a lookup then compares
//! them without following a pointer, one cache miss fewer per decision in a map of millions.
//! Longer identifiers are boxed. A lookup needs no key at all, only the borrowed parts: no
//! allocation unless a new state is stored.

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
        bytes: [u8; INLINE_LEN],
    },
    Boxed(Box<[u8]>),
}

impl StateKey {
    /// The key of `name`'s state under `algorithm` for `identifier`.
    pub(crate) fn new(name: &Arc<str>, algorithm: Algorithm, identifier: &[u8]) -> StateKey {
        let id = match u8::try_from(identifier.len()) {
            Ok(len) if identifier.len() <= INLINE_LEN => {
                let mut bytes = [0; INLINE_LEN];
                bytes[..identifier.len()].copy_from_slice(identifier);
                Id::Inline {
                    algorithm,
                    len,
                    bytes,
                }
            }
            _ => Id::Boxed([&[algorithm as u8], identifier].concat().into()),
        };
        StateKey {
            name: name.clone(),
            id,
        }
    }

    fn algorithm(&self) -> Algorithm {
        match &self.id {
            Id::Inline { algorithm, .. } => *algorithm,
            Id::Boxed(bytes) => Algorithm::ALL[usize::from(bytes[0])],
        }
    }

    fn identifier(&self) -> &[u8] {
        match &self.id {
            Id::Inline { len, bytes, .. } => &bytes[..usize::from(*len)],
            Id::Boxed(bytes) => &bytes[1..],
        }
    }

    /// Whether this is the key of these parts.
    #[inline]
    pub(crate) fn is(&self, name: &str, algorithm: Algorithm, identifier: &[u8]) -> bool {
        self.algorithm() == algorithm
            && self.identifier() == identifier
            // Keys of one limit share its name's allocation: compare addresses before bytes.
            && (std::ptr::eq(self.name.as_ptr(), name.as_ptr()) && self.name.len() == name.len()
                || *self.name == *name)
    }
}

impl std::hash::Hash for StateKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        write_parts(state, &self.name, self.algorithm(), self.identifier());
    }
}

/// The hash of the key of these parts under `hasher`: that of the [`StateKey`] they make.
#[inline]
pub(crate) fn hash_parts(
    hasher: &impl BuildHasher,
    name: &str,
    algorithm: Algorithm,
    identifier: &[u8],
) -> u64 {
    let mut state = hasher.build_hasher();
    write_parts(&mut state, name, algorithm, identifier);
    state.finish()
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
        for id in [
            &b""[..],
            b"203.0.113.7",
            &[7; INLINE_LEN],
            &[7; INLINE_LEN + 1],
            &[0xff; 300],
        ] {
            let key = StateKey::new(&name, Algorithm::Gcra, id);
            assert!(key.is("per-ip", Algorithm::Gcra, id));
            assert!(key.is(&other_alloc, Algorithm::Gcra, id));
            assert!(!key.is("per-ip", Algorithm::TokenBucket, id));
            assert!(!key.is("per-ipx", Algorithm::Gcra, id));
            assert!(!key.is("per-ip", Algorithm::Gcra, &[id, b"x"].concat()));
            assert_eq!(
                hasher.hash_one(&key),
                hash_parts(&hasher, "per-ip", Algorithm::Gcra, id)
            );
        }
        assert_ne!(
            hash_parts(&hasher, "ab", Algorithm::Gcra, b"c"),
            hash_parts(&hasher, "a", Algorithm::Gcra, b"bc")
        );
    }

    #[test]
    fn algorithms_round_trip_through_their_byte() {
        for a in Algorithm::ALL {
            assert_eq!(Algorithm::ALL[a as usize], a);
        }
    }

    #[test]
    fn a_key_is_forty_bytes() {
        assert_eq!(std::mem::size_of::<StateKey>(), 40);
    }
}
