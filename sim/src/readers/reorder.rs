//! A bounded reorder buffer: logs are written when requests *finish*, so lines come slightly out
//! of time order (the bundled Apache trace is shuffled within each second). Events are held until
//! no event within `window_ms` of them can still arrive, then released in time order.
//!
//! An event older than the last one already released arrived later than the window allows; it is
//! released at the last released time (clamped) and counted, because the algorithms treat time
//! going backwards as "no time passed" anyway, and the window metrics need ordered times.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::event::Event;

/// What the reorder buffer did, for the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReorderStats {
    /// The window: how far back in time a line may arrive and still be put in its place (ms).
    pub window_ms: u64,
    /// Events that arrived after a later one and were put back in order.
    pub reordered: u64,
    /// Events that arrived later than the window allows and were clamped to the last released time.
    pub late_clamped: u64,
    /// The largest lateness seen: how far before the newest time seen an event arrived (ms).
    pub max_lateness_ms: u64,
}

/// A held event: time, arrival sequence (ties keep arrival order), client, cost, duration.
type Held = (u64, u64, u32, i64, u32);

/// The buffer. Ties keep arrival order (a sequence number breaks them), so replay is stable.
#[derive(Debug, Default)]
pub struct Reorder {
    heap: BinaryHeap<Reverse<Held>>,
    newest_ms: u64,
    last_out_ms: u64,
    seq: u64,
    stats: ReorderStats,
}

impl Reorder {
    /// A buffer holding events for `window_ms` of trace time (0: release at once, clamping any
    /// event that goes back in time).
    pub fn new(window_ms: u64) -> Reorder {
        Reorder {
            stats: ReorderStats {
                window_ms,
                ..ReorderStats::default()
            },
            ..Reorder::default()
        }
    }

    /// Adds an event.
    pub fn push(&mut self, mut ev: Event) {
        if ev.time_ms < self.newest_ms {
            self.stats.max_lateness_ms =
                self.stats.max_lateness_ms.max(self.newest_ms - ev.time_ms);
            if ev.time_ms < self.last_out_ms {
                self.stats.late_clamped += 1;
                ev.time_ms = self.last_out_ms;
            } else {
                self.stats.reordered += 1;
            }
        }
        self.newest_ms = self.newest_ms.max(ev.time_ms);
        self.seq += 1;
        self.heap.push(Reverse((
            ev.time_ms,
            self.seq,
            ev.client,
            ev.cost,
            ev.duration_ms,
        )));
    }

    /// The next event that can no longer be overtaken, if any.
    pub fn pop_ready(&mut self) -> Option<Event> {
        let cutoff = self.newest_ms.saturating_sub(self.stats.window_ms);
        match self.heap.peek() {
            Some(Reverse((t, ..))) if *t <= cutoff => self.pop(),
            _ => None,
        }
    }

    /// The next event regardless of the window (at the end of the input).
    pub fn pop(&mut self) -> Option<Event> {
        let Reverse((time_ms, _, client, cost, duration_ms)) = self.heap.pop()?;
        self.last_out_ms = time_ms;
        Some(Event {
            time_ms,
            client,
            duration_ms,
            cost,
        })
    }

    /// Whether no event is held.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// What the buffer did so far.
    pub fn stats(&self) -> ReorderStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(t: u64) -> Event {
        Event::new(t, 0, 1)
    }

    #[test]
    fn sorts_within_the_window_and_clamps_beyond_it() {
        let mut r = Reorder::new(10);
        let mut out = vec![];
        for t in [5, 3, 8, 20, 15, 40, 2] {
            r.push(ev(t));
            while let Some(e) = r.pop_ready() {
                out.push(e.time_ms);
            }
        }
        while let Some(e) = r.pop() {
            out.push(e.time_ms);
        }
        // 3 and 15 were put back in place; 2 came 38 ms late and is clamped to 20.
        assert_eq!(out, vec![3, 5, 8, 15, 20, 20, 40]);
        let s = r.stats();
        assert_eq!((s.reordered, s.late_clamped, s.max_lateness_ms), (2, 1, 38));
    }
}
