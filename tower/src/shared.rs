//! What every service a layer wraps shares: the request path over the store, how requests are
//! read, and the names of reservations.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use edgelimit::Clock;
use edgelimit_engine::config::RouteToken;
use edgelimit_engine::route_guard::RouteGuard;
use edgelimit_engine::Edge;

use crate::exempt::Exemptions;
use crate::request::Reading;

/// What every service the layer wraps shares: the request path over the store, how requests
/// are read, and the metrics page's token (unless the page is public or absent) with the guard
/// counting failed attempts at it.
pub(crate) struct Shared<S> {
    pub(crate) edge: Edge<S>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) reading: Reading,
    pub(crate) exempt: Exemptions,
    pub(crate) ids: ReservationIds,
    pub(crate) metrics_token: Option<RouteToken>,
    pub(crate) guard: RouteGuard,
}

/// Names for reservations of requests without a request id: unique across every process that
/// shares a store (a random prefix per layer), since a commit is remembered under its name.
pub(crate) struct ReservationIds {
    prefix: u64,
    next: AtomicU64,
}

impl ReservationIds {
    pub(crate) fn new() -> ReservationIds {
        // A random 64-bit prefix: std's per-process hash keys, no random number crate needed.
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        hasher.write_u32(std::process::id());
        ReservationIds {
            prefix: hasher.finish(),
            next: AtomicU64::new(0),
        }
    }

    /// A name no other request of any process has.
    pub(crate) fn next(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("tower-{:016x}-{n:x}", self.prefix)
    }
}
