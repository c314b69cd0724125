//! The exact count of what a policy admitted in the trailing window, per client: two pointers
//! over admitted times (push at the back, drop from the front), so `max_admitted_in_window` is
//! exact over *every* window, not only aligned ones.

use std::collections::VecDeque;

/// A client's admitted `(time_ms, cost)` within the last window, and their sum.
#[derive(Debug, Clone, Default)]
pub struct Trailing {
    admitted: VecDeque<(u64, u64)>,
    sum: u64,
}

impl Trailing {
    /// Drops what left the window `(now − window, now]` and returns what remains.
    #[inline]
    pub fn advance(&mut self, now_ms: u64, window_ms: u64) -> u64 {
        let cutoff = now_ms.saturating_sub(window_ms);
        while let Some(&(t, c)) = self.admitted.front() {
            if t > cutoff || now_ms < window_ms {
                break;
            }
            self.admitted.pop_front();
            self.sum -= c;
        }
        self.sum
    }

    /// Records an admission of `cost` at `now_ms` (times must not decrease).
    #[inline]
    pub fn admit(&mut self, now_ms: u64, cost: u64) -> u64 {
        match self.admitted.back_mut() {
            Some((t, c)) if *t == now_ms => *c += cost,
            _ => self.admitted.push_back((now_ms, cost)),
        }
        self.sum += cost;
        self.sum
    }

    /// The oldest admission still in the window.
    pub fn oldest_ms(&self) -> Option<u64> {
        self.admitted.front().map(|&(t, _)| t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_exactly_one_window_old_no_longer_counts() {
        let mut w = Trailing::default();
        w.advance(1000, 1000);
        w.admit(1000, 1);
        assert_eq!(w.advance(1999, 1000), 1);
        assert_eq!(w.advance(2000, 1000), 0);
        assert_eq!(w.advance(5, 1000), 0);
        w.admit(5, 2);
        assert_eq!(w.advance(10, 1000), 2);
    }
}
