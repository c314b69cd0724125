//! The one place the library reads a wall clock; everything else takes time as an argument.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};

/// A source of "now" in epoch milliseconds.
pub trait Clock: Debug + Send + Sync {
    /// The current time, epoch ms.
    fn now_ms(&self) -> u64;

    /// A mark to time a call from (the limiter times its store's round trip). The monotonic
    /// system clock by default; a clock that moves only when told ([`ManualClock`]) gives a
    /// stopped one, as its timeline stands still during a call, and reads no system clock.
    fn stopwatch(&self) -> Stopwatch {
        Stopwatch::running()
    }
}

/// The time a call took, as its [`Clock`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(Option<web_time::Instant>);

impl Stopwatch {
    /// A stopwatch on the monotonic system clock, started now.
    pub fn running() -> Stopwatch {
        Stopwatch(Some(web_time::Instant::now()))
    }

    /// A stopwatch that never moves: every call takes 0 ms.
    pub fn stopped() -> Stopwatch {
        Stopwatch(None)
    }

    /// Milliseconds since it started (0 for a stopped one).
    pub fn elapsed_ms(&self) -> f64 {
        self.0
            .map_or(0.0, |started| started.elapsed().as_secs_f64() * 1000.0)
    }
}

/// The system's wall clock (`Date.now()` on wasm32, through `web-time`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        web_time::SystemTime::now()
            .duration_since(web_time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
}

/// A clock that moves only when told: for tests and replays on a virtual timeline.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock standing at `ms`.
    pub fn at(ms: u64) -> ManualClock {
        ManualClock(AtomicU64::new(ms))
    }

    /// Moves the clock to `ms`.
    pub fn set(&self, ms: u64) {
        // Release/acquire is all one value needs (a reader sees this time or a later one); a
        // sequentially consistent store is a locked instruction on x86, paid on every request
        // of a replay.
        self.0.store(ms, Ordering::Release);
    }

    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::AcqRel);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    fn stopwatch(&self) -> Stopwatch {
        Stopwatch::stopped()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_times_every_call_at_zero_and_the_system_clock_times_it() {
        let manual = ManualClock::at(5).stopwatch();
        let system = SystemClock.stopwatch();
        std::thread::sleep(std::time::Duration::from_millis(3));
        assert_eq!(manual.elapsed_ms(), 0.0);
        assert!(system.elapsed_ms() >= 3.0, "{}", system.elapsed_ms());
    }
}
