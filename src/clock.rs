//! The one place the library reads a wall clock; everything else takes time as an argument.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};

/// A source of "now" in epoch milliseconds.
pub trait Clock: Debug + Send + Sync {
    /// The current time, epoch ms.
    fn now_ms(&self) -> u64;
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
        self.0.store(ms, Ordering::SeqCst);
    }

    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}
