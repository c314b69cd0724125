//! Things due at a time, taken in time order, and two due at one millisecond in the order they
//! were added: the requests that land after their durations, whose leases are released and whose
//! costs are settled then (`exact::inflight` for `--policy`, `config::engine` for `--config`).

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// A queue of things due at a time (see the module documentation).
#[derive(Debug)]
pub(crate) struct Due<T> {
    heap: BinaryHeap<Reverse<Entry<T>>>,
    added: u64,
}

/// One thing, ordered by its time, then by when it was added.
#[derive(Debug)]
struct Entry<T> {
    at_ms: u64,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.at_ms, self.seq) == (other.at_ms, other.seq)
    }
}

impl<T> Eq for Entry<T> {}

impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at_ms, self.seq).cmp(&(other.at_ms, other.seq))
    }
}

impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Default for Due<T> {
    fn default() -> Self {
        Due {
            heap: BinaryHeap::new(),
            added: 0,
        }
    }
}

impl<T> Due<T> {
    /// Adds `item`, due at `at_ms`.
    pub(crate) fn push(&mut self, at_ms: u64, item: T) {
        self.added += 1;
        self.heap.push(Reverse(Entry {
            at_ms,
            seq: self.added,
            item,
        }));
    }

    /// Takes out the earliest thing due at or before `now_ms`, with its time.
    pub(crate) fn pop_due(&mut self, now_ms: u64) -> Option<(u64, T)> {
        if self.heap.peek().is_some_and(|Reverse(e)| e.at_ms <= now_ms) {
            self.heap.pop().map(|Reverse(e)| (e.at_ms, e.item))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_things_come_out_in_time_order_then_in_the_order_added() {
        let mut due = Due::default();
        for (at, what) in [(30, "c"), (10, "a1"), (20, "b"), (10, "a2"), (40, "d")] {
            due.push(at, what);
        }
        assert_eq!(due.pop_due(5), None);
        let mut out = Vec::new();
        while let Some(next) = due.pop_due(30) {
            out.push(next);
        }
        assert_eq!(out, [(10, "a1"), (10, "a2"), (20, "b"), (30, "c")]);
        assert_eq!(due.pop_due(39), None);
        assert_eq!(due.pop_due(u64::MAX), Some((40, "d")));
        assert_eq!(due.pop_due(u64::MAX), None);
    }
}
