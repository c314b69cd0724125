//! The store a configuration replay decides against: the library's `MemoryStore` (the reference
//! every Redis store is tested against, docs/design.md §3), on the trace's clocks, and
//! unreachable during `--outage` spans.
//!
//! Under `time = "server"` the Worker's two checks — enforced, then shadow — are two scripts in
//! one pipeline, each reading Redis `TIME`; the Worker logs both times, and a replay of its log
//! decides each check at its own.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use edgelimit::{Check, MemoryStore, Store, StoreError, TimeSource, Verdict};

/// A `MemoryStore` with the store clock set per request and an on/off switch.
#[derive(Debug)]
pub struct ReplayStore {
    memory: MemoryStore,
    enforced_ms: AtomicU64,
    shadow_ms: AtomicU64,
    down: AtomicBool,
    /// The names of the shadow rules' limits: a check holding one is the shadow check (a shadow
    /// rule may not share a limit with an enforced one, so names tell the checks apart).
    shadow_limits: Vec<Arc<str>>,
}

impl ReplayStore {
    /// A store; checks of `shadow_limits` are decided at the shadow time.
    pub fn new(shadow_limits: Vec<Arc<str>>) -> ReplayStore {
        ReplayStore {
            // Redis evicts nothing a replay writes; the library's bound is for attackers.
            memory: MemoryStore::with_capacity(usize::MAX >> 1),
            enforced_ms: AtomicU64::new(0),
            shadow_ms: AtomicU64::new(0),
            down: AtomicBool::new(false),
            shadow_limits,
        }
    }

    /// The store's clock for the next request's enforced and shadow checks
    /// (`TimeSource::Server`).
    pub fn set_times(&self, enforced_ms: u64, shadow_ms: u64) {
        self.enforced_ms.store(enforced_ms, Ordering::Relaxed);
        self.shadow_ms.store(shadow_ms, Ordering::Relaxed);
    }

    /// Makes the store unreachable (an outage) or reachable again.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::Relaxed);
    }

    fn is_shadow(&self, check: &Check) -> bool {
        check.items().first().is_some_and(|item| {
            self.shadow_limits
                .iter()
                .any(|name| Arc::ptr_eq(name, &item.limit.name) || **name == *item.limit.name)
        })
    }
}

#[async_trait]
impl Store for ReplayStore {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        if self.down.load(Ordering::Relaxed) {
            return Err(StoreError::Unreachable("--outage".into()));
        }
        Ok(checks
            .iter()
            .map(|check| {
                let now = match time {
                    TimeSource::At(ms) => ms,
                    TimeSource::Server if self.is_shadow(check) => {
                        self.shadow_ms.load(Ordering::Relaxed)
                    }
                    TimeSource::Server => self.enforced_ms.load(Ordering::Relaxed),
                };
                let mut verdicts = self.memory.check_now(std::slice::from_ref(check), now);
                verdicts.pop().expect("one verdict per check")
            })
            .collect())
    }
}
