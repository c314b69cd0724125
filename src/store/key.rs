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

/// Whether `b` stands for itself in a key: `[A-Za-z0-9._~-]`; every other byte is escaped.
fn is_unreserved(b: u8) -> bool {
    UNRESERVED[usize::from(b)]
}

/// [`is_unreserved`] for every byte: a key is written on every decision, a byte at a time.
const UNRESERVED: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let byte = b as u8;
        table[b] = byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'~' | b'-');
        b += 1;
    }
    table
};

/// Appends `bytes` escaped: unreserved bytes ([`is_unreserved`]) as is, every other as `%XX`.
fn escape_into(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut rest = bytes;
    loop {
        // Most names and identifiers escape nothing: runs of unreserved bytes go in whole.
        let plain = rest
            .iter()
            .position(|&b| !is_unreserved(b))
            .unwrap_or(rest.len());
        out.push_str(std::str::from_utf8(&rest[..plain]).expect("unreserved bytes are ASCII"));
        let Some((&b, after)) = rest[plain..].split_first() else {
            return;
        };
        out.push('%');
        out.push(HEX[usize::from(b >> 4)] as char);
        out.push(HEX[usize::from(b & 15)] as char);
        rest = after;
    }
}

/// The escaped form of an identifier, or `#` and its SHA-256 when long. `#` is never produced by
/// escaping, so hashed and escaped forms cannot collide.
pub fn encode_identifier(identifier: &Identifier) -> String {
    let mut out = String::with_capacity(identifier.as_bytes().len().min(MAX_ESCAPED_LEN) + 8);
    push_identifier(&mut out, identifier);
    out
}

/// The identifier an [`encode_identifier`] form stands for: `%XX` → the byte, other bytes as
/// they are. A hashed form (`#` and a SHA-256) cannot be undone and stays as written — distinct
/// from every other identifier's form, which is all a replay of logged keys needs.
pub fn decode_identifier(encoded: &str) -> Identifier {
    let bytes = encoded.as_bytes();
    if bytes.first() == Some(&b'#') {
        return Identifier::from(bytes);
    }
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push(hi << 4 | lo);
                i += 3;
            }
            (b, ..) => {
                out.push(b);
                i += 1;
            }
        }
    }
    Identifier::from(out)
}

/// Appends [`encode_identifier`]'s form of `identifier` to `out`: keys are written in place, into
/// the one buffer of a script call, rather than each identifier into a `String` of its own.
fn push_identifier(out: &mut String, identifier: &Identifier) {
    let bytes = identifier.as_bytes();
    let start = out.len();
    // Every byte escapes to at least one character: a longer identifier is hashed whatever it
    // holds, without escaping it first.
    if bytes.len() <= MAX_ESCAPED_LEN {
        escape_into(out, bytes);
        if out.len() - start <= MAX_ESCAPED_LEN {
            return;
        }
        out.truncate(start);
    }
    out.push('#');
    out.push_str(std::str::from_utf8(&sha256_hex(bytes)).expect("hex digits are ASCII"));
}

/// The SHA-256 of `bytes` in lower-case hex, on the stack: how a long identifier appears in its
/// keys (after `#`), and how the Worker keys an `api-key:` source and matches it in lists — one
/// writer for both, so they cannot come to spell a digest differently.
pub fn sha256_hex(bytes: &[u8]) -> [u8; 64] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 64];
    for (pair, b) in out.chunks_exact_mut(2).zip(Sha256::digest(bytes)) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 15)];
    }
    out
}

/// Appends `{el:<namespace>:<limit>:<identifier>}`: the hash tag every key of one (limit,
/// identifier) starts with, so that all of them land in one Cluster slot.
fn push_hash_tag(out: &mut String, namespace: &str, limit_name: &str, identifier: &Identifier) {
    out.push_str("{el:");
    escape_into(out, namespace.as_bytes());
    out.push(':');
    escape_into(out, limit_name.as_bytes());
    out.push(':');
    push_identifier(out, identifier);
    out.push('}');
}

/// The key holding the state of `limit_name` for `identifier` under `namespace`.
pub fn state_key(
    namespace: &str,
    limit_name: &str,
    algorithm: Algorithm,
    identifier: &Identifier,
) -> String {
    let mut key = String::new();
    push_state_key(&mut key, namespace, limit_name, algorithm, identifier);
    key
}

/// Appends [`state_key`] to `out` (a script call's buffer of keys and arguments, or a `String`).
pub(crate) fn push_state_key(
    out: &mut String,
    namespace: &str,
    limit_name: &str,
    algorithm: Algorithm,
    identifier: &Identifier,
) {
    push_hash_tag(out, namespace, limit_name, identifier);
    out.push(':');
    out.push_str(algorithm.as_str());
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
    let mut key = String::new();
    push_request_key(&mut key, namespace, limit_name, identifier, request_id);
    key
}

/// Appends [`request_key`] to `out`, as [`push_state_key`] does.
pub(crate) fn push_request_key(
    out: &mut String,
    namespace: &str,
    limit_name: &str,
    identifier: &Identifier,
    request_id: &Identifier,
) {
    push_hash_tag(out, namespace, limit_name, identifier);
    out.push_str(":rq:");
    push_identifier(out, request_id);
}

/// The key holding the [`crate::control::Assignment`] of `identifier` on `limit_name` (its tier
/// or override): `{el:<ns>:<limit>:<id>}:ctl`, in the state's hash tag so the deciding script
/// reads it in the same slot and round trip, and without the algorithm, since an assignment
/// outlives a change of the limit's policy.
pub fn control_key(namespace: &str, limit_name: &str, identifier: &Identifier) -> String {
    let mut key = String::new();
    push_control_key(&mut key, namespace, limit_name, identifier);
    key
}

/// Appends [`control_key`] to `out`, as [`push_state_key`] does.
pub(crate) fn push_control_key(
    out: &mut String,
    namespace: &str,
    limit_name: &str,
    identifier: &Identifier,
) {
    push_hash_tag(out, namespace, limit_name, identifier);
    out.push_str(":ctl");
}

/// The key holding the capacity lease of `identifier` on `limit_name` (docs/design.md §9):
/// `{el:<ns>:<limit>:<id>}:lease`, `"<balance> <until_ms>"`, in the state's hash tag so the
/// deciding script spends it in the same slot and round trip, and without the algorithm, as the
/// units granted are the limit's whatever its policy.
pub fn lease_key(namespace: &str, limit_name: &str, identifier: &Identifier) -> String {
    let mut key = String::new();
    push_lease_key(&mut key, namespace, limit_name, identifier);
    key
}

/// Appends [`lease_key`] to `out`, as [`push_state_key`] does.
pub(crate) fn push_lease_key(
    out: &mut String,
    namespace: &str,
    limit_name: &str,
    identifier: &Identifier,
) {
    push_hash_tag(out, namespace, limit_name, identifier);
    out.push_str(":lease");
}

/// The key holding the end of `identifier`'s block on `limit_name` (docs/design.md §2,
/// "Blocks"): `{el:<ns>:<limit>:<id>}:block`, `"<until_ms>"`, in the state's hash tag so the
/// deciding script reads and writes it in the same slot and round trip; without the algorithm,
/// as a block is the limit's whatever its policy.
pub fn block_key(namespace: &str, limit_name: &str, identifier: &Identifier) -> String {
    let mut key = String::new();
    push_block_key(&mut key, namespace, limit_name, identifier);
    key
}

/// Appends [`block_key`] to `out`, as [`push_state_key`] does.
pub(crate) fn push_block_key(
    out: &mut String,
    namespace: &str,
    limit_name: &str,
    identifier: &Identifier,
) {
    push_hash_tag(out, namespace, limit_name, identifier);
    out.push_str(":block");
}

/// The key of the deny or allow list `list` under `namespace`: `{el:<namespace>:list:<list>}`, a
/// sorted set of entry members scored by the epoch ms they lapse at. The whole key is its hash
/// tag: a list lives in its own Cluster slot, and cannot collide with a state key (those carry
/// a suffix after the tag).
pub fn list_key(namespace: &str, list: &str) -> String {
    let mut key = String::new();
    push_list_key(&mut key, namespace, list);
    key
}

/// Appends [`list_key`] to `out`, as [`push_state_key`] does.
pub(crate) fn push_list_key(out: &mut String, namespace: &str, list: &str) {
    out.push_str("{el:");
    escape_into(out, namespace.as_bytes());
    out.push_str(":list:");
    escape_into(out, list.as_bytes());
    out.push('}');
}

/// The length [`escape_into`] gives `bytes`.
fn escaped_len(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .map(|&b| if is_unreserved(b) { 1 } else { 3 })
        .sum()
}

/// The length of [`encode_identifier`]'s form, without writing it (nor hashing a long one).
fn identifier_len(identifier: &Identifier) -> usize {
    let bytes = identifier.as_bytes();
    if bytes.len() <= MAX_ESCAPED_LEN {
        let escaped = escaped_len(bytes);
        if escaped <= MAX_ESCAPED_LEN {
            return escaped;
        }
    }
    "#".len() + 64 // the SHA-256 in hex
}

fn hash_tag_len(namespace: &str, limit_name: &str, identifier: &Identifier) -> usize {
    "{el:::}".len()
        + escaped_len(namespace.as_bytes())
        + escaped_len(limit_name.as_bytes())
        + identifier_len(identifier)
}

/// The length of [`state_key`], computed without writing it: a script call reserves its
/// buffer's room at once from such lengths.
pub(crate) fn state_key_len(
    namespace: &str,
    limit_name: &str,
    algorithm: Algorithm,
    identifier: &Identifier,
) -> usize {
    hash_tag_len(namespace, limit_name, identifier) + 1 + algorithm.as_str().len()
}

/// The length of [`request_key`], as [`state_key_len`].
pub(crate) fn request_key_len(
    namespace: &str,
    limit_name: &str,
    identifier: &Identifier,
    request_id: &Identifier,
) -> usize {
    hash_tag_len(namespace, limit_name, identifier) + ":rq:".len() + identifier_len(request_id)
}

/// The length of [`control_key`], as [`state_key_len`].
pub(crate) fn control_key_len(namespace: &str, limit_name: &str, identifier: &Identifier) -> usize {
    hash_tag_len(namespace, limit_name, identifier) + ":ctl".len()
}

/// The length of [`lease_key`], as [`state_key_len`].
pub(crate) fn lease_key_len(namespace: &str, limit_name: &str, identifier: &Identifier) -> usize {
    hash_tag_len(namespace, limit_name, identifier) + ":lease".len()
}

/// The length of [`block_key`], as [`state_key_len`].
pub(crate) fn block_key_len(namespace: &str, limit_name: &str, identifier: &Identifier) -> usize {
    hash_tag_len(namespace, limit_name, identifier) + ":block".len()
}

/// The length of [`list_key`], as [`state_key_len`].
pub(crate) fn list_key_len(namespace: &str, list: &str) -> usize {
    "{el::list:}".len() + escaped_len(namespace.as_bytes()) + escaped_len(list.as_bytes())
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
    fn identifiers_decode_to_what_was_encoded() {
        for raw in ["alice", "2001:db8::7", "a b/ü", "", "%41", "100%", "%zz"] {
            let id = Identifier::from(raw);
            assert_eq!(decode_identifier(&encode_identifier(&id)), id, "{raw}");
        }
        let long = Identifier::from("é".repeat(100));
        let hashed = encode_identifier(&long);
        assert!(hashed.starts_with('#'));
        assert_eq!(decode_identifier(&hashed).as_bytes(), hashed.as_bytes());
    }

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
    fn key_lengths_are_the_lengths_of_the_keys() {
        let names = ["", "ns", "per ip", "a:b{}", "ü", &"n".repeat(200)];
        let ids: Vec<Identifier> = vec![
            "".into(),
            "198.51.100.7".into(),
            "2001:db8::1".into(),
            "x".repeat(128).into(),
            "x".repeat(129).into(),
            ":".repeat(42).into(),
            ":".repeat(43).into(),
            vec![0u8, 255, 123, 125].into(),
        ];
        for ns in names {
            for name in names {
                assert_eq!(list_key_len(ns, name), list_key(ns, name).len());
                for id in &ids {
                    for algorithm in Algorithm::EVERY {
                        assert_eq!(
                            state_key_len(ns, name, algorithm, id),
                            state_key(ns, name, algorithm, id).len()
                        );
                    }
                    assert_eq!(
                        control_key_len(ns, name, id),
                        control_key(ns, name, id).len()
                    );
                    assert_eq!(lease_key_len(ns, name, id), lease_key(ns, name, id).len());
                    let lease = lease_key(ns, name, id);
                    assert_eq!(
                        hash_slot(&lease),
                        hash_slot(&state_key(ns, name, Algorithm::Gcra, id)),
                        "a lease lives in its state's slot"
                    );
                    for rq in &ids {
                        assert_eq!(
                            request_key_len(ns, name, id, rq),
                            request_key(ns, name, id, rq).len()
                        );
                    }
                    assert_eq!(identifier_len(id), encode_identifier(id).len());
                }
            }
        }
    }

    #[test]
    fn long_identifiers_are_hashed_in_lowercase_hex() {
        let long: Identifier = "x".repeat(129).into();
        let mut expected = String::from("#");
        for b in Sha256::digest(long.as_bytes()) {
            expected.push_str(&format!("{b:02x}"));
        }
        assert_eq!(encode_identifier(&long), expected);
        let escaped_long: Identifier = ":".repeat(43).into();
        assert!(encode_identifier(&escaped_long).starts_with('#'));
        let escaped_fits: Identifier = ":".repeat(42).into();
        assert_eq!(encode_identifier(&escaped_fits), "%3A".repeat(42));
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
