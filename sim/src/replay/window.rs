//! The exact count of what a policy admitted in the trailing window, per client: two pointers
//! over admitted times (push at the back, drop from the front), so `max_admitted_in_window` is
//! exact over *every* window, not only aligned ones.

use std::collections::VecDeque;

/// A client's admitted `(time_ms, cost)` within the last window, and their sum.
///
/// The oldest time is also kept inline: most requests of a busy client leave nothing to drop, and
/// answering that from the inline copy avoids touching the deque's heap buffer — a cache miss per
/// policy per request on traces with many clients.
#[derive(Debug, Clone)]
pub struct Trailing {
    admitted: VecDeque<(u64, u64)>,
    sum: u64,
    oldest_ms: u64,
    newest_ms: u64,
}

impl Default for Trailing {
    fn default() -> Self {
        Trailing {
            admitted: VecDeque::new(),
            sum: 0,
            oldest_ms: u64::MAX,
            newest_ms: u64::MAX,
        }
    }
}

impl Trailing {
    /// Drops what left the window `(now − window, now]` and returns what remains.
    #[inline]
    pub fn advance(&mut self, now_ms: u64, window_ms: u64) -> u64 {
        if now_ms < window_ms || self.oldest_ms > now_ms - window_ms {
            return self.sum;
        }
        let cutoff = now_ms - window_ms;
        while let Some(&(t, c)) = self.admitted.front() {
            if t > cutoff {
                break;
            }
            self.admitted.pop_front();
            self.sum -= c;
        }
        self.oldest_ms = self.admitted.front().map_or(u64::MAX, |&(t, _)| t);
        if self.admitted.is_empty() {
            self.newest_ms = u64::MAX;
        }
        self.sum
    }

    /// Records an admission of `cost` at `now_ms` (times must not decrease).
    #[inline]
    pub fn admit(&mut self, now_ms: u64, cost: u64) -> u64 {
        // The inline newest time decides between merging and appending, so a new entry is a
        // store into the buffer (which the CPU does not wait for), not a load that misses.
        match self.admitted.back_mut() {
            Some((_, c)) if self.newest_ms == now_ms => *c += cost,
            _ => self.admitted.push_back((now_ms, cost)),
        }
        self.newest_ms = now_ms;
        self.oldest_ms = self.oldest_ms.min(now_ms);
        self.sum += cost;
        self.sum
    }

    /// The oldest logged admission, read from the heap buffer. Replay calls it a few events ahead
    /// so the buffer is in cache when [`Trailing::advance`] needs it.
    #[inline]
    pub fn peek_oldest(&self) -> Option<u64> {
        self.admitted.front().map(|&(t, _)| t)
    }

    /// The oldest admission still in the window.
    pub fn oldest_ms(&self) -> Option<u64> {
        (self.oldest_ms != u64::MAX).then_some(self.oldest_ms)
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
