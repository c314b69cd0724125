//! Where one connection is in its request/answer cycle, since when, and what has been decided
//! about it (authenticated, to close, evicted): what its watchdog reads to know its deadline.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::ConnectionLimits;

const HEAD: u8 = 0;
const BUSY: u8 = 1;
const IDLE: u8 = 2;

/// Microseconds since the first connection of this process: a clock every connection's
/// [`Phase::last_heard`] shares, so they compare.
fn micros_now() -> u64 {
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_micros() as u64
}

/// A connection's phase. Written by the connection's reads and service calls, by its requests'
/// ends (on their own tasks under HTTP/2), by the token check and by the accept loop's eviction;
/// read by its watchdog.
pub(crate) struct Phase {
    origin: Instant,
    state: Mutex<State>,
    /// The connection speaks HTTP/2 (known from its first request).
    http2: AtomicBool,
    /// A request on it presented a valid token: the long timeouts apply, and it is not evicted.
    authenticated: AtomicBool,
    /// A handler asked to close once the answers in flight are sent (after a 401).
    close_requested: AtomicBool,
    /// A handler asked to close without answering.
    dropped: AtomicBool,
    /// The accept loop closed it to make room for a new connection.
    evicted: AtomicBool,
    /// When bytes last arrived on it (or it opened), by [`micros_now`]; kept until it has
    /// authenticated, for eviction.
    last_heard: AtomicU64,
    /// Wakes the watchdog when the phase (and so the deadline) or a decision changes.
    pub(super) changed: Notify,
    /// Wakes the handlers that asked to drop the connection once it is gone: under HTTP/2 each
    /// request runs on a task of its own, which would otherwise wait forever.
    pub(super) closed: Notify,
}

/// The phase, when it began, and the requests in flight, changed together under one lock so a
/// request ending on one task and the next beginning on another cannot leave the phase behind.
struct State {
    phase: u8,
    since: Duration,
    in_flight: usize,
}

/// Why a connection's time ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Expired {
    /// The phase: `reading headers` (the TLS handshake included) or `idle`.
    pub(super) phase: &'static str,
    /// Whether the connection had not authenticated yet.
    pub(super) unauthenticated: bool,
}

impl Phase {
    pub(crate) fn new() -> Phase {
        Phase {
            origin: Instant::now(),
            state: Mutex::new(State {
                phase: HEAD,
                since: Duration::ZERO,
                in_flight: 0,
            }),
            http2: AtomicBool::new(false),
            authenticated: AtomicBool::new(false),
            close_requested: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            last_heard: AtomicU64::new(micros_now()),
            changed: Notify::new(),
            closed: Notify::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing panics while holding it; if something did, the state is still whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn enter(&self, state: &mut State, phase: u8) {
        state.since = self.origin.elapsed();
        state.phase = phase;
        self.changed.notify_one();
    }

    /// A request's headers are in: busy until it and every other in flight are done.
    pub(super) fn request_began(&self, http2: bool) {
        if http2 {
            self.http2.store(true, Ordering::Relaxed);
        }
        let mut state = self.state();
        state.in_flight += 1;
        if state.phase != BUSY {
            self.enter(&mut state, BUSY);
        }
    }

    /// A request was answered (or its future dropped): idle when it was the last.
    pub(super) fn request_ended(&self) {
        let mut state = self.state();
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0 {
            self.enter(&mut state, IDLE);
        }
    }

    /// A read returned bytes: after an idle spell, a new HTTP/1.1 request's head has begun.
    pub(super) fn bytes_arrived(&self) {
        if !self.is_authenticated() {
            self.last_heard.store(micros_now(), Ordering::Relaxed);
        }
        if self.http2.load(Ordering::Relaxed) {
            return;
        }
        let mut state = self.state();
        if state.phase == IDLE {
            self.enter(&mut state, HEAD);
        }
    }

    /// A request presented a valid token.
    pub(crate) fn authenticate(&self) {
        self.authenticated.store(true, Ordering::Relaxed);
    }

    pub(super) fn is_authenticated(&self) -> bool {
        self.authenticated.load(Ordering::Relaxed)
    }

    /// When bytes last arrived, or it opened (microseconds on a clock all connections share):
    /// until it authenticates.
    pub(super) fn last_heard(&self) -> u64 {
        self.last_heard.load(Ordering::Relaxed)
    }

    /// Close once the answers in flight are sent.
    pub(super) fn request_close(&self) {
        self.close_requested.store(true, Ordering::Relaxed);
        self.changed.notify_one();
    }

    pub(super) fn close_requested(&self) -> bool {
        self.close_requested.load(Ordering::Relaxed)
    }

    /// Close without answering what is in flight.
    pub(super) fn request_drop(&self) {
        self.dropped.store(true, Ordering::Relaxed);
        self.changed.notify_one();
    }

    pub(super) fn is_dropped(&self) -> bool {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Close now, to make room.
    pub(super) fn evict(&self) {
        self.evicted.store(true, Ordering::Relaxed);
        self.changed.notify_one();
    }

    pub(super) fn is_evicted(&self) -> bool {
        self.evicted.load(Ordering::Relaxed)
    }

    /// When the connection's time runs out in its current phase; none while a request is being
    /// handled. Until the connection has authenticated, every wait is at most
    /// `unauthenticated_timeout`.
    pub(super) fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        let state = self.state();
        let limit = match state.phase {
            HEAD => limits.header_read_timeout,
            IDLE => limits.idle_timeout,
            _ => return None,
        };
        let limit = match self.is_authenticated() {
            true => limit,
            false => limit.min(limits.unauthenticated_timeout),
        };
        Some(self.origin + state.since + limit)
    }

    /// Why the connection's time ran out, if it did.
    pub(super) fn expired(&self, limits: &ConnectionLimits) -> Option<Expired> {
        let deadline = self.deadline(limits)?;
        (Instant::now() >= deadline).then(|| Expired {
            phase: match self.state().phase {
                HEAD => "reading headers",
                _ => "idle",
            },
            unauthenticated: !self.is_authenticated(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ConnectionLimits {
        ConnectionLimits {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(75),
            unauthenticated_timeout: Duration::from_secs(3),
            max_connections: 10,
            max_connections_per_address: 10,
        }
    }

    #[test]
    fn until_it_authenticates_a_connection_waits_the_short_time_only() {
        let limits = limits();
        let phase = Phase::new();
        let opened = phase.origin;
        assert_eq!(
            phase.deadline(&limits),
            Some(opened + Duration::from_secs(3))
        );
        phase.request_began(false);
        assert_eq!(phase.deadline(&limits), None, "no limit while busy");
        phase.request_ended();
        let idle_since = phase.origin + phase.state().since;
        assert_eq!(
            phase.deadline(&limits),
            Some(idle_since + Duration::from_secs(3)),
            "idle, still unauthenticated"
        );
        phase.authenticate();
        assert_eq!(
            phase.deadline(&limits),
            Some(idle_since + Duration::from_secs(75)),
            "authenticated: the idle timeout"
        );
        phase.bytes_arrived();
        let head_since = phase.origin + phase.state().since;
        assert_eq!(
            phase.deadline(&limits),
            Some(head_since + Duration::from_secs(10)),
            "authenticated: the header-read timeout"
        );
    }

    #[test]
    fn a_short_header_read_timeout_still_applies_before_authentication() {
        let limits = ConnectionLimits {
            header_read_timeout: Duration::from_millis(500),
            ..limits()
        };
        let phase = Phase::new();
        assert_eq!(
            phase.deadline(&limits),
            Some(phase.origin + Duration::from_millis(500))
        );
    }
}
