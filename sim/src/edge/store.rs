//! The store a configuration replay decides against, on the trace's clocks, and unreachable during
//! `--outage` spans.
//!
//! The replay owns its store and uses it from one thread, and Redis evicts nothing a replay writes,
//! so states live in one plain map keyed as the library's stores key them — (limit name,
//! algorithm, identifier) — with no expiry index, no shards and no eviction, and each check is
//! decided by the library's own all-or-nothing rule over its states (`edgelimit::store::decide`,
//! what `MemoryStore` runs). A state is dropped by `MemoryStore` only once it stopped mattering
//! (docs/design.md §3), so keeping it changes no decision. Checks carrying request ids (limits with
//! `idempotent = true`) need the remembered ids only `MemoryStore` keeps: a configuration with such
//! a limit is replayed on the library's `MemoryStore` itself.
//!
//! Under `time = "server"` the Worker's two checks — enforced, then shadow — are two scripts in
//! one pipeline, each reading Redis `TIME`; the Worker logs both times, and a replay of its log
//! decides each check at its own.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use edgelimit::algorithm::State;
use edgelimit::store::decide;
use edgelimit::{Algorithm, Check, MemoryStore, Store, StoreError, TimeSource, Verdict};
use rustc_hash::FxHashMap;

use super::inline_id::InlineId;

/// Where a state lives: the limit's name (limits sharing a name share state), its algorithm, and
/// the identifier (its bytes inline when short: see `InlineId`).
type Key = (Arc<str>, Algorithm, InlineId);

/// Where the replay's states live.
#[derive(Debug)]
enum States {
    /// One map, used from one thread (the mutex is never contended).
    Plain(Mutex<FxHashMap<Key, State>>),
    /// The library's store, for configurations with idempotent limits.
    Memory(MemoryStore),
}

/// The replay's store: its states, the store clock set per request, and an on/off switch.
#[derive(Debug)]
pub struct ReplayStore {
    states: States,
    enforced_ms: AtomicU64,
    shadow_ms: AtomicU64,
    down: AtomicBool,
    /// The names of the shadow rules' limits: a check holding one is the shadow check (a shadow
    /// rule may not share a limit with an enforced one, so names tell the checks apart).
    shadow_limits: Vec<Arc<str>>,
}

impl ReplayStore {
    /// A store; checks of `shadow_limits` are decided at the shadow time. `remembering`: some
    /// limit carries request ids (then the library's `MemoryStore` keeps the states).
    pub fn new(shadow_limits: Vec<Arc<str>>, remembering: bool) -> ReplayStore {
        ReplayStore {
            states: if remembering {
                // Redis evicts nothing a replay writes; the library's bound is for attackers.
                States::Memory(MemoryStore::with_capacity(usize::MAX >> 1))
            } else {
                States::Plain(Mutex::new(FxHashMap::default()))
            },
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
            let name = &item.limit.name;
            // The configuration's own `Arc`s: pointers first, text only if none is equal.
            self.shadow_limits.iter().any(|n| Arc::ptr_eq(n, name))
                || self.shadow_limits.iter().any(|n| n == name)
        })
    }

    /// Decides one check at `now_ms`.
    fn decide(&self, check: &Check, now_ms: u64) -> Verdict {
        let map = match &self.states {
            States::Memory(memory) => {
                let mut verdicts = memory.check_now(std::slice::from_ref(check), now_ms);
                return verdicts.pop().expect("one verdict per check");
            }
            States::Plain(map) => map,
        };
        let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
        let items = check.items();
        let key = |i: usize| {
            let item = &items[i];
            (
                item.limit.name.clone(),
                item.limit.policy.algorithm(),
                InlineId::of(&item.identifier),
            )
        };
        if items.len() == 1 {
            // One item: stepped in place (a denial never changes a state).
            let key = key(0);
            return match map.get_mut(&key) {
                Some(state) => decide(check, std::slice::from_mut(state), now_ms).0,
                None => {
                    let mut state = [State::fresh(key.1)];
                    let (verdict, outcomes) = decide(check, &mut state, now_ms);
                    // A fresh key that was only looked at stays absent, as in `MemoryStore`.
                    if outcomes[0].changed {
                        let [state] = state;
                        map.insert(key, state);
                    }
                    verdict
                }
            };
        }
        let keys: Vec<Key> = (0..items.len()).map(key).collect();
        let mut states: Vec<State> = keys
            .iter()
            .map(|k| map.get(k).cloned().unwrap_or_else(|| State::fresh(k.1)))
            .collect();
        let (verdict, outcomes) = decide(check, &mut states, now_ms);
        for ((key, state), outcome) in keys.into_iter().zip(states).zip(&outcomes) {
            // Only what was written changes, as in `MemoryStore`.
            if outcome.changed {
                map.insert(key, state);
            }
        }
        verdict
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
                self.decide(check, now)
            })
            .collect())
    }
}
