//! A [`super::MemoryStore`]'s entries as they can be kept outside the process and put back: how a
//! store that must outlive its process but decides in memory (the Worker's Durable Objects) makes
//! every decision durable — after each call it saves the entries the call could have changed
//! ([`super::MemoryStore::saved_for`] and friends), and on start restores them all
//! ([`super::MemoryStore::restore`]). One entry per key, each with the time it may be dropped,
//! so whoever keeps them collects garbage by the entries' own times (docs/design.md §2: TTLs only
//! collect garbage).
//!
//! Kept as text, an entry carries the version of its form ([`Saved::to_stored`],
//! [`Saved::from_stored`]): code that finds an entry it cannot read (written by a newer version,
//! or damaged) can tell so, skip it and count it, rather than fail on it.

use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::algorithm::State;
use crate::decision::Decision;
use crate::policy::Algorithm;

/// One saved entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Saved {
    /// The state of (limit, identifier) under one algorithm.
    State {
        /// The limit's name.
        limit: String,
        /// The identifier's bytes.
        #[serde(with = "bytes")]
        identifier: Vec<u8>,
        /// The state.
        state: State,
        /// When it may be dropped (epoch ms).
        keep_until_ms: u64,
    },
    /// A decision remembered under a request id (docs/design.md §3, "Idempotent checks").
    Request {
        /// The limit's name.
        limit: String,
        /// The identifier's bytes.
        #[serde(with = "bytes")]
        identifier: Vec<u8>,
        /// The request id's bytes.
        #[serde(with = "bytes")]
        request_id: Vec<u8>,
        /// Until when a repeat answers it (exclusive).
        until_ms: u64,
        /// When it was decided.
        decided_at_ms: u64,
        /// The decision.
        decision: Decision,
        /// When it may be dropped (epoch ms).
        keep_until_ms: u64,
    },
    /// The tier and override (of) an identifier on a limit, as stored text
    /// (`Assignment::encode`), the override first.
    Assignments {
        /// The limit's name.
        limit: String,
        /// The identifier's bytes.
        #[serde(with = "bytes")]
        identifier: Vec<u8>,
        /// The assignments.
        held: Vec<String>,
    },
    /// The capacity lease of (limit, identifier) (docs/design.md §9).
    CapacityLease {
        /// The limit's name.
        limit: String,
        /// The identifier's bytes.
        #[serde(with = "bytes")]
        identifier: Vec<u8>,
        /// The units it holds.
        balance: u64,
        /// When it ends (epoch ms).
        until_ms: u64,
        /// When it may be dropped (epoch ms).
        keep_until_ms: u64,
    },
    /// The block of (limit, identifier) (docs/design.md §2, "Blocks").
    Block {
        /// The limit's name.
        limit: String,
        /// The identifier's bytes.
        #[serde(with = "bytes")]
        identifier: Vec<u8>,
        /// When it ends (epoch ms).
        until_ms: u64,
        /// When it may be dropped (epoch ms).
        keep_until_ms: u64,
    },
    /// A deny or allow list: each member with the epoch ms it lapses at.
    List {
        /// The list's name.
        name: String,
        /// (member, lapse time).
        members: Vec<(String, u64)>,
    },
}

/// The version of the form [`Saved::to_stored`] writes. Text without a version is an entry's
/// bare JSON, the form written before versions were (read as version 0).
pub const STORED_VERSION: u32 = 1;

/// Why kept text is not an entry this code reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnreadableEntry {
    /// Written in a form this code does not know (a newer version's).
    #[error("format version {0}, which this code does not read (it reads 0 and {STORED_VERSION})")]
    Version(u64),
    /// Not an entry of its version.
    #[error("not a saved entry: {0}")]
    Malformed(String),
}

/// The kept form: the version first, then the entry.
#[derive(Serialize)]
struct Stored<'a> {
    v: u32,
    entry: &'a Saved,
}

/// The kept form read back, for its version's form.
#[derive(Deserialize)]
struct StoredEntry {
    v: u64,
    entry: Saved,
}

/// Only the version of kept text, whatever follows it.
#[derive(Deserialize)]
struct StoredVersion {
    v: Option<u64>,
}

impl Saved {
    /// The entry as kept text: `{"v":1,"entry":…}`, the entry's JSON under its form's version.
    pub fn to_stored(&self) -> String {
        let stored = Stored {
            v: STORED_VERSION,
            entry: self,
        };
        serde_json::to_string(&stored).expect("a saved entry serialises")
    }

    /// An entry from its kept text ([`Saved::to_stored`]), or from the bare JSON of version 0.
    pub fn from_stored(text: &str) -> Result<Saved, UnreadableEntry> {
        let malformed = |e: serde_json::Error| UnreadableEntry::Malformed(e.to_string());
        let current = u64::from(STORED_VERSION);
        match serde_json::from_str::<StoredEntry>(text) {
            Ok(StoredEntry { v, entry }) if v == current => Ok(entry),
            Ok(StoredEntry { v, .. }) => Err(UnreadableEntry::Version(v)),
            // Not the current form: which version, if any, says why.
            Err(e) => match serde_json::from_str::<StoredVersion>(text) {
                Ok(StoredVersion { v: None }) => serde_json::from_str(text).map_err(malformed),
                Ok(StoredVersion { v: Some(v) }) if v != current => {
                    Err(UnreadableEntry::Version(v))
                }
                _ => Err(malformed(e)),
            },
        }
    }

    /// The key this entry is kept under: one per entry of the store, the same for every state
    /// of one key, so a later save of the key replaces it.
    pub fn key(&self) -> String {
        match self {
            Saved::State {
                limit,
                identifier,
                state,
                ..
            } => state_key(limit, state.algorithm(), identifier),
            Saved::Request {
                limit,
                identifier,
                request_id,
                ..
            } => request_key(limit, identifier, request_id),
            Saved::Assignments {
                limit, identifier, ..
            } => assignments_key(limit, identifier),
            Saved::CapacityLease {
                limit, identifier, ..
            } => lease_key(limit, identifier),
            Saved::Block {
                limit, identifier, ..
            } => block_key(limit, identifier),
            Saved::List { name, .. } => list_key(name),
        }
    }

    /// When the entry may be dropped (epoch ms), if it may: assignments and lists carry their
    /// own lapse times and are dropped when they are cleared.
    pub fn keep_until_ms(&self) -> Option<u64> {
        match self {
            Saved::State { keep_until_ms, .. }
            | Saved::Request { keep_until_ms, .. }
            | Saved::CapacityLease { keep_until_ms, .. }
            | Saved::Block { keep_until_ms, .. } => Some(*keep_until_ms),
            Saved::Assignments { .. } | Saved::List { .. } => None,
        }
    }
}

/// The key of (limit, identifier)'s state under `algorithm`.
pub(super) fn state_key(limit: &str, algorithm: Algorithm, identifier: &[u8]) -> String {
    format!(
        "s/{}/{}/{}",
        hex(limit.as_bytes()),
        algorithm.as_str(),
        hex(identifier)
    )
}

/// The key of a request id remembered for (limit, identifier).
pub(super) fn request_key(limit: &str, identifier: &[u8], request_id: &[u8]) -> String {
    format!(
        "r/{}/{}/{}",
        hex(limit.as_bytes()),
        hex(identifier),
        hex(request_id)
    )
}

/// The key of (limit, identifier)'s assignments.
pub(super) fn assignments_key(limit: &str, identifier: &[u8]) -> String {
    format!("a/{}/{}", hex(limit.as_bytes()), hex(identifier))
}

/// The key of (limit, identifier)'s capacity lease.
pub(super) fn lease_key(limit: &str, identifier: &[u8]) -> String {
    format!("g/{}/{}", hex(limit.as_bytes()), hex(identifier))
}

/// The key of (limit, identifier)'s block.
pub(super) fn block_key(limit: &str, identifier: &[u8]) -> String {
    format!("b/{}/{}", hex(limit.as_bytes()), hex(identifier))
}

/// The key of a list.
pub(super) fn list_key(name: &str) -> String {
    format!("l/{}", hex(name.as_bytes()))
}

/// Lower-case hex: keys are plain ASCII whatever the names and identifiers hold, and no part
/// can run into the next.
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// Bytes as standard base64 text.
mod bytes {
    use super::*;

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Saved {
        Saved::Block {
            limit: "per-user".into(),
            identifier: b"alice".to_vec(),
            until_ms: 5_000,
            keep_until_ms: 65_000,
        }
    }

    #[test]
    fn kept_text_carries_its_version_and_reads_back() {
        let text = entry().to_stored();
        assert!(text.starts_with(r#"{"v":1,"entry":{"block":"#), "{text}");
        assert_eq!(Saved::from_stored(&text), Ok(entry()));
    }

    #[test]
    fn bare_entries_written_before_versions_read_as_version_0() {
        let bare = serde_json::to_string(&entry()).unwrap();
        assert_eq!(Saved::from_stored(&bare), Ok(entry()));
    }

    #[test]
    fn an_unknown_version_or_a_damaged_entry_is_told_apart() {
        let newer = r#"{"v":2,"entry":{"block":{"shape":"unknown"}}}"#;
        assert_eq!(Saved::from_stored(newer), Err(UnreadableEntry::Version(2)));
        // A newer version is unreadable even when its entry happens to parse.
        let text = entry().to_stored().replacen(r#""v":1"#, r#""v":7"#, 1);
        assert_eq!(Saved::from_stored(&text), Err(UnreadableEntry::Version(7)));
        for damaged in [
            r#"{"v":1,"entry":{"block":{"limit":"l"}}}"#,
            r#"{"state":{"limit":"l"}}"#,
            "not json",
            "",
            "null",
        ] {
            assert!(
                matches!(
                    Saved::from_stored(damaged),
                    Err(UnreadableEntry::Malformed(_))
                ),
                "{damaged}: {:?}",
                Saved::from_stored(damaged)
            );
        }
    }
}
