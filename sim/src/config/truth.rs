//! The ground truth each limit of a configuration is held against, as `--policy` mode holds a
//! policy (see `policy::metrics`): per identifier, the exact sliding log of the limit's reference
//! (`exact::reference`), replayed alongside as its own limiter on every request the limit
//! applied to, and the cost that really got through in any span of that log's window.
//!
//! - **false allow**: the limit admitted a request (alone, whatever the other limits said) that
//!   the exact log denied; **false deny**: the reverse. Decisions the denial cache skipped are
//!   not compared; fallback decisions during an outage are, and are also counted apart.
//! - **max admitted in window**: the most cost admitted for one identifier in any span of the
//!   reference window — forwarded requests for an enforced limit (fail-open admissions
//!   included), would-be admissions for a shadow one.
//!
//! A concurrency limit is held against the exact in-flight count instead (`exact::inflight`:
//! each request in flight for its duration, no timeout); its "max admitted in window" is the
//! peak in flight, and `in_flight` lists the identifiers with the highest peaks.

use std::collections::VecDeque;

use edgelimit::{Algorithm, Decision, Policy, Reason};

use super::identifiers::Identifiers;
use super::names::display_identifier;
use super::prefetch::prefetch_bytes;
use crate::error::SimError;
use crate::exact::inflight::InFlight;
use crate::exact::pct;
use crate::exact::reference::reference;
use crate::readers::time::format_utc;

/// The admission decisions of an exact sliding log of the reference policy: the library's
/// `sliding_log` semantics (a request of cost `c` at `t` is admitted iff the cost admitted in
/// `(t − W, t]` plus `c` is at most `L`; a clock stepping back before the last admission counts as
/// no time passed; entries are dropped only on an admission), without what only a limiter needs:
/// the retry time, which `sliding_log::step` finds by scanning the log on every denial. The entries
/// that left the window as of the latest time are skipped by a cursor that only moves forward while
/// time does, so a decision is O(1) amortised. A test holds it to `sliding_log::step`, decision
/// by decision, on random requests with clocks stepping back.
#[derive(Debug)]
struct ExactLog {
    /// Admitted cost per millisecond, oldest first.
    entries: VecDeque<(u64, u64)>,
    /// Their total.
    total: u64,
    /// The last admission's time (the library's write time).
    seen_ms: u64,
    /// How many leading entries, and how much cost, had left the window at `cursor_ms`.
    left: usize,
    left_cost: u64,
    cursor_ms: u64,
    /// The time of the first entry still in the window (`entries[left]`), `u64::MAX` if none:
    /// kept inline so a request that moves nothing out of the window reads no buffer.
    next_left_ms: u64,
}

impl Default for ExactLog {
    fn default() -> Self {
        ExactLog {
            entries: VecDeque::new(),
            total: 0,
            seen_ms: 0,
            left: 0,
            left_cost: 0,
            cursor_ms: 0,
            next_left_ms: u64::MAX,
        }
    }
}

impl ExactLog {
    /// Whether the log admits `cost` at `now_ms` under `limit` per `window_ms` (and, if so,
    /// logs it). A cost of 0 or less takes nothing and is admitted (a look).
    fn admits(&mut self, limit: u64, window_ms: u64, now_ms: u64, cost: i64) -> bool {
        let t = now_ms.max(self.seen_ms);
        if t < self.cursor_ms {
            // The clock stepped back: count the entries again from the oldest.
            (self.left, self.left_cost) = (0, 0);
            self.next_left_ms = self.entries.front().map_or(u64::MAX, |e| e.0);
        }
        self.cursor_ms = t;
        if let Some(cutoff) = t.checked_sub(window_ms) {
            while self.next_left_ms <= cutoff {
                self.left_cost += self.entries[self.left].1;
                self.left += 1;
                self.next_left_ms = self.entries.get(self.left).map_or(u64::MAX, |e| e.0);
            }
        }
        if cost <= 0 {
            return true;
        }
        let cost = cost as u64;
        let used = self.total - self.left_cost;
        if cost > limit || used + cost > limit {
            return false;
        }
        if self.left > 0 {
            self.entries.drain(..self.left);
            self.total -= self.left_cost;
            (self.left, self.left_cost) = (0, 0);
            self.next_left_ms = self.entries.front().map_or(u64::MAX, |e| e.0);
        }
        // The newest entry is the last admission's, at `seen_ms`: comparing that needs no read
        // of the buffer's back.
        match self.entries.back_mut() {
            Some((_, logged)) if self.seen_ms == t => *logged += cost,
            _ => self.entries.push_back((t, cost)),
        }
        self.seen_ms = t;
        if self.next_left_ms == u64::MAX {
            // The log was empty: this entry is the first in the window.
            self.next_left_ms = t;
        }
        self.total += cost;
        true
    }
}

/// One identifier's truth.
#[derive(Debug, Default)]
struct IdTruth {
    log: ExactLog,
    admitted: VecDeque<(u64, u64)>,
    /// The oldest admission's time, kept inline so a request that moves nothing out of the
    /// window does not read the buffer (meaningless while `admitted` is empty).
    admitted_front_ms: u64,
    sum: u64,
    last_ms: u64,
}

impl IdTruth {
    /// Starts fetching this truth into cache (a hint).
    fn prefetch(&self) {
        prefetch_bytes(
            (self as *const IdTruth).cast(),
            std::mem::size_of::<IdTruth>(),
        );
    }

    /// Starts fetching into cache what its logs will be read at first (a hint; call once the
    /// truth itself is in cache).
    fn prefetch_logs(&self) {
        if let Some(entry) = self.log.entries.get(self.log.left) {
            prefetch_bytes((entry as *const (u64, u64)).cast(), 16);
        }
        if let Some(entry) = self.admitted.front() {
            prefetch_bytes((entry as *const (u64, u64)).cast(), 16);
        }
    }
}

/// How many requests ahead in its sorted batch [`LimitTruth::flush`] fetches a truth, and its
/// logs (a truth spans three cache lines; its logs are reached through it). Requests of the
/// identifier being decided are skipped over by then, so the truths fetched are the next
/// identifiers'.
const PREFETCH_FAR: usize = 8;
const PREFETCH_NEAR: usize = 4;

/// One limit's truth, over all its identifiers.
#[derive(Debug)]
pub struct LimitTruth {
    reference: Policy,
    /// Window limits' truths, in order of each identifier's first sight (see `place`).
    states: Vec<IdTruth>,
    /// Where each identifier's truth is in `states`, by dense id, plus one (0: none yet): the
    /// ids are shared by every limit, and most limits see few of them (an API key's limit none
    /// of the addresses), so the truths themselves are kept dense.
    place: Vec<u32>,
    /// A concurrency limit's flights (then `reference` is the limit itself).
    flights: Option<InFlight>,
    decided: u64,
    false_allows: u64,
    false_denies: u64,
    fallback_decided: u64,
    fallback_false_allows: u64,
    fallback_false_denies: u64,
    max_in_window: u64,
    /// Identifier, window start and end, and the request's place in the limit's order: of two
    /// windows as full, the earlier is reported.
    worst: Option<(u32, u64, u64, u64)>,
    /// The place in the trace of the request being recorded ([`LimitTruth::at_request`]) and
    /// how many records it made so far: a record's place in order is both (see `place`).
    request_place: u64,
    within_request: u64,
    /// Window limits' requests not yet held against their logs (see [`LimitTruth::record`]).
    pending: Vec<Pending>,
    /// How many are held before they are decided.
    batch: usize,
}

/// A window limit's request waiting to be held against its identifier's log.
#[derive(Debug, Clone, Copy)]
struct Pending {
    /// Its place in order (see `LimitTruth::place`).
    seq: u64,
    at_ms: u64,
    cost: i64,
    id: u32,
    allowed: bool,
    reason: Reason,
    admitted: bool,
}

/// Requests a window limit holds before deciding them against the exact logs, identifier by
/// identifier (see [`LimitTruth::record`]).
const BATCH: usize = 1 << 16;
/// Bits of a record's place in order given to its place within its request (see
/// `LimitTruth::place`): a request records a limit at most a few times, and a trace holds fewer
/// than 2^44 requests.
const RECORDS_PER_REQUEST_BITS: u32 = 20;

// A place in the batch is kept in 32 bits.
const _: () = assert!(BATCH <= u32::MAX as usize);

/// Where a limit admitted the most in one window.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WorstWindow {
    /// The identifier (as keyed; see `display_identifier`).
    pub identifier: String,
    /// The first admission in the span (UTC epoch ms).
    pub start_ms: u64,
    /// The last admission in the span.
    pub end_ms: u64,
    /// `end_ms` as UTC text.
    pub end_utc: String,
}

/// A limit's boundary metrics, as `--policy` mode reports them for a policy.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Boundary {
    /// The exact sliding log the limit is held against.
    pub reference: String,
    /// Decisions compared (every decision but the denial cache's skips).
    pub decided: u64,
    /// The most cost admitted for one identifier in any span of the reference window.
    pub max_admitted_in_window: u64,
    /// That over the reference limit.
    pub max_window_multiple: f64,
    /// Where it happened.
    pub worst_window: Option<WorstWindow>,
    /// Admitted by the limit, denied by the exact log.
    pub false_allows: u64,
    /// Denied by the limit, admitted by the exact log.
    pub false_denies: u64,
    /// `false_allows` over `decided`, in percent.
    pub wrongly_allowed_pct: f64,
    /// `false_denies` over `decided`, in percent.
    pub wrongly_limited_pct: f64,
    /// Fallback decisions (store unreachable, `fail = "fallback N%"`).
    pub fallback_decided: u64,
    /// Fallback admissions the exact log denied: the fallback's over-admission.
    pub fallback_false_allows: u64,
    /// Fallback denials the exact log admitted: its under-admission.
    pub fallback_false_denies: u64,
    /// A concurrency limit's flights; for it `reference` is the exact in-flight count, and
    /// `max_admitted_in_window` the peak in flight.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<InFlightReport>,
}

/// What a concurrency limit's flights came to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InFlightReport {
    /// The lease timeout (ms): how long a request without a duration holds its lease.
    pub timeout_ms: u64,
    /// Requests released after their duration (through the Worker's settlement).
    pub requests_with_duration: u64,
    /// Requests without one, holding their leases until the timeout.
    pub requests_without_duration: u64,
    /// The identifiers with the highest peaks in flight (up to 10).
    pub top_peaks: Vec<PeakIdentifier>,
}

/// One identifier's peak in flight.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PeakIdentifier {
    /// The identifier (as keyed; see `display_identifier`).
    pub identifier: String,
    /// The most leases it had in flight at once.
    pub peak: u64,
    /// When it first reached it (UTC epoch ms).
    pub at_ms: u64,
}

impl LimitTruth {
    /// The truth for a limit of `policy`.
    pub fn new(policy: &Policy) -> Result<LimitTruth, SimError> {
        let concurrency = policy.algorithm() == Algorithm::Concurrency;
        Ok(LimitTruth {
            reference: if concurrency {
                *policy
            } else {
                reference(policy)?
            },
            flights: concurrency.then(|| InFlight::new(*policy)),
            states: Vec::new(),
            place: Vec::new(),
            decided: 0,
            false_allows: 0,
            false_denies: 0,
            fallback_decided: 0,
            fallback_false_allows: 0,
            fallback_false_denies: 0,
            max_in_window: 0,
            worst: None,
            request_place: 0,
            within_request: 0,
            pending: Vec::new(),
            batch: BATCH,
        })
    }

    /// The records that follow are of the request at `place` in the trace (counted from 0):
    /// of two windows as full, the one reached at the earlier place is reported, so a replay
    /// split over threads, each thread seeing only some requests, picks the one a whole replay
    /// picks. Without it, records are placed in the order made.
    pub fn at_request(&mut self, place: u64) {
        self.request_place = place;
        self.within_request = 0;
    }

    /// The next record's place in order: the request's place, then the record's within it.
    fn place(&mut self) -> u64 {
        let within = self.within_request;
        self.within_request += 1;
        (self.request_place << RECORDS_PER_REQUEST_BITS) + within
    }

    /// Lands the requests in flight under a concurrency limit that ended by `now_ms` (call
    /// before each request; nothing for a window limit).
    pub fn land_until(&mut self, now_ms: u64) {
        if let Some(flights) = &mut self.flights {
            flights.land_until(now_ms);
        }
    }

    /// One request this limit applied to: its decision (with when it was made), whether the
    /// request got through (for an enforced limit) or would have (for a shadow one), and how
    /// long it was in flight when the trace says.
    ///
    /// A window limit's requests are held against the exact logs a batch at a time, sorted by
    /// identifier (each identifier's own in trace order): every identifier's log is then read
    /// once per batch, not once per request, which with 100,000s of identifiers is the
    /// difference between one cache miss per request and one per identifier. Each log only
    /// ever sees its own identifier's requests, in order, so the outcome is the same.
    pub fn record(
        &mut self,
        identifier: u32,
        cost: i64,
        decision: &Decision,
        at_ms: u64,
        admitted: bool,
        duration: Option<u64>,
    ) {
        let seq = self.place();
        if let Some(flights) = &mut self.flights {
            let (exact, in_flight) =
                flights.record(identifier, at_ms, cost, duration, admitted, None);
            self.compare(decision.allowed, decision.reason, exact);
            let peak = in_flight + cost.max(0) as u64;
            if admitted {
                self.consider(peak, seq, (identifier, at_ms, at_ms));
            }
            return;
        }
        self.pending.push(Pending {
            seq,
            at_ms,
            cost,
            id: identifier,
            allowed: decision.allowed,
            reason: decision.reason,
            admitted,
        });
        if self.pending.len() >= self.batch {
            self.flush();
        }
    }

    /// Holds the pending requests against their identifiers' logs.
    fn flush(&mut self) {
        let mut pending = std::mem::take(&mut self.pending);
        // Sorted as keys (identifier, place in the batch) of one word each, lighter to move than
        // the records. The places are in order already, so a stable sort by identifier alone
        // gives each identifier's requests in time order: a radix sort, two or three passes over
        // the batch instead of a comparison sort's sixteen levels.
        let mut order: Vec<u64> = pending
            .iter()
            .zip(0u64..)
            .map(|(p, place)| (u64::from(p.id) << 32) | place)
            .collect();
        radsort::sort_by_key(&mut order, |key| (key >> 32) as u32);
        let (limit, window) = (self.reference.limit(), self.reference.window_ms());
        if let Some(&last) = order.last() {
            let last = (last >> 32) as usize;
            if self.place.len() <= last {
                self.place.resize(last + 1, 0);
            }
        }
        // Decided in place, `self` lent to the tallies meanwhile.
        let (mut states, mut place) = (
            std::mem::take(&mut self.states),
            std::mem::take(&mut self.place),
        );
        let place_of = |place: &[u32], key: u64| place[(key >> 32) as usize] as usize;
        let mut at = 0;
        while at < order.len() {
            let key = order[at];
            // The identifiers coming next are known: their truths are fetched while this one
            // is decided (they are 100,000s, scattered through memory), the truth itself
            // `PREFETCH_FAR` requests ahead and the log it points to nearer. (`place` is read
            // in order.)
            if let Some(far) = order.get(at + PREFETCH_FAR).map(|&k| place_of(&place, k)) {
                if let Some(truth) = far.checked_sub(1).and_then(|i| states.get(i)) {
                    truth.prefetch();
                }
            }
            if let Some(near) = order.get(at + PREFETCH_NEAR).map(|&k| place_of(&place, k)) {
                if let Some(truth) = near.checked_sub(1).and_then(|i| states.get(i)) {
                    truth.prefetch_logs();
                }
            }
            let index = (key >> 32) as usize;
            let slot = match place_of(&place, key) {
                0 => {
                    states.push(IdTruth::default());
                    states.len()
                }
                slot => slot,
            };
            place[index] = slot as u32;
            let id = &mut states[slot - 1];
            while let Some(&key) = order.get(at).filter(|&&k| (k >> 32) as usize == index) {
                at += 1;
                let in_batch = key as u32;
                let p = &pending[in_batch as usize];
                let exact = id.log.admits(limit, window, p.at_ms, p.cost);
                self.compare(p.allowed, p.reason, exact);
                if !p.admitted || p.cost <= 0 {
                    continue;
                }
                let cost = p.cost as u64;
                // Times may step back a little (several clocks in one log): no time passed then.
                let t = p.at_ms.max(id.last_ms);
                id.last_ms = t;
                while id.admitted_front_ms.saturating_add(window) <= t {
                    let Some((_, c)) = id.admitted.pop_front() else {
                        id.admitted_front_ms = u64::MAX;
                        break;
                    };
                    id.sum -= c;
                    id.admitted_front_ms = id.admitted.front().map_or(u64::MAX, |&(s, _)| s);
                }
                id.admitted.push_back((t, cost));
                if id.admitted.len() == 1 {
                    id.admitted_front_ms = t;
                }
                id.sum += cost;
                let start = id.admitted_front_ms;
                self.consider(id.sum, p.seq, (p.id, start, t));
            }
        }
        (self.states, self.place) = (states, place);
        pending.clear();
        self.pending = pending;
    }

    /// A window as full as `sum` at the request of place `seq`: the worst so far if fuller
    /// than any, or as full as the worst and earlier.
    fn consider(&mut self, sum: u64, seq: u64, window: (u32, u64, u64)) {
        let earlier = self.worst.is_some_and(|w| seq < w.3);
        if sum > self.max_in_window || (sum == self.max_in_window && earlier) {
            self.max_in_window = sum;
            self.worst = Some((window.0, window.1, window.2, seq));
        }
    }

    /// Counts the limit's decision against the exact one (the denial cache's skips are not
    /// decisions).
    fn compare(&mut self, allowed: bool, reason: Reason, exact: bool) {
        if reason == Reason::Skipped {
            return;
        }
        self.decided += 1;
        let fallback = reason == Reason::Fallback;
        self.fallback_decided += u64::from(fallback);
        if allowed && !exact {
            self.false_allows += 1;
            self.fallback_false_allows += u64::from(fallback);
        } else if !allowed && exact {
            self.false_denies += 1;
            self.fallback_false_denies += u64::from(fallback);
        }
    }

    /// The metrics; `identifiers` names the ids.
    pub fn finish(&mut self, identifiers: &Identifiers) -> Boundary {
        self.flush();
        let in_flight = self.flights.as_ref().map(|f| {
            let (with, without) = f.durations();
            InFlightReport {
                timeout_ms: self.reference.window_ms(),
                requests_with_duration: with,
                requests_without_duration: without,
                top_peaks: f
                    .top(10)
                    .into_iter()
                    .map(|p| PeakIdentifier {
                        identifier: display_identifier(identifiers.name(p.id)),
                        peak: p.peak,
                        at_ms: p.at_ms,
                    })
                    .collect(),
            }
        });
        Boundary {
            in_flight,
            reference: match &self.flights {
                Some(_) => format!("exact in-flight ≤ {}", self.reference.limit()),
                None => self.reference.to_string(),
            },
            decided: self.decided,
            max_admitted_in_window: self.max_in_window,
            max_window_multiple: self.max_in_window as f64 / self.reference.limit() as f64,
            worst_window: self.worst.as_ref().map(|(id, start, end, _)| WorstWindow {
                identifier: display_identifier(identifiers.name(*id)),
                start_ms: *start,
                end_ms: *end,
                end_utc: format_utc(*end),
            }),
            false_allows: self.false_allows,
            false_denies: self.false_denies,
            wrongly_allowed_pct: pct(self.false_allows, self.decided),
            wrongly_limited_pct: pct(self.false_denies, self.decided),
            fallback_decided: self.fallback_decided,
            fallback_false_allows: self.fallback_false_allows,
            fallback_false_denies: self.fallback_false_denies,
        }
    }
}

/// A limit's boundary metrics over one share of the requests (a replay thread's), with the
/// place in order of its worst window: what [`Boundary::merged`] joins.
#[derive(Debug, Clone)]
pub struct BoundaryPart {
    /// The metrics of this share.
    pub boundary: Boundary,
    /// Where its worst window was reached (see [`LimitTruth::at_request`]).
    worst_place: Option<u64>,
}

impl LimitTruth {
    /// [`LimitTruth::finish`], keeping where the worst window was reached for a merge.
    pub fn finish_part(&mut self, identifiers: &Identifiers) -> BoundaryPart {
        let boundary = self.finish(identifiers);
        BoundaryPart {
            boundary,
            worst_place: self.worst.map(|w| w.3),
        }
    }
}

impl Boundary {
    /// The metrics of one limit over shares of the requests that share no identifier: counts
    /// add up, and the worst window is the fullest of the shares', of equal ones the one reached
    /// earliest in the trace — what one replay of all of them reports. `None` without parts.
    pub fn merged(parts: &[BoundaryPart]) -> Option<Boundary> {
        let worst = parts
            .iter()
            .filter(|p| p.worst_place.is_some())
            .min_by_key(|p| {
                (
                    std::cmp::Reverse(p.boundary.max_admitted_in_window),
                    p.worst_place,
                )
            });
        let mut merged = worst.or(parts.first())?.boundary.clone();
        let sum = |count: fn(&Boundary) -> u64| parts.iter().map(|p| count(&p.boundary)).sum();
        merged.decided = sum(|b| b.decided);
        merged.false_allows = sum(|b| b.false_allows);
        merged.false_denies = sum(|b| b.false_denies);
        merged.fallback_decided = sum(|b| b.fallback_decided);
        merged.fallback_false_allows = sum(|b| b.fallback_false_allows);
        merged.fallback_false_denies = sum(|b| b.fallback_false_denies);
        merged.wrongly_allowed_pct = pct(merged.false_allows, merged.decided);
        merged.wrongly_limited_pct = pct(merged.false_denies, merged.decided);
        Some(merged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::Rng;
    use edgelimit::Identifier;

    fn decision(allowed: bool, reason: Reason) -> Decision {
        Decision {
            allowed,
            limit: 2,
            remaining: 0,
            reset_at_ms: 0,
            retry_after_ms: 0,
            reason,
        }
    }

    #[test]
    fn a_boundary_burst_is_measured_against_the_exact_log() {
        // A fixed 2/1s window admitting 2 at 999 ms and 2 at 1000 ms: 4 in one second.
        let mut t = LimitTruth::new(&"fixed 2/1s".parse().unwrap()).unwrap();
        let mut ids = Identifiers::default();
        let id = ids.id(&Identifier::from("a"));
        for at in [999, 999, 1000, 1000] {
            t.record(id, 1, &decision(true, Reason::Admitted), at, true, None);
        }
        t.record(
            id,
            1,
            &decision(false, Reason::CachedDenial),
            1001,
            false,
            None,
        );
        t.record(id, 1, &decision(true, Reason::Skipped), 1002, false, None);
        let b = t.finish(&ids);
        assert_eq!(b.reference, "sliding-log 2/1s");
        assert_eq!((b.max_admitted_in_window, b.max_window_multiple), (4, 2.0));
        assert_eq!((b.decided, b.false_allows, b.false_denies), (5, 2, 0));
        let worst = b.worst_window.unwrap();
        assert_eq!(
            (worst.identifier.as_str(), worst.start_ms, worst.end_ms),
            ("a", 999, 1000)
        );
    }

    #[test]
    fn the_exact_log_decides_as_the_librarys_sliding_log() {
        use edgelimit::algorithm::{sliding_log, SlidingLogState};
        // A fixed seed, so the sequence is the same every run.
        let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
        let mut next = move |n: u64| rng.below(n);
        for _ in 0..300 {
            let (limit, window) = (1 + next(6), 1 + next(30));
            let policy: Policy = format!("sliding-log {limit}/{window}ms").parse().unwrap();
            let mut library = SlidingLogState::default();
            let mut ours = ExactLog::default();
            let mut t = 1_000u64;
            for step in 0..200 {
                // Mostly forward, sometimes back (several clocks in one log).
                t = if next(8) == 0 {
                    t - next(20)
                } else {
                    t + next(6)
                };
                let cost = 1 + next(3) as i64;
                let expected = sliding_log::step(&policy, &mut library, t, cost)
                    .decision
                    .allowed;
                assert_eq!(
                    ours.admits(limit, window, t, cost),
                    expected,
                    "{policy}, step {step} at {t} cost {cost}"
                );
            }
        }
    }

    #[test]
    fn batched_requests_count_as_if_held_one_by_one() {
        // An independent model, request by request in trace order: per identifier the exact
        // log (a clock stepping back before its last admission counts as no time passed) and
        // the admissions in the trailing window; the worst window is the first to reach the
        // maximum.
        let mut rng = Rng::new(0x2545_f491_4f6c_dd1d);
        let mut next = move |n: u64| rng.below(n);
        for round in 0..40 {
            let (limit, window) = (1 + next(5), 1 + next(40));
            let policy: Policy = format!("sliding-log {limit}/{window}ms").parse().unwrap();
            let mut truth = LimitTruth::new(&policy).unwrap();
            truth.batch = 1 + next(9) as usize;
            let mut ids = Identifiers::default();
            // Every third id only: the ids are shared by all limits, and a limit sees some.
            let names: Vec<u32> = (0..15)
                .map(|i| ids.id(&Identifier::from(format!("id-{i}"))))
                .step_by(3)
                .collect();
            #[derive(Default, Clone)]
            struct Model {
                exact: Vec<(u64, u64)>,
                seen: u64,
                admitted: Vec<(u64, u64)>,
                last: u64,
            }
            let mut models = vec![Model::default(); names.len()];
            let (mut decided, mut false_allows, mut false_denies) = (0u64, 0u64, 0u64);
            let mut worst: Option<(u64, u32, u64, u64)> = None;
            let mut t = 10_000u64;
            for _ in 0..300 {
                t = if next(6) == 0 {
                    t - next(15)
                } else {
                    t + next(5)
                };
                let who = next(names.len() as u64) as usize;
                let cost = 1 + next(2) as i64;
                let reason =
                    [Reason::Admitted, Reason::Skipped, Reason::OverLimit][next(3) as usize];
                let allowed = next(2) == 0;
                let admitted = next(3) != 0;
                let m = &mut models[who];
                let te = t.max(m.seen);
                let used: u64 = m
                    .exact
                    .iter()
                    .filter(|e| e.0 + window > te)
                    .map(|e| e.1)
                    .sum();
                let exact = used + cost as u64 <= limit;
                if exact {
                    m.exact.push((te, cost as u64));
                    m.seen = te;
                }
                if reason != Reason::Skipped {
                    decided += 1;
                    false_allows += u64::from(allowed && !exact);
                    false_denies += u64::from(!allowed && exact);
                }
                if admitted {
                    let ta = t.max(m.last);
                    m.last = ta;
                    m.admitted.push((ta, cost as u64));
                    let inside: Vec<&(u64, u64)> =
                        m.admitted.iter().filter(|e| e.0 + window > ta).collect();
                    let sum: u64 = inside.iter().map(|e| e.1).sum();
                    if worst.is_none_or(|w| sum > w.0) {
                        worst = Some((sum, names[who], inside[0].0, ta));
                    }
                }
                truth.record(
                    names[who],
                    cost,
                    &decision(allowed, reason),
                    t,
                    admitted,
                    None,
                );
            }
            let b = truth.finish(&ids);
            assert_eq!(
                (b.decided, b.false_allows, b.false_denies),
                (decided, false_allows, false_denies),
                "round {round}: {policy}"
            );
            let (sum, id, start, end) = worst.unwrap_or((0, 0, 0, 0));
            assert_eq!(b.max_admitted_in_window, sum, "round {round}: {policy}");
            let w = b.worst_window.expect("something admitted");
            assert_eq!(
                (w.identifier, w.start_ms, w.end_ms),
                (format!("id-{id}"), start, end),
                "round {round}: {policy}"
            );
        }
    }

    #[test]
    fn fallback_decisions_are_counted_apart() {
        let mut t = LimitTruth::new(&"fixed 1/1s".parse().unwrap()).unwrap();
        let mut ids = Identifiers::default();
        let id = ids.id(&Identifier::from("a"));
        t.record(id, 1, &decision(false, Reason::Fallback), 0, false, None);
        t.record(id, 1, &decision(true, Reason::Fallback), 1, true, None);
        let b = t.finish(&ids);
        assert_eq!(
            (
                b.fallback_decided,
                b.fallback_false_allows,
                b.fallback_false_denies
            ),
            (2, 1, 1)
        );
    }
}
