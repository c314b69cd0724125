//! Redis keys: `{el:<namespace>:<limit>:<identifier>}:<algorithm>`.
//!
//! The braces are a Redis Cluster hash tag: every key of one (limit, identifier) lands in one
//! slot, so a script may touch them together. Names and identifiers are escaped so that no input
//! can contain `{`, `}` or `:` — no identifier can forge another's key or hash tag — and long
//! identifiers are replaced by their SHA-256, so a 10 KB header costs a 64-byte key.

use sha2::{Digest, Sha256};

use super::check::Identifier;
use crate::policy::Algorithm;

/// The namespace keys live under unless a store is told otherwise — the same for every store and
/// the Worker, so a native service and the Worker sharing one Redis share their counters.
pub const DEFAULT_NAMESPACE: &str = "edgelimit";

/// Escaped identifiers longer than this are hashed instead.
const MAX_ESCAPED_LEN: usize = 128;

/// Appends `bytes` escaped: `[A-Za-z0-9._~-]` as is, every other byte as `%XX`.
fn escape_into(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-') {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 15) as usize] as char);
        }
    }
}

/// The escaped form of an identifier, or `#` and its SHA-256 when long. `#` is never produced by
/// escaping, so hashed and escaped forms cannot collide.
pub fn encode_identifier(identifier: &Identifier) -> String {
    let bytes = identifier.as_bytes();
    let mut out = String::with_capacity(bytes.len() + 8);
    escape_into(&mut out, bytes);
    if out.len() <= MAX_ESCAPED_LEN {
        return out;
    }
    out.clear();
    out.push('#');
    for b in Sha256::digest(bytes) {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// `{el:<namespace>:<limit>:<identifier>}`: the hash tag every key of one (limit, identifier)
/// starts with, so that all of them land in one Cluster slot.
fn hash_tag(namespace: &str, limit_name: &str, identifier: &Identifier) -> String {
    let mut key = String::from("{el:");
    escape_into(&mut key, namespace.as_bytes());
    key.push(':');
    escape_into(&mut key, limit_name.as_bytes());
    key.push(':');
    key.push_str(&encode_identifier(identifier));
    key.push('}');
    key
}

/// The key holding the state of `limit_name` for `identifier` under `namespace`.
pub fn state_key(
    namespace: &str,
    limit_name: &str,
    algorithm: Algorithm,
    identifier: &Identifier,
) -> String {
    let mut key = hash_tag(namespace, limit_name, identifier);
    key.push(':');
    key.push_str(algorithm.as_str());
    key
}

/// The key remembering the decision for `request_id` on `limit_name` for `identifier`: beside
/// the state key, in the same hash tag (so one script reads both, on a Cluster too), and without
/// the algorithm, since a request is the same request whatever the policy.
pub fn request_key(
    namespace: &str,
    limit_name: &str,
    identifier: &Identifier,
    request_id: &Identifier,
) -> String {
    let mut key = hash_tag(namespace, limit_name, identifier);
    key.push_str(":rq:");
    key.push_str(&encode_identifier(request_id));
    key
}

/// The key holding the [`crate::control::Assignment`] of `identifier` on `limit_name` (its tier
/// or override): `{el:<ns>:<limit>:<id>}:ctl`, in the state's hash tag so the deciding script
/// reads it in the same slot and round trip, and without the algorithm, since an assignment
/// outlives a change of the limit's policy.
pub fn control_key(namespace: &str, limit_name: &str, identifier: &Identifier) -> String {
    let mut key = hash_tag(namespace, limit_name, identifier);
    key.push_str(":ctl");
    key
}

/// The key of the deny or allow list `list` under `namespace`: `{el:<namespace>:list:<list>}`, a
/// sorted set of entry members scored by the epoch ms they lapse at. The whole key is its hash
/// tag: a list lives in its own Cluster slot, and cannot collide with a state key (those carry
/// a suffix after the tag).
pub fn list_key(namespace: &str, list: &str) -> String {
    let mut key = String::from("{el:");
    escape_into(&mut key, namespace.as_bytes());
    key.push_str(":list:");
    escape_into(&mut key, list.as_bytes());
    key.push('}');
    key
}

/// The Redis Cluster hash slot of a key (CRC16/XMODEM of its hash tag, mod 16384).
pub fn hash_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(bytes);
    crc16_xmodem(tagged) % 16384
}

fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_identifiers_cannot_forge_keys_or_tags() {
        let ids: Vec<Identifier> = vec![
            "a".into(),
            "a}:gcra".into(),
            "{a}".into(),
            "a:b".into(),
            "a%3Ab".into(),
            "*".into(),
            "line\nbreak".into(),
            "x".repeat(10_000).into(),
            "x".repeat(10_001).into(),
            vec![0u8, 255, 123, 125].into(),
            "ü".into(),
        ];
        let keys: Vec<String> = ids
            .iter()
            .map(|id| state_key("ns", "per-ip", Algorithm::Gcra, id))
            .collect();
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(key.matches('{').count(), 1, "{key}");
            assert_eq!(key.matches('}').count(), 1, "{key}");
            assert!(key.len() < 200, "{key}");
            assert!(key.is_ascii());
            for other in &keys[i + 1..] {
                assert_ne!(key, other);
            }
        }
    }

    #[test]
    fn hash_slots_match_redis_reference_values() {
        // Values from the Redis Cluster specification's test vectors (CLUSTER KEYSLOT).
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
        assert_eq!(hash_slot("foo"), 12182);
        assert_eq!(
            hash_slot("{user1000}.following"),
            hash_slot("{user1000}.followers")
        );
        assert_eq!(hash_slot("foo{}{bar}"), hash_slot("foo{}{bar}"));
        assert_eq!(hash_slot("{}x"), crc16_xmodem(b"{}x") % 16384);
    }
}
