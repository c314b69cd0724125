//! The bounds of docs/design.md §9, asserted on generated multi-region schedules: regions
//! bursting at a window's start, refills landing at random, the home lost mid-window. Each
//! region is a `GlobalStore` over its own `MemoryStore`, the home one `MemoryStore` they share;
//! a lone `MemoryStore` deciding every request with the whole policy is the exact reference.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use futures::executor::block_on;
use proptest::prelude::*;

use super::{GlobalStats, GlobalStore, RegionalLimits, Split, Take, Taken, MILLION};
use crate::policy::{Algorithm, Policy};
use crate::store::{Check, Limit, MemoryStore, Store, StoreError, TimeSource, Verdict};

/// The home's store, which a test can take down and bring back.
#[derive(Debug, Clone)]
struct Home {
    store: Arc<MemoryStore>,
    down: Arc<AtomicBool>,
}

#[async_trait]
impl Store for Home {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        if self.down.load(Ordering::Relaxed) {
            return Err(StoreError::Unreachable("the home is down".into()));
        }
        self.store.check(checks, time).await
    }

    async fn take(&self, takes: &[Take], time: TimeSource) -> Result<Vec<Taken>, StoreError> {
        if self.down.load(Ordering::Relaxed) {
            return Err(StoreError::Unreachable("the home is down".into()));
        }
        self.store.take(takes, time).await
    }
}

/// One request of a schedule.
#[derive(Debug, Clone)]
struct Request {
    time_ms: u64,
    region: usize,
    identifier: u8,
    cost: u64,
    /// Whether the region sends its queued refills right after this request.
    refill: bool,
}

/// A deployment under test and what it admitted.
struct Run {
    policy: Policy,
    split: Split,
    lease_ms: u64,
    /// Per request: admitted under leases, admitted by the exact single store.
    admitted: Vec<(bool, bool)>,
}

fn run(
    policy: Policy,
    weights: &[u64],
    static_share: u64,
    lease_ms: u64,
    requests: &[Request],
    home_down: Option<(u64, u64)>,
) -> Run {
    let whole = Limit::new("api", policy);
    let home = Home {
        store: Arc::new(MemoryStore::new()),
        down: Arc::new(AtomicBool::new(false)),
    };
    // Each region's own store, which the others may borrow unused shares from.
    let own: Vec<Arc<MemoryStore>> = weights
        .iter()
        .map(|_| Arc::new(MemoryStore::new()))
        .collect();
    let regions: Vec<_> = (0..weights.len())
        .map(|r| {
            let limits = RegionalLimits::new([&whole], weights, static_share, r).unwrap();
            let peers = (0..own.len())
                .filter(|&p| p != r)
                .map(|p| (p, own[p].clone()))
                .collect();
            GlobalStore::new(
                own[r].clone(),
                home.clone(),
                limits,
                weights.len(),
                lease_ms,
            )
            .with_peers(peers)
        })
        .collect();
    let single = MemoryStore::new();
    let mut admitted = Vec::with_capacity(requests.len());
    for request in requests {
        let down = home_down.is_some_and(|(from, to)| (from..to).contains(&request.time_ms));
        home.down.store(down, Ordering::Relaxed);
        let check = Check::single(
            &whole,
            [b'u', request.identifier].as_slice(),
            request.cost as i64,
        );
        let time = TimeSource::At(request.time_ms);
        let region = &regions[request.region];
        let leased = block_on(region.check(std::slice::from_ref(&check), time)).unwrap();
        let exact = block_on(single.check(std::slice::from_ref(&check), time)).unwrap();
        admitted.push((leased[0].allowed, exact[0].allowed));
        if request.refill {
            // A refill the home cannot answer now is retried at the next chance.
            let _ = block_on(region.refill(request.time_ms));
        }
    }
    let split = Split::new(&policy, weights, static_share).unwrap();
    Run {
        policy,
        split,
        lease_ms,
        admitted,
    }
}

/// Schedules whose requests crowd a fixed window's start: a third land in its first 5 ms.
fn schedule(regions: usize, window_ms: u64, max_cost: u64) -> impl Strategy<Value = Vec<Request>> {
    let request = (
        0u64..4,
        prop_oneof![0u64..5, 0..window_ms],
        0..regions,
        0u8..3,
        1..=max_cost,
        any::<bool>(),
    )
        .prop_map(
            move |(window, offset, region, identifier, cost, refill)| Request {
                time_ms: window * window_ms + offset,
                region,
                identifier,
                cost,
                refill,
            },
        );
    proptest::collection::vec(request, 1..300).prop_map(|mut requests| {
        requests.sort_by_key(|r| r.time_ms);
        requests
    })
}

fn admitted_cost(run: &Run, requests: &[Request], pick: fn((bool, bool)) -> bool) -> Vec<u64> {
    requests
        .iter()
        .zip(&run.admitted)
        .map(|(r, &a)| if pick(a) { r.cost } else { 0 })
        .collect()
}

fn leased(a: (bool, bool)) -> bool {
    a.0
}

fn exact(a: (bool, bool)) -> bool {
    a.1
}

/// The leased admissions of each (identifier, window) of a fixed window.
fn per_window(requests: &[Request], costs: &[u64], window_ms: u64) -> Vec<((u8, u64), u64)> {
    let mut sums: Vec<((u8, u64), u64)> = Vec::new();
    for (r, &c) in requests.iter().zip(costs) {
        let key = (r.identifier, r.time_ms / window_ms);
        match sums.iter_mut().find(|(k, _)| *k == key) {
            Some((_, sum)) => *sum += c,
            None => sums.push((key, c)),
        }
    }
    sums
}

fn weights() -> impl Strategy<Value = Vec<u64>> {
    proptest::collection::vec(1u64..4, 1..4)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// No fixed window admits more than the limit across regions, whatever the share, the
    /// refills and the home's outages.
    #[test]
    fn a_fixed_window_never_admits_more_than_its_limit(
        limit in 1u64..40,
        weights in weights(),
        static_share in prop_oneof![Just(0), Just(MILLION / 2), Just(MILLION), 0..=MILLION],
        requests in weights().prop_flat_map(|w| schedule(w.len(), 1_000, 3)),
        outage in proptest::option::of((0u64..4_000, 0u64..2_000)),
    ) {
        let regions = weights.len();
        let requests: Vec<Request> = requests
            .into_iter()
            .map(|r| Request { region: r.region % regions, ..r })
            .collect();
        let policy = Policy::new(Algorithm::FixedWindow, limit, 1_000, None).unwrap();
        let outage = outage.map(|(from, long)| (from, from + long));
        let run = run(policy, &weights, static_share, 1_000, &requests, outage);
        let costs = admitted_cost(&run, &requests, leased);
        for ((identifier, window), sum) in per_window(&requests, &costs, 1_000) {
            prop_assert!(
                sum <= limit,
                "identifier {identifier} window {window}: {sum} admitted, limit {limit}"
            );
        }
    }

    /// No interval of `Δ` admits more than `B + r·(Δ + τ)` of a bucket across regions (`τ` the
    /// lease's life): every unit admitted in it was issued by the pool or a share within
    /// `[t − τ, t + Δ]`.
    #[test]
    fn a_bucket_never_admits_more_than_burst_rate_and_the_leases_in_flight(
        gcra in any::<bool>(),
        limit in 1u64..20,
        burst in 1u64..40,
        lease_ms in 1u64..2_000,
        weights in weights(),
        static_share in 0..=MILLION,
        requests in weights().prop_flat_map(|w| schedule(w.len(), 1_000, 3)),
        outage in proptest::option::of((0u64..4_000, 0u64..2_000)),
    ) {
        let regions = weights.len();
        let requests: Vec<Request> = requests
            .into_iter()
            .map(|r| Request { region: r.region % regions, ..r })
            .collect();
        let algorithm = if gcra { Algorithm::Gcra } else { Algorithm::TokenBucket };
        let policy = Policy::new(algorithm, limit, 1_000, Some(burst)).unwrap();
        let outage = outage.map(|(from, long)| (from, from + long));
        let run = run(policy, &weights, static_share, lease_ms, &requests, outage);
        let costs = admitted_cost(&run, &requests, leased);
        for id in 0..3u8 {
            let mine: Vec<(u64, u64)> = requests
                .iter()
                .zip(&costs)
                .filter(|(r, _)| r.identifier == id)
                .map(|(r, &c)| (r.time_ms, c))
                .collect();
            for i in 0..mine.len() {
                let mut sum = 0;
                for &(t, c) in &mine[i..] {
                    sum += c;
                    let delta = t - mine[i].0;
                    // In units × window: burst·W + L·(Δ + τ).
                    let bound = run.policy.burst() * 1_000
                        + run.policy.limit() * (delta + run.lease_ms);
                    prop_assert!(
                        sum * 1_000 <= bound,
                        "identifier {id}: {sum} admitted in [{}, {t}], bound {}/1000",
                        mine[i].0,
                        bound
                    );
                }
            }
        }
    }

    /// The cost, with one region taking all the traffic and the home reachable: per window it
    /// admits what the exact single store admits — the pool and the other regions' unused
    /// shares follow its demand — short of at most what the rounding left out and fragments
    /// smaller than a request (its share, its lease, the pool and each other region's share
    /// holding less than the request that was denied). With the home lost for the window, it
    /// still admits up to its own share.
    #[test]
    fn one_busy_region_is_short_of_the_single_store_by_the_others_shares_at_most(
        limit in 1u64..60,
        weights in weights(),
        static_share in 0..=MILLION,
        requests in schedule(1, 1_000, 3),
        home_lost in any::<bool>(),
    ) {
        let policy = Policy::new(Algorithm::FixedWindow, limit, 1_000, None).unwrap();
        let outage = home_lost.then_some((0, u64::MAX));
        let run = run(policy, &weights, static_share, 1_000, &requests, outage);
        let part = |p: Option<Policy>| p.map_or(0, |p| p.limit());
        let own = part(run.split.shares[0]);
        let others: u64 = run.split.shares[1..].iter().map(|&s| part(s)).sum();
        let pool = part(run.split.pool);
        let slack = limit - own - others - pool;
        let fragments = (2 + weights.len() as u64) * (3 - 1);
        let leased_costs = admitted_cost(&run, &requests, leased);
        let exact_costs = admitted_cost(&run, &requests, exact);
        let leased_sums = per_window(&requests, &leased_costs, 1_000);
        for ((key, exact_sum), (_, leased_sum)) in
            per_window(&requests, &exact_costs, 1_000).into_iter().zip(leased_sums)
        {
            let short = exact_sum.saturating_sub(leased_sum);
            let allowed = if home_lost {
                exact_sum.saturating_sub(own.saturating_sub(2))
            } else {
                slack + fragments
            };
            prop_assert!(
                short <= allowed,
                "{key:?}: exact {exact_sum}, leased {leased_sum}, own {own}, others {others}, \
                 pool {pool}, slack {slack}"
            );
        }
    }
}

#[test]
fn a_region_past_its_share_waits_once_then_spends_the_refill_it_was_granted() {
    let whole = Limit::new("api", "fixed 100/1m".parse().unwrap());
    let home = Home {
        store: Arc::new(MemoryStore::new()),
        down: Arc::new(AtomicBool::new(false)),
    };
    // Two regions hold 25 each; the pool 50.
    let limits = RegionalLimits::new([&whole], &[1, 1], MILLION / 2, 0).unwrap();
    let region = GlobalStore::new(MemoryStore::new(), home.clone(), limits, 2, 1_000);
    let check = Check::single(&whole, "alice", 1);
    let mut reasons = Vec::new();
    for t in 0..40 {
        let verdict = block_on(region.check(std::slice::from_ref(&check), TimeSource::At(t)))
            .unwrap()
            .remove(0);
        assert!(verdict.allowed, "request {t}");
        assert_eq!(
            verdict.decisions[0].limit, 100,
            "reported as the whole limit"
        );
        reasons.push(verdict.decisions[0].reason);
        block_on(region.refill(t)).unwrap();
    }
    let stats = region.stats();
    assert_eq!(stats.checks, 40);
    assert!(stats.waited <= 1, "{stats:?}");
    assert_eq!(
        reasons
            .iter()
            .filter(|r| **r == crate::decision::Reason::Leased)
            .count(),
        15
    );
    assert!(stats.granted >= 15 && stats.granted <= 50, "{stats:?}");
}

#[test]
fn the_server_clock_is_refused_for_global_limits() {
    let whole = Limit::new("api", "fixed 10/1m".parse().unwrap());
    let limits = RegionalLimits::new([&whole], &[1], MILLION / 2, 0).unwrap();
    let region = GlobalStore::new(MemoryStore::new(), MemoryStore::new(), limits, 1, 1_000);
    let check = Check::single(&whole, "alice", 1);
    let e = block_on(region.check(&[check], TimeSource::Server)).unwrap_err();
    assert!(matches!(e, StoreError::InvalidInput(_)), "{e}");
}

#[test]
fn global_limits_refuse_blocks_and_delays_and_others_keep_their_blocks() {
    let whole = Limit::new("api", "fixed 10/1m".parse().unwrap());
    let limits = RegionalLimits::new([&whole], &[1], MILLION / 2, 0).unwrap();
    let region = GlobalStore::new(MemoryStore::new(), MemoryStore::new(), limits, 1, 1_000);
    for changed in [
        whole.clone().with_block_for(1_000),
        whole.clone().with_max_delay(100),
    ] {
        let check = Check::single(&changed, "alice", 1);
        let e = block_on(region.check(&[check], TimeSource::At(1_000))).unwrap_err();
        assert!(
            matches!(&e, StoreError::InvalidInput(m) if m.contains("`api`")),
            "{e}"
        );
    }
    // A limit that is not global decides its block in the region's store.
    let local = Limit::new("local", "fixed 1/1m".parse().unwrap()).with_block_for(1_000);
    let reasons: Vec<_> = [1_000, 1_001, 1_002]
        .into_iter()
        .map(|t| {
            let check = Check::single(&local, "alice", 1);
            block_on(region.check(&[check], TimeSource::At(t))).unwrap()[0].decisions[0].reason
        })
        .collect();
    use crate::decision::Reason;
    assert_eq!(
        reasons,
        [Reason::Admitted, Reason::OverLimit, Reason::Blocked]
    );
}

/// The home's store answering only after `yields` polls, so that concurrent requests of a
/// region overlap their asks as they do behind a real round trip.
#[derive(Debug, Clone)]
struct SlowHome {
    store: Arc<MemoryStore>,
    yields: usize,
}

#[async_trait]
impl Store for SlowHome {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        let mut left = self.yields;
        std::future::poll_fn(|cx| {
            if left == 0 {
                return std::task::Poll::Ready(());
            }
            left -= 1;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        })
        .await;
        self.store.check(checks, time).await
    }

    async fn take(&self, takes: &[Take], time: TimeSource) -> Result<Vec<Taken>, StoreError> {
        let mut left = self.yields;
        std::future::poll_fn(|cx| {
            if left == 0 {
                return std::task::Poll::Ready(());
            }
            left -= 1;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        })
        .await;
        self.store.take(takes, time).await
    }
}

/// What two regions' bursts come to: admitted per region, and each region's stats.
type Bursts = ((usize, usize), GlobalStats, GlobalStats);

/// Bursts of 20 requests in one region and 10 in another on one identifier under `fixed 40/5s`
/// split over three regions (shares of 6, a pool of 22), every request sending the refills it
/// queued after its answer: all at once (`concurrent`, each request of a burst overlapping the
/// others' asks of the home), or one request at a time.
fn bursts(concurrent: bool) -> Bursts {
    let whole = Limit::new("api", "fixed 40/5s".parse().unwrap());
    let home = SlowHome {
        store: Arc::new(MemoryStore::new()),
        yields: 8,
    };
    let regions: Vec<_> = (0..3)
        .map(|r| {
            let limits = RegionalLimits::new([&whole], &[1, 1, 1], MILLION / 2, r).unwrap();
            GlobalStore::new(MemoryStore::new(), home.clone(), limits, 3, 1_000)
        })
        .collect();
    let check = Check::single(&whole, "alice", 1);
    let (us, eu) = if concurrent {
        block_on(futures::future::join(
            burst(&regions[0], &check, 20),
            burst(&regions[1], &check, 10),
        ))
    } else {
        // As the simulator replays them: one request at a time, each region's refills decided
        // at the home when sent and credited once the bursts are over (a round trip later).
        let mut us = Vec::new();
        let mut eu = Vec::new();
        let mut granted = Vec::new();
        for i in 0..20 {
            for (r, answers) in [(0, &mut us), (1, &mut eu)] {
                if r == 1 && i % 2 == 1 {
                    continue;
                }
                let region = &regions[r];
                answers.push(block_on(
                    region.check(std::slice::from_ref(&check), TimeSource::At(100)),
                ));
                granted.push((region, block_on(region.ask_refills(100)).unwrap()));
            }
        }
        for (region, granted) in granted {
            block_on(region.credit_refills(granted)).unwrap();
        }
        (us, eu)
    };
    let admitted = |answers: Vec<Result<Vec<Verdict>, StoreError>>| {
        answers
            .into_iter()
            .filter(|a| a.as_ref().unwrap()[0].allowed)
            .count()
    };
    (
        (admitted(us), admitted(eu)),
        regions[0].stats(),
        regions[1].stats(),
    )
}

/// Bursts cost what the design bounds, whether their requests overlap (as in a Worker's
/// isolate) or come one at a time (as the simulator replays them): short of the exact store,
/// which admits all 30, by at most the units the leases hold unspent. While a region's waiting
/// requests have asks out it sends no refill beside them (at most the one already queued).
#[test]
fn concurrent_bursts_cost_at_most_what_the_leases_hold_unspent() {
    for concurrent in [true, false] {
        let ((us_admitted, eu_admitted), us, eu) = bursts(concurrent);
        let unspent = us.granted + eu.granted - us.leased - eu.leased;
        let short = 30 - (us_admitted + eu_admitted) as u64;
        assert!(
            short <= unspent,
            "concurrent {concurrent}: {short} short of the exact store, {unspent} unspent: {us:?} {eu:?}"
        );
        if concurrent {
            assert_eq!((us.waited, eu.waited), (14, 4));
            for stats in [us, eu] {
                assert!(stats.home_round_trips <= stats.waited + 1, "{stats:?}");
            }
        }
    }
}

/// `n` concurrent requests of `check` in `region`, all at once, each sending the refills it
/// queued after its answer (as the Worker does in `waitUntil`).
async fn burst(
    region: &GlobalStore<MemoryStore, SlowHome>,
    check: &Check,
    n: usize,
) -> Vec<Result<Vec<Verdict>, StoreError>> {
    let requests = (0..n).map(|_| async {
        let answer = region
            .check(std::slice::from_ref(check), TimeSource::At(100))
            .await;
        region.refill(100).await.unwrap();
        answer
    });
    futures::future::join_all(requests).await
}

/// Three regions of `fixed 60/1m` (shares of 15, 9 and 6 by weights 5:3:2, a pool of 30), each
/// the others' peer; the home and every store in memory.
fn three_regions() -> Vec<GlobalStore<Arc<MemoryStore>, Arc<MemoryStore>>> {
    let whole = Limit::new("api", "fixed 60/1m".parse().unwrap());
    let weights = [5, 3, 2];
    let home = Arc::new(MemoryStore::new());
    let own: Vec<Arc<MemoryStore>> = (0..3).map(|_| Arc::new(MemoryStore::new())).collect();
    (0..3)
        .map(|r| {
            let limits = RegionalLimits::new([&whole], &weights, MILLION / 2, r).unwrap();
            let peers = (0..3)
                .filter(|&p| p != r)
                .map(|p| (p, own[p].clone()))
                .collect();
            GlobalStore::new(own[r].clone(), home.clone(), limits, 3, 1_000).with_peers(peers)
        })
        .collect()
}

fn admitted_of(region: &GlobalStore<Arc<MemoryStore>, Arc<MemoryStore>>, n: u64, at: u64) -> u64 {
    let whole = Limit::new("api", "fixed 60/1m".parse().unwrap());
    let check = Check::single(&whole, "alice", 1);
    (0..n)
        .filter(|i| {
            block_on(region.check(std::slice::from_ref(&check), TimeSource::At(at + i))).unwrap()[0]
                .allowed
        })
        .count() as u64
}

/// An identifier only one region serves gets its whole limit there, as one store would give it:
/// its share, then the whole pool at one wait, then the other regions' unused shares at one
/// more round trip; the regions it took them from then admit none of it in that window.
#[test]
fn one_region_serving_an_identifier_gets_its_whole_limit_there() {
    let regions = three_regions();
    assert_eq!(admitted_of(&regions[0], 70, 0), 60);
    let stats = regions[0].stats();
    // One wait for the pool, one more for the peers (a round trip to each, at once), and one
    // to learn that they have nothing left: beyond the limit, no round trip.
    assert_eq!(
        (stats.waited, stats.home_round_trips, stats.peer_round_trips),
        (3, 2, 4),
        "{stats:?}"
    );
    assert_eq!((stats.granted, stats.borrowed), (30, 15), "{stats:?}");
    assert_eq!(admitted_of(&regions[1], 5, 100), 0, "its share was lent");
    assert_eq!(admitted_of(&regions[2], 5, 100), 0, "its share was lent");
    // The next window starts whole, and the region that served it is still alone.
    assert_eq!(admitted_of(&regions[0], 70, 60_000), 60);
}

/// A region that sees another draw on the pool is not alone: it borrows only what each request
/// lacks, from the others' shares and leases, and admits what one store would.
#[test]
fn a_region_sharing_an_identifier_borrows_only_its_shortfall() {
    let regions = three_regions();
    // `us` spends its share and takes the whole pool; `eu` then spends its share, finds the
    // pool empty (another region drew on it) and borrows, request by request, what `ap`'s
    // share holds: the 21 one store would still admit.
    assert_eq!(admitted_of(&regions[1], 39, 0), 39);
    let eu = admitted_of(&regions[0], 30, 100);
    let stats = regions[0].stats();
    assert_eq!(eu, 21, "{stats:?}");
    assert_eq!(
        (stats.granted, stats.borrowed, stats.home_round_trips),
        (0, 6, 1),
        "{stats:?}"
    );
    assert_eq!(admitted_of(&regions[2], 10, 200), 0, "`ap` lent its share");
}

/// Units a region holds in its lease, unspent, are lent to another region that needs them: a
/// lease holds no capacity away from demand.
#[test]
fn a_lease_left_unspent_in_one_region_is_lent_to_another_that_needs_it() {
    let regions = three_regions();
    // `us`, alone, spends its share and takes the whole pool for one more request: 29 units
    // sit in its lease. `eu` then spends its share and borrows the rest of the limit.
    assert_eq!(admitted_of(&regions[1], 10, 0), 10);
    assert_eq!(admitted_of(&regions[0], 60, 100), 50);
    let stats = regions[0].stats();
    assert!(stats.borrowed >= 29, "{stats:?}");
    assert_eq!(admitted_of(&regions[1], 10, 200), 0, "`us` lent its lease");
}
