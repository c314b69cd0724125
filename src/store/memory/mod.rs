//! `MemoryStore`: the pure steps over a bounded in-process map. The embedded default, the
//! simulator's store, the local fallback, and the reference every other store is tested against.
//!
//! The keys are spread over shards by their (secretly seeded) hash, each shard a lock around a
//! [`StateMap`], so threads deciding for different identifiers rarely wait for one another.
//! Small stores have one shard. See docs/decisions.md, "Memory", for the measurements behind it.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use super::batch::{self, Gated};
use super::check::{Check, CheckItem, Identifier, Limit, TimeSource, Verdict};
use super::error::StoreError;
use super::expiring_map::ExpiringMap;
use super::key_hasher::KeyHasher;
use super::remembered::{self, RequestMap};
use super::saved::{self, Saved};
use super::state_key::KeyRef;
use super::state_map::StateMap;
use super::traits::{Control, Store};
use crate::algorithm::{capacity_lease, CapacityLease, Charge, State, StepOutcome};
use crate::clock::{Clock, SystemClock};
use crate::control::list::{self, ListEntry};
use crate::control::{Assignment, AssignmentKind, ControlAnswer, ControlOp};
use crate::decision::Decision;
use crate::global::take::{self, Take, Taken};
use crate::policy::{Algorithm, Policy};

mod control;
mod direct;
mod persist;

pub use direct::Direct;

/// How long after its state stops mattering a key is kept anyway, in every store: a caller whose
/// clock lags a little still finds the state it wrote (Redis TTLs use the same margin).
pub const GC_GRACE_MS: u64 = 60_000;

/// The default bound on keys held by a [`MemoryStore`].
pub const DEFAULT_CAPACITY: usize = 1 << 20;

/// Stores holding fewer than twice this many keys have a single shard (eviction then picks the
/// soonest-expiring key of the whole store).
const MIN_SHARD_CAPACITY: usize = 4096;

/// The most keys a shard holds: exactly what a hash table of 2^14 slots holds at hashbrown's
/// maximum load of 7/8. A full shard then fills its table instead of doubling it for a few more
/// keys (1M keys in 64 equal shards took 2^15 slots each, at load 0.48).
const MAX_SHARD_CAPACITY: usize = (1 << 14) / 8 * 7;

/// The most shards a store has. A store bounded beyond `MAX_SHARDS * MAX_SHARD_CAPACITY` keys
/// (e.g. the simulator's, which must evict nothing) has larger shards whose tables grow with
/// use, rather than a shard vector sized by its bound.
const MAX_SHARDS: usize = 1024;

/// How often (on the callers' clock) shards that no check touched are purged too. A shard is
/// always purged when a check locks it; this only bounds how long an idle shard keeps garbage.
const SWEEP_EVERY_MS: u64 = 1_000;

/// Assignments (at most a tier and an override) by (limit name, identifier), each with when it
/// lapses, the override first.
type AssignmentMap = HashMap<(Arc<str>, Identifier), Vec<(Assignment, Option<u64>)>>;
/// Capacity leases of global limits (docs/design.md §9) by (limit name, identifier), as Redis
/// keys them beside the state whatever the algorithm; each kept [`GC_GRACE_MS`] past its end.
type LeaseMap = ExpiringMap<(Arc<str>, Identifier), CapacityLease>;
/// Blocks (docs/design.md §2, "Blocks") by (limit name, identifier): the end of each, kept
/// [`GC_GRACE_MS`] past it, as Redis keeps `{el:<ns>:<limit>:<id>}:block` beside the state.
type BlockMap = ExpiringMap<(Arc<str>, Identifier), u64>;
/// Each item's block end in a check (0: none), inline for a request's few items.
type BlocksOf = smallvec::SmallVec<[u64; 4]>;
/// Each item's capacity lease in a check, inline for a request's few items.
type LeasesOf = smallvec::SmallVec<[CapacityLease; 4]>;
/// Deny and allow lists: list name → member → the epoch ms it lapses at
/// ([`list::NEVER_MS`] for never), as a Redis sorted set holds them.
type Lists = HashMap<String, HashMap<String, u64>>;

/// One lock's share of the keys, on cache lines of its own, so that two threads working on two
/// shards never write to one line.
#[repr(align(128))]
struct Shard(Mutex<StateMap>);

/// An in-process store. Entries are dropped [`GC_GRACE_MS`] after their state stops mattering,
/// and at most `capacity` are held. Keys are spread over shards by a secretly seeded hash, each
/// shard holding its share of the capacity; when a shard is full, its entry that expires soonest
/// is evicted. A store with capacity under 8192 has one shard, so
/// there the soonest-expiring entry of the whole store is evicted.
pub struct MemoryStore {
    shards: Box<[Shard]>,
    // Remembered request ids (see `remembered`). Taken only by checks carrying one, always
    // before any shard lock.
    requests: Mutex<RequestMap>,
    // Deny and allow lists. Taken only by gated checks and list calls.
    lists: Mutex<Lists>,
    // Capacity leases. Taken only by checks that spend or credit one, always after any shard
    // lock (the one order: requests, shards, leases).
    leases: Mutex<LeaseMap>,
    // Blocks. Taken only by checks with an item on a limit with a block duration, always after
    // the leases' lock (the one order: requests, shards, leases, blocks).
    blocks: Mutex<BlockMap>,
    hasher: KeyHasher,
    capacity: usize,
    // The callers' time at or after which the next call purges every shard.
    next_sweep_ms: AtomicU64,
    clock: Arc<dyn Clock>,
    // Tiers and overrides (docs/design.md §2, "Policy changes"). `assigned` mirrors the map's
    // size so that a store without any assignment — the common case — decides without taking
    // this lock: the fast path stays as fast.
    assignments: Mutex<AssignmentMap>,
    assigned: AtomicUsize,
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("capacity", &self.capacity)
            .field("shards", &self.shards.len())
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
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

    /// A store holding at most `capacity` keys (at least one).
    pub fn with_capacity(capacity: usize) -> MemoryStore {
        let capacity = capacity.max(1);
        let count = shard_count(capacity);
        let hasher = KeyHasher::random();
        let shards = (0..count)
            .map(|i| {
                // The remainder goes to the first shards, so the shares add up to `capacity`.
                let share = capacity / count + usize::from(i < capacity % count);
                Shard(Mutex::new(StateMap::new(share, hasher.clone())))
            })
            .collect();
        MemoryStore {
            shards,
            requests: Mutex::new(ExpiringMap::new(capacity)),
            lists: Mutex::new(HashMap::new()),
            leases: Mutex::new(ExpiringMap::new(capacity)),
            blocks: Mutex::new(ExpiringMap::new(capacity)),
            hasher,
            capacity,
            next_sweep_ms: AtomicU64::new(0),
            clock: Arc::new(SystemClock),
            assignments: Mutex::new(HashMap::new()),
            assigned: AtomicUsize::new(0),
        }
    }

    /// The same store reading `TimeSource::Server` from `clock` (for tests and replays).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> MemoryStore {
        self.clock = clock;
        self
    }

    /// The number of limiter states held (remembered request ids are not counted).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decides one check under its limits' own policies, without lists, assignments or request
    /// ids: the limiter's fallback while its store is down (a `Check::single`). Apart from
    /// [`MemoryStore::check_now`] so a Worker, whose fallback is all it uses of this store, does
    /// not link the gated and assignment paths (docs/decisions.md, Size).
    pub(crate) fn check_plain_now(&self, check: &Check, now_ms: u64) -> Verdict {
        self.sweep_if_due(now_ms);
        self.decide(check, now_ms)
    }

    /// Decides checks synchronously (the store has no I/O); the async [`Store::check`] calls this.
    ///
    /// # Panics
    ///
    /// On a check every store refuses as bad input: an item on a concurrency limit spending or
    /// crediting a capacity lease (docs/design.md §9), or on a limit delaying requests or
    /// blocking longer than 366 days (docs/design.md §2), which [`Store::check`] answers with
    /// [`StoreError::InvalidInput`].
    pub(super) fn check_now(&self, checks: &[Check], now_ms: u64) -> Vec<Verdict> {
        for check in checks {
            if let Err(refused) = check.refuse_bad_items() {
                panic!("{refused}");
            }
        }
        let mut verdicts = Vec::with_capacity(checks.len());
        self.check_now_into(checks, now_ms, &mut verdicts);
        verdicts
    }

    /// [`MemoryStore::check_now`] into `verdicts`, reusing what it holds ([`Store::check_into`]):
    /// a check without lists or request ids, a layer's usual one, allocates nothing once the
    /// caller's buffer has held a verdict. The checks' leases are the caller's to have checked.
    fn check_now_into(&self, checks: &[Check], now_ms: u64, verdicts: &mut Vec<Verdict>) {
        self.sweep_if_due(now_ms);
        for (at, check) in checks.iter().enumerate() {
            let effective = self.effective(check, now_ms);
            if check.is_gated() {
                *Verdict::reuse(verdicts, at) = self.decide_gated(check, &effective, now_ms);
            } else if remembered::carries_request_id(check) {
                *Verdict::reuse(verdicts, at) = self.decide_remembering(check, &effective, now_ms);
            } else {
                self.decide_into(&effective, now_ms, Verdict::reuse(verdicts, at));
            }
        }
        verdicts.truncate(checks.len());
    }

    /// A gated check: the lists first (docs/design.md §"Deny and allow lists"), then what no
    /// list settled, as any check.
    ///
    /// `effective` is `check` under the effective policies (which decide); `check` itself is
    /// remembered under its request ids, as in [`Self::decide_remembering`].
    fn decide_gated(&self, check: &Check, effective: &Check, now_ms: u64) -> Verdict {
        let candidates = check.probe().candidates();
        let listed = {
            let lists = self.lists.lock().unwrap_or_else(|e| e.into_inner());
            list::resolve(check.gates(), candidates, |name| {
                let members = lists.get(name)?;
                candidates
                    .iter()
                    .position(|c| members.get(c).is_some_and(|&lapse| lapse > now_ms))
            })
        };
        match batch::split_gated(effective, listed.clone(), now_ms) {
            Gated::Denied(verdict) => verdict,
            Gated::Decide {
                rest,
                allowlisted,
                listed: found,
            } => {
                let verdict = if remembered::carries_request_id(&rest) {
                    let own = match batch::split_gated(check, listed, now_ms) {
                        Gated::Decide { rest, .. } => rest,
                        Gated::Denied(_) => unreachable!("the same lists denied nothing"),
                    };
                    self.decide_remembering(&own, &rest, now_ms)
                } else {
                    self.decide(&rest, now_ms)
                };
                batch::merge_gated(allowlisted, found, verdict)
                    .expect("a memory verdict has one decision per item")
            }
        }
    }

    /// Decides one limit for one identifier: what `check_now` answers for
    /// `Check::single(limit, identifier, cost)`, without building the check or the verdict.
    /// Allocates nothing unless a new state is stored.
    pub(super) fn check_one(
        &self,
        limit: &Limit,
        identifier: &[u8],
        cost: i64,
        now_ms: u64,
    ) -> Decision {
        self.sweep_if_due(now_ms);
        if self.assigned.load(Ordering::Relaxed) > 0 {
            let id = Identifier::from(identifier);
            let mut effective = limit.clone();
            effective.policy = self.effective_policy(limit, &id, now_ms);
            return self.decide_one(&effective, identifier, cost, Charge::Request, now_ms);
        }
        self.decide_one(limit, identifier, cost, Charge::Request, now_ms)
    }

    /// The effective policy of (limit, identifier) at `now_ms` (docs/design.md §2).
    fn effective_policy(&self, limit: &Limit, identifier: &Identifier, now_ms: u64) -> Policy {
        let assigned = self.assignments_now(limit, identifier);
        *limit.effective_policy(&assigned, now_ms)
    }

    /// `check` with each item's policy replaced by its effective one — the check itself, not
    /// copied, while the store holds no assignment.
    fn effective<'a>(&self, check: &'a Check, now_ms: u64) -> Cow<'a, Check> {
        if self.assigned.load(Ordering::Relaxed) == 0 {
            return Cow::Borrowed(check);
        }
        let mut changed = check.clone();
        changed.map_policies(|item| self.effective_policy(&item.limit, &item.identifier, now_ms));
        Cow::Owned(changed)
    }

    /// A check without request ids.
    fn decide(&self, check: &Check, now_ms: u64) -> Verdict {
        let mut verdict = Verdict::empty();
        self.decide_into(check, now_ms, &mut verdict);
        verdict
    }

    /// [`Self::decide`] written into `verdict`, as [`Verdict::reuse`] left it (no decision, no
    /// list match): a single limit's decision goes into its buffer.
    fn decide_into(&self, check: &Check, now_ms: u64, verdict: &mut Verdict) {
        match check.items() {
            [item] if !item.uses_lease() && !item.applies_block() => {
                let (limit, id) = (&item.limit, item.identifier.as_bytes());
                let decision = self.decide_one(limit, id, item.cost, item.charge, now_ms);
                verdict.allowed = decision.allowed;
                verdict.decisions.push(decision);
                verdict.atomic = true;
                verdict.decided_at_ms = now_ms;
            }
            _ => *verdict = self.decide_all_or_nothing(check, now_ms),
        }
    }

    /// A check carrying request ids: a repeat of an admitted one answers what was remembered
    /// for its remembered items and decides the others anew (docs/design.md §3); a new one is
    /// decided and, if admitted, remembered. All under the requests' lock, so a repeat racing
    /// its original waits for it.
    ///
    /// `effective` is `check` under the effective policies (which decide and look); `check`
    /// itself is remembered, for its limits' own windows, as the scripts do.
    fn decide_remembering(&self, check: &Check, effective: &Check, now_ms: u64) -> Verdict {
        let mut requests = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        requests.purge_expired(gc_horizon(now_ms));
        let Some(found) = remembered::recall(&requests, check, now_ms) else {
            let verdict = self.decide(effective, now_ms);
            if verdict.allowed {
                remembered::remember(&mut requests, check, &verdict, now_ms);
            }
            return verdict;
        };
        if remembered::all_remembered(&found) {
            return remembered::repeat(&found);
        }
        let own = remembered::unremembered(check, &found);
        let fresh = self.decide(&remembered::unremembered(effective, &found), now_ms);
        if fresh.allowed {
            remembered::remember(&mut requests, &own, &fresh, now_ms);
            return remembered::partial_repeat(effective, &found, fresh, |_, _| {
                unreachable!("an admitted partial repeat answers its remembered decisions")
            });
        }
        let (keys, hashes) = self.keys(effective.items());
        let mut locked = self.lock_involved(&hashes);
        let leases = self.held_leases(effective.items(), now_ms);
        remembered::partial_repeat(effective, &found, fresh, |i, item| {
            let (key, hash) = (&keys[i], hashes[i]);
            let map = shard_map(&mut locked, self.shard_index(hash));
            let state = match map.find_mut(hash, key) {
                Some(held) => held.state(),
                None => State::fresh(item.limit.policy.algorithm()),
            };
            let lease = leases
                .as_ref()
                .map_or(CapacityLease::default(), |(l, _)| l[i]);
            capacity_lease::look(
                &item.limit.policy,
                &state,
                &lease,
                now_ms,
                item.charge,
                item.spend_lease,
                item.max_delay_ms(),
            )
            .decision
        })
    }

    fn decide_one(
        &self,
        limit: &Limit,
        identifier: &[u8],
        cost: i64,
        charge: Charge,
        now_ms: u64,
    ) -> Decision {
        if limit.block_ms > 0 && charge == Charge::Request && cost > 0 {
            // A blocking limit's state has its block beside it: the general path reads both.
            let item = CheckItem::new(limit, identifier, cost);
            let verdict = self.decide_all_or_nothing(&Check::new().with_item(item), now_ms);
            return verdict.decisions[0];
        }
        let key = KeyRef::new(&limit.name, limit.policy.algorithm(), identifier);
        let (hash, mut map) = self.locked(&key, now_ms);
        apply(&mut map, hash, &key, limit, cost, charge, now_ms).decision
    }

    /// The key's hash and its shard, locked and purged at `now_ms`: the one way to reach a
    /// single state. Under the guard, `map.find_mut(hash, key)` gives the held state (to read,
    /// change in place or replace, its expiry to move), `map.insert_absent` stores a new one
    /// (evicting the soonest-expiring when the shard is full), and `map.remove` drops one.
    /// Several states at once: [`Self::keys`] and [`Self::lock_involved`].
    fn locked(&self, key: &KeyRef<'_>, now_ms: u64) -> (u64, MutexGuard<'_, StateMap>) {
        let hash = key.hash(&self.hasher);
        let mut map = lock(self.shard(hash));
        map.purge_expired(gc_horizon(now_ms));
        (hash, map)
    }

    /// The state keys of `items` and their hashes.
    fn keys<'a>(&self, items: &'a [CheckItem]) -> (Vec<KeyRef<'a>>, Vec<u64>) {
        let keys: Vec<KeyRef<'a>> = items
            .iter()
            .map(|item| {
                let algorithm = item.limit.policy.algorithm();
                KeyRef::new(&item.limit.name, algorithm, item.identifier.as_bytes())
            })
            .collect();
        let hashes = keys.iter().map(|key| key.hash(&self.hasher)).collect();
        (keys, hashes)
    }

    /// Locks the shards holding `hashes`, each once. Locks are taken in ascending shard
    /// order, the one order every caller uses, so two checks can never each hold a lock the
    /// other waits for.
    fn lock_involved(&self, hashes: &[u64]) -> Vec<(usize, MutexGuard<'_, StateMap>)> {
        let mut involved: Vec<usize> = hashes.iter().map(|&h| self.shard_index(h)).collect();
        involved.sort_unstable();
        involved.dedup();
        involved
            .into_iter()
            .map(|i| (i, lock(&self.shards[i])))
            .collect()
    }

    /// Several limits, all or nothing (or one spending or crediting its capacity lease): every
    /// shard involved is locked, the states and leases are decided together by
    /// [`batch::decide`] on copies, and those that changed are written back.
    fn decide_all_or_nothing(&self, check: &Check, now_ms: u64) -> Verdict {
        let items = check.items();
        let (keys, hashes) = self.keys(items);
        let mut locked = self.lock_involved(&hashes);
        for (_, map) in &mut locked {
            map.purge_expired(gc_horizon(now_ms));
        }
        let mut states: Vec<State> = items
            .iter()
            .zip(keys.iter().zip(&hashes))
            .map(|(item, (key, &hash))| {
                let map = shard_map(&mut locked, self.shard_index(hash));
                match map.find_mut(hash, key) {
                    Some(held) => held.state(),
                    None => State::fresh(item.limit.policy.algorithm()),
                }
            })
            .collect();
        let mut leases = self.held_leases(items, now_ms);
        // Only the leases that changed are written: what was held is kept to tell.
        let before: LeasesOf = leases
            .as_ref()
            .map_or_else(LeasesOf::new, |(l, _)| l.clone());
        let mut blocks = self.held_blocks(items, now_ms);
        let blocks_before: BlocksOf = blocks
            .as_ref()
            .map_or_else(BlocksOf::new, |(b, _)| b.clone());
        let mut verdict = Verdict::empty();
        let no_blocks: &mut [u64] = &mut [];
        let block_ends = blocks.as_mut().map_or(no_blocks, |(b, _)| &mut b[..]);
        let outcomes = match &mut leases {
            Some((leases, _)) => batch::decide_blocking_into(
                check,
                &mut states,
                leases,
                block_ends,
                now_ms,
                &mut verdict,
            ),
            None => batch::decide_blocking_into(
                check,
                &mut states,
                &mut [],
                block_ends,
                now_ms,
                &mut verdict,
            ),
        };
        if let Some((after, mut table)) = blocks {
            for ((item, before), &end) in items.iter().zip(&blocks_before).zip(&after) {
                if *before != end {
                    let key = (item.limit.name.clone(), item.identifier.clone());
                    table.insert(key, end, end.saturating_add(GC_GRACE_MS));
                }
            }
        }
        if let Some((after, mut table)) = leases {
            for ((item, before), after) in items.iter().zip(&before).zip(&after) {
                if before != after {
                    let key = (item.limit.name.clone(), item.identifier.clone());
                    table.insert(key, *after, after.until_ms().saturating_add(GC_GRACE_MS));
                }
            }
        }
        for ((item, (key, &hash)), (state, outcome)) in items
            .iter()
            .zip(keys.iter().zip(&hashes))
            .zip(states.into_iter().zip(&outcomes))
        {
            // Only what was written changes: a denial changes nothing, and a fresh key that was
            // only looked at stays absent.
            if !outcome.changed {
                continue;
            }
            let map = shard_map(&mut locked, self.shard_index(hash));
            let keep_until = keep_until(outcome);
            match map.find_mut(hash, key) {
                Some(mut held) => {
                    held.set(state);
                    held.set_expiry(keep_until);
                }
                None => map.insert_absent(hash, key, &item.limit.name, state, keep_until),
            }
        }
        verdict
    }

    /// The capacity lease of each of `items`, when any spends or credits one (else `None`, and
    /// the leases' lock is not taken), with the leases' lock held: to be taken after any shard
    /// lock. An item that uses none is given no lease.
    fn held_leases(
        &self,
        items: &[CheckItem],
        now_ms: u64,
    ) -> Option<(LeasesOf, MutexGuard<'_, LeaseMap>)> {
        if !items.iter().any(CheckItem::uses_lease) {
            return None;
        }
        let mut table = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        table.purge_expired(gc_horizon(now_ms));
        let held = items
            .iter()
            .map(|item| {
                if !item.uses_lease() {
                    return CapacityLease::default();
                }
                let key = (item.limit.name.clone(), item.identifier.clone());
                table
                    .get(&key)
                    .map_or(CapacityLease::default(), |(l, _)| *l)
            })
            .collect();
        Some((held, table))
    }

    /// The end of each of `items`' blocks (0: none), when any applies one (else `None`, and the
    /// blocks' lock is not taken), with the blocks' lock held: to be taken after the leases'.
    fn held_blocks(
        &self,
        items: &[CheckItem],
        now_ms: u64,
    ) -> Option<(BlocksOf, MutexGuard<'_, BlockMap>)> {
        if !items.iter().any(CheckItem::applies_block) {
            return None;
        }
        let mut table = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        table.purge_expired(gc_horizon(now_ms));
        let held = items
            .iter()
            .map(|item| {
                if !item.applies_block() {
                    return 0;
                }
                let key = (item.limit.name.clone(), item.identifier.clone());
                table.get(&key).map_or(0, |(end, _)| *end)
            })
            .collect();
        Some((held, table))
    }

    fn shard_index(&self, hash: u64) -> usize {
        // Bits 16..48 scaled to the shard count (a multiply, not a modulo). The table inside a
        // shard indexes by the low bits and tags entries by the top seven, so the shard is chosen
        // from bits that neither uses: keys of one shard still differ in both.
        let bits = (hash >> 16) as u32;
        ((u64::from(bits) * self.shards.len() as u64) >> 32) as usize
    }

    fn shard(&self, hash: u64) -> &Shard {
        &self.shards[self.shard_index(hash)]
    }

    /// Purges every shard once per [`SWEEP_EVERY_MS`] of the callers' time: shards that checks
    /// touch are purged then anyway, this reaches the idle ones.
    #[inline]
    fn sweep_if_due(&self, now_ms: u64) {
        let due = self.next_sweep_ms.load(Ordering::Relaxed);
        if now_ms >= due {
            self.sweep(due, now_ms);
        }
    }

    #[cold]
    fn sweep(&self, due: u64, now_ms: u64) {
        let next = now_ms.saturating_add(SWEEP_EVERY_MS);
        if self
            .next_sweep_ms
            .compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return; // another caller is sweeping
        }
        for shard in self.shards.iter() {
            lock(shard).purge_expired(gc_horizon(now_ms));
        }
        let mut requests = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        requests.purge_expired(gc_horizon(now_ms));
        drop(requests);
        let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        leases.purge_expired(gc_horizon(now_ms));
        drop(leases);
        let mut blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        blocks.purge_expired(gc_horizon(now_ms));
        drop(blocks);
        if self.assigned.load(Ordering::Relaxed) > 0 {
            // Lapsed assignments are kept as long as states, then dropped.
            let mut map = self.assignments.lock().unwrap_or_else(|e| e.into_inner());
            let horizon = gc_horizon(now_ms);
            map.retain(|_, held| {
                held.retain(|(_, until)| until.is_none_or(|u| u > horizon));
                !held.is_empty()
            });
            self.assigned.store(map.len(), Ordering::Relaxed);
        }
    }
}

/// The shard count for `capacity`: one for small stores, else enough that no shard holds more
/// than [`MAX_SHARD_CAPACITY`] keys (and at least two), up to [`MAX_SHARDS`].
fn shard_count(capacity: usize) -> usize {
    if capacity < 2 * MIN_SHARD_CAPACITY {
        1
    } else {
        capacity.div_ceil(MAX_SHARD_CAPACITY).clamp(2, MAX_SHARDS)
    }
}

fn lock(shard: &Shard) -> MutexGuard<'_, StateMap> {
    // A poisoned lock is still safe to use: a write replaces a complete state, and nothing that
    // can panic runs between the writes of one multi-limit check.
    shard.0.lock().unwrap_or_else(|e| e.into_inner())
}

fn shard_map<'a>(
    locked: &'a mut [(usize, MutexGuard<'_, StateMap>)],
    shard: usize,
) -> &'a mut StateMap {
    let (_, map) = locked
        .iter_mut()
        .find(|(i, _)| *i == shard)
        .expect("every involved shard is locked");
    map
}

/// States whose stored expiry is at or before this are dropped before deciding at `now_ms`.
fn gc_horizon(now_ms: u64) -> u64 {
    now_ms.saturating_sub(GC_GRACE_MS)
}

/// The stored expiry of a state written with `outcome`: [`GC_GRACE_MS`] past the moment it
/// stops mattering.
fn keep_until(outcome: &StepOutcome) -> u64 {
    outcome.expire_at_ms.saturating_add(GC_GRACE_MS)
}

/// One limit for one identifier, in place: a denial never changes a state, so there is nothing
/// to copy or roll back.
fn apply(
    map: &mut StateMap,
    hash: u64,
    key: &KeyRef<'_>,
    limit: &Limit,
    cost: i64,
    charge: Charge,
    now_ms: u64,
) -> StepOutcome {
    let policy = &limit.policy;
    if let Some(mut held) = map.find_mut(hash, key) {
        let delay = limit.delay_ms();
        let outcome =
            held.update(|state| state.apply_charge_delaying(policy, now_ms, cost, charge, delay));
        if outcome.changed {
            held.set_expiry(keep_until(&outcome));
        }
        return outcome;
    }
    let mut state = State::fresh(policy.algorithm());
    let outcome = state.apply_charge_delaying(policy, now_ms, cost, charge, limit.delay_ms());
    // A fresh key that was only looked at or denied stays absent.
    if outcome.changed {
        map.insert_absent(hash, key, &limit.name, state, keep_until(&outcome));
    }
    outcome
}

impl MemoryStore {
    /// One take ([`crate::global::take`]) on the Rust step, its state and lease under their
    /// locks (shard, then leases: the one order).
    fn take_one(&self, take: &Take, now_ms: u64) -> Taken {
        let item = &take.item;
        let algorithm = item.limit.policy.algorithm();
        let policy = if self.assigned.load(Ordering::Relaxed) > 0 {
            self.effective_policy(&item.limit, &item.identifier, now_ms)
        } else {
            item.limit.policy
        };
        let key = KeyRef::new(&item.limit.name, algorithm, item.identifier.as_bytes());
        let (hash, mut map) = self.locked(&key, now_ms);
        let mut state = match map.find_mut(hash, &key) {
            Some(held) => held.state(),
            None => State::fresh(algorithm),
        };
        let mut leases = item.uses_lease().then(|| {
            let mut table = self.leases.lock().unwrap_or_else(|e| e.into_inner());
            table.purge_expired(gc_horizon(now_ms));
            table
        });
        let lease_key = (item.limit.name.clone(), item.identifier.clone());
        let before = leases
            .as_ref()
            .and_then(|table| table.get(&lease_key).map(|(l, _)| *l))
            .unwrap_or_default();
        let mut lease = before;
        let (granted, outcome) = take::take(
            &policy,
            &mut state,
            &mut lease,
            now_ms,
            take.want(),
            take.need,
            item.spend_lease,
        );
        if let Some(table) = leases.as_mut() {
            if lease != before {
                let keep = lease.until_ms().saturating_add(GC_GRACE_MS);
                table.insert(lease_key, lease, keep);
            }
        }
        if outcome.changed {
            let keep_until = keep_until(&outcome);
            match map.find_mut(hash, &key) {
                Some(mut held) => {
                    held.set(state);
                    held.set_expiry(keep_until);
                }
                None => map.insert_absent(hash, &key, &item.limit.name, state, keep_until),
            }
        }
        Taken {
            granted,
            decision: outcome.decision,
        }
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl Store for MemoryStore {
    /// On the Rust step, each take in order.
    async fn take(&self, takes: &[Take], time: TimeSource) -> Result<Vec<Taken>, StoreError> {
        for take in takes {
            take.refuse_bad()?;
        }
        let now_ms = match time {
            TimeSource::At(ms) => ms,
            TimeSource::Server => self.clock.now_ms(),
        };
        self.sweep_if_due(now_ms);
        Ok(takes.iter().map(|t| self.take_one(t, now_ms)).collect())
    }

    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        for check in checks {
            check.refuse_bad_items()?;
        }
        let now_ms = match time {
            TimeSource::At(ms) => ms,
            TimeSource::Server => self.clock.now_ms(),
        };
        Ok(self.check_now(checks, now_ms))
    }

    /// Into the caller's verdicts, in their buffers: a layer deciding request after request
    /// allocates no verdict.
    async fn check_into(
        &self,
        checks: &[Check],
        time: TimeSource,
        verdicts: &mut Vec<Verdict>,
    ) -> Result<(), StoreError> {
        for check in checks {
            check.refuse_bad_items()?;
        }
        let now_ms = match time {
            TimeSource::At(ms) => ms,
            TimeSource::Server => self.clock.now_ms(),
        };
        self.check_now_into(checks, now_ms, verdicts);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::Reason;

    #[test]
    fn full_shards_fill_their_tables_and_small_stores_have_one() {
        assert_eq!(shard_count(1), 1);
        assert_eq!(shard_count(2 * MIN_SHARD_CAPACITY - 1), 1);
        assert_eq!(shard_count(2 * MIN_SHARD_CAPACITY), 2);
        assert_eq!(shard_count(100_000), 7);
        assert_eq!(shard_count(1_000_000), 70);
        for capacity in [2 * MIN_SHARD_CAPACITY, 100_000, 1_000_000, DEFAULT_CAPACITY] {
            let count = shard_count(capacity);
            assert!(capacity.div_ceil(count) <= MAX_SHARD_CAPACITY, "{capacity}");
        }
    }

    #[test]
    fn a_store_bounded_beyond_any_memory_allocates_by_use_not_by_its_bound() {
        // The simulator's replay store asks for `usize::MAX >> 1` keys (evict nothing).
        assert_eq!(shard_count(usize::MAX >> 1), MAX_SHARDS);
        let store = MemoryStore::with_capacity(usize::MAX >> 1);
        let limit = Limit::new("l", "fixed 2/1s".parse::<Policy>().unwrap());
        let verdicts = store.check_now(&[Check::single(&limit, "a", 1)], 1_000);
        assert!(verdicts[0].allowed);
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn keys_spread_evenly_over_a_shard_count_that_is_no_power_of_two() {
        let store = MemoryStore::with_capacity(1_000_000);
        let limit = Limit::new("l", "fixed 1/1h".parse::<Policy>().unwrap());
        let mut per_shard = vec![0usize; store.shards.len()];
        for i in 0..70_000 {
            let id = format!("id-{i}");
            let key = KeyRef::new(&limit.name, limit.policy.algorithm(), id.as_bytes());
            per_shard[store.shard_index(key.hash(&store.hasher))] += 1;
        }
        // 1000 expected each; a binomial spread stays well within ±20%.
        assert!(
            per_shard.iter().all(|&n| (800..1200).contains(&n)),
            "{per_shard:?}"
        );
    }

    #[test]
    fn a_sharded_store_holds_its_capacity_and_no_more() {
        let store = MemoryStore::with_capacity(3 * MIN_SHARD_CAPACITY + 5);
        assert_eq!(store.shards.len(), 2);
        let limit = Limit::new("l", "fixed 1/1h".parse::<Policy>().unwrap());
        for i in 0..5 * MIN_SHARD_CAPACITY {
            store.check_one(&limit, format!("id-{i}").as_bytes(), 1, 0);
        }
        // Each shard fills to its share, so the store is exactly full.
        assert_eq!(store.len(), 3 * MIN_SHARD_CAPACITY + 5);
    }

    #[test]
    fn idle_shards_are_swept_on_the_callers_clock() {
        let store = MemoryStore::with_capacity(4 * MIN_SHARD_CAPACITY);
        let limit = Limit::new("l", "fixed 1/1s".parse::<Policy>().unwrap());
        for i in 0..1_000 {
            store.check_one(&limit, format!("id-{i}").as_bytes(), 1, 0);
        }
        assert_eq!(store.len(), 1_000);
        // Kept while any caller could still need them...
        store.check_now(&[], 1_000 + 2 * GC_GRACE_MS - 1);
        assert_eq!(store.len(), 1_000);
        // ...and gone from every shard once the next sweep is due, though no check touched them.
        store.check_now(&[], 1_000 + 2 * GC_GRACE_MS + SWEEP_EVERY_MS);
        assert_eq!(store.len(), 0);
    }

    #[test]
    fn blocks_are_kept_for_blocking_limits_only_and_check_one_honours_them() {
        let store = MemoryStore::new();
        let plain = Limit::new("plain", "fixed 1/1s".parse::<Policy>().unwrap());
        let blocking =
            Limit::new("blocking", "fixed 1/1s".parse::<Policy>().unwrap()).with_block_for(3_000);
        for t in [0, 1, 2] {
            store.check_one(&plain, b"x", 1, t);
        }
        // Denials of a limit without a block leave the block table untouched (and unlocked).
        assert_eq!(store.blocks.lock().unwrap().len(), 0);
        assert!(store.check_one(&blocking, b"x", 1, 0).allowed);
        assert_eq!(
            store.check_one(&blocking, b"x", 1, 1).reason,
            Reason::OverLimit
        );
        assert_eq!(store.blocks.lock().unwrap().len(), 1);
        // The layer's one-limit path answers the block as a check does: to its end, at 3001.
        let d = store.check_one(&blocking, b"x", 1, 1_000);
        assert_eq!((d.reason, d.retry_after_ms), (Reason::Blocked, 2_001));
        let d = store.check_now(&[Check::single(&blocking, "x", 1)], 3_000)[0].decisions[0];
        assert_eq!((d.reason, d.retry_after_ms), (Reason::Blocked, 1));
        assert!(store.check_one(&blocking, b"x", 1, 3_001).allowed);
        // A reset lifts a block.
        assert_eq!(
            store.check_one(&blocking, b"x", 1, 3_002).reason,
            Reason::OverLimit
        );
        assert!(store.reset_now(&blocking, b"x"));
        assert!(store.check_one(&blocking, b"x", 1, 3_003).allowed);
        assert_eq!(
            store.check_one(&blocking, b"x", 1, 3_004).reason,
            Reason::OverLimit
        );
    }

    #[test]
    fn a_retry_racing_its_original_on_another_thread_charges_once() {
        // Many shards, so that the two items of a check sit on different locks.
        let store = MemoryStore::with_capacity(1_000_000);
        let a = Limit::new("a", "fixed 1000/1h".parse::<Policy>().unwrap());
        let b = Limit::new("b", "fixed 1000/1h".parse::<Policy>().unwrap());
        let rounds = 200u64;
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    for round in 0..rounds {
                        let check = Check::single(&a, "client", 1)
                            .with(&b, "client", 2)
                            .with_request_id(format!("r{round}"));
                        assert!(store.check_now(&[check], 0)[0].allowed);
                    }
                });
            }
        });
        // Each request id was charged once, whichever thread came first.
        let look = Check::single(&a, "client", 0).with(&b, "client", 0);
        let remaining: Vec<u64> = store.check_now(&[look], 0)[0]
            .decisions
            .iter()
            .map(|d| d.remaining)
            .collect();
        assert_eq!(remaining, [1000 - rounds, 1000 - 2 * rounds]);
    }
}
