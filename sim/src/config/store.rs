//! The store a configuration replay decides against, on the trace's clocks, and unreachable during
//! `--outage` spans.
//!
//! The replay owns its store and uses it from one thread, and Redis evicts nothing a replay writes,
//! so states live in a plain table with no expiry index, no shards and no eviction, and each check
//! is decided by the library's own all-or-nothing rule over its states (`edgelimit::store::decide`,
//! what `MemoryStore` runs; a replayed configuration spends and credits no capacity lease, so
//! none is held). A state is dropped by `MemoryStore` only once it stopped mattering
//! (docs/design.md §3), so keeping it changes no decision. Checks carrying request ids (limits with
//! `idempotent = true`) need the remembered ids only `MemoryStore` keeps, and limits with
//! `block_for` the blocks it keeps beside their states: a configuration with such a limit is
//! replayed on the library's `MemoryStore` itself.
//!
//! The table is indexed, not hashed: an identifier's dense id (`Identifiers`, looked up once per
//! request and shared with the truths) times the number of the configuration's limit slots
//! (limit name and algorithm, as the library's stores key a state), plus the limit's slot. The
//! states of one identifier under every limit keyed by it sit side by side. A limit the
//! configuration did not name up front (none in practice) falls back to a map.
//!
//! Under `time = "server"` the Worker's two checks — enforced, then shadow — are two scripts in
//! one pipeline, each reading Redis `TIME`; the Worker logs both times, and a replay of its log
//! decides each check at its own.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use edgelimit::algorithm::State;
use edgelimit::store::decide_into;
use edgelimit::{Algorithm, Check, CheckItem, MemoryStore, Store, StoreError, TimeSource, Verdict};
use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use super::identifiers::Identifiers;
use super::prefetch::prefetch_bytes;

/// A limit as the library's stores key its state: its name (limits sharing a name share state)
/// and its algorithm.
type Slot = (Arc<str>, Algorithm);

/// States by dense identifier id and limit slot.
#[derive(Debug)]
struct Table {
    slots: Vec<Slot>,
    /// `id * slots.len() + slot`; rows are added as ids appear, fresh.
    states: Vec<State>,
    /// States of limits not among `slots`.
    others: FxHashMap<(Arc<str>, Algorithm, u32), State>,
}

/// Where in the table an item's state is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Row(usize),
    Other(u32),
}

impl Table {
    fn new(slots: Vec<Slot>) -> Table {
        Table {
            slots,
            states: Vec::new(),
            others: FxHashMap::default(),
        }
    }

    /// Where `item`'s state is, for the identifier of dense id `id`.
    fn place(&mut self, item: &CheckItem, id: u32) -> Place {
        let name = &item.limit.name;
        let algorithm = item.limit.policy.algorithm();
        // The item's name is the configuration's own `Arc` (pointer equal) unless two limits
        // share a name: compare pointers across all before comparing text.
        let slot = self
            .slots
            .iter()
            .position(|(n, a)| Arc::ptr_eq(n, name) && *a == algorithm)
            .or_else(|| {
                self.slots
                    .iter()
                    .position(|(n, a)| n == name && *a == algorithm)
            });
        let Some(slot) = slot else {
            return Place::Other(id);
        };
        let width = self.slots.len();
        let at = id as usize * width + slot;
        while self.states.len() <= at {
            let next = self.states.len() % width;
            self.states.push(State::fresh(self.slots[next].1));
        }
        Place::Row(at)
    }

    /// Starts fetching into cache the row of states of the identifier of dense id `id`, when it
    /// has one (a hint).
    fn prefetch_row(&self, id: u32) {
        let width = self.slots.len();
        let at = id as usize * width;
        if let Some(row) = self.states.get(at..at + width) {
            prefetch_bytes(row.as_ptr().cast(), std::mem::size_of_val(row));
        }
    }

    fn state(&mut self, place: Place, item: &CheckItem) -> &mut State {
        match place {
            Place::Row(at) => &mut self.states[at],
            Place::Other(id) => {
                let algorithm = item.limit.policy.algorithm();
                self.others
                    .entry((item.limit.name.clone(), algorithm, id))
                    .or_insert_with(|| State::fresh(algorithm))
            }
        }
    }

    /// Decides `check` at `now_ms` into `verdict` (see `Verdict::reuse`); `ids` gives each
    /// item's identifier its dense id.
    fn decide(&mut self, check: &Check, ids: &mut Identifiers, now_ms: u64, verdict: &mut Verdict) {
        let items = check.items();
        if let [item] = items {
            // One item: stepped in place (a denial never changes a state).
            let place = self.place(item, ids.id(&item.identifier));
            let state = self.state(place, item);
            decide_into(check, std::slice::from_mut(state), &mut [], now_ms, verdict);
            return;
        }
        let places: SmallVec<[Place; INLINE_ITEMS]> = items
            .iter()
            .map(|item| self.place(item, ids.id(&item.identifier)))
            .collect();
        // `Check::with_item` merges items of one limit and identifier, so no two items share a
        // state: the states move out, are decided together (the rule itself copies what it may
        // roll back) and move back, changed only if the check was admitted.
        debug_assert!(places
            .iter()
            .enumerate()
            .all(|(i, p)| !places[..i].contains(p)));
        let mut states: SmallVec<[State; INLINE_ITEMS]> = places
            .iter()
            .zip(items)
            .map(|(&p, item)| std::mem::replace(self.state(p, item), placeholder()))
            .collect();
        decide_into(check, &mut states, &mut [], now_ms, verdict);
        for ((&p, item), state) in places.iter().zip(items).zip(states) {
            *self.state(p, item) = state;
        }
    }
}

/// Items of a check decided without allocating (the Worker's checks have one per limit of the
/// matched rules).
const INLINE_ITEMS: usize = 8;

/// What stands in a state's place while it is being decided: the smallest state, allocating
/// nothing.
fn placeholder() -> State {
    State::fresh(Algorithm::FixedWindow)
}

/// Where the replay's states live.
#[derive(Debug)]
enum States {
    /// The table, used from one thread (the mutex is never contended).
    Table(Mutex<Table>),
    /// The library's store, for configurations with idempotent or blocking limits and for
    /// replays given tiers, overrides or lists (`--overrides`), which only it keeps.
    Memory(Box<MemoryStore>),
}

/// The replay's store: its states, the identifiers' dense ids, the store clock set per request,
/// and an on/off switch.
#[derive(Debug)]
pub struct ReplayStore {
    states: States,
    identifiers: Mutex<Identifiers>,
    enforced_ms: AtomicU64,
    shadow_ms: AtomicU64,
    down: AtomicBool,
    /// The names of the shadow rules' limits: a check holding one is the shadow check (a shadow
    /// rule may not share a limit with an enforced one, so names tell the checks apart).
    shadow_limits: Vec<Arc<str>>,
}

impl ReplayStore {
    /// A store for the limits `slots` (name and algorithm, each once); checks of `shadow_limits`
    /// are decided at the shadow time. `on_memory`: the library's `MemoryStore` keeps the states
    /// (some limit carries request ids, or the replay holds assignments and lists), else the
    /// table does.
    pub fn new(slots: Vec<Slot>, shadow_limits: Vec<Arc<str>>, on_memory: bool) -> ReplayStore {
        ReplayStore {
            states: if on_memory {
                // Redis evicts nothing a replay writes; the library's bound is for attackers.
                States::Memory(Box::new(MemoryStore::with_capacity(usize::MAX >> 1)))
            } else {
                States::Table(Mutex::new(Table::new(slots)))
            },
            identifiers: Mutex::new(Identifiers::default()),
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

    /// The library's `MemoryStore` the states live in, when they do (see [`ReplayStore::new`]):
    /// where `--overrides` writes its tiers, overrides and lists, as `edgelimit-admin` writes
    /// them to Redis.
    pub fn memory(&self) -> Option<&MemoryStore> {
        match &self.states {
            States::Memory(memory) => Some(memory),
            States::Table(_) => None,
        }
    }

    /// Makes the store unreachable (an outage) or reachable again.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::Relaxed);
    }

    /// Starts fetching into cache the identifier table's slot for hash `hashed`
    /// (`identifiers::hash`): the first of two stages, some requests ahead (see
    /// `EdgeReplay::prepare`).
    pub fn prefetch_slot(&mut self, hashed: u64) {
        self.identifiers_mut().prefetch_slot(hashed);
    }

    /// Starts fetching into cache what deciding for the identifier of hash `hashed` will read:
    /// its key and its row of states, found by the slot fetched before (a hint).
    pub fn prefetch_states(&mut self, hashed: u64) {
        let ids = self.identifiers_mut();
        let Some(id) = ids.likely_id(hashed) else {
            return;
        };
        ids.prefetch_key(id);
        if let States::Table(table) = &mut self.states {
            owned(table).prefetch_row(id);
        }
    }

    /// The identifiers' dense ids, reached without locking (the store is owned).
    pub fn identifiers_mut(&mut self) -> &mut Identifiers {
        owned(&mut self.identifiers)
    }

    /// The identifiers' dense ids (call [`Identifiers::next_request`] before each request).
    pub fn identifiers(&self) -> MutexGuard<'_, Identifiers> {
        lock(&self.identifiers)
    }

    fn is_shadow(&self, check: &Check) -> bool {
        check.items().first().is_some_and(|item| {
            let name = &item.limit.name;
            // The configuration's own `Arc`s: pointers first, text only if none is equal.
            self.shadow_limits.iter().any(|n| Arc::ptr_eq(n, name))
                || self.shadow_limits.iter().any(|n| n == name)
        })
    }

    /// The time `check` is decided at under `time`.
    fn now_ms(&self, check: &Check, time: TimeSource) -> u64 {
        match time {
            TimeSource::At(ms) => ms,
            TimeSource::Server if self.is_shadow(check) => self.shadow_ms.load(Ordering::Relaxed),
            TimeSource::Server => self.enforced_ms.load(Ordering::Relaxed),
        }
    }

    /// Decides `checks` in order, each at its time under `time`, into `verdicts` (reused, see
    /// `Verdict::reuse`).
    fn decide_all(&self, checks: &[Check], time: TimeSource, verdicts: &mut Vec<Verdict>) {
        match &self.states {
            States::Memory(memory) => {
                verdicts.clear();
                verdicts.extend(checks.iter().map(|check| {
                    let now = self.now_ms(check, time);
                    let mut answer = memory.direct().check(std::slice::from_ref(check), now);
                    answer.pop().expect("one verdict per check")
                }));
            }
            States::Table(table) => {
                let (mut table, mut ids) = (lock(table), self.identifiers());
                for (at, check) in checks.iter().enumerate() {
                    let now = self.now_ms(check, time);
                    table.decide(check, &mut ids, now, Verdict::reuse(verdicts, at));
                }
                verdicts.truncate(checks.len());
            }
        }
    }
}

/// Locks a mutex only this replay's thread uses (a poisoned one still holds whole states: a step
/// never panics half way through writing one).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// What an owned mutex holds, reached without locking; recovered from poisoning as [`lock`] is.
fn owned<T>(mutex: &mut Mutex<T>) -> &mut T {
    mutex.get_mut().unwrap_or_else(|e| e.into_inner())
}

#[async_trait]
impl Store for ReplayStore {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        let mut verdicts = Vec::new();
        self.check_into(checks, time, &mut verdicts).await?;
        Ok(verdicts)
    }

    async fn check_into(
        &self,
        checks: &[Check],
        time: TimeSource,
        verdicts: &mut Vec<Verdict>,
    ) -> Result<(), StoreError> {
        if self.down.load(Ordering::Relaxed) {
            verdicts.clear();
            return Err(StoreError::Unreachable("--outage".into()));
        }
        self.decide_all(checks, time, verdicts);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::Rng;
    use edgelimit::{Identifier, Limit, Policy};

    /// Random checks of one to four items — limits of every algorithm and one the table was not
    /// told of — decided by the table and by the library's `MemoryStore`: the same verdicts,
    /// check by check.
    #[test]
    fn the_table_decides_as_the_librarys_memory_store() {
        let limit = |name: &str, policy: &str| Limit::new(name, policy.parse::<Policy>().unwrap());
        let limits = [
            limit("a", "fixed 3/100ms"),
            limit("b", "sliding-log 2/50ms"),
            limit("c", "sliding-counter 4/80ms"),
            limit("d", "token-bucket 2/40ms burst 3"),
            limit("e", "gcra 3/90ms burst 2"),
            limit("unlisted", "fixed 1/30ms"),
        ];
        let slots = limits[..5]
            .iter()
            .map(|l| (l.name.clone(), l.policy.algorithm()))
            .collect();
        let table = ReplayStore::new(slots, Vec::new(), false);
        let memory = ReplayStore::new(Vec::new(), Vec::new(), true);
        let mut rng = Rng::new(0x853c_49e6_748f_ea9b);
        let mut next = move |n: u64| rng.below(n);
        let mut t = 1_000u64;
        let mut several_admitted = 0;
        let mut ours = Vec::new();
        for step in 0..5_000 {
            t = if next(10) == 0 {
                t.saturating_sub(next(20))
            } else {
                t + next(15)
            };
            // Batches of one to three checks, the table answering into one buffer throughout:
            // what an earlier, longer batch left there must never show through.
            let checks: Vec<Check> = (0..1 + next(3))
                .map(|_| {
                    let mut check = Check::new();
                    for _ in 0..1 + next(4) {
                        let limit = &limits[next(limits.len() as u64) as usize];
                        let who = Identifier::from(format!("id-{}", next(4)));
                        check = check.with_item(CheckItem::new(limit, who, 1 + next(2) as i64));
                    }
                    check
                })
                .collect();
            table.identifiers().next_request();
            let at = TimeSource::At(t);
            table.decide_all(&checks, at, &mut ours);
            let mut theirs = Vec::new();
            memory.decide_all(&checks, at, &mut theirs);
            assert_eq!(ours.len(), checks.len());
            for ((check, ours), theirs) in checks.iter().zip(&ours).zip(&theirs) {
                several_admitted += u64::from(check.items().len() > 1 && ours.allowed);
                assert_eq!(ours, theirs, "step {step} at {t}: {check:?}");
            }
        }
        // Checks of several items were admitted (and changed their states), not only denied.
        assert!(several_admitted > 100, "{several_admitted}");
    }
}
