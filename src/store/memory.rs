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
use crate::decision::Decision;
use crate::policy::Algorithm;

/// How long after its state stops mattering a key is kept anyway, in every store: a caller whose
/// clock lags a little still finds the state it wrote (Redis TTLs use the same margin).
pub const GC_GRACE_MS: u64 = 60_000;

/// The default bound on keys held by a [`MemoryStore`].
pub const DEFAULT_CAPACITY: usize = 1 << 20;

type StateMap = ExpiringMap<StateKey, State>;
type RequestMap = ExpiringMap<RequestKey, Remembered>;

/// Both maps, behind one lock: a check reads and writes its states and its requests at once.
#[derive(Debug)]
struct Maps {
    states: StateMap,
    requests: RequestMap,
}

/// A remembered request, as the Lua twin keys it: beside the (limit, identifier), whatever the
/// algorithm.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RequestKey {
    name: Arc<str>,
    identifier: Identifier,
    request_id: Identifier,
}

/// An admitted decision remembered under a request id until `until_ms` (exclusive).
#[derive(Debug, Clone, Copy)]
struct Remembered {
    until_ms: u64,
    decided_at_ms: u64,
    decision: Decision,
}

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
    maps: Mutex<Maps>,
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
            maps: Mutex::new(Maps {
                states: ExpiringMap::new(capacity),
                requests: ExpiringMap::new(capacity),
            }),
            clock: Arc::new(SystemClock),
        }
    }

    /// The same store reading `TimeSource::Server` from `clock` (for tests and replays).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> MemoryStore {
        self.clock = clock;
        self
    }

    /// The number of limiter states held (remembered request ids are not counted).
    pub fn len(&self) -> usize {
        self.lock().states.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Maps> {
        // A panic while holding the lock cannot leave a half-written state: every write is one
        // insert of a complete value. So a poisoned lock is still safe to use.
        self.maps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Decides checks synchronously (the store has no I/O); the async [`Store::check`] calls this.
    pub fn check_now(&self, checks: &[Check], now_ms: u64) -> Vec<Verdict> {
        let mut maps = self.lock();
        let Maps { states, requests } = &mut *maps;
        states.purge_expired(now_ms.saturating_sub(GC_GRACE_MS));
        requests.purge_expired(now_ms.saturating_sub(GC_GRACE_MS));
        checks
            .iter()
            .map(|check| {
                if let Some(repeat) = recall(states, requests, check, now_ms) {
                    return repeat;
                }
                let verdict = match check.items() {
                    [item] => decide_single(states, item, now_ms),
                    _ => decide_all_or_nothing(states, check, now_ms),
                };
                if verdict.allowed {
                    remember(requests, check, &verdict, now_ms);
                }
                verdict
            })
            .collect()
    }
}

fn request_key(item: &CheckItem) -> Option<RequestKey> {
    Some(RequestKey {
        name: item.limit.name.clone(),
        identifier: item.identifier.clone(),
        request_id: item.request_id.clone()?,
    })
}

/// The answer to a repeat of an admitted check, as multi.lua gives it: when any item's request id
/// is remembered and live, each item answers its remembered decision (a look at its state if it
/// has none), at the first remembered time, and nothing is charged.
fn recall(states: &StateMap, requests: &RequestMap, check: &Check, now_ms: u64) -> Option<Verdict> {
    let remembered: Vec<Option<Remembered>> = check
        .items()
        .iter()
        .map(|item| {
            let (r, _) = requests.get(&request_key(item)?)?;
            (now_ms < r.until_ms).then_some(*r)
        })
        .collect();
    let decided_at_ms = remembered.iter().flatten().next()?.decided_at_ms;
    let decisions = check
        .items()
        .iter()
        .zip(remembered)
        .map(|(item, r)| match r {
            Some(r) => r.decision,
            None => {
                let mut state = match states.get(&state_key(item)) {
                    Some((state, _)) => state.clone(),
                    None => State::fresh(item.limit.policy.algorithm()),
                };
                state.apply(&item.limit.policy, now_ms, 0).decision
            }
        })
        .collect();
    Some(Verdict {
        allowed: true,
        decisions,
        atomic: true,
        decided_at_ms,
    })
}

/// Remembers an admitted check's decisions under each item's request id for its window.
fn remember(requests: &mut RequestMap, check: &Check, verdict: &Verdict, now_ms: u64) {
    for (item, decision) in check.items().iter().zip(&verdict.decisions) {
        if let Some(key) = request_key(item) {
            let until_ms = now_ms.saturating_add(item.remember_ms());
            let remembered = Remembered {
                until_ms,
                decided_at_ms: now_ms,
                decision: *decision,
            };
            requests.insert(key, remembered, until_ms.saturating_add(GC_GRACE_MS));
        }
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
            let outcome = state.apply_charge(policy, now_ms, item.cost, item.charge);
            if outcome.changed {
                map.set_expiry(&key, outcome.expire_at_ms.saturating_add(GC_GRACE_MS));
            }
            outcome
        }
        None => {
            let mut state = State::fresh(key.algorithm);
            let outcome = state.apply_charge(policy, now_ms, item.cost, item.charge);
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
