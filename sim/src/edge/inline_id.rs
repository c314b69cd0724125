//! Identifiers as hash-map keys that hold their bytes inline when short (any IPv4 address, short
//! ids; a hashed API key's hex digest does not fit and stays shared): comparing two short keys then
//! reads no heap allocation, one cache miss fewer per lookup in the replay's maps of 100,000s of
//! identifiers (an `Identifier` is an `Arc`, whose bytes live apart from the map's slot).

use edgelimit::Identifier;

/// Identifiers up to this many bytes are held inline, as four words: comparing and hashing them
/// are then a few word operations, not a call to `memcmp`.
const INLINE_LEN: usize = 32;

/// An identifier's bytes as a map key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum InlineId {
    /// Short: the bytes in little-endian words, zero past `len` (so equal words mean equal
    /// identifiers).
    Inline {
        /// How many bytes.
        len: u8,
        /// The bytes.
        words: [u64; INLINE_LEN / 8],
    },
    /// Long (a hashed API key's hex digest): the identifier itself, shared, not copied.
    Shared(Identifier),
}

impl InlineId {
    /// The key of `identifier`.
    #[inline]
    pub fn of(identifier: &Identifier) -> InlineId {
        let b = identifier.as_bytes();
        if b.len() <= INLINE_LEN {
            let mut bytes = [0; INLINE_LEN];
            bytes[..b.len()].copy_from_slice(b);
            let mut words = [0u64; INLINE_LEN / 8];
            for (word, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
                *word = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            }
            InlineId::Inline {
                len: b.len() as u8,
                words,
            }
        } else {
            InlineId::Shared(identifier.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_exactly_when_the_bytes_are() {
        let k = |s: &str| InlineId::of(&Identifier::from(s));
        assert_eq!(k("10.0.0.1"), k("10.0.0.1"));
        assert_ne!(k("10.0.0.1"), k("10.0.0.10"));
        // A trailing NUL is a byte like any other, not padding.
        assert_ne!(k("a"), k("a\0"));
        assert_ne!(k(&"y".repeat(32)), k(&"y".repeat(31)));
        assert_ne!(k(&"y".repeat(32)), k(&format!("{}z", "y".repeat(31))));
        let long = "x".repeat(64);
        assert_eq!(k(&long), k(&long));
        assert_ne!(k(&long), k(&"x".repeat(65)));
        assert_ne!(k(""), k("\0"));
    }
}
