//! A [`super::MemoryStore`]'s entries as they can be kept outside the process and put back: how a
//! store that must outlive its process but decides in memory (the Worker's Durable Objects) makes
//! every decision durable — after each call it saves the entries the call could have changed
//! ([`super::MemoryStore::saved_for`] and friends), and on start restores them all
//! ([`super::MemoryStore::restore`]). One entry per key, each with the time it may be dropped,
//! so whoever keeps them collects garbage by the entries' own times (docs/design.md §2: TTLs only
//! collect garbage).

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

impl Saved {
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
