//! The path's own request ids (docs/design.md §4): unique per request — an isolate's random
//! number and a count — and never read from the request, so no client can choose or repeat one.
//! `idempotent` limits remember a request under its own id unless a trusted header names one
//! (`request_id_header`), and a settlement always commits under it: a commit sent twice (a
//! retry after a lost answer) is charged once, and no two requests share a commit.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use edgelimit::Identifier;

/// One request's own id: its isolate's number and its count there. Cheap to hold; written out
/// ([`OwnId::identifier`]) only for a limit that remembers it or a settlement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OwnId {
    isolate: u64,
    count: u64,
}

impl OwnId {
    /// The id as the store keeps it: `<isolate, 16 hex digits>-<count, hex>`.
    pub fn identifier(&self) -> Identifier {
        Identifier::from(format!("{:016x}-{:x}", self.isolate, self.count).as_str())
    }
}

/// The ids one isolate gives its requests, in order.
#[derive(Debug)]
pub(crate) struct OwnIds {
    isolate: u64,
    next: AtomicU64,
}

impl OwnIds {
    /// Ids under an isolate number drawn from `seed` (a host's random number: a runtime without
    /// the operating system's randomness, as wasm32, gives one).
    pub(crate) fn seeded(seed: u64) -> OwnIds {
        OwnIds {
            isolate: seed,
            next: AtomicU64::new(0),
        }
    }

    /// Ids under a random isolate number: the operating system's randomness where the standard
    /// library has it (its hash maps' keys), mixed with `now_ms` for a runtime without it.
    pub(crate) fn random(now_ms: u64) -> OwnIds {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(now_ms);
        OwnIds::seeded(hasher.finish())
    }

    /// The next request's id.
    pub(crate) fn next(&self) -> OwnId {
        OwnId {
            isolate: self.isolate,
            count: self.next.fetch_add(1, Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_in_an_isolate_and_differ_across_isolates() {
        let ids = OwnIds::random(1_700_000_000_000);
        let first: Vec<Identifier> = (0..1000).map(|_| ids.next().identifier()).collect();
        let mut distinct = first.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), first.len());
        // Two isolates started at the same moment still number their requests apart.
        let other = OwnIds::random(1_700_000_000_000);
        assert_ne!(other.isolate, ids.isolate);
        assert_eq!(
            OwnIds::seeded(0xabc).next().identifier(),
            Identifier::from("0000000000000abc-0")
        );
    }
}
