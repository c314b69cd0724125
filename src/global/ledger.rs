//! A region's bookkeeping of its leases (docs/design.md §9, "A request in a region" and
//! "Capacity follows demand"): what it admitted of each global (limit, identifier) lately, the
//! lease balance its store last reported, what the pool last had left, when another region was
//! last seen serving the identifier — and from those, when to refill and by how much. Pure:
//! time is passed in.

use std::collections::HashMap;
use std::sync::Arc;

use crate::store::Identifier;

/// A refill the region owes itself: ask the home's pool for `want` units of `limit` for
/// `identifier`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refill {
    /// The global limit's name.
    pub limit: Arc<str>,
    /// Whose lease.
    pub identifier: Identifier,
    /// How many units to ask for.
    pub want: u64,
    /// When the need was seen (epoch ms).
    pub queued_ms: u64,
}

/// What the region knows of one (limit, identifier).
#[derive(Debug, Clone, Default)]
struct Entry {
    /// Units the region admitted from its leases since `since_ms`: its demand beyond its
    /// static share, which is what a lease is for.
    leased: u64,
    since_ms: u64,
    /// The lease balance the store last reported, and when the lease ends.
    balance: u64,
    lease_until_ms: u64,
    /// What the pool had left at the home's last answer.
    pool: Option<PoolSeen>,
    /// When another region was last seen drawing on the pool (its left falling by more than
    /// this region took), or borrowing from this region's share.
    others_ms: Option<u64>,
    /// A fixed window's share as the region's last admission by it left it: what remained,
    /// and the window's end.
    share: Option<(u64, u64)>,
    /// Until when the pool is known to hold less than a request the region needed (epoch ms):
    /// till then a denied request does not wait for the home.
    pool_empty_until_ms: u64,
    /// Until when the other regions are known to have nothing to lend a request (epoch ms).
    peers_short_until_ms: u64,
    /// Whether a refill is queued or under way: only its own answer ends it.
    pending: bool,
    /// Asks of the home under way for waiting requests.
    asking: u32,
    seen_ms: u64,
}

/// The pool as the home's last answer showed it.
#[derive(Debug, Clone, Copy)]
struct PoolSeen {
    left: u64,
    at_ms: u64,
    /// When the pool is whole again if nothing more is taken (the answer's `reset_at_ms`).
    whole_at_ms: u64,
}

/// A region's leases, as far as its decisions tell.
#[derive(Debug, Default)]
pub struct Ledger {
    entries: HashMap<(Arc<str>, Identifier), Entry>,
    queue: Vec<Refill>,
}

/// How the ledger sizes refills: the horizon a refill should last, the number of regions
/// sharing the pool, the pool's capacity (what is left before the home has answered), and how
/// long the region must have drawn on the pool alone to take all of it.
#[derive(Debug, Clone, Copy)]
pub struct Sizing {
    /// How long a refill should last at the region's rate (ms).
    pub horizon_ms: u64,
    /// How many regions share the pool.
    pub regions: u64,
    /// The pool's capacity.
    pub pool_capacity: u64,
    /// Whether the pool is a fixed window: what it has left holds until its window ends (a
    /// bucket's grows back steadily until it is whole).
    pub fixed_window: bool,
    /// How long no other region must have been seen drawing on the pool for this one to ask
    /// for all it has left (ms); 0: never.
    pub alone_ms: u64,
}

impl Sizing {
    /// The units to ask for: the region's rate beyond its share (what it admitted from leases)
    /// over the horizon, at least one unit; at most the pool's last remaining over the number
    /// of regions — and never less than `need`, what a waiting request must have. A rate
    /// counting the share's admissions too would size a burst's refill by the burst, and the
    /// refill would sit in the lease, unspent, while other regions' requests wait for it.
    fn want(&self, entry: &Entry, now_ms: u64, need: u64) -> u64 {
        let left = self.pool_left(entry, now_ms);
        let alone = self.alone(entry, now_ms);
        if alone && self.fixed_window {
            // Capacity follows demand (docs/design.md §9): no other region draws on this
            // identifier's pool, so all it holds until its window ends is this region's.
            return left.max(need).max(1);
        }
        // Rates are measured over at least one horizon, so a region's first requests do not
        // read as a flood.
        let elapsed = now_ms.saturating_sub(entry.since_ms).max(self.horizon_ms);
        let rate_target = (u128::from(entry.leased) * u128::from(self.horizon_ms))
            .div_ceil(u128::from(elapsed.max(1))) as u64;
        // Alone, a bucket's region may take all the pool holds, at the pace its rate asks:
        // what a lease holds past its end is lost, so it is not taken far ahead.
        let fair = if alone {
            left
        } else {
            left / self.regions.max(1)
        };
        rate_target.max(1).min(fair.max(1)).max(need)
    }

    /// Whether the region has drawn on the pool alone lately: no other region seen taking
    /// from it for `alone_ms`.
    fn alone(&self, entry: &Entry, now_ms: u64) -> bool {
        self.alone_ms > 0
            && entry
                .others_ms
                .is_none_or(|seen| now_ms.saturating_sub(seen) >= self.alone_ms)
    }

    /// What the pool holds at `now_ms`, as far as the home's last answer tells: a fixed
    /// window's left until its window ends, a bucket's growing back in a straight line until
    /// it is whole; the capacity when nothing is known.
    fn pool_left(&self, entry: &Entry, now_ms: u64) -> u64 {
        let Some(seen) = entry.pool else {
            return self.pool_capacity;
        };
        if now_ms >= seen.whole_at_ms {
            return self.pool_capacity;
        }
        if self.fixed_window || now_ms <= seen.at_ms {
            return seen.left.min(self.pool_capacity);
        }
        let missing = self.pool_capacity.saturating_sub(seen.left);
        let back = u128::from(missing) * u128::from(now_ms - seen.at_ms)
            / u128::from(seen.whole_at_ms - seen.at_ms);
        (u128::from(seen.left) + back).min(u128::from(self.pool_capacity)) as u64
    }
}

impl Ledger {
    /// Notes a global item the region's store admitted at `now_ms`: `cost` units, by its share
    /// with `share_left` remaining, or by its lease (`leased`) with `share_left` the lease's
    /// balance. Queues a refill when the share and the lease together hold less than half of
    /// one. Returns whether it queued one.
    pub fn note_admitted(
        &mut self,
        key: (&Arc<str>, &Identifier),
        cost: u64,
        left: u64,
        leased: bool,
        now_ms: u64,
        sizing: &Sizing,
    ) -> bool {
        let entry = self.entry(key, now_ms, sizing);
        if leased {
            entry.leased = entry.leased.saturating_add(cost);
        }
        let lease = if entry.lease_until_ms > now_ms {
            entry.balance
        } else {
            0
        };
        let available = if leased {
            entry.balance = left;
            left
        } else {
            left.saturating_add(lease)
        };
        // A fixed window's region alone on its pool takes all of it when its share and lease
        // fall short: one wait per window, and nothing sent ahead that a waiting request of
        // the same moment would then find taken.
        if sizing.fixed_window && sizing.alone(entry, now_ms) {
            return false;
        }
        let want = sizing.want(entry, now_ms, 0);
        // One ask of the home ahead of need at a time, and none beside a waiting request's:
        // a refill sent while others are out strands what they bring in the region's lease.
        if entry.pending || entry.asking > 0 || available.saturating_mul(2) >= want {
            return false;
        }
        entry.pending = true;
        self.queue.push(Refill {
            limit: key.0.clone(),
            identifier: key.1.clone(),
            want,
            queued_ms: now_ms,
        });
        true
    }

    /// Notes that another region serves `key` too, as the home's count of what other regions
    /// asked for shows at `now_ms`.
    pub fn note_others(&mut self, key: (&Arc<str>, &Identifier), now_ms: u64) {
        if let Some(entry) = self.entries.get_mut(&(key.0.clone(), key.1.clone())) {
            entry.others_ms = Some(now_ms);
        }
    }

    /// Notes that a fixed window's static share admitted `cost` units at `now_ms`, leaving
    /// `left` in the window ending at `window_end_ms`. A share that fell by more than the
    /// region took since its last admission was lent to another region: one that serves the
    /// identifier too.
    pub fn note_share(
        &mut self,
        key: (&Arc<str>, &Identifier),
        cost: u64,
        left: u64,
        window_end_ms: u64,
        now_ms: u64,
        sizing: &Sizing,
    ) {
        let entry = self.entry(key, now_ms, sizing);
        if let Some((before, end)) = entry.share {
            if end == window_end_ms && before.saturating_sub(cost) > left {
                entry.others_ms = Some(now_ms);
            }
        }
        entry.share = Some((left, window_end_ms));
    }

    /// What to ask the home for a request that must have `need` units now, counting the ask
    /// as under way until [`Ledger::asked`]: a refill's worth for the first, only `need` while
    /// another ask or a refill is under way — a burst of waiting requests must not each take a
    /// region's fair share of the pool, stranding in one region's lease what other regions'
    /// requests need.
    pub fn want_now(
        &mut self,
        key: (&Arc<str>, &Identifier),
        need: u64,
        now_ms: u64,
        sizing: &Sizing,
    ) -> u64 {
        let entry = self.entry(key, now_ms, sizing);
        let busy = entry.asking > 0 || entry.pending;
        entry.asking += 1;
        if busy {
            need
        } else {
            sizing.want(entry, now_ms, need)
        }
    }

    /// Notes that an ask [`Ledger::want_now`] sized has been answered (or failed).
    pub fn asked(&mut self, key: (&Arc<str>, &Identifier)) {
        if let Some(entry) = self.entries.get_mut(&(key.0.clone(), key.1.clone())) {
            entry.asking = entry.asking.saturating_sub(1);
        }
    }

    /// Notes that the pool could not grant a request's need until `until_ms` (the pool's own
    /// retry time).
    pub fn note_pool_empty(&mut self, key: (&Arc<str>, &Identifier), until_ms: u64) {
        if let Some(entry) = self.entries.get_mut(&(key.0.clone(), key.1.clone())) {
            entry.pool_empty_until_ms = entry.pool_empty_until_ms.max(until_ms);
        }
    }

    /// Whether the region has drawn on this (limit, identifier)'s pool alone lately (see
    /// [`Sizing::alone_ms`]).
    pub fn alone(&self, key: (&Arc<str>, &Identifier), now_ms: u64, sizing: &Sizing) -> bool {
        self.entries
            .get(&(key.0.clone(), key.1.clone()))
            .map_or(sizing.alone_ms > 0, |e| sizing.alone(e, now_ms))
    }

    /// Notes that the other regions could not lend a request what it lacked, until `until_ms`.
    pub fn note_peers_short(&mut self, key: (&Arc<str>, &Identifier), until_ms: u64) {
        if let Some(entry) = self.entries.get_mut(&(key.0.clone(), key.1.clone())) {
            entry.peers_short_until_ms = entry.peers_short_until_ms.max(until_ms);
        }
    }

    /// Whether the other regions are known, at `now_ms`, to have nothing to lend.
    pub fn peers_short(&self, key: (&Arc<str>, &Identifier), now_ms: u64) -> bool {
        self.entries
            .get(&(key.0.clone(), key.1.clone()))
            .is_some_and(|e| e.peers_short_until_ms > now_ms)
    }

    /// Until when the pool is known to be short of a request, if it still is at `now_ms`.
    pub fn pool_empty_until(&self, key: (&Arc<str>, &Identifier), now_ms: u64) -> Option<u64> {
        let entry = self.entries.get(&(key.0.clone(), key.1.clone()))?;
        (entry.pool_empty_until_ms > now_ms).then_some(entry.pool_empty_until_ms)
    }

    /// Whether a refill is queued or under way: what it brings may admit the next request.
    pub fn refilling(&self, key: (&Arc<str>, &Identifier)) -> bool {
        self.entries
            .get(&(key.0.clone(), key.1.clone()))
            .is_some_and(|e| e.pending)
    }

    /// A fixed window's share as the region's last admission by it left it — what remained
    /// and the window's end — if that is still the window at `now_ms` and it holds less than
    /// `cost`.
    pub fn share_short(
        &self,
        key: (&Arc<str>, &Identifier),
        cost: u64,
        now_ms: u64,
    ) -> Option<(u64, u64)> {
        let (left, end) = self.entries.get(&(key.0.clone(), key.1.clone()))?.share?;
        (now_ms < end && left < cost).then_some((left, end))
    }

    /// The units the region's lease held at its last report, if it is still live at `now_ms`.
    pub fn lease_balance(&self, key: (&Arc<str>, &Identifier), now_ms: u64) -> u64 {
        self.entries
            .get(&(key.0.clone(), key.1.clone()))
            .filter(|e| e.lease_until_ms > now_ms)
            .map_or(0, |e| e.balance)
    }

    /// Notes the home's answer to an ask at `now_ms`: it granted `granted` units and the pool
    /// has `left` after them, whole again at `whole_at_ms`. A pool that held less before the
    /// grant than the region's last answer left it is one another region draws on.
    pub fn note_pool(
        &mut self,
        key: (&Arc<str>, &Identifier),
        granted: u64,
        left: u64,
        whole_at_ms: u64,
        now_ms: u64,
        sizing: &Sizing,
    ) {
        let entry = self.entry(key, now_ms, sizing);
        let expected = sizing.pool_left(entry, now_ms);
        // A bucket's growing back is estimated, and rounded down by the home: one unit of
        // slack.
        let slack = u64::from(!sizing.fixed_window);
        if left.saturating_add(granted).saturating_add(slack) < expected {
            entry.others_ms = Some(now_ms);
        }
        entry.pool = Some(PoolSeen {
            left,
            at_ms: now_ms,
            whole_at_ms,
        });
    }

    /// Notes a lease the region's store now holds after a credit.
    pub fn note_lease(&mut self, key: (&Arc<str>, &Identifier), balance: u64, until_ms: u64) {
        if let Some(entry) = self.entries.get_mut(&(key.0.clone(), key.1.clone())) {
            entry.balance = balance;
            entry.lease_until_ms = until_ms;
        }
    }

    /// Marks the refill of `key` over: the home answered it (granted or not) or was not reached.
    pub fn refill_done(&mut self, key: (&Arc<str>, &Identifier)) {
        if let Some(entry) = self.entries.get_mut(&(key.0.clone(), key.1.clone())) {
            entry.pending = false;
        }
    }

    /// The refills queued, oldest first, leaving none.
    pub fn take_refills(&mut self) -> Vec<Refill> {
        std::mem::take(&mut self.queue)
    }

    /// When the oldest queued refill was queued, if any is.
    pub fn oldest_refill_ms(&self) -> Option<u64> {
        self.queue.first().map(|r| r.queued_ms)
    }

    /// Forgets entries neither seen for `idle_ms` nor holding a live lease, so an isolate's
    /// memory follows its recent traffic.
    pub fn forget_idle(&mut self, now_ms: u64, idle_ms: u64) {
        self.entries.retain(|_, e| {
            e.pending
                || e.asking > 0
                || e.lease_until_ms > now_ms
                || e.pool_empty_until_ms > now_ms
                || e.peers_short_until_ms > now_ms
                || now_ms.saturating_sub(e.seen_ms) < idle_ms
        });
    }

    /// How many (limit, identifier) the ledger holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn entry(&mut self, key: (&Arc<str>, &Identifier), now_ms: u64, sizing: &Sizing) -> &mut Entry {
        let entry = self
            .entries
            .entry((key.0.clone(), key.1.clone()))
            .or_insert_with(|| Entry {
                since_ms: now_ms,
                ..Entry::default()
            });
        // The rate is measured over the last one to two horizons: older traffic decays.
        if now_ms.saturating_sub(entry.since_ms) > 2 * sizing.horizon_ms {
            entry.leased /= 2;
            entry.since_ms = now_ms - sizing.horizon_ms;
        }
        entry.seen_ms = now_ms;
        entry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> (Arc<str>, Identifier) {
        (Arc::from("api"), Identifier::from("alice"))
    }

    /// A bucket's pool shared by regions never alone on it: refills follow the rate.
    const SIZING: Sizing = Sizing {
        horizon_ms: 1_000,
        regions: 3,
        pool_capacity: 60,
        fixed_window: false,
        alone_ms: 0,
    };

    /// A fixed window's pool of 60 a minute.
    const FIXED: Sizing = Sizing {
        horizon_ms: 1_000,
        regions: 3,
        pool_capacity: 60,
        fixed_window: true,
        alone_ms: 60_000,
    };

    #[test]
    fn a_region_alone_on_a_fixed_window_asks_all_the_pool_holds_until_another_draws_on_it() {
        let (name, id) = key();
        let mut ledger = Ledger::default();
        // Alone: no refill ahead (one wait per window), and that wait asks for the whole pool.
        assert!(!ledger.note_admitted((&name, &id), 1, 0, false, 0, &FIXED));
        assert!(ledger.alone((&name, &id), 0, &FIXED));
        assert_eq!(ledger.want_now((&name, &id), 1, 0, &FIXED), 60);
        ledger.asked((&name, &id));
        // It took 60 of 60: nobody else drew. Next window, 40 was left before it took 10:
        // another region took 20.
        ledger.note_pool((&name, &id), 60, 0, 60_000, 0, &FIXED);
        assert!(ledger.alone((&name, &id), 1, &FIXED));
        ledger.note_pool((&name, &id), 10, 30, 120_000, 60_000, &FIXED);
        assert!(!ledger.alone((&name, &id), 60_001, &FIXED));
        // Then it asks by its rate beyond its share (none yet: what the request needs), as
        // regions sharing a pool do.
        assert_eq!(ledger.want_now((&name, &id), 1, 60_001, &FIXED), 1);
        ledger.asked((&name, &id));
        // A window's length without seeing another region, and it is alone again.
        assert!(ledger.alone((&name, &id), 120_000, &FIXED));
        assert_eq!(ledger.want_now((&name, &id), 1, 120_000, &FIXED), 60);
        ledger.asked((&name, &id));
        // Until its share falls by more than it admitted: another region borrowed from it.
        ledger.note_share((&name, &id), 1, 9, 180_000, 120_001, &FIXED);
        ledger.note_share((&name, &id), 1, 8, 180_000, 120_002, &FIXED);
        assert!(ledger.alone((&name, &id), 120_002, &FIXED));
        ledger.note_share((&name, &id), 1, 2, 180_000, 120_003, &FIXED);
        assert!(!ledger.alone((&name, &id), 120_003, &FIXED));
    }

    #[test]
    fn a_region_refills_by_its_rate_beyond_its_share_when_the_lease_falls_below_half() {
        let (name, id) = key();
        let mut ledger = Ledger::default();
        // What its share admits says nothing of what it needs beyond the share: spent, a
        // refill of one unit.
        assert!(!ledger.note_admitted((&name, &id), 1, 5, false, 0, &SIZING));
        assert!(ledger.note_admitted((&name, &id), 1, 0, false, 1, &SIZING));
        assert_eq!(ledger.take_refills()[0].want, 1);
        ledger.refill_done((&name, &id));
        // Ten units landed in the lease; as they are spent, the rate beyond the share grows,
        // and the seventh leaves 3, less than half of a refill of 7.
        ledger.note_lease((&name, &id), 10, 1_000);
        for (n, t) in (1..7).zip(2..) {
            assert!(!ledger.note_admitted((&name, &id), 1, 10 - n, true, t, &SIZING));
        }
        assert!(ledger.note_admitted((&name, &id), 1, 3, true, 8, &SIZING));
        assert_eq!(ledger.take_refills()[0].want, 7);
        // Queued once until the refill is answered, whatever lands in the lease meanwhile.
        ledger.note_lease((&name, &id), 1, 1_000);
        assert!(!ledger.note_admitted((&name, &id), 1, 0, true, 9, &SIZING));
        ledger.refill_done((&name, &id));
        ledger.note_lease((&name, &id), 10, 1_000);
        assert!(!ledger.note_admitted((&name, &id), 1, 9, true, 10, &SIZING));
    }

    #[test]
    fn a_refill_shrinks_as_the_pool_empties_but_covers_what_a_request_needs() {
        let (name, id) = key();
        let mut ledger = Ledger::default();
        for t in 0..50 {
            ledger.note_admitted((&name, &id), 1, 100, true, t, &SIZING);
        }
        let mut ask = |need| {
            let want = ledger.want_now((&name, &id), need, 50, &SIZING);
            ledger.asked((&name, &id));
            want
        };
        assert_eq!(ask(1), 20);
        ledger.note_pool((&name, &id), 0, 9, 1_000_000, 50, &SIZING);
        let mut ask = |need| {
            let want = ledger.want_now((&name, &id), need, 50, &SIZING);
            ledger.asked((&name, &id));
            want
        };
        assert_eq!(ask(1), 3);
        assert_eq!(ask(5), 5);
        ledger.note_pool((&name, &id), 0, 0, 1_000_000, 50, &SIZING);
        assert_eq!(ledger.want_now((&name, &id), 1, 50, &SIZING), 1);
    }

    #[test]
    fn a_burst_of_waiting_requests_asks_one_refill_then_only_what_each_needs() {
        let (name, id) = key();
        let mut ledger = Ledger::default();
        for t in 0..50 {
            ledger.note_admitted((&name, &id), 1, 100, true, t, &SIZING);
        }
        let first = ledger.want_now((&name, &id), 1, 50, &SIZING);
        let others: Vec<u64> = (0..3)
            .map(|_| ledger.want_now((&name, &id), 2, 50, &SIZING))
            .collect();
        assert_eq!((first, others), (20, vec![2, 2, 2]));
        // What the asks bring is spent; no refill goes out beside them.
        ledger.note_lease((&name, &id), 0, 1_000);
        assert!(!ledger.note_admitted((&name, &id), 1, 0, true, 51, &SIZING));
        for _ in 0..4 {
            ledger.asked((&name, &id));
        }
        assert_eq!(
            ledger.want_now((&name, &id), 1, 50, &SIZING),
            20,
            "none under way"
        );
    }

    #[test]
    fn idle_entries_are_forgotten_unless_a_lease_is_live() {
        let (name, id) = key();
        let other = Identifier::from("bob");
        let mut ledger = Ledger::default();
        ledger.note_admitted((&name, &id), 1, 100, false, 0, &SIZING);
        ledger.note_admitted((&name, &other), 1, 100, false, 0, &SIZING);
        ledger.note_lease((&name, &other), 3, 20_000);
        ledger.forget_idle(10_000, 5_000);
        assert_eq!(ledger.len(), 1);
    }
}
