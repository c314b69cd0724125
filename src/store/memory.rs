//! `MemoryStore`: the pure steps over a bounded in-process map. The embedded default, the
//! simulator's store, the local fallback, and the reference every other store is tested against.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::batch;
use super::check::{Check, CheckItem, Identifier, TimeSource, Verdict};
use super::error::StoreError;
use super::expiring_map::ExpiringMap;
use super::traits::Store;
use crate::algorithm::State;
use crate::clock::{Clock, SystemClock};
use crate::policy::Algorithm;

/// How long after its state stops mattering a key is kept anyway, in every store: a caller whose
/// clock lags a little still finds the state it wrote (Redis TTLs use the same margin).
pub const GC_GRACE_MS: u64 = 60_000;

/// The default bound on keys held by a [`MemoryStore`].
pub const DEFAULT_CAPACITY: usize = 1 << 20;

type StateMap = ExpiringMap<StateKey, State>;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct StateKey {
    name: Arc<str>,
    algorithm: Algorithm,
    identifier: Identifier,
}

/// An in-process store. Entries are dropped [`GC_GRACE_MS`] after their state stops mattering,
/// and at most `capacity` are held: when full, the one that expires soonest is evicted (see
/// [`ExpiringMap`]).
#[derive(Debug)]
pub struct MemoryStore {
    states: Mutex<StateMap>,
    clock: Arc<dyn Clock>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::with_capacity(DEFAULT_CAPACITY)
    }
}

impl MemoryStore {
    /// A store bounded to [`DEFAULT_CAPACITY`] keys.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// A store holding at most `capacity` keys.
    pub fn with_capacity(capacity: usize) -> MemoryStore {
        MemoryStore {
            states: Mutex::new(ExpiringMap::new(capacity)),
            clock: Arc::new(SystemClock),
        }
    }

    /// The same store reading `TimeSource::Server` from `clock` (for tests and replays).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> MemoryStore {
        self.clock = clock;
        self
    }

    /// The number of keys held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StateMap> {
        // A panic while holding the lock cannot leave a half-written state: every write is one
        // insert of a complete value. So a poisoned lock is still safe to use.
        self.states.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Decides checks synchronously (the store has no I/O); the async [`Store::check`] calls this.
    pub fn check_now(&self, checks: &[Check], now_ms: u64) -> Vec<Verdict> {
        let mut map = self.lock();
        map.purge_expired(now_ms.saturating_sub(GC_GRACE_MS));
        checks
            .iter()
            .map(|check| match check.items() {
                [item] => decide_single(&mut map, item, now_ms),
                _ => decide_all_or_nothing(&mut map, check, now_ms),
            })
            .collect()
    }
}

fn state_key(item: &CheckItem) -> StateKey {
    StateKey {
        name: item.limit.name.clone(),
        algorithm: item.limit.policy.algorithm(),
        identifier: item.identifier.clone(),
    }
}

/// One limit: applied in place, since a denial never changes a state (no copy, no rollback).
fn decide_single(map: &mut StateMap, item: &CheckItem, now_ms: u64) -> Verdict {
    let key = state_key(item);
    let policy = &item.limit.policy;
    let outcome = match map.get_mut(&key) {
        Some(state) => {
            let outcome = state.apply(policy, now_ms, item.cost);
            if outcome.changed {
                map.set_expiry(&key, outcome.expire_at_ms.saturating_add(GC_GRACE_MS));
            }
            outcome
        }
        None => {
            let mut state = State::fresh(key.algorithm);
            let outcome = state.apply(policy, now_ms, item.cost);
            // A fresh key that was only looked at or denied stays absent.
            if outcome.changed {
                let expiry = outcome.expire_at_ms.saturating_add(GC_GRACE_MS);
                map.insert(key, state, expiry);
            }
            outcome
        }
    };
    Verdict {
        allowed: outcome.decision.allowed,
        decisions: vec![outcome.decision],
        atomic: true,
        decided_at_ms: now_ms,
    }
}

/// Several limits: taken out of the map, decided together by [`batch::decide`], put back.
fn decide_all_or_nothing(map: &mut StateMap, check: &Check, now_ms: u64) -> Verdict {
    let keys: Vec<StateKey> = check.items().iter().map(state_key).collect();
    let mut expiries = Vec::with_capacity(keys.len());
    let mut states: Vec<State> = keys
        .iter()
        .map(|key| match map.remove(key) {
            Some((state, expire)) => {
                expiries.push(Some(expire));
                state
            }
            None => {
                expiries.push(None);
                State::fresh(key.algorithm)
            }
        })
        .collect();
    let (verdict, outcomes) = batch::decide(check, &mut states, now_ms);
    for ((key, state), (outcome, old_expiry)) in keys
        .into_iter()
        .zip(states)
        .zip(outcomes.iter().zip(expiries))
    {
        // Keep a state that was written now or held before; a fresh key that was only looked
        // at or denied stays absent.
        let expiry = if outcome.changed {
            Some(outcome.expire_at_ms.saturating_add(GC_GRACE_MS))
        } else {
            old_expiry
        };
        if let Some(expiry) = expiry {
            map.insert(key, state, expiry);
        }
    }
    verdict
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl Store for MemoryStore {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        let now_ms = match time {
            TimeSource::At(ms) => ms,
            TimeSource::Server => self.clock.now_ms(),
        };
        Ok(self.check_now(checks, now_ms))
    }
}
