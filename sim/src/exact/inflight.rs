//! Concurrency limits under replay: requests in flight for their durations, leases released when
//! they land, and the exact in-flight count each limit is held against.
//!
//! A request at `t` that the trace says took `d` ms is in flight over `[t, t + d)`; one without a
//! duration is taken to hold its lease until the limit's timeout (the only end known). When it
//! lands, the limit's lease is released through the library's own `concurrency::release` (the
//! `--policy` replay, which steps the limit itself) or the Worker's settlement through the store
//! (the `--config` replay, `config::engine`). Landings are applied in time order before any arrival
//! at the same or a later millisecond: a request arriving at the very millisecond another lands
//! finds its lease released, as the library's own timeout does.
//!
//! The ground truth is an **exact in-flight limiter**: it admits a request iff the requests it
//! admitted that are really still in flight (by their durations, with no timeout) plus this one's
//! cost are at most `N`. A **false allow** is a request the limit admitted and the exact count
//! refused — a lease that timed out while its request was still running freed a slot too early;
//! a **false deny** the reverse (a denial cache holding a refusal past a release, or an earlier
//! difference in admissions). Requests without a duration are in flight until the timeout in both,
//! so they never differ by themselves.
//!
//! The **peak in flight** per identifier counts the leases (a request of cost `c` holds `c`) of
//! the requests the limit admitted, each in flight for its duration: above `N` only when leases
//! time out before their requests end.

use std::mem::size_of;

use edgelimit::algorithm::{concurrency, ConcurrencyState};
use edgelimit::{Decision, Policy};

use crate::due::Due;

/// One identifier's flights under one concurrency limit.
#[derive(Debug, Clone, Default)]
pub(crate) struct Lanes {
    /// The limit's own leases (stepped by the `--policy` replay; a `--config` replay keeps them
    /// in its store instead, and this stays empty).
    pub(crate) leases: ConcurrencyState,
    /// Leases the exact in-flight limiter admitted that are still in flight.
    exact: u64,
    /// Leases of requests the limit admitted that are still in flight (by their durations).
    in_flight: u64,
    /// The most `in_flight` reached, and when first.
    peak: u64,
    peak_at_ms: u64,
}

/// A request that will land (when is its place in [`Due`]): whose, how many leases, and which
/// sides admitted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Landing {
    id: u32,
    cost: u64,
    /// The limit's own lease to release (the `--policy` replay), named by its end.
    lease_ms: Option<u64>,
    admitted: bool,
    exact: bool,
}

/// One identifier's peak, for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Peak {
    pub(crate) id: u32,
    pub(crate) peak: u64,
    pub(crate) at_ms: u64,
}

/// The flights of every identifier under one concurrency limit.
#[derive(Debug)]
pub(crate) struct InFlight {
    policy: Policy,
    /// By dense identifier (client) id.
    ids: Vec<Lanes>,
    landings: Due<Landing>,
    with_duration: u64,
    without_duration: u64,
}

impl InFlight {
    /// No flights yet under `policy` (a concurrency policy).
    pub(crate) fn new(policy: Policy) -> InFlight {
        InFlight {
            policy,
            ids: Vec::new(),
            landings: Due::default(),
            with_duration: 0,
            without_duration: 0,
        }
    }

    /// The limit.
    pub(crate) fn policy(&self) -> &Policy {
        &self.policy
    }

    fn lanes(&mut self, id: u32) -> &mut Lanes {
        let index = id as usize;
        if self.ids.len() <= index {
            self.ids.resize_with(index + 1, Lanes::default);
        }
        &mut self.ids[index]
    }

    /// Lands every request whose flight ended at or before `now_ms`, in time order: its lease
    /// released (with the library's `release`, at the landing time) and the counts lowered.
    /// Called before each arrival, so a landing at the arrival's millisecond comes first.
    pub(crate) fn land_until(&mut self, now_ms: u64) {
        while let Some((at_ms, landing)) = self.landings.pop_due(now_ms) {
            let policy = self.policy;
            let lanes = self.lanes(landing.id);
            if let Some(lease_ms) = landing.lease_ms {
                concurrency::release(&policy, &mut lanes.leases, at_ms, lease_ms, landing.cost);
            }
            if landing.admitted {
                lanes.in_flight -= landing.cost;
            }
            if landing.exact {
                lanes.exact -= landing.cost;
            }
        }
    }

    /// The limit's own decision on a request (the `--policy` replay): the library's
    /// `concurrency::step` on the identifier's leases. Land first ([`InFlight::land_until`]).
    pub(crate) fn step(&mut self, id: u32, now_ms: u64, cost: i64) -> Decision {
        let policy = self.policy;
        concurrency::step(&policy, &mut self.lanes(id).leases, now_ms, cost).decision
    }

    /// Records a request of `cost` at `now_ms` that took `duration` ms (if known): whether the
    /// limit `admitted` it, and the limit's lease to release when it lands (`lease_ms`, the
    /// `--policy` replay's own). Returns whether the exact in-flight limiter admits it, and the
    /// leases really in flight before it (what the limit's `limit − remaining` is set against).
    pub(crate) fn record(
        &mut self,
        id: u32,
        now_ms: u64,
        cost: i64,
        duration: Option<u64>,
        admitted: bool,
        lease_ms: Option<u64>,
    ) -> (bool, u64) {
        let limit = self.policy.limit();
        let end = now_ms.saturating_add(duration.unwrap_or(self.policy.window_ms()));
        if duration.is_some() {
            self.with_duration += 1;
        } else {
            self.without_duration += 1;
        }
        let cost = cost.max(0) as u64;
        let lanes = self.lanes(id);
        let before = lanes.in_flight;
        let exact = lanes.exact.saturating_add(cost) <= limit;
        if cost == 0 {
            return (exact, before);
        }
        if exact {
            lanes.exact += cost;
        }
        if admitted {
            lanes.in_flight += cost;
            if lanes.in_flight > lanes.peak {
                lanes.peak = lanes.in_flight;
                lanes.peak_at_ms = now_ms;
            }
        }
        if admitted || exact {
            self.landings.push(
                end,
                Landing {
                    id,
                    cost,
                    lease_ms: lease_ms.filter(|_| admitted && duration.is_some()),
                    admitted,
                    exact,
                },
            );
        }
        (exact, before)
    }

    /// Requests recorded with a duration, and without one.
    pub(crate) fn durations(&self) -> (u64, u64) {
        (self.with_duration, self.without_duration)
    }

    /// The identifiers with the highest peaks (ties: the earlier identifier), at most `n`.
    pub(crate) fn top(&self, n: usize) -> Vec<Peak> {
        let mut peaks: Vec<Peak> = self
            .ids
            .iter()
            .enumerate()
            .filter(|(_, l)| l.peak > 0)
            .map(|(id, l)| Peak {
                id: id as u32,
                peak: l.peak,
                at_ms: l.peak_at_ms,
            })
            .collect();
        peaks.sort_by(|a, b| b.peak.cmp(&a.peak).then(a.id.cmp(&b.id)));
        peaks.truncate(n);
        peaks
    }

    /// Identifiers holding lease state at the end, and the bytes it takes in process (the
    /// state struct plus 16 bytes per `(end, count)` pair).
    pub(crate) fn footprint(&self) -> (usize, usize) {
        let held = self
            .ids
            .iter()
            .filter(|l| l.leases != ConcurrencyState::default());
        held.fold((0, 0), |(keys, bytes), l| {
            (keys + 1, bytes + lease_bytes(l.leases.leases().len()))
        })
    }

    /// The most bytes one identifier's leases took at the end (the longest list of lease ends).
    pub(crate) fn largest(&self) -> usize {
        lease_bytes(
            self.ids
                .iter()
                .map(|l| l.leases.leases().len())
                .max()
                .unwrap_or(0),
        )
    }
}

/// The bytes a concurrency state with `pairs` lease ends takes in memory.
fn lease_bytes(pairs: usize) -> usize {
    size_of::<ConcurrencyState>() + pairs * size_of::<(u64, u64)>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_landing_at_the_arrival_millisecond_frees_the_slot_first() {
        let mut f = InFlight::new("concurrency 1 timeout 1m".parse().unwrap());
        let a = f.step(0, 100, 1);
        assert!(a.allowed);
        assert_eq!(
            f.record(0, 100, 1, Some(50), true, Some(a.reset_at_ms)),
            (true, 0)
        );
        f.land_until(149);
        assert!(!f.step(0, 149, 1).allowed);
        f.land_until(150);
        assert!(f.step(0, 150, 1).allowed);
    }

    #[test]
    fn a_lease_that_times_out_before_its_request_ends_is_a_false_allow() {
        let mut f = InFlight::new("concurrency 1 timeout 10ms".parse().unwrap());
        let a = f.step(7, 0, 1);
        f.record(7, 0, 1, Some(100), a.allowed, Some(a.reset_at_ms));
        f.land_until(10);
        let b = f.step(7, 10, 1);
        assert!(b.allowed, "the lease timed out");
        let (exact, before) = f.record(7, 10, 1, Some(100), b.allowed, Some(b.reset_at_ms));
        assert_eq!((exact, before), (false, 1));
        let top = f.top(10);
        assert_eq!(
            top,
            [Peak {
                id: 7,
                peak: 2,
                at_ms: 10
            }]
        );
    }
}
