//! The work a request leaves for after its response (docs/design.md §4, "After the response"):
//! its settlement (leases released, costs stated by the response charged in place of the
//! estimates, statuses that do not count refunded; commits under the path's own request id), and
//! the store's upkeep (a global store's lease refills). One value, [`AfterResponse`], which a
//! host runs with [`crate::Edge::run_after_response`] without knowing its parts: the Worker in
//! `waitUntil`, the tower layer in a spawned task (the answer never waits for it), `sim` on its
//! replay clock when the request lands.

use std::borrow::Cow;

use edgelimit::StoreError;

use crate::settlement::Settlement;

/// The origin's response as the work after it reads it: its status and its header fields.
pub trait ResponseView {
    /// The status code.
    fn status(&self) -> u16;

    /// The value of the field `name` (lower case), when the response has it. A host may also
    /// answer names of its own (tower's `custom:` costs, counted from the response by code).
    fn header(&self, name: &str) -> Option<Cow<'_, str>>;
}

/// What a request leaves to do once its response is out, owned so that it outlives the request
/// (a host runs it after answering). Empty for most requests: a host then has nothing to run
/// ([`AfterResponse::is_empty`]).
#[derive(Debug, Default, Clone, PartialEq)]
#[must_use = "the work is done only when a host runs it (Edge::run_after_response)"]
pub struct AfterResponse {
    settlement: Option<Settlement>,
    upkeep: bool,
}

impl AfterResponse {
    pub(crate) fn new(settlement: Option<Settlement>, upkeep: bool) -> AfterResponse {
        AfterResponse { settlement, upkeep }
    }

    /// Whether there is nothing to do: a host need not schedule anything.
    pub fn is_empty(&self) -> bool {
        self.settlement.is_none() && !self.upkeep
    }

    /// What it settles, when anything (to inspect: running the work sends it).
    pub fn settlement(&self) -> Option<&Settlement> {
        self.settlement.as_ref()
    }

    pub(crate) fn into_parts(self) -> (Option<Settlement>, bool) {
        (self.settlement, self.upkeep)
    }
}

/// What running an [`AfterResponse`] did: each failure is here for the host to log. A failed
/// commit leaves its estimate charged and its leases to their timeout (the safe side); a failed
/// upkeep is queued again by the next request that needs it.
#[derive(Debug, Default)]
pub struct AfterResponseDone {
    /// Settlement commits the store took.
    pub committed: usize,
    /// Why the other commits failed.
    pub failed: Vec<StoreError>,
    /// Why the store's upkeep failed, if it did.
    pub upkeep_failed: Option<StoreError>,
}

impl AfterResponseDone {
    /// Every failure, the commits' first.
    pub fn failures(&self) -> impl Iterator<Item = &StoreError> {
        self.failed.iter().chain(&self.upkeep_failed)
    }
}
