//! [`GlobalStore`]: one region's store for a configuration with global limits (docs/design.md
//! §9). Every check is decided in the region's own store in one round trip, global items by
//! their static share and then their lease; only a request whose share and lease both fall
//! short waits for the home, and for the other regions' stores when the pool falls short too
//! ([`GlobalStore::with_peers`]: capacity follows demand). Refills are asked for ahead of need
//! and sent by [`GlobalStore::refill`], off the request path.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use futures_util::future::join_all;

use super::ledger::{Ledger, Refill, Sizing};
use super::limits::{RegionalLimit, RegionalLimits};
use super::take::{Take, Taken};
use crate::algorithm::{Charge, LeaseSpending};
use crate::clock::{Clock, SystemClock};
use crate::decision::{Decision, Reason};
use crate::policy::Algorithm;
use crate::store::{Check, CheckItem, Identifier, Limit, Store, StoreError, TimeSource, Verdict};

mod loans;

/// The shortest horizon a refill is sized for (ms): a second of the region's traffic.
pub const MIN_REFILL_HORIZON_MS: u64 = 1_000;

/// A region's store for global limits: `R` the region's own store, `H` the home's, `P` the
/// other regions' (whose unused static shares it may borrow, [`GlobalStore::with_peers`]).
///
/// Decides on the caller's clock only ([`TimeSource::At`]): leases end at times the region and
/// the home must agree on. Items of limits that are not global pass through untouched.
#[derive(Debug)]
pub struct GlobalStore<R, H, P = R> {
    region: R,
    home: H,
    peers: Vec<(usize, P)>,
    limits: RegionalLimits,
    regions: u64,
    lease_ms: u64,
    clock: Arc<dyn Clock>,
    home_rtt_ms: AtomicU64,
    ledger: Mutex<Ledger>,
    counters: Counters,
}

/// What a region's global limits cost, counted since the store was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct GlobalStats {
    /// Checks with at least one global item.
    pub checks: u64,
    /// Checks that waited for the home (their share and lease fell short).
    pub waited: u64,
    /// Round trips to the home: for waiting checks and for refills.
    pub home_round_trips: u64,
    /// Round trips to the home that failed.
    pub home_failures: u64,
    /// Round trips to other regions' stores, borrowing their unused static shares.
    pub peer_round_trips: u64,
    /// Units borrowed from other regions' static shares.
    pub borrowed: u64,
    /// Units the home granted in leases.
    pub granted: u64,
    /// Units admitted from leases.
    pub leased: u64,
    /// Units granted but never credited to the region (its store failed after the home had
    /// granted them): lost to the region, never to the bound.
    pub lost: u64,
    /// Script calls the region's own store ran (a Redis store on one node runs one per check
    /// and one per batch of takes): every request's check, credits, checks decided again.
    pub region_script_calls: u64,
    /// Script calls the home's store ran: asks for waiting requests and refills.
    pub home_script_calls: u64,
    /// Script calls the other regions' stores ran: loans.
    pub peer_script_calls: u64,
}

impl GlobalStats {
    /// Script calls of every store: what Upstash bills as commands.
    pub fn script_calls(&self) -> u64 {
        self.region_script_calls + self.home_script_calls + self.peer_script_calls
    }
}

#[derive(Debug, Default)]
struct Counters {
    checks: AtomicU64,
    waited: AtomicU64,
    home_round_trips: AtomicU64,
    home_failures: AtomicU64,
    peer_round_trips: AtomicU64,
    borrowed: AtomicU64,
    granted: AtomicU64,
    leased: AtomicU64,
    lost: AtomicU64,
    region_script_calls: AtomicU64,
    home_script_calls: AtomicU64,
    peer_script_calls: AtomicU64,
}

/// The script calls a Redis store on one node runs for `checks`: one per check with an item.
fn script_calls(checks: &[Check]) -> u64 {
    checks.iter().filter(|c| !c.items().is_empty()).count() as u64
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// Leases the home granted for refills, not yet credited to the region's store (see
/// [`GlobalStore::ask_refills`]).
#[derive(Debug, Default)]
pub struct Granted {
    asked_ms: u64,
    /// Every refill asked for: (limit, identifier).
    refills: Vec<(Arc<str>, Identifier)>,
    /// What was granted, as the checks crediting it.
    credits: Vec<Check>,
}

/// One ask of the home: units of a global limit's pool for an identifier.
struct Ask<'a> {
    limit: &'a RegionalLimit,
    identifier: Identifier,
    /// What the waiting requests must have (a refill: one unit).
    need: u64,
    want: u64,
    /// Whether requests wait on it: a pool short of `need` then denies them for a while.
    waiting: bool,
}

impl<R: Store, H: Store> GlobalStore<R, H> {
    /// The store of one region among `regions`, deciding `limits` (as
    /// [`RegionalLimits::new`] split them for this region) with `region`'s store and the
    /// `home`'s pools. Leases of the buckets last `lease_ms`.
    pub fn new(
        region: R,
        home: H,
        limits: RegionalLimits,
        regions: usize,
        lease_ms: u64,
    ) -> GlobalStore<R, H> {
        GlobalStore {
            region,
            home,
            peers: Vec::new(),
            limits,
            regions: regions.max(1) as u64,
            lease_ms: lease_ms.max(1),
            clock: Arc::new(SystemClock),
            home_rtt_ms: AtomicU64::new(0),
            ledger: Mutex::new(Ledger::default()),
            counters: Counters::default(),
        }
    }

    /// The same store borrowing, when a request's share, lease and the home's pool all fall
    /// short, the unused static shares of the other regions from their stores: `peers` as
    /// (region index, store), the indexes those of [`RegionalLimits::new`]'s weights
    /// (docs/design.md §9, "Capacity follows demand").
    pub fn with_peers<P: Store>(self, peers: Vec<(usize, P)>) -> GlobalStore<R, H, P> {
        GlobalStore {
            region: self.region,
            home: self.home,
            peers,
            limits: self.limits,
            regions: self.regions,
            lease_ms: self.lease_ms,
            clock: self.clock,
            home_rtt_ms: self.home_rtt_ms,
            ledger: self.ledger,
            counters: self.counters,
        }
    }
}

impl<R: Store, H: Store, P: Store> GlobalStore<R, H, P> {
    /// The same store timing the home's round trips with `clock` (a clock that does not move
    /// during a call, as a replay's, times none: give the round trip with
    /// [`GlobalStore::with_home_rtt_ms`]).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> GlobalStore<R, H, P> {
        self.clock = clock;
        self
    }

    /// The same store assuming the home's round trip takes `ms` until one is timed.
    pub fn with_home_rtt_ms(self, ms: u64) -> GlobalStore<R, H, P> {
        self.home_rtt_ms.store(ms, Ordering::Relaxed);
        self
    }

    /// The region's own store.
    pub fn region_store(&self) -> &R {
        &self.region
    }

    /// The home's store.
    pub fn home_store(&self) -> &H {
        &self.home
    }

    /// What the global limits cost so far.
    pub fn stats(&self) -> GlobalStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        GlobalStats {
            checks: get(&c.checks),
            waited: get(&c.waited),
            home_round_trips: get(&c.home_round_trips),
            home_failures: get(&c.home_failures),
            peer_round_trips: get(&c.peer_round_trips),
            borrowed: get(&c.borrowed),
            granted: get(&c.granted),
            leased: get(&c.leased),
            lost: get(&c.lost),
            region_script_calls: get(&c.region_script_calls),
            home_script_calls: get(&c.home_script_calls),
            peer_script_calls: get(&c.peer_script_calls),
        }
    }

    /// When the oldest refill still to send was asked for (epoch ms), if one is.
    pub fn refill_due_since(&self) -> Option<u64> {
        self.ledger().oldest_refill_ms()
    }

    /// Sends the refills asked for so far: one round trip to the home for their leases, one to
    /// the region's store to credit them. Off the request path: a host's work after the
    /// response runs it as [`Store::upkeep`]. A refill the home denies is dropped (the pool is
    /// nearly empty: a request needing units then waits for the home instead).
    pub async fn refill(&self, now_ms: u64) -> Result<(), StoreError> {
        let granted = self.ask_refills(now_ms).await?;
        self.credit_refills(granted).await
    }

    /// The first half of [`GlobalStore::refill`]: asks the home for the refills queued so far
    /// (one round trip), returning what it granted, to be credited to the region's store by
    /// [`GlobalStore::credit_refills`]. Split for a replay, whose home decides a refill when it
    /// arrives there and whose region holds the lease only a round trip after it was asked for.
    pub async fn ask_refills(&self, now_ms: u64) -> Result<Granted, StoreError> {
        let refills = self.ledger().take_refills();
        let asks: Vec<Ask<'_>> = refills
            .into_iter()
            .filter_map(
                |Refill {
                     limit,
                     identifier,
                     want,
                     ..
                 }| {
                    let limit = self.limits.get(&limit)?;
                    Some(Ask {
                        limit,
                        identifier,
                        need: 1,
                        want,
                        waiting: false,
                    })
                },
            )
            .collect();
        let keys: Vec<(Arc<str>, Identifier)> = asks
            .iter()
            .map(|a| (a.limit.whole.name.clone(), a.identifier.clone()))
            .collect();
        if asks.is_empty() {
            return Ok(Granted {
                asked_ms: now_ms,
                ..Granted::default()
            });
        }
        let asks: Vec<&Ask<'_>> = asks.iter().collect();
        match self.ask_home(&asks, now_ms).await {
            Ok(credits) => Ok(Granted {
                asked_ms: now_ms,
                refills: keys,
                credits: in_one_check(credits, now_ms),
            }),
            Err(e) => {
                let mut ledger = self.ledger();
                for (name, identifier) in &keys {
                    ledger.refill_done((name, identifier));
                }
                Err(e)
            }
        }
    }

    /// The second half of [`GlobalStore::refill`]: credits what the home `granted` to the
    /// region's leases (one round trip), at the time it was asked for.
    pub async fn credit_refills(&self, granted: Granted) -> Result<(), StoreError> {
        let now_ms = granted.asked_ms;
        let result = if granted.credits.is_empty() {
            Ok(Vec::new())
        } else {
            bump(
                &self.counters.region_script_calls,
                script_calls(&granted.credits),
            );
            self.region
                .check(&granted.credits, TimeSource::At(now_ms))
                .await
        };
        self.note_credits(&granted.credits, result.as_deref().ok());
        let mut ledger = self.ledger();
        // A refill is over once answered and credited, granted or not; a waiting request's
        // ask never ends one (another refill would then go out beside the one in flight).
        for (name, identifier) in &granted.refills {
            ledger.refill_done((name, identifier));
        }
        ledger.forget_idle(now_ms, 4 * self.horizon_ms());
        result.map(|_| ())
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How long a refill should last: twice the home's round trip, at least a second.
    fn horizon_ms(&self) -> u64 {
        (2 * self.home_rtt_ms.load(Ordering::Relaxed)).max(MIN_REFILL_HORIZON_MS)
    }

    fn sizing(&self, limit: &RegionalLimit) -> Sizing {
        let policy = &limit.whole.policy;
        Sizing {
            horizon_ms: self.horizon_ms(),
            regions: self.regions,
            pool_capacity: limit.pool.as_ref().map_or(0, |p| p.policy.capacity()),
            fixed_window: policy.algorithm() == Algorithm::FixedWindow,
            // Two windows, not one: regions sharing an identifier often draw on its pool at the
            // same moment of every window (a daily job, a burst at each minute's start), so a
            // region sees the others about one window apart, and a span of one window would
            // make it alone again at that moment of each window, a few milliseconds either way
            // deciding it — then it takes the whole pool from under the others' requests of
            // that moment and strands it in its lease (docs/design.md §9).
            alone_ms: 2 * policy.window_ms().max(self.horizon_ms()),
        }
    }

    /// `checks` as the region's store decides them: each global item on its share, spending
    /// its lease when the limit has a pool.
    fn regional(&self, checks: &[Check]) -> Vec<Check> {
        checks
            .iter()
            .map(|check| {
                let mut regional = check.clone();
                regional.map_items(|item| {
                    let Some(global) = self.limits.get(&item.limit.name) else {
                        return;
                    };
                    item.limit = global.regional().clone();
                    // A share-less region holds no state of the limit: every item, whatever
                    // its charge, is its lease's.
                    item.spend_lease = match (&global.share, &global.pool) {
                        (None, _) => LeaseSpending::Only,
                        (Some(_), Some(_)) => LeaseSpending::AfterPolicy,
                        (Some(_), None) => LeaseSpending::Never,
                    };
                });
                regional
            })
            .collect()
    }

    /// Whether a denied check is denied only by global items a lease could admit, none of
    /// whose pools is known to be short of it: then it waits for the home.
    fn waits(&self, check: &Check, verdict: &Verdict, now_ms: u64) -> bool {
        if verdict.allowed {
            return false;
        }
        let ledger = self.ledger();
        let mut denied = check
            .items()
            .iter()
            .zip(&verdict.decisions)
            .filter(|(_, d)| !d.allowed)
            .peekable();
        // A share smaller than the request denies it as too costly; the lease may still hold it,
        // unless it is beyond the whole limit.
        denied.peek().is_some()
            && denied.all(|(item, decision)| {
                matches!(
                    decision.reason,
                    Reason::OverLimit | Reason::CostExceedsCapacity
                ) && item.charge == Charge::Request
                    && item.cost > 0
                    && self.limits.get(&item.limit.name).is_some_and(|g| {
                        g.pool.is_some() && item.cost as u64 <= g.whole.policy.capacity()
                    })
                    && self.may_grant(&ledger, (&item.limit.name, &item.identifier), now_ms)
            })
    }

    /// Whether the home's pool or the other regions may still have units for `key`: neither is
    /// known, at `now_ms`, to be short of them.
    fn may_grant(&self, ledger: &Ledger, key: (&Arc<str>, &Identifier), now_ms: u64) -> bool {
        ledger.pool_empty_until(key, now_ms).is_none()
            || (!self.peers.is_empty() && !ledger.peers_short(key, now_ms))
    }

    /// Asks the home's pools for `asks`, one round trip and one script call: each for up to its
    /// `want` ([`crate::global::take`]: the pool grants all it holds up to it), each region not
    /// alone on the identifier counting what it asks for beside it; the grants made, as the
    /// checks crediting them to the region's leases.
    async fn ask_home(&self, asks: &[&Ask<'_>], now_ms: u64) -> Result<Vec<Check>, StoreError> {
        let mut takes = Vec::with_capacity(2 * asks.len());
        // Per ask: where its pool's take is, and its demand count's (with whether it is alone).
        let mut at = Vec::with_capacity(asks.len());
        for ask in asks {
            let pool = ask.limit.pool.as_ref().expect("asked only of a pool");
            // No more than the pool can ever hold.
            let want = ask.want.max(ask.need).min(largest(pool));
            takes.push(Take::new(
                CheckItem::new(pool.clone(), ask.identifier.clone(), want as i64),
                ask.need,
            ));
            let pool_at = takes.len() - 1;
            // A region sharing the identifier counts what it asks for where a region alone on
            // it looks: a region that takes all the pool holds learns that others want it,
            // though it never finds the pool drawn before its own grant.
            let alone = self.ledger().alone(
                (&ask.limit.whole.name, &ask.identifier),
                now_ms,
                &self.sizing(ask.limit),
            );
            let demand = ask.limit.demand.as_ref().map(|demand| {
                let counted = if alone { 0 } else { ask.want as i64 };
                takes.push(Take::new(
                    CheckItem::new(demand.clone(), ask.identifier.clone(), counted),
                    0,
                ));
                (takes.len() - 1, alone)
            });
            at.push((pool_at, demand));
        }
        let answers = self.home_round_trip(&takes, now_ms).await?;
        let mut grants = Vec::new();
        for (ask, (pool_at, demand)) in asks.iter().zip(at) {
            if let (Some((demand_at, true)), Some(count)) = (demand, &ask.limit.demand) {
                if answers[demand_at].decision.remaining < count.policy.capacity() {
                    self.ledger()
                        .note_others((&ask.limit.whole.name, &ask.identifier), now_ms);
                }
            }
            let Taken { granted, decision } = answers[pool_at];
            // Granted or short, the decision tells what the pool holds after the take.
            self.ledger().note_pool(
                (&ask.limit.whole.name, &ask.identifier),
                granted,
                decision.remaining,
                decision.reset_at_ms,
                now_ms,
                &self.sizing(ask.limit),
            );
            if granted > 0 {
                grants.push(self.credit_check(ask, granted, &decision, now_ms));
            }
            // Short of the need: the shortfall's denial says when it may fit.
            if granted < ask.need && decision.reason == Reason::OverLimit {
                self.note_pool_empty(ask, &decision, now_ms);
            }
        }
        bump(&self.counters.granted, units(&grants));
        Ok(grants)
    }

    /// Notes that `ask`'s pool could not grant a waiting request's need (or holds nothing at
    /// all): until the pool's retry time, a request it denies is denied in the region without
    /// waiting for the home.
    fn note_pool_empty(&self, ask: &Ask<'_>, decision: &Decision, now_ms: u64) {
        // A refill the pool cannot fill says nothing of a request's smaller need.
        if !ask.waiting && decision.remaining > 0 {
            return;
        }
        let until = now_ms.saturating_add(decision.retry_after_ms.max(1));
        self.ledger()
            .note_pool_empty((&ask.limit.whole.name, &ask.identifier), until);
    }

    /// `takes` of the home's store: one round trip, one script call, timed.
    async fn home_round_trip(&self, takes: &[Take], now_ms: u64) -> Result<Vec<Taken>, StoreError> {
        bump(&self.counters.home_round_trips, 1);
        bump(&self.counters.home_script_calls, 1);
        let stopwatch = self.clock.stopwatch();
        let answers = self.home.take(takes, TimeSource::At(now_ms)).await;
        let took = stopwatch.elapsed_ms().round() as u64;
        if took > 0 {
            // A moving average: one slow trip does not double the next refills.
            let before = self.home_rtt_ms.load(Ordering::Relaxed);
            let after = if before == 0 {
                took
            } else {
                (before * 7 + took).div_ceil(8)
            };
            self.home_rtt_ms.store(after, Ordering::Relaxed);
        }
        answers.inspect_err(|_| bump(&self.counters.home_failures, 1))
    }

    /// Waits for the home on behalf of the checks at `waiting` (denied only by leases short of
    /// units): one ask of the home for every identifier they need, then one round trip to the
    /// region's store crediting the grants and deciding every one of those checks again (a
    /// concurrent request's grant may cover one the home refused). What the home does not
    /// grant (or, unreachable, cannot) is borrowed from the other regions' unused shares.
    async fn wait_for_home(
        &self,
        regional: &[Check],
        verdicts: &mut [Verdict],
        waiting: &[usize],
        now_ms: u64,
    ) {
        bump(&self.counters.waited, waiting.len() as u64);
        let mut asks: Vec<Ask<'_>> = Vec::new();
        for &i in waiting {
            let denied = regional[i]
                .items()
                .iter()
                .zip(&verdicts[i].decisions)
                .filter(|(_, d)| !d.allowed);
            for (item, _) in denied {
                let Some(limit) = self.limits.get(&item.limit.name) else {
                    continue;
                };
                let need = item.cost as u64;
                match asks.iter_mut().find(|a| {
                    *a.limit.whole.name == *item.limit.name && a.identifier == item.identifier
                }) {
                    Some(ask) => ask.need += need,
                    None => asks.push(Ask {
                        limit,
                        identifier: item.identifier.clone(),
                        need,
                        want: need,
                        waiting: true,
                    }),
                }
            }
        }
        {
            let mut ledger = self.ledger();
            for ask in &mut asks {
                let key = (&ask.limit.whole.name, &ask.identifier);
                ask.want = ledger.want_now(key, ask.need, now_ms, &self.sizing(ask.limit));
            }
        }
        // A pool known to be short is not asked: only the other regions may lend.
        let to_home: Vec<&Ask<'_>> = {
            let ledger = self.ledger();
            asks.iter()
                .filter(|a| {
                    ledger
                        .pool_empty_until((&a.limit.whole.name, &a.identifier), now_ms)
                        .is_none()
                })
                .collect()
        };
        let answered = if to_home.is_empty() {
            Ok(Vec::new())
        } else {
            self.ask_home(&to_home, now_ms).await
        };
        {
            let mut ledger = self.ledger();
            for ask in &asks {
                ledger.asked((&ask.limit.whole.name, &ask.identifier));
            }
        }
        let grants = answered.unwrap_or_else(|_| {
            // A home that cannot be reached is not asked again for these identifiers for a
            // horizon: their requests are decided by the region's share meanwhile, without
            // paying a failed round trip each. The other regions may still lend.
            let until = now_ms.saturating_add(self.horizon_ms());
            let mut ledger = self.ledger();
            for ask in &asks {
                ledger.note_pool_empty((&ask.limit.whole.name, &ask.identifier), until);
            }
            Vec::new()
        });
        let borrowed = self.borrow(&asks, &grants, now_ms).await;
        let mut credited = grants;
        credited.extend(borrowed);
        let mut credits = in_one_check(credited, now_ms);
        // A waiting check of one request the units just granted cover spends them as they
        // land: what crediting them and deciding it again would do (its share denies again at
        // the same time, its lease then holds them), without that round trip. Only what is
        // left is credited.
        let mut spent = Vec::new();
        let mut again = Vec::new();
        for &i in waiting {
            match spend_landed(&regional[i], &verdicts[i], credits.first_mut(), now_ms) {
                Some(decision) => spent.push((i, decision)),
                None => again.push(i),
            }
        }
        // A credit spent whole credits nothing: it is left out, and a check left empty too.
        for check in &mut credits {
            let kept: Vec<bool> = check.items().iter().map(|c| c.cost > 0).collect();
            check.retain_items(|i| kept[i]);
        }
        credits.retain(|c| !c.items().is_empty());
        // Every other waiting check is decided again, granted or not: while it waited, another
        // request of the region may have been granted units its lease now holds.
        let mut batch = credits;
        let credits = batch.len();
        batch.extend(again.iter().map(|&i| regional[i].clone()));
        let answers = if batch.is_empty() {
            Ok(Vec::new())
        } else {
            bump(&self.counters.region_script_calls, script_calls(&batch));
            self.region.check(&batch, TimeSource::At(now_ms)).await
        };
        self.note_credits(&batch[..credits], answers.as_deref().ok());
        for (i, mut decision) in spent {
            let item = &regional[i].items()[0];
            decision.remaining = self
                .ledger()
                .lease_balance((&item.limit.name, &item.identifier), now_ms);
            verdicts[i].allowed = true;
            verdicts[i].decisions[0] = decision;
        }
        if let Ok(mut answers) = answers {
            for (&i, verdict) in again.iter().zip(answers.drain(credits..)) {
                verdicts[i] = verdict;
            }
        }
    }

    /// Notes what the region's store answered to `credits` (`None`: it failed and the grants
    /// are lost to the region).
    fn note_credits(&self, credits: &[Check], answers: Option<&[Verdict]>) {
        let mut ledger = self.ledger();
        match answers {
            Some(answers) => {
                for (credit, answer) in credits.iter().zip(answers) {
                    for (item, lease) in credit.items().iter().zip(&answer.decisions) {
                        // A credit's limit is the region's part, named as the whole.
                        ledger.note_lease(
                            (&item.limit.name, &item.identifier),
                            lease.remaining,
                            lease.reset_at_ms,
                        );
                    }
                }
            }
            None => bump(&self.counters.lost, units(credits)),
        }
    }

    /// Reports each global item's decision as the whole limit's and notes what the region
    /// admitted.
    fn report(&self, regional: &[Check], verdicts: &mut [Verdict], now_ms: u64) {
        let mut ledger = self.ledger();
        for (check, verdict) in regional.iter().zip(verdicts.iter_mut()) {
            let mut global = false;
            for (item, decision) in check.items().iter().zip(verdict.decisions.iter_mut()) {
                let Some(limit) = self.limits.get(&item.limit.name) else {
                    continue;
                };
                global = true;
                let counted = verdict.allowed
                    && decision.allowed
                    && item.charge == Charge::Request
                    && item.cost > 0
                    && matches!(decision.reason, Reason::Admitted | Reason::Leased);
                if counted && limit.pool.is_some() {
                    let leased = decision.reason == Reason::Leased;
                    let sizing = self.sizing(limit);
                    if !leased && sizing.fixed_window {
                        ledger.note_share(
                            (&limit.whole.name, &item.identifier),
                            item.cost as u64,
                            decision.remaining,
                            decision.reset_at_ms,
                            now_ms,
                            &sizing,
                        );
                    }
                    if leased {
                        bump(&self.counters.leased, item.cost as u64);
                    }
                    ledger.note_admitted(
                        (&limit.whole.name, &item.identifier),
                        item.cost as u64,
                        decision.remaining,
                        leased,
                        now_ms,
                        &self.sizing(limit),
                    );
                }
                if !decision.allowed && limit.pool.is_some() {
                    decision.retry_after_ms =
                        self.retry_after(&ledger, limit, item, decision, now_ms);
                }
                *decision = limit.as_whole(*decision);
            }
            if global {
                bump(&self.counters.checks, 1);
            }
        }
    }
}

impl<R: Store, H: Store, P: Store> GlobalStore<R, H, P> {
    /// The check crediting `units` the home's `decision` granted `ask` to the region's lease:
    /// a check of its own, so that it is written whatever the request it was asked for decides.
    fn credit_check(&self, ask: &Ask<'_>, units: u64, decision: &Decision, now_ms: u64) -> Check {
        self.credit_until(
            ask,
            units,
            ask.limit.lease_end(decision, now_ms, self.lease_ms),
        )
    }

    /// The check crediting `units` to `ask`'s lease, ending at `until_ms`.
    fn credit_until(&self, ask: &Ask<'_>, units: u64, until_ms: u64) -> Check {
        Check::new().with_item(
            CheckItem::new(
                ask.limit.regional().clone(),
                ask.identifier.clone(),
                units as i64,
            )
            .charged(Charge::LeaseCredit { until_ms }),
        )
    }

    /// The denial the region's store would give `check`, when the region knows it without
    /// asking and the check then waits for the home: one request item of a fixed window's
    /// global limit (no tiers, no request id, no list), its share spent in the current window
    /// as this isolate last saw it, its lease short of the cost. A share only falls within its
    /// window (a refund aside) and what lands in the lease meanwhile is found when a wait that
    /// is not covered decides the check there again: no request is refused on this view alone.
    fn known_short(&self, check: &Check, now_ms: u64) -> Option<Verdict> {
        let [item] = check.items() else {
            return None;
        };
        if item.charge != Charge::Request
            || item.cost <= 0
            || item.request_id.is_some()
            || check.is_gated()
        {
            return None;
        }
        let global = self.limits.get(&item.limit.name)?;
        let share = global.share.as_ref()?;
        global.pool.as_ref()?;
        if share.policy.algorithm() != Algorithm::FixedWindow || !global.whole.tiers.is_empty() {
            return None;
        }
        let cost = item.cost as u64;
        let key = (&item.limit.name, &item.identifier);
        let (left, end) = {
            let ledger = self.ledger();
            let (left, end) = ledger.share_short(key, cost, now_ms)?;
            if ledger.lease_balance(key, now_ms) >= cost {
                return None;
            }
            (left, end)
        };
        let verdict = Verdict {
            allowed: false,
            decisions: vec![Decision {
                allowed: false,
                limit: item.limit.policy.capacity(),
                remaining: left,
                reset_at_ms: end,
                retry_after_ms: end - now_ms,
                reason: Reason::OverLimit,
            }],
            atomic: true,
            decided_at_ms: now_ms,
            listed: Vec::new(),
        };
        self.waits(check, &verdict, now_ms).then_some(verdict)
    }

    /// When a request a global item denied may be tried again. Only a pool known to be short
    /// of it, with the region's lease spent as far as the region knows and no refill on its
    /// way, makes the denial firm: then the later of the share's and the pool's retry times
    /// (what a denial cache may keep it for). Otherwise the home was not reached, or another
    /// request of the region took the units first, or a refill is still to land: the next
    /// request may find units in the lease, so it may be tried again at once — a retry time of
    /// zero, which no denial cache keeps (not even for requests of the same millisecond) and a
    /// `Retry-After` header rounds up to a second.
    fn retry_after(
        &self,
        ledger: &Ledger,
        limit: &RegionalLimit,
        item: &CheckItem,
        decision: &Decision,
        now_ms: u64,
    ) -> u64 {
        if decision.reason != Reason::OverLimit {
            return decision.retry_after_ms;
        }
        let key = (&limit.whole.name, &item.identifier);
        let lenders_short = self.peers.is_empty() || ledger.peers_short(key, now_ms);
        match ledger.pool_empty_until(key, now_ms) {
            Some(until)
                if lenders_short
                    && ledger.lease_balance(key, now_ms) == 0
                    && !ledger.refilling(key) =>
            {
                decision.retry_after_ms.max(until - now_ms)
            }
            _ => 0,
        }
    }
}

/// The most a part of `limit` can ever hold: its policy's capacity or a tier's, the larger.
fn largest(limit: &Limit) -> u64 {
    limit
        .tiers
        .iter()
        .map(|(_, p)| p.capacity())
        .fold(limit.policy.capacity(), u64::max)
}

/// The units `credits` grant.
fn units(credits: &[Check]) -> u64 {
    credits
        .iter()
        .flat_map(Check::items)
        .map(|i| i.cost as u64)
        .sum()
}

/// `credits` (checks of one credit each) as one check, one script call: a credit never denies,
/// so all or nothing changes none of them. The credits of one lease are merged into one — their
/// units added, the later end kept — which leaves the lease as crediting them one after another
/// does when every end is past `now_ms` (a credit ending sooner is sent apart: on an ended lease
/// it credits nothing).
fn in_one_check(credits: Vec<Check>, now_ms: u64) -> Vec<Check> {
    let mut merged: Vec<CheckItem> = Vec::new();
    let mut apart = Vec::new();
    for credit in credits {
        let item = &credit.items()[0];
        let until_ms = match item.charge {
            Charge::LeaseCredit { until_ms } if until_ms > now_ms => until_ms,
            _ => {
                apart.push(credit);
                continue;
            }
        };
        let same = merged
            .iter_mut()
            .find(|m| m.limit.name == item.limit.name && m.identifier == item.identifier);
        match same {
            Some(lease) => {
                lease.cost = lease.cost.saturating_add(item.cost);
                if let Charge::LeaseCredit { until_ms: end } = &mut lease.charge {
                    *end = (*end).max(until_ms);
                }
            }
            None => merged.push(item.clone()),
        }
    }
    let mut out = Vec::with_capacity(1 + apart.len());
    if !merged.is_empty() {
        out.push(merged.into_iter().fold(Check::new(), Check::with_item));
    }
    out.extend(apart);
    out
}

/// The decision of a waiting `check` (denied as `verdict` says) admitted from the units just
/// granted for its lease, taken out of `credits` (the one check crediting them,
/// [`in_one_check`]), if they cover it: a check of one request item without a request id (a
/// remembered one is the store's to remember), denied for want of units. Its decision is what
/// deciding it again would give — leased, `reset_at` its share's, retry 0 — its `remaining`
/// (the lease's balance) to be filled in once the rest is credited.
fn spend_landed(
    check: &Check,
    verdict: &Verdict,
    credits: Option<&mut Check>,
    now_ms: u64,
) -> Option<Decision> {
    let [item] = check.items() else {
        return None;
    };
    let denied = verdict.decisions.first()?;
    if item.charge != Charge::Request || item.cost <= 0 || item.request_id.is_some() {
        return None;
    }
    let mut found = None;
    credits?.map_items(|credit| {
        let same = *credit.limit.name == *item.limit.name && credit.identifier == item.identifier;
        // Only units of a lease live now: a credit already over credits nothing.
        let live = matches!(credit.charge, Charge::LeaseCredit { until_ms } if until_ms > now_ms);
        if let (None, true, Charge::LeaseCredit { until_ms }) =
            (&found, same && live, credit.charge)
        {
            if credit.cost >= item.cost {
                credit.cost -= item.cost;
                // A lease deciding alone says when it ends; a share, when it is whole again.
                let reset_at_ms = match item.spend_lease {
                    LeaseSpending::Only => until_ms,
                    _ => denied.reset_at_ms,
                };
                found = Some(Decision {
                    allowed: true,
                    remaining: 0,
                    reset_at_ms,
                    retry_after_ms: 0,
                    reason: Reason::Leased,
                    ..*denied
                });
            }
        }
    });
    found
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl<R: Store, H: Store, P: Store> Store for GlobalStore<R, H, P> {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        if self.limits.is_empty() {
            bump(&self.counters.region_script_calls, script_calls(checks));
            return self.region.check(checks, time).await;
        }
        let Some(now_ms) = time.at_ms() else {
            return Err(StoreError::InvalidInput(
                "global limits decide on the caller's clock (time = \"local\"): a lease ends at \
                 a time the region and the home must agree on (docs/design.md §9)"
                    .into(),
            ));
        };
        // A global limit's item is decided by its region's share and leases, which keep no
        // block and delay no request (docs/design.md §9): refused rather than half-applied.
        let refused = checks.iter().flat_map(Check::items).find(|item| {
            (item.limit.block_ms > 0 || item.limit.max_delay_ms > 0)
                && self.limits.get(&item.limit.name).is_some()
        });
        if let Some(item) = refused {
            return Err(StoreError::InvalidInput(format!(
                "global limit `{}` has a block_for or a delay: global limits take neither \
                 (docs/design.md §9)",
                item.limit.name
            )));
        }
        let regional = self.regional(checks);
        // A check the region knows its share and lease cannot admit waits for the home at once:
        // asking the region's store first would only hear the denial (and a wait not covered
        // decides it there again).
        let known: Vec<Option<Verdict>> = regional
            .iter()
            .map(|check| self.known_short(check, now_ms))
            .collect();
        let mut verdicts = if known.iter().all(Option::is_none) {
            bump(&self.counters.region_script_calls, script_calls(&regional));
            self.region.check(&regional, time).await?
        } else {
            let asked: Vec<Check> = regional
                .iter()
                .zip(&known)
                .filter(|(_, known)| known.is_none())
                .map(|(check, _)| check.clone())
                .collect();
            let mut answers = if asked.is_empty() {
                Vec::new()
            } else {
                bump(&self.counters.region_script_calls, script_calls(&asked));
                self.region.check(&asked, time).await?
            }
            .into_iter();
            known
                .into_iter()
                .map(|known| known.or_else(|| answers.next()))
                .collect::<Option<Vec<Verdict>>>()
                .ok_or_else(|| {
                    StoreError::Protocol("the region's store answered too few checks".into())
                })?
        };
        let waiting: Vec<usize> = (0..regional.len())
            .filter(|&i| self.waits(&regional[i], &verdicts[i], now_ms))
            .collect();
        if !waiting.is_empty() {
            self.wait_for_home(&regional, &mut verdicts, &waiting, now_ms)
                .await;
        }
        self.report(&regional, &mut verdicts, now_ms);
        Ok(verdicts)
    }

    /// Refills are queued: the next requests find their leases credited once they are sent.
    fn upkeep_due(&self) -> bool {
        self.refill_due_since().is_some()
    }

    /// Sends the queued refills ([`GlobalStore::refill`]).
    async fn upkeep(&self, now_ms: u64) -> Result<(), StoreError> {
        self.refill(now_ms).await
    }
}
