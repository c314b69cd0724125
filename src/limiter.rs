//! `Limiter`: a store plus what production needs around it — a cache of recent denials that
//! answers repeat offenders with no round trip, per-limit failure modes for when the store
//! cannot answer (`fail`) or refuses the limiter (`fail_misconfigured`), counters, and the
//! store failures' rate-limited log.

use std::hash::BuildHasher;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use smallvec::SmallVec;

use crate::clock::{Clock, SystemClock};
use crate::decision::{Decision, Reason};
use crate::metrics::{FailureLine, FailureLog, Metrics, MetricsSnapshot};
use crate::policy::{Algorithm, Policy};
use crate::store::{
    Check, CheckItem, ExpiringMap, FailMode, FailureClass, Identifier, KeyHasher, Limit,
    MemoryStore, Reservation, Store, StoreError, TimeSource, Verdict,
};

/// How long a fail-closed denial tells the client to wait, in ms.
pub const FAIL_CLOSED_RETRY_MS: u64 = 1_000;

/// What the denial cache answered for a batch: one entry per check, or none at all. Inline for a
/// Worker's plan, whose batch is at most its enforced and its shadow check.
type CachedVerdicts = SmallVec<[Option<Verdict>; 2]>;

/// The default bound on cached denials (and on the fallback limiter's states, and on the tiers
/// and overrides remembered for it): small enough for a Worker isolate's 128 MB, ample for the
/// repeat offenders of one process.
pub const DEFAULT_DENIAL_CACHE: usize = 10_000;

/// How long a denial is kept at most, in ms, however far its retry time: a `reset`, tier or
/// override written to the store then reaches every process within this time, even for a limit
/// whose retry time is hours away (a daily quota). A client still refused after it costs one
/// store round trip per this time and process.
pub const DEFAULT_DENIAL_CACHE_MS: u64 = 10_000;

/// How long the limiter remembers the tier or override the store last decided an identifier
/// with, in ms: a limit failing to `fallback N%` then keeps deciding it at N% of that policy
/// rather than of the limit's own, through an outage up to this long after the store last
/// answered for it.
pub const ASSIGNED_POLICY_MS: u64 = 3_600_000;

/// Where a [`Limiter`] takes "now" from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeMode {
    /// The limiter's own clock, sent to the store (the library default).
    #[default]
    Local,
    /// The store's clock (Redis `TIME`): the safe choice for a fleet whose clocks disagree.
    Server,
}

/// Recent denials by (limit name, identifier), until their retry time or for the cache's time,
/// whichever ends first.
type DenialCache = ExpiringMap<(Arc<str>, Identifier), CachedDenial>;

/// The policies the store last decided identifiers with, by (limit name, identifier), where they
/// were not the limit's own (a tier or an override): what the fallback decides them at.
type AssignedPolicies = ExpiringMap<(Arc<str>, Identifier), Policy>;

#[derive(Debug, Clone, Copy)]
struct CachedDenial {
    decision: Decision,
    retry_at_ms: u64,
    /// When the cache stops answering for it: its retry time, or sooner (`denial_ms`).
    until_ms: u64,
    cost: i64,
}

/// A rate limiter over a [`Store`]. Never fails: when the store does, each limit follows its
/// [`FailMode`] for the failure's class — [`Limit::fail_mode`] when the store cannot answer,
/// [`Limit::fail_misconfigured`] when it refuses the limiter — and the verdict says which in
/// each decision's [`Reason`].
#[derive(Debug)]
pub struct Limiter<S> {
    store: S,
    time: TimeMode,
    clock: Arc<dyn Clock>,
    denials: Option<Mutex<DenialCache>>,
    /// How long a denial is kept at most (ms).
    denial_ms: u64,
    // The denial cache's hasher: lookups hash a borrowed (name, identifier) with it.
    hasher: KeyHasher,
    fallback: MemoryStore,
    /// The tiers and overrides the store decided with lately, for the fallback.
    assigned: Mutex<AssignedPolicies>,
    /// Whether `assigned` ever held one: until then (a deployment without tiers or overrides)
    /// a decision at the limit's own capacity looks nothing up.
    assigned_seen: AtomicBool,
    /// `None` once turned off ([`Limiter::without_metrics`]).
    metrics: Option<Metrics>,
    /// The store's failures, until a host takes their lines ([`Limiter::store_failure_lines`]).
    failures: FailureLog,
}

/// What [`Limiter::check_all`] answers: one verdict per check, and how long the store took.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Checked {
    /// One verdict per check, in order.
    pub verdicts: Vec<Verdict>,
    /// The limiter's own clock when it checked (epoch ms): the time its denial cache and fail
    /// modes used, which differs from [`Verdict::decided_at_ms`] when the store's clock decides.
    pub local_ms: u64,
    /// The store round trip's duration in ms, as the limiter's clock times it (0 on a
    /// [`ManualClock`](crate::ManualClock), see [`Clock::stopwatch`]); `None` when no check
    /// needed the store (every one was answered from the denial cache, or the batch was empty).
    pub store_ms: Option<f64>,
}

impl<S: Store> Limiter<S> {
    /// A limiter over `store` with the local clock and a denial cache of
    /// [`DEFAULT_DENIAL_CACHE`] entries, each kept for [`DEFAULT_DENIAL_CACHE_MS`] at most.
    pub fn new(store: S) -> Limiter<S> {
        let hasher = KeyHasher::random();
        let assigned = Mutex::new(ExpiringMap::with_hasher(
            DEFAULT_DENIAL_CACHE,
            hasher.clone(),
        ));
        Limiter {
            store,
            time: TimeMode::Local,
            clock: Arc::new(SystemClock),
            denials: Some(Mutex::new(ExpiringMap::with_hasher(
                DEFAULT_DENIAL_CACHE,
                hasher.clone(),
            ))),
            denial_ms: DEFAULT_DENIAL_CACHE_MS,
            hasher,
            fallback: MemoryStore::with_capacity(DEFAULT_DENIAL_CACHE),
            assigned,
            assigned_seen: AtomicBool::new(false),
            metrics: Some(Metrics::default()),
            failures: FailureLog::default(),
        }
    }

    /// Logs a store failure class at most once per `ms` (see [`FailureLog`]; default
    /// [`crate::metrics::DEFAULT_FAILURE_LOG_INTERVAL_MS`]).
    pub fn with_failure_log_interval_ms(mut self, ms: u64) -> Limiter<S> {
        self.failures = FailureLog::new(ms);
        self
    }

    /// Takes "now" from `time`.
    pub fn with_time_mode(mut self, time: TimeMode) -> Limiter<S> {
        self.time = time;
        self
    }

    /// Reads the local clock from `clock` (tests, replays).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Limiter<S> {
        self.clock = clock;
        self
    }

    /// Caches at most `capacity` denials; zero turns the cache off.
    pub fn with_denial_cache(mut self, capacity: usize) -> Limiter<S> {
        self.denials = (capacity > 0)
            .then(|| Mutex::new(ExpiringMap::with_hasher(capacity, self.hasher.clone())));
        self
    }

    /// Counts nothing: [`Limiter::metrics`] then stays empty. For a limiter nobody reads the
    /// counters of (a replay deciding millions of requests), which then skips their atomic
    /// updates and the per-limit lock on every check.
    pub fn without_metrics(mut self) -> Limiter<S> {
        self.metrics = None;
        self
    }

    /// Keeps a denial `ms` at most, however far its retry time (until its retry time if that
    /// is sooner); zero turns the cache off. See [`DEFAULT_DENIAL_CACHE_MS`].
    pub fn with_denial_cache_ms(mut self, ms: u64) -> Limiter<S> {
        self.denial_ms = ms;
        self
    }

    /// The denial cache, unless it is off (no capacity, or no time to keep a denial).
    fn denial_cache(&self) -> Option<&Mutex<DenialCache>> {
        self.denials.as_ref().filter(|_| self.denial_ms > 0)
    }

    /// The store underneath.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The store underneath, to change it between checks (a store that is only ever used from
    /// its owner's thread can then skip its own locking).
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }

    /// What the limiter has decided so far: checks admitted and denied, per-limit decision counts
    /// (their sum is [`MetricsSnapshot::totals`]), store errors and the store-latency histogram,
    /// e.g. for a `/metrics` page ([`MetricsSnapshot::to_prometheus`]).
    pub fn metrics(&self) -> MetricsSnapshot {
        self.metrics
            .as_ref()
            .map(Metrics::snapshot)
            .unwrap_or_default()
    }

    /// The store failures' log lines due now: one per class that failed since its last line,
    /// at most one per class per interval, each saying how many failures it stands for. A host
    /// calls it after each request (it reads one flag while the store answers) and writes the
    /// lines where it logs, as they are: each [`FailureLine::error`] was redacted when noted.
    pub fn store_failure_lines(&self) -> Vec<FailureLine> {
        if !self.failures.any_pending() {
            return Vec::new();
        }
        self.failures.due_at(self.clock.now_ms())
    }

    /// Counts and notes a store failure at `now`.
    #[cold]
    fn store_failed(&self, error: &StoreError, now: u64) {
        if let Some(metrics) = &self.metrics {
            metrics.store_error(error.class());
        }
        self.failures.note_at(error, now);
    }

    /// Decides one check.
    pub async fn check(&self, check: &Check) -> Verdict {
        self.check_all(std::slice::from_ref(check))
            .await
            .verdicts
            .pop()
            .expect("one verdict per check")
    }

    /// Decides a batch of checks with at most one store round trip, one verdict per check.
    pub async fn check_all(&self, checks: &[Check]) -> Checked {
        let mut checked = Checked::default();
        self.check_all_into(checks, &mut checked).await;
        checked
    }

    /// [`Limiter::check_all`] answering into `checked`, whose buffers are reused (see
    /// [`Store::check_into`]): a caller deciding batch after batch (a replay) keeps one.
    pub async fn check_all_into(&self, checks: &[Check], checked: &mut Checked) {
        let now = self.clock.now_ms();
        checked.local_ms = now;
        checked.store_ms = None;
        // Empty unless the denial cache answered some check (the usual case); inline for the
        // two checks of a Worker's plan. A verdict the cache gives is built in one the last
        // batch left in the buffer.
        let mut cached = CachedVerdicts::new();
        self.cached_denials(checks, now, &mut checked.verdicts, &mut cached);
        // Only the checks the cache did not answer go to the store. Usually they are all of
        // them, or one run of them (a plan's enforced check answered from the cache, its shadow
        // one not): then they are a slice of the caller's, sent without a copy.
        let copied: Vec<Check>;
        let pending: &[Check] = match uncached_run(&cached, checks.len()) {
            Some(run) => &checks[run],
            None => {
                copied = checks
                    .iter()
                    .zip(&cached)
                    .filter(|(_, v)| v.is_none())
                    .map(|(c, _)| c.clone())
                    .collect();
                &copied
            }
        };
        // The store answers straight into the caller's buffer, reusing what it holds; the
        // cache's verdicts then take their places among its answers.
        let answers = &mut checked.verdicts;
        if pending.is_empty() {
            answers.clear();
        } else {
            let time = match self.time {
                TimeMode::Local => TimeSource::At(now),
                TimeMode::Server => TimeSource::Server,
            };
            let stopwatch = self.clock.stopwatch();
            let answered = self.store.check_into(pending, time, answers).await;
            let elapsed_ms = stopwatch.elapsed_ms();
            if let Some(metrics) = &self.metrics {
                metrics.observe_store_latency(elapsed_ms);
            }
            checked.store_ms = Some(elapsed_ms);
            match answered {
                Ok(()) if answers.len() == pending.len() => {
                    self.remember(pending, answers, now);
                }
                Ok(()) => {
                    let error = StoreError::Protocol(format!(
                        "the store answered {} verdicts for {} checks",
                        answers.len(),
                        pending.len()
                    ));
                    self.fail_all(pending, &error, now, answers);
                }
                Err(error) => self.fail_all(pending, &error, now, answers),
            }
        }
        // In order: every place before `at` already holds its verdict, the store's answers
        // still to place follow.
        for (at, verdict) in cached.drain(..).enumerate() {
            if let Some(verdict) = verdict {
                answers.insert(at, verdict);
            }
        }
        if let Some(metrics) = &self.metrics {
            metrics.record_checks(checks, &checked.verdicts);
        }
    }

    /// Forgets what this process remembers of `identifier` on `limit` — a cached denial, the
    /// tier or override its fallback would decide at — so the next check asks the store: after
    /// a reset or an assignment written through this process (other processes learn of it within
    /// [`DEFAULT_DENIAL_CACHE_MS`], as documented).
    pub fn forget(&self, limit: &Limit, identifier: &Identifier) {
        let key = (limit.name.clone(), identifier.clone());
        if let Some(denials) = &self.denials {
            denials
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key);
        }
        self.assigned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
    }

    /// Decides `check` as [`Limiter::check`] and, when it is admitted, returns the
    /// [`Reservation`] it made, named `id`, for [`Limiter::commit`] after the response.
    pub async fn reserve(
        &self,
        check: &Check,
        id: impl Into<Identifier>,
    ) -> (Verdict, Option<Reservation>) {
        let verdict = self.check(check).await;
        // A verdict the store did not give (failed open, fallback) reserved nothing there.
        let reservation = Reservation::new(check, &verdict, id);
        (verdict, reservation)
    }

    /// Settles `reservation` at the real cost `actual` (see [`Reservation::commit`]): one store
    /// call, idempotent. Off the request path; an error leaves the reservation charged at its
    /// estimate, the safe side, so it is only counted.
    pub async fn commit(
        &self,
        reservation: &Reservation,
        actual: u64,
    ) -> Result<Option<Verdict>, StoreError> {
        self.settle(reservation.commit(actual)).await
    }

    /// Sends a settling check (a [`Reservation`]'s commit) to the store as it is: no denial
    /// cache, no fail mode, not counted as a decision. `None` for an empty check.
    pub async fn settle(&self, check: Check) -> Result<Option<Verdict>, StoreError> {
        if check.items().is_empty() {
            return Ok(None);
        }
        let time = match self.time {
            TimeMode::Local => TimeSource::At(self.clock.now_ms()),
            TimeMode::Server => TimeSource::Server,
        };
        let error = match self.store.check(std::slice::from_ref(&check), time).await {
            Ok(mut verdicts) if verdicts.len() == 1 => return Ok(verdicts.pop()),
            Ok(verdicts) => StoreError::Protocol(format!(
                "store answered {} verdicts for 1 check",
                verdicts.len()
            )),
            Err(e) => e,
        };
        self.store_failed(&error, self.clock.now_ms());
        Err(error)
    }

    /// Fills `out` with one verdict per check, `Some` where the denial cache answers it, or
    /// leaves it empty when it answers none: the cache is off, empty, or holds no item of
    /// `checks`.
    fn cached_denials(
        &self,
        checks: &[Check],
        now: u64,
        spare: &mut Vec<Verdict>,
        out: &mut CachedVerdicts,
    ) {
        let Some(denials) = self.denial_cache() else {
            return;
        };
        let mut cache = denials.lock().unwrap_or_else(|e| e.into_inner());
        cache.purge_expired(now);
        if cache.is_empty() {
            return;
        }
        for (i, check) in checks.iter().enumerate() {
            if let Some(verdict) = self.cached_denial(&mut cache, check, now, spare) {
                if out.is_empty() {
                    out.resize_with(checks.len(), || None);
                }
                out[i] = Some(verdict);
            }
        }
    }

    /// The verdict the denial cache gives `check`, if one of its items is a remembered denial.
    fn cached_denial(
        &self,
        cache: &mut DenialCache,
        check: &Check,
        now: u64,
        spare: &mut Vec<Verdict>,
    ) -> Option<Verdict> {
        let items = check.items();
        // Built only on a hit (most checks find nothing), in a spare verdict's buffers.
        let mut verdict: Option<Verdict> = None;
        for (i, item) in items.iter().enumerate() {
            // An item spending or crediting its capacity lease is never answered here: a credit
            // never denies, and a lease may be credited at any time.
            let found = (!item.uses_lease())
                .then(|| cache.find_mut(self.key_hash(item), is_key_of(item)))
                .flatten()
                .map(|mut slot| *slot.value())
                .filter(|d| item.cost >= d.cost && item.cost > 0 && now < d.until_ms);
            match (found, &mut verdict) {
                (Some(d), _) => {
                    let hit = verdict.get_or_insert_with(|| {
                        let mut hit = spare.pop().unwrap_or_else(Verdict::empty);
                        hit.decisions.clear();
                        hit.listed.clear();
                        hit.decisions
                            .extend(items[..i].iter().map(|item| skipped(item, now)));
                        hit
                    });
                    hit.decisions.push(Decision {
                        retry_after_ms: d.retry_at_ms - now,
                        reason: Reason::CachedDenial,
                        ..d.decision
                    });
                }
                (None, Some(hit)) => hit.decisions.push(skipped(item, now)),
                (None, None) => {}
            }
        }
        verdict.map(|hit| Verdict {
            allowed: false,
            atomic: true,
            decided_at_ms: now,
            ..hit
        })
    }

    /// Remembers what the store's answers teach the process, in one pass over their decisions:
    /// each denial, for the denial cache; and each tier or override that decided (and each
    /// identifier back on its limit's own policy), for the fallback.
    fn remember(&self, checks: &[Check], verdicts: &[Verdict], now: u64) {
        let denials = self.denial_cache();
        // Until a tier or override is seen, a decision at its limit's own capacity has nothing
        // to teach the fallback: the usual case, a comparison per item.
        let assigned_seen = self.assigned_seen.load(Ordering::Relaxed);
        let mut cache = None;
        let mut assigned = None;
        for (check, verdict) in checks.iter().zip(verdicts) {
            for (item, decision) in check.items().iter().zip(&verdict.decisions) {
                // A concurrency denial may lift before its retry time (a lease released after
                // its response), and so may the denial of an item spending its capacity lease
                // (the lease credited by a refill), so only the store can tell: never cached.
                if let Some(denials) = denials {
                    if decision.reason == Reason::OverLimit
                        && decision.retry_after_ms > 0
                        && item.limit.policy.algorithm() != Algorithm::Concurrency
                        && item.spend_lease == crate::algorithm::LeaseSpending::Never
                    {
                        // Locked only when there is a denial to remember.
                        let cache = cache.get_or_insert_with(|| {
                            denials.lock().unwrap_or_else(|e| e.into_inner())
                        });
                        self.remember_denial(cache, item, decision, now);
                    }
                }
                let own = item.limit.decided_with_own_policy(decision);
                // Only the store's own decisions say which policy decided.
                if (!own || assigned_seen)
                    && matches!(
                        decision.reason,
                        Reason::Admitted
                            | Reason::OverLimit
                            | Reason::CostExceedsCapacity
                            | Reason::Leased
                    )
                {
                    let map = assigned.get_or_insert_with(|| {
                        self.assigned.lock().unwrap_or_else(|e| e.into_inner())
                    });
                    self.remember_assigned(map, item, decision, own, now);
                }
            }
        }
    }

    /// Caches `item`'s denial until its retry time, or for the cache's time if that is sooner.
    fn remember_denial(
        &self,
        cache: &mut DenialCache,
        item: &CheckItem,
        decision: &Decision,
        now: u64,
    ) {
        let retry_at_ms = now.saturating_add(decision.retry_after_ms);
        let until_ms = retry_at_ms.min(now.saturating_add(self.denial_ms));
        let key = (item.limit.name.clone(), item.identifier.clone());
        let denial = CachedDenial {
            decision: *decision,
            retry_at_ms,
            until_ms,
            cost: item.cost,
        };
        cache.insert(key, denial, until_ms);
    }

    /// Remembers the policy the store decided `item` with when it is not the limit's own (`own`
    /// false: a tier or an override), or forgets one remembered once the store decides with the
    /// limit's own again (the assignment lapsed or was cleared). Cold: most deployments never
    /// get here.
    #[cold]
    fn remember_assigned(
        &self,
        map: &mut AssignedPolicies,
        item: &CheckItem,
        decision: &Decision,
        own: bool,
        now: u64,
    ) {
        if own {
            // A key is built only to remove one.
            let held = map.find_mut(self.key_hash(item), is_key_of(item)).is_some();
            if held {
                map.remove(&(item.limit.name.clone(), item.identifier.clone()));
            }
        } else {
            let key = (item.limit.name.clone(), item.identifier.clone());
            let policy = item.limit.advertised_policy(decision);
            map.insert(key, policy, now.saturating_add(ASSIGNED_POLICY_MS));
            self.assigned_seen.store(true, Ordering::Relaxed);
        }
    }

    /// The policy the store last decided `item` with, if it was a tier or an override
    /// ([`ASSIGNED_POLICY_MS`]); `None`: the limit's own.
    fn assigned_policy(&self, item: &CheckItem, now: u64) -> Option<Policy> {
        if !self.assigned_seen.load(Ordering::Relaxed) {
            return None;
        }
        let mut map = self.assigned.lock().unwrap_or_else(|e| e.into_inner());
        map.purge_expired(now);
        map.find_mut(self.key_hash(item), is_key_of(item))
            .map(|mut slot| *slot.value())
    }

    /// The hash of `item`'s (limit name, identifier) as the denial cache and the remembered
    /// policies hash their owned keys, so that no key is cloned to look one up.
    fn key_hash(&self, item: &CheckItem) -> u64 {
        self.hasher
            .hash_one((&*item.limit.name, item.identifier.as_bytes()))
    }

    /// Counts and notes `error`, then answers every check of `pending` by its limits' failure
    /// modes for the error's class.
    #[cold]
    fn fail_all(
        &self,
        pending: &[Check],
        error: &StoreError,
        now: u64,
        answers: &mut Vec<Verdict>,
    ) {
        self.store_failed(error, now);
        let class = error.class();
        answers.clear();
        answers.extend(pending.iter().map(|c| self.fail(c, class, now)));
    }

    /// The verdict when the store failed with a failure of `class`: each item by its limit's
    /// failure mode for it. Cold: kept out of the request path of a store that answers.
    #[cold]
    fn fail(&self, check: &Check, class: FailureClass, now: u64) -> Verdict {
        let decisions: Vec<Decision> = check
            .items()
            .iter()
            .map(|item| self.fail_item(item, class, now))
            .collect();
        Verdict {
            allowed: decisions.iter().all(|d| d.allowed),
            decisions,
            atomic: false,
            decided_at_ms: now,
            listed: Vec::new(),
        }
    }

    /// One item's decision when the store failed with a failure of `class`: by its limit's
    /// `fail` for an outage, its `fail_misconfigured` for a refusal, the reason saying which.
    fn fail_item(&self, item: &CheckItem, class: FailureClass, now: u64) -> Decision {
        let capacity = item.limit.policy.capacity();
        let refused = class.is_misconfiguration();
        let reason = |outage: Reason, misconfigured: Reason| {
            if refused {
                misconfigured
            } else {
                outage
            }
        };
        match item.limit.fail_mode_for(class) {
            FailMode::Open => Decision {
                allowed: true,
                limit: capacity,
                remaining: capacity,
                reset_at_ms: now,
                retry_after_ms: 0,
                reason: reason(Reason::FailedOpen, Reason::MisconfiguredOpen),
            },
            FailMode::Closed => Decision {
                allowed: false,
                limit: capacity,
                remaining: 0,
                reset_at_ms: now + FAIL_CLOSED_RETRY_MS,
                retry_after_ms: FAIL_CLOSED_RETRY_MS,
                reason: reason(Reason::FailedClosed, Reason::MisconfiguredClosed),
            },
            FailMode::Fallback { per_mille } => {
                // An identifier on a tier or override keeps it, as the store last decided it.
                let policy = self.assigned_policy(item, now).unwrap_or(item.limit.policy);
                let local = Limit {
                    name: item.limit.name.clone(),
                    policy: scaled(&policy, per_mille),
                    fail_mode: FailMode::Closed,
                    ..Limit::clone(&item.limit)
                };
                let check = Check::single(&local, item.identifier.clone(), item.cost);
                let verdict = self.fallback.check_plain_now(&check, now);
                Decision {
                    reason: reason(Reason::Fallback, Reason::MisconfiguredFallback),
                    ..verdict.decisions[0]
                }
            }
        }
    }
}

/// The places of the checks the cache did not answer, when they are one run (`cached` empty: all
/// `n` of them); `None` when answered checks lie between them.
fn uncached_run(cached: &[Option<Verdict>], n: usize) -> Option<Range<usize>> {
    if cached.is_empty() {
        return Some(0..n);
    }
    let start = cached.iter().position(Option::is_none).unwrap_or(n);
    let end = cached
        .iter()
        .rposition(Option::is_none)
        .map_or(start, |i| i + 1);
    cached[start..end]
        .iter()
        .all(Option::is_none)
        .then_some(start..end)
}

/// Whether a (limit name, identifier) key held by the denial cache or the remembered policies is
/// `item`'s: the configuration's own name is found by its pointer before its text is compared.
fn is_key_of(item: &CheckItem) -> impl Fn(&(Arc<str>, Identifier)) -> bool + '_ {
    |(name, id)| {
        (Arc::ptr_eq(name, &item.limit.name) || *name == item.limit.name) && *id == item.identifier
    }
}

/// The decision of an item the denial cache did not consult: nothing was taken from it.
fn skipped(item: &CheckItem, now: u64) -> Decision {
    Decision {
        allowed: true,
        limit: item.limit.policy.capacity(),
        remaining: item.limit.policy.capacity(),
        reset_at_ms: now,
        retry_after_ms: 0,
        reason: Reason::Skipped,
    }
}

/// `policy` with its limit and burst scaled to `per_mille`/1000, at least 1 each.
pub fn scaled(policy: &Policy, per_mille: u16) -> Policy {
    let scale = |n: u64| ((n as u128 * per_mille as u128) / 1000).max(1) as u64;
    let burst = policy
        .algorithm()
        .takes_burst()
        .then(|| scale(policy.burst()));
    // Scaling down keeps every bound the original satisfied; fall back to it if not.
    policy
        .with_limit(scale(policy.limit()), burst)
        .unwrap_or(*policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_borrowed_key_hashes_as_the_cache_hashes_its_owned_key() {
        let hasher = KeyHasher::random();
        let owned: (Arc<str>, Identifier) = (Arc::from("per-ip"), Identifier::from("203.0.113.7"));
        assert_eq!(
            hasher.hash_one((&*owned.0, owned.1.as_bytes())),
            hasher.hash_one(&owned)
        );
    }
}
