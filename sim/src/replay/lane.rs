//! One policy's states for every client, in a vector indexed by the dense client id, stepped by
//! the library's own `step` functions — the same code `MemoryStore` and the Worker run.
//!
//! A typed vector per algorithm (rather than `Vec<State>`) keeps each state at its own size and
//! the dispatch to one `match` per request, which is what makes replay fast.

use std::mem::size_of;

use edgelimit::algorithm::{
    fixed_window, gcra, sliding_counter, sliding_log, token_bucket, FixedWindowState, GcraState,
    Outcome, SlidingCounterState, SlidingLogState, TokenBucketState,
};
use edgelimit::{Algorithm, Policy};

/// The states of one policy, one per client.
#[derive(Debug)]
pub enum Lane {
    /// Fixed window counters.
    Fixed(Vec<FixedWindowState>),
    /// Sliding window logs.
    Log(Vec<SlidingLogState>),
    /// Sliding window counters.
    Counter(Vec<SlidingCounterState>),
    /// Token buckets.
    Bucket(Vec<TokenBucketState>),
    /// GCRA theoretical arrival times.
    Gcra(Vec<GcraState>),
}

impl Lane {
    /// An empty lane for `algorithm`.
    pub fn new(algorithm: Algorithm) -> Lane {
        match algorithm {
            Algorithm::FixedWindow => Lane::Fixed(Vec::new()),
            Algorithm::SlidingLog => Lane::Log(Vec::new()),
            Algorithm::SlidingCounter => Lane::Counter(Vec::new()),
            Algorithm::TokenBucket => Lane::Bucket(Vec::new()),
            Algorithm::Gcra => Lane::Gcra(Vec::new()),
        }
    }

    /// Makes room for clients `0..len` (new ones start with no state).
    pub fn grow(&mut self, len: usize) {
        match self {
            Lane::Fixed(v) => v.resize(len, Default::default()),
            Lane::Log(v) => v.resize(len, Default::default()),
            Lane::Counter(v) => v.resize(len, Default::default()),
            Lane::Bucket(v) => v.resize(len, Default::default()),
            Lane::Gcra(v) => v.resize(len, Default::default()),
        }
    }

    /// Applies one request of `client` (which must be below the grown length).
    #[inline]
    pub fn step(&mut self, policy: &Policy, client: u32, now_ms: u64, cost: i64) -> Outcome {
        let i = client as usize;
        match self {
            Lane::Fixed(v) => fixed_window::step(policy, &mut v[i], now_ms, cost),
            Lane::Log(v) => sliding_log::step(policy, &mut v[i], now_ms, cost),
            Lane::Counter(v) => sliding_counter::step(policy, &mut v[i], now_ms, cost),
            Lane::Bucket(v) => token_bucket::step(policy, &mut v[i], now_ms, cost),
            Lane::Gcra(v) => gcra::step(policy, &mut v[i], now_ms, cost),
        }
    }

    /// Entries in `client`'s log (sliding log only; 0 otherwise), to track the per-key peak.
    #[inline]
    pub fn log_entries(&self, client: u32) -> usize {
        match self {
            Lane::Log(v) => v[client as usize].entries().len(),
            _ => 0,
        }
    }

    /// The bytes one key's state takes in memory, with `entries` log entries.
    pub fn key_bytes(&self, entries: usize) -> usize {
        match self {
            Lane::Fixed(_) => size_of::<FixedWindowState>(),
            Lane::Log(_) => size_of::<SlidingLogState>() + entries * size_of::<(u64, u64)>(),
            Lane::Counter(_) => size_of::<SlidingCounterState>(),
            Lane::Bucket(_) => size_of::<TokenBucketState>(),
            Lane::Gcra(_) => size_of::<GcraState>(),
        }
    }

    /// Keys that hold state, and the bytes all states take now (log entries counted as held).
    pub fn footprint(&self) -> (usize, usize) {
        fn count<T: Default + PartialEq>(v: &[T]) -> usize {
            let empty = T::default();
            v.iter().filter(|s| **s != empty).count()
        }
        match self {
            Lane::Fixed(v) => {
                let n = count(v);
                (n, n * self.key_bytes(0))
            }
            Lane::Log(v) => {
                let n = count(v);
                let entries: usize = v.iter().map(|s| s.entries().len()).sum();
                (n, n * self.key_bytes(0) + entries * size_of::<(u64, u64)>())
            }
            Lane::Counter(v) => {
                let n = count(v);
                (n, n * self.key_bytes(0))
            }
            Lane::Bucket(v) => {
                let n = count(v);
                (n, n * self.key_bytes(0))
            }
            Lane::Gcra(v) => {
                let n = count(v);
                (n, n * self.key_bytes(0))
            }
        }
    }
}
