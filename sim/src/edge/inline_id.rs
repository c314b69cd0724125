//! Identifiers as hash-map keys that hold their bytes inline when short (any IPv4 address, short
//! ids) or when they are a SHA-256 in lower-case hex (a hashed API key: its 32 bytes, decoded):
//! comparing two such keys then reads no heap allocation, one cache miss fewer per lookup in the
//! replay's maps of 100,000s of identifiers (an `Identifier` is an `Arc`, whose bytes live apart
//! from the map's slot). Other long identifiers stay shared.

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
    /// 64 lower-case hex digits (the Worker's `api-key:` identifiers): the 32 bytes they spell,
    /// in little-endian words. Decoding lower-case hex is one to one, so equal words mean equal
    /// identifiers, and no identifier of another variant can have them.
    Hex {
        /// The decoded bytes.
        words: [u64; 4],
    },
    /// Long: the identifier itself, shared, not copied.
    Shared(Identifier),
}

/// Whether `c` is a lower-case hex digit.
fn is_lower_hex(c: u8) -> bool {
    c.is_ascii_digit() | (b'a'..=b'f').contains(&c)
}

/// The 32 bytes 64 lower-case hex digits spell, as little-endian words. Checked and decoded
/// without a branch per digit (a `0`–`9` or `a`–`f` digit's value is its low nibble, plus 9 for
/// a letter, whose bit 6 is set).
fn decode_hex(b: &[u8]) -> Option<[u64; 4]> {
    if b.len() != 64 || !b.iter().fold(true, |all, &c| all & is_lower_hex(c)) {
        return None;
    }
    let value = |c: u8| (c & 0x0f) + 9 * (c >> 6);
    let mut words = [0u64; 4];
    for (word, digits) in words.iter_mut().zip(b.chunks_exact(16)) {
        let mut bytes = [0u8; 8];
        for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
            *byte = value(pair[0]) << 4 | value(pair[1]);
        }
        *word = u64::from_le_bytes(bytes);
    }
    Some(words)
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
        } else if let Some(words) = decode_hex(b) {
            InlineId::Hex { words }
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
        // Hex digests: decoded, and still equal exactly when the text is.
        let digest = "0123456789abcdef".repeat(4);
        assert!(matches!(k(&digest), InlineId::Hex { .. }));
        assert_eq!(k(&digest), k(&digest.clone()));
        let other = format!("{}e", &digest[..63]);
        assert_ne!(k(&digest), k(&other));
        // Upper case is not what the Worker writes: kept as text, so never equal to lower case.
        let upper = digest.to_uppercase();
        assert!(matches!(k(&upper), InlineId::Shared(_)));
        assert_ne!(k(&digest), k(&upper));
        // Every digit decodes to its value: distinct digests stay distinct.
        for (i, d) in "0123456789abcdef".chars().enumerate() {
            let one = format!("{}{d}", "0".repeat(63));
            match k(&one) {
                InlineId::Hex { words } => assert_eq!(words[3] >> 56, i as u64, "{d}"),
                other => panic!("{d}: {other:?}"),
            }
        }
        for bad in ['g', '/', ':', '`', 'G', 'A'] {
            assert!(matches!(
                k(&format!("{}{bad}", "0".repeat(63))),
                InlineId::Shared(_)
            ));
        }
        // 32 raw bytes and the 64 digits spelling them are different identifiers.
        let raw: Vec<u8> = (0..32).map(|i| i as u8 * 7).collect();
        let spelled: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        assert_ne!(InlineId::of(&Identifier::from(&raw[..])), k(&spelled),);
        assert_ne!(k(&long), k(&"x".repeat(65)));
        assert_ne!(k(""), k("\0"));
    }
}
