//! Waiting with a bound: poll a condition until it holds or the time is up, and say which. Tests
//! assert on the answer with their own message, so a wait that runs out fails the test rather
//! than hanging it.
//!
//! ```
//! use std::time::Duration;
//! use edgelimit_testkit::wait;
//!
//! let mut polls = 0;
//! let ready = wait::until(Duration::from_secs(5), Duration::from_millis(1), || {
//!     polls += 1;
//!     polls == 3
//! });
//! assert!(ready, "not ready after {polls} polls");
//! ```

use std::time::{Duration, Instant};

/// Polls `ready` every `every` until it returns true (then true) or `within` has passed (then
/// false), sleeping the thread in between. `ready` runs at least once.
pub fn until(within: Duration, every: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if let Some(held) = look(deadline, &mut ready) {
            return held;
        }
        std::thread::sleep(every);
    }
}

/// [`until`] for async tests: the same polling, sleeping on the tokio timer so the runtime's
/// other tasks (a server under test, say) run in between.
pub async fn until_async(
    within: Duration,
    every: Duration,
    mut ready: impl FnMut() -> bool,
) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if let Some(held) = look(deadline, &mut ready) {
            return held;
        }
        tokio::time::sleep(every).await;
    }
}

/// One poll: `Some(true)` once `ready` holds, `Some(false)` once `deadline` has passed without
/// it, `None` to poll again.
fn look(deadline: Instant, ready: &mut impl FnMut() -> bool) -> Option<bool> {
    if ready() {
        Some(true)
    } else if Instant::now() >= deadline {
        Some(false)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_that_never_holds_is_false_after_the_bound() {
        let started = Instant::now();
        assert!(!until(
            Duration::from_millis(50),
            Duration::from_millis(5),
            || false
        ));
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert!(until(Duration::ZERO, Duration::from_secs(60), || true));
    }

    #[tokio::test]
    async fn the_async_wait_polls_until_true() {
        let mut polls = 0;
        assert!(
            until_async(Duration::from_secs(5), Duration::from_millis(1), || {
                polls += 1;
                polls >= 3
            })
            .await
        );
        assert_eq!(polls, 3);
    }
}
