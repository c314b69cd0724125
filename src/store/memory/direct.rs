//! [`Direct`]: a `MemoryStore`'s operations without a future. A `MemoryStore` never waits, so a
//! single-threaded host, a test or a replay may call its `Store` and `Control` operations
//! directly; each answers exactly as its async counterpart.

use super::MemoryStore;
use crate::control::list::ListEntry;
use crate::control::{Assignment, AssignmentKind};
use crate::decision::Decision;
use crate::store::check::{Check, Identifier, Limit, Verdict};
use crate::store::error::StoreError;

/// A `MemoryStore`'s operations called directly ([`MemoryStore::direct`]). Where the async
/// operation takes a [`TimeSource`](crate::TimeSource), these take the instant, `now_ms`.
#[derive(Debug, Clone, Copy)]
pub struct Direct<'s>(&'s MemoryStore);

impl MemoryStore {
    /// This store's operations without a future: `store.direct().check(&checks, now_ms)`.
    pub fn direct(&self) -> Direct<'_> {
        Direct(self)
    }
}

impl Direct<'_> {
    /// [`Store::check`](crate::Store::check) at `now_ms`.
    ///
    /// # Panics
    ///
    /// On a check every store refuses as bad input: an item on a concurrency limit spending or
    /// crediting a capacity lease (docs/design.md §9), or on a limit delaying requests or
    /// blocking longer than 366 days (docs/design.md §2), which
    /// [`Store::check`](crate::Store::check) answers with [`StoreError::InvalidInput`].
    pub fn check(&self, checks: &[Check], now_ms: u64) -> Vec<Verdict> {
        self.0.check_now(checks, now_ms)
    }

    /// What [`Direct::check`] answers for `Check::single(limit, identifier, cost)`, without
    /// building the check or the verdict: a layer's hot path. Allocates nothing unless a new
    /// state is stored.
    pub fn check_one(&self, limit: &Limit, identifier: &[u8], cost: i64, now_ms: u64) -> Decision {
        self.0.check_one(limit, identifier, cost, now_ms)
    }

    /// [`Control::peek`](crate::Control::peek) at `now_ms`.
    pub fn peek(&self, limit: &Limit, identifier: &[u8], now_ms: u64) -> Verdict {
        self.0.peek_now(limit, identifier, now_ms)
    }

    /// [`Control::reset`](crate::Control::reset).
    pub fn reset(&self, limit: &Limit, identifier: &[u8]) -> bool {
        self.0.reset_now(limit, identifier)
    }

    /// [`Control::list_add`](crate::Control::list_add).
    pub fn list_add(
        &self,
        list: &str,
        entry: &ListEntry,
        until_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        self.0.list_add_now(list, entry, until_ms, now_ms)
    }

    /// [`Control::list_remove`](crate::Control::list_remove).
    pub fn list_remove(&self, list: &str, entry: &ListEntry) -> bool {
        self.0.list_remove_now(list, entry)
    }

    /// [`Control::list_entries`](crate::Control::list_entries) at `now_ms`.
    pub fn list_entries(&self, list: &str, now_ms: u64) -> Vec<(String, Option<u64>)> {
        self.0.list_entries_now(list, now_ms)
    }

    /// [`Control::assign`](crate::Control::assign).
    pub fn assign(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        assignment: Option<&Assignment>,
        until_ms: Option<u64>,
    ) {
        self.0.assign_now(limit, identifier, assignment, until_ms)
    }

    /// [`Control::clear_assignment`](crate::Control::clear_assignment).
    pub fn clear_assignment(&self, limit: &Limit, identifier: &Identifier, kind: AssignmentKind) {
        self.0.clear_assignment_now(limit, identifier, kind)
    }

    /// [`Control::assignments`](crate::Control::assignments): the override first.
    pub fn assignments(
        &self,
        limit: &Limit,
        identifier: &Identifier,
    ) -> Vec<(Assignment, Option<u64>)> {
        self.0.assignments_now(limit, identifier)
    }
}
