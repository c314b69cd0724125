//! The hash of in-process maps whose keys an attacker chooses: foldhash, keyed with secret
//! randomness (see docs/decisions.md, "Memory").
//!
//! An unkeyed hash would let whoever sends the requests pick identifiers that all land in one
//! probe sequence and turn each decision into a scan. foldhash mixes every input with secret
//! seeds, so colliding identifiers cannot be computed offline; the seeds are drawn here from the
//! operating system's randomness (through std's `RandomState`) rather than foldhash's own
//! address-based default. On wasm32-unknown-unknown std has no randomness source, so the current
//! time is mixed in as well: weaker, but no worse than std's maps there.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::OnceLock;

use foldhash::fast::{FoldHasher, SeedableRandomState};
use foldhash::SharedSeed;

/// A seeded foldhash builder; clones hash alike, so shards of one store agree on every hash.
#[derive(Clone, Debug)]
pub(crate) struct KeyHasher(SeedableRandomState);

impl KeyHasher {
    /// A builder with fresh secret seeds.
    pub(crate) fn random() -> KeyHasher {
        static SHARED: OnceLock<SharedSeed> = OnceLock::new();
        let shared = SHARED.get_or_init(|| SharedSeed::from_u64(random_u64()));
        KeyHasher(SeedableRandomState::with_seed(random_u64(), shared))
    }
}

impl BuildHasher for KeyHasher {
    type Hasher = FoldHasher<'static>;

    #[inline]
    fn build_hasher(&self) -> Self::Hasher {
        self.0.build_hasher()
    }
}

/// 64 secret bits: std's per-process random keys (advanced for every `RandomState`), applied to
/// the time.
fn random_u64() -> u64 {
    let nanos = web_time::SystemTime::now()
        .duration_since(web_time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    RandomState::new().hash_one(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_are_seeded_apart_and_clones_agree() {
        let a = KeyHasher::random();
        let b = KeyHasher::random();
        let key = b"203.0.113.7".as_slice();
        assert_eq!(a.hash_one(key), a.clone().hash_one(key));
        assert_ne!(a.hash_one(key), b.hash_one(key));
    }
}
