//! Keys cannot collide (docs/design.md §3): no two distinct (namespace, limit name, identifier)
//! triples map to one Redis key, and every key carries exactly one hash tag whose content names
//! its triple — checked by decoding keys with a decoder written here from the documented format
//! `{el:<namespace>:<limit>:<identifier>}:<algorithm>`, not with the encoder's own code.
//! Identifiers lean on what could break an encoding: `:`, `{`, `}`, `%`, `#`, the escape
//! alphabet, NUL, bytes ≥ 0x80, very long ones (hashed), and identifiers equal to another's
//! encoded or hashed form.
//!
//! Then the Worker's identifiers: a raw value, a long value's `0xFF` + SHA-256, and an
//! `api-key:` source's SHA-256 hex never collide where docs/decisions.md ("Identifiers")
//! promises it.

use std::collections::HashMap;

use edgelimit::store::key::state_key;
use edgelimit::{Algorithm, Identifier};
use edgelimit_engine::{IdentifierSource, OwnedRequest};
use proptest::prelude::*;
use sha2::{Digest, Sha256};

const ALGORITHMS: [Algorithm; 5] = [
    Algorithm::FixedWindow,
    Algorithm::SlidingLog,
    Algorithm::SlidingCounter,
    Algorithm::TokenBucket,
    Algorithm::Gcra,
];

/// Escaped identifiers longer than this are stored as `#` + SHA-256 hex (src/store/key.rs).
const MAX_ESCAPED: usize = 128;

/// Bytes that could confuse a key: separators, hash-tag braces, the escape and hash markers,
/// characters kept verbatim, NUL and non-ASCII.
fn tricky_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        4 => prop::sample::select(b":{}%#~._-".to_vec()),
        3 => prop::sample::select(b"aAzZ09fF3B".to_vec()),
        1 => Just(0u8),
        2 => 0x80u8..=0xFF,
        1 => any::<u8>(),
    ]
}

/// Short ones (escaped), ones around the hashing threshold, and very long ones (hashed).
fn identifier_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => prop::collection::vec(tricky_byte(), 0..24),
        2 => prop::collection::vec(tricky_byte(), 40..140),
        1 => prop::collection::vec(tricky_byte(), 300..2000),
    ]
}

/// Names are config text (Unicode), so any string; the same alphabet shows through it.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec!["a", "a:b", "a%3Ab", "{a}", "per-ip", "", "#", "é"])
            .prop_map(str::to_string),
        2 => "[:{}%#a-c0-9é\\x00]{0,12}",
    ]
}

/// The identifier's form in the key, computed here from the documented rule: every byte outside
/// `[A-Za-z0-9._~-]` as `%XX` (upper-case hex), or, past 128 characters, `#` + SHA-256 hex.
fn expected_encoding(bytes: &[u8]) -> String {
    let escaped: String = bytes
        .iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || b".~_-".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    if escaped.len() <= MAX_ESCAPED {
        escaped
    } else {
        format!("#{}", hex(&Sha256::digest(bytes)))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a key says: namespace, limit and identifier (decoded, or the identifier's SHA-256 when
/// hashed), and the algorithm.
#[derive(Debug, PartialEq, Eq)]
struct Decoded {
    namespace: Vec<u8>,
    limit: Vec<u8>,
    identifier: DecodedId,
    algorithm: String,
}

#[derive(Debug, PartialEq, Eq)]
enum DecodedId {
    Raw(Vec<u8>),
    Sha256(Vec<u8>),
}

/// Undoes `%XX`; refuses anything escaping could not have produced.
fn unescape(text: &str) -> Result<Vec<u8>, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = text
                    .get(i + 1..i + 3)
                    .filter(|h| h.bytes().all(|c| matches!(c, b'0'..=b'9' | b'A'..=b'F')))
                    .ok_or_else(|| format!("bad escape at {i} in `{text}`"))?;
                let byte = u8::from_str_radix(hex, 16).map_err(|e| e.to_string())?;
                if byte.is_ascii_alphanumeric() || b".~_-".contains(&byte) {
                    return Err(format!("`{text}` escapes a byte kept verbatim"));
                }
                out.push(byte);
                i += 3;
            }
            b if b.is_ascii_alphanumeric() || b".~_-".contains(&b) => {
                out.push(b);
                i += 1;
            }
            other => return Err(format!("byte {other:#x} unescaped in `{text}`")),
        }
    }
    Ok(out)
}

/// Decodes a key, checking it has exactly one hash tag, at its start, holding the whole triple
/// (what Redis Cluster hashes: the text between the first `{` and the next `}`).
fn decode(key: &str) -> Result<Decoded, String> {
    if key.matches('{').count() != 1 || key.matches('}').count() != 1 {
        return Err(format!("`{key}` has not exactly one `{{` and one `}}`"));
    }
    let rest = key.strip_prefix('{').ok_or("no hash tag at the start")?;
    let (tag, algorithm) = rest.split_once("}:").ok_or("no `}:` after the tag")?;
    let parts: Vec<&str> = tag.split(':').collect();
    let [el, namespace, limit, identifier] = parts[..] else {
        return Err(format!("tag `{tag}` is not el:<ns>:<limit>:<id>"));
    };
    if el != "el" {
        return Err(format!("tag `{tag}` does not start with `el`"));
    }
    let identifier = match identifier.strip_prefix('#') {
        Some(digest) if digest.len() == 64 => DecodedId::Sha256(
            (0..32)
                .map(|i| u8::from_str_radix(&digest[2 * i..2 * i + 2], 16))
                .collect::<Result<_, _>>()
                .map_err(|e| format!("digest `{digest}`: {e}"))?,
        ),
        Some(_) => return Err(format!("bad digest in `{identifier}`")),
        None => DecodedId::Raw(unescape(identifier)?),
    };
    Ok(Decoded {
        namespace: unescape(namespace)?,
        limit: unescape(limit)?,
        identifier,
        algorithm: algorithm.to_string(),
    })
}

/// Identifiers built from others: the literal text of another's encoded form, or of its hashed
/// form, or `#` + the digest — what an attacker would send to land on a victim's key.
fn with_forgeries(ids: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut all = ids.clone();
    for id in ids {
        all.push(expected_encoding(&id).into_bytes());
        all.push(format!("#{}", hex(&Sha256::digest(&id))).into_bytes());
        all.push(hex(&Sha256::digest(&id)).into_bytes());
        let mut prefixed = b"#".to_vec();
        prefixed.extend_from_slice(&id);
        all.push(prefixed);
    }
    all
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(384))]

    #[test]
    fn every_key_decodes_to_its_own_triple(
        namespace in name(),
        limit in name(),
        identifier in identifier_bytes(),
        algorithm in prop::sample::select(ALGORITHMS.to_vec()),
    ) {
        let key = state_key(&namespace, &limit, algorithm, &Identifier::from(identifier.clone()));
        let (namespace_len, limit_len) = (namespace.len(), limit.len());
        let decoded = decode(&key).map_err(TestCaseError::fail)?;
        let expected_id = if expected_encoding(&identifier).starts_with('#') {
            DecodedId::Sha256(Sha256::digest(&identifier).to_vec())
        } else {
            DecodedId::Raw(identifier.clone())
        };
        prop_assert_eq!(decoded, Decoded {
            namespace: namespace.into_bytes(),
            limit: limit.into_bytes(),
            identifier: expected_id,
            algorithm: algorithm.as_str().to_string(),
        });
        // Bounded whatever the identifier: `{el:` ns `:` limit `:` id `}:` algorithm.
        let bound = 4 + 3 * namespace_len + 1 + 3 * limit_len + 1 + MAX_ESCAPED + 2 + 15;
        prop_assert!(key.is_ascii() && key.len() <= bound, "{} > {}", key.len(), bound);
    }

    #[test]
    fn distinct_triples_never_share_a_key(
        namespaces in prop::collection::vec(name(), 1..4),
        limits in prop::collection::vec(name(), 1..4),
        ids in prop::collection::vec(identifier_bytes(), 1..6),
        algorithm in prop::sample::select(ALGORITHMS.to_vec()),
    ) {
        let mut seen: HashMap<String, (String, String, Vec<u8>)> = HashMap::new();
        for namespace in &namespaces {
            for limit in &limits {
                for id in with_forgeries(ids.clone()) {
                    let key = state_key(namespace, limit, algorithm, &Identifier::from(id.clone()));
                    let triple = (namespace.clone(), limit.clone(), id);
                    if let Some(other) = seen.insert(key.clone(), triple.clone()) {
                        prop_assert_eq!(&other, &triple, "two triples share `{}`", key);
                    }
                }
            }
        }
    }
}

#[test]
fn identifiers_that_spell_another_ones_key_form_get_their_own_key() {
    // Regression cases written out: the encoded and hashed forms of one identifier, sent as
    // identifiers themselves, and names that contain the separator.
    let long = vec![b'x'; 200];
    let digest = hex(&Sha256::digest(&long));
    let cases: Vec<(&str, &str, Vec<u8>)> = vec![
        ("ns", "l", long.clone()),
        ("ns", "l", format!("#{digest}").into_bytes()),
        ("ns", "l", digest.clone().into_bytes()),
        ("ns", "l", b"a:b".to_vec()),
        ("ns", "l", b"a%3Ab".to_vec()),
        ("ns", "l:a", b"b".to_vec()),
        ("ns:l", "a", b"b".to_vec()),
        ("ns", "l", b"}:gcra".to_vec()),
        ("ns", "l", vec![0]),
        ("ns", "l", vec![]),
        ("ns", "l", vec![0xFF]),
        ("ns", "l", "\u{FF}".as_bytes().to_vec()),
    ];
    let mut keys = HashMap::new();
    for (ns, limit, id) in &cases {
        let key = state_key(ns, limit, Algorithm::Gcra, &Identifier::from(id.clone()));
        assert!(decode(&key).is_ok(), "{key}");
        assert_eq!(keys.insert(key.clone(), (ns, limit, id)), None, "{key}");
    }
}

/// A request carrying `value` in both headers the sources below read.
fn one_value(value: &str) -> OwnedRequest {
    OwnedRequest::get("example.com", "/")
        .with_header("x-user", value)
        .with_header("authorization", value)
}

/// Header values (any Unicode, as the Worker sees them), around the 256-byte raw limit, and
/// ones that look like hashes.
fn header_value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-f0-9:{}%#\\u{FF}\\u{80}é ]{1,40}",
        2 => "[a-f0-9]{64}",
        2 => "[a-z]{250,262}",
        1 => "[a-zé]{300,1000}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn worker_identifiers_keep_raw_hashed_and_api_key_forms_apart(
        values in prop::collection::vec(header_value(), 1..6),
    ) {
        let header = IdentifierSource::parse("header:x-user").expect("a valid source");
        let api_key = IdentifierSource::parse("api-key:header:authorization").expect("valid");
        let mut by_identifier: HashMap<Vec<u8>, (String, &str)> = HashMap::new();
        for value in &values {
            let request = one_value(value);
            let trimmed = value.trim();
            let (Some(raw), Some(key)) = (header.extract(&request), api_key.extract(&request))
            else {
                prop_assert!(trimmed.is_empty(), "`{}` gave no identifier", value);
                continue;
            };
            // The documented forms: ≤ 256 bytes as is; longer `0xFF` + SHA-256; api keys hex.
            if trimmed.len() <= 256 {
                prop_assert_eq!(raw.as_bytes(), trimmed.as_bytes());
            } else {
                let mut hashed = vec![0xFF];
                hashed.extend_from_slice(&Sha256::digest(trimmed.as_bytes()));
                prop_assert_eq!(raw.as_bytes(), &hashed[..]);
            }
            let digest_hex = hex(&Sha256::digest(trimmed.as_bytes()));
            prop_assert_eq!(key.as_bytes(), digest_hex.as_bytes());
            // Hashed raw values start with 0xFF, which no UTF-8 text (raw values, hex) holds.
            prop_assert!(std::str::from_utf8(key.as_bytes()).is_ok());
            for (id, kind) in [(raw, "raw"), (key, "api-key")] {
                let form = match (kind, id.as_bytes().first()) {
                    ("raw", Some(0xFF)) => "hashed",
                    (kind, _) => kind,
                };
                if let Some((other, other_form)) =
                    by_identifier.insert(id.as_bytes().to_vec(), (trimmed.to_string(), form))
                {
                    // The one overlap the docs leave open: a raw value that *is* 64 hex digits
                    // equals an api key's digest. Values of one form never collide.
                    let open = (form, other_form) == ("raw", "api-key")
                        || (form, other_form) == ("api-key", "raw");
                    prop_assert!(
                        other == trimmed || open,
                        "{form} `{trimmed}` and {other_form} `{other}` share an identifier"
                    );
                }
            }
        }
    }
}

#[test]
fn a_long_value_and_its_hash_sent_raw_stay_apart() {
    let header = IdentifierSource::parse("header:x-user").expect("valid");
    let long = "k".repeat(300);
    let hashed = header.extract(&one_value(&long)).expect("non-empty");
    // The hashed form's bytes after 0xFF, sent as text (lossy), and its hex: both stay raw.
    let digest = Sha256::digest(long.as_bytes());
    for forged in [
        String::from_utf8_lossy(hashed.as_bytes()).into_owned(),
        hex(&digest),
        format!("\u{FF}{}", hex(&digest)),
    ] {
        let id = header.extract(&one_value(&forged)).expect("non-empty");
        assert_ne!(id, hashed, "`{forged}` forged a hashed identifier");
    }
}
