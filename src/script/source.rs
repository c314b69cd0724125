//! The script sources, assembled from the `.lua` files, and their SHA1 digests.
//!
//! A script is a list of parts (the prelude, algorithm files, its main), not one concatenated
//! literal: every script shares the one copy of each file in the binary, which keeps the
//! Worker's compressed wasm small (ten scripts carry the prelude). The whole source is joined
//! only when a script must be sent in full (`EVAL` after `NOSCRIPT`, `SCRIPT LOAD`); its SHA1
//! is computed over the parts.

use std::fmt;
use std::sync::OnceLock;

use crate::policy::Algorithm;

/// One limiter script: its Lua source and the SHA1 Redis knows it by.
pub struct Script {
    name: &'static str,
    parts: &'static [&'static str],
    source: OnceLock<String>,
    sha1: OnceLock<String>,
}

macro_rules! single {
    ($name:literal, [$($file:literal),+], $step:literal, $code:literal) => {
        Script::new(
            $name,
            &[
                include_str!("prelude.lua"),
                include_str!("capacity_lease.lua"),
                include_str!("block.lua"),
                $(include_str!($file),)+
                concat!("local step, code = ", $step, ", ", $code, "\n"),
                include_str!("single.lua"),
            ],
        )
    };
}

// The codes are multi.lua's (and `control::assignment::algorithm_code`'s): an override names
// its algorithm by them.
static FIXED_WINDOW: Script = single!("fixed", ["fixed_window.lua"], "fixed_window", 1);
static SLIDING_LOG: Script = single!("sliding-log", ["sliding_log.lua"], "sliding_log", 2);
static SLIDING_COUNTER: Script = single!(
    "sliding-counter",
    ["sliding_counter.lua"],
    "sliding_counter",
    3
);
static TOKEN_BUCKET: Script = single!("token-bucket", ["token_bucket.lua"], "token_bucket", 4);
static GCRA: Script = single!("gcra", ["gcra.lua"], "gcra", 5);
static CONCURRENCY: Script = single!("concurrency", ["concurrency.lua"], "concurrency", 6);
static MULTI: Script = Script::new(
    "multi",
    &[
        include_str!("prelude.lua"),
        include_str!("capacity_lease.lua"),
        include_str!("block.lua"),
        include_str!("fixed_window.lua"),
        include_str!("sliding_log.lua"),
        include_str!("sliding_counter.lua"),
        include_str!("token_bucket.lua"),
        include_str!("gcra.lua"),
        include_str!("concurrency.lua"),
        include_str!("multi.lua"),
    ],
);

/// "Take up to x" (docs/design.md §9): a global limit's asks of the home or a lender, each
/// take decided on its own, in one call.
static TAKE: Script = Script::new(
    "take",
    &[
        include_str!("prelude.lua"),
        include_str!("capacity_lease.lua"),
        include_str!("block.lua"),
        include_str!("fixed_window.lua"),
        include_str!("sliding_log.lua"),
        include_str!("sliding_counter.lua"),
        include_str!("token_bucket.lua"),
        include_str!("gcra.lua"),
        include_str!("take.lua"),
    ],
);

/// The control scripts (docs/design.md §"Deny and allow lists", §"Peek and reset"): they carry
/// the prelude too, for its helpers and so every script states the same grace period.
static LIST: Script = Script::new(
    "list",
    &[include_str!("prelude.lua"), include_str!("list.lua")],
);
static PEEK: Script = Script::new(
    "peek",
    &[
        include_str!("prelude.lua"),
        include_str!("fixed_window.lua"),
        include_str!("sliding_log.lua"),
        include_str!("sliding_counter.lua"),
        include_str!("token_bucket.lua"),
        include_str!("gcra.lua"),
        include_str!("concurrency.lua"),
        include_str!("peek.lua"),
    ],
);
static RESET: Script = Script::new(
    "reset",
    &[include_str!("prelude.lua"), include_str!("reset.lua")],
);

impl Script {
    const fn new(name: &'static str, parts: &'static [&'static str]) -> Script {
        Script {
            name,
            parts,
            source: OnceLock::new(),
            sha1: OnceLock::new(),
        }
    }

    /// The script deciding one limit of `algorithm`.
    pub fn single(algorithm: Algorithm) -> &'static Script {
        match algorithm {
            Algorithm::FixedWindow => &FIXED_WINDOW,
            Algorithm::SlidingLog => &SLIDING_LOG,
            Algorithm::SlidingCounter => &SLIDING_COUNTER,
            Algorithm::TokenBucket => &TOKEN_BUCKET,
            Algorithm::Gcra => &GCRA,
            Algorithm::Concurrency => &CONCURRENCY,
        }
    }

    /// The script deciding several limits of mixed algorithms, all or nothing.
    pub fn multi() -> &'static Script {
        &MULTI
    }

    /// The script taking up to x units of each of several sources ([`crate::global::take`]).
    pub fn take() -> &'static Script {
        &TAKE
    }

    /// The script adding to, removing from, listing and matching one deny or allow list.
    pub fn list() -> &'static Script {
        &LIST
    }

    /// The script looking at one state without writing (peek).
    pub fn peek() -> &'static Script {
        &PEEK
    }

    /// The script deleting one identifier's states on a limit (reset).
    pub fn reset() -> &'static Script {
        &RESET
    }

    /// Every script: the six single-limit ones, the multi-limit one, the take script, then the
    /// control scripts (list, peek, reset) — e.g. to `SCRIPT LOAD` them ahead of traffic.
    pub fn all() -> [&'static Script; 11] {
        [
            &FIXED_WINDOW,
            &SLIDING_LOG,
            &SLIDING_COUNTER,
            &TOKEN_BUCKET,
            &GCRA,
            &CONCURRENCY,
            &MULTI,
            &TAKE,
            &LIST,
            &PEEK,
            &RESET,
        ]
    }

    /// A short name: the algorithm's (`gcra`, …), `multi`, `take`, `list`, `peek` or `reset`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The Lua source, for `EVAL` and `SCRIPT LOAD` (joined from its parts on first use).
    pub fn source(&self) -> &str {
        self.source.get_or_init(|| self.parts.concat())
    }

    /// The SHA1 of the source in lowercase hex, for `EVALSHA`.
    pub fn sha1(&self) -> &str {
        self.sha1.get_or_init(|| {
            let mut digest = sha1_smol::Sha1::new();
            for part in self.parts {
                digest.update(part.as_bytes());
            }
            digest.digest().to_string()
        })
    }
}

// Scripts are statics: one is another exactly when it has the same name.
impl PartialEq for Script {
    fn eq(&self, other: &Script) -> bool {
        self.name == other.name
    }
}

impl Eq for Script {}

impl fmt::Debug for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Script")
            .field("name", &self.name)
            .field("sha1", &self.sha1())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::GC_GRACE_MS;

    #[test]
    fn the_grace_period_matches_the_memory_store() {
        let line = format!("local GC_GRACE_MS = {GC_GRACE_MS}\n");
        for script in Script::all() {
            assert!(script.source().contains(&line), "{}", script.name());
        }
    }

    #[test]
    fn the_lease_bounds_match_the_rust_rule() {
        use crate::algorithm::capacity_lease::{MAX_LEASE_BALANCE, MAX_LEASE_END_MS};
        let balance = format!("local MAX_LEASE = {MAX_LEASE_BALANCE}\n");
        let end = format!("local MAX_LEASE_END = {MAX_LEASE_END_MS}\n");
        // Every deciding script carries the lease rule; the control scripts need none.
        for script in Script::all() {
            let deciding = !matches!(script.name(), "list" | "peek" | "reset");
            let source = script.source();
            assert_eq!(source.contains(&balance), deciding, "{}", script.name());
            assert_eq!(source.contains(&end), deciding, "{}", script.name());
        }
    }

    #[test]
    fn digests_are_distinct_lowercase_hex() {
        let mut seen = std::collections::HashSet::new();
        for script in Script::all() {
            let sha = script.sha1();
            assert_eq!(sha.len(), 40);
            assert!(sha
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
            assert!(seen.insert(sha.to_string()));
        }
        // Digested by parts as the whole source is.
        for script in Script::all() {
            let whole = sha1_smol::Sha1::from(script.source()).digest().to_string();
            assert_eq!(script.sha1(), whole, "{}", script.name());
        }
        // The SHA1 of "abc", to pin the digest to the one Redis computes.
        assert_eq!(
            sha1_smol::Sha1::from("abc").digest().to_string(),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
    }
}
