//! The `Store` trait: one batch of checks in, one verdict per check out, in one round trip.

use async_trait::async_trait;

use super::check::{Check, Identifier, Limit, TimeSource, Verdict};
use super::error::StoreError;
use crate::control::list::ListEntry;
use crate::control::{Assignment, AssignmentKind};

/// `Send + Sync` natively; nothing on wasm32, where JS futures and handles are not `Send`.
#[cfg(not(target_arch = "wasm32"))]
pub trait MaybeSendSync: Send + Sync {}
#[cfg(not(target_arch = "wasm32"))]
impl<T: Send + Sync + ?Sized> MaybeSendSync for T {}
/// `Send + Sync` natively; nothing on wasm32, where JS futures and handles are not `Send`.
#[cfg(target_arch = "wasm32")]
pub trait MaybeSendSync {}
#[cfg(target_arch = "wasm32")]
impl<T: ?Sized> MaybeSendSync for T {}

/// Where limiter state lives. Implementations decide each [`Check`] all or nothing with the
/// algorithms' exact semantics, and must agree with [`super::MemoryStore`] decision for decision.
///
/// The control methods (lists, peek, reset) are implemented by every store of this crate; their
/// defaults, for stores that only decide (test doubles, a replay's store), refuse with
/// [`StoreError::InvalidInput`].
#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
pub trait Store: MaybeSendSync {
    /// Decides a batch of checks, in one round trip where the store allows, one verdict per
    /// check in order. An error means no verdict is known for any check of the batch.
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError>;

    /// [`Store::check`] answering into `verdicts`, which then holds one verdict per check in
    /// order (nothing on an error). A store deciding in process overrides it to reuse what the
    /// buffer holds, each verdict's `decisions` included ([`Verdict::reuse`]), so a caller
    /// deciding batch after batch with one buffer (a replay) allocates nothing for its answers.
    /// The default moves [`Store::check`]'s answer in: over a network the allocations are noise.
    async fn check_into(
        &self,
        checks: &[Check],
        time: TimeSource,
        verdicts: &mut Vec<Verdict>,
    ) -> Result<(), StoreError> {
        verdicts.clear();
        *verdicts = self.check(checks, time).await?;
        Ok(())
    }

    /// Assigns `identifier` on `limit` a tier or an override until `until_ms` (epoch ms on the
    /// callers' clock; `None`: until cleared), replacing the assignment of that kind it held (an
    /// identifier holds at most one tier and one override: a temporary override of a `pro`
    /// customer lapses back to `pro`). `assignment` `None` clears both. Every later check of the
    /// pair decides with the effective policy (docs/design.md §2, "Policy changes"). Every
    /// bundled store implements it; the default refuses, for test doubles.
    async fn assign(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        assignment: Option<&Assignment>,
        until_ms: Option<u64>,
    ) -> Result<(), StoreError> {
        let _ = (limit, identifier, assignment, until_ms);
        Err(unsupported("assignments (tiers and overrides)"))
    }

    /// Clears the assignment of one kind (the tier or the override) of `identifier` on `limit`,
    /// keeping the other.
    async fn clear_assignment(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        kind: AssignmentKind,
    ) -> Result<(), StoreError> {
        let _ = (limit, identifier, kind);
        Err(unsupported("assignments (tiers and overrides)"))
    }

    /// Every assignment `identifier` holds on `limit`, each with when it lapses, the override
    /// first; as stored, so a lapsed one may be listed until it is collected (compare `until`
    /// with now, or use [`crate::control::effective_policy`]).
    async fn assignments(
        &self,
        limit: &Limit,
        identifier: &Identifier,
    ) -> Result<Vec<(Assignment, Option<u64>)>, StoreError> {
        let _ = (limit, identifier);
        Err(unsupported("assignments (tiers and overrides)"))
    }

    /// The first of [`Store::assignments`] (the override if one is held, else the tier), or
    /// `None`.
    async fn assignment(
        &self,
        limit: &Limit,
        identifier: &Identifier,
    ) -> Result<Option<(Assignment, Option<u64>)>, StoreError> {
        Ok(self
            .assignments(limit, identifier)
            .await?
            .into_iter()
            .next())
    }

    /// Adds `entry` to the deny or allow list `list` until `until_ms` (epoch ms; `None`: never),
    /// replacing its lapse time if it is there. Entries lapsed at `now_ms` are dropped on the way
    /// (expiry is data, compared with now: docs/design.md §"Deny and allow lists").
    async fn list_add(
        &self,
        list: &str,
        entry: &ListEntry,
        until_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        let _ = (list, entry, until_ms, now_ms);
        Err(unsupported("list_add"))
    }

    /// Removes `entry` from `list`; whether it was there (live or lapsed).
    async fn list_remove(&self, list: &str, entry: &ListEntry) -> Result<bool, StoreError> {
        let _ = (list, entry);
        Err(unsupported("list_remove"))
    }

    /// The entries of `list` live at `now_ms`: (member, lapse time; `None` for never), soonest
    /// lapsing first, ties by member.
    async fn list_entries(
        &self,
        list: &str,
        now_ms: u64,
    ) -> Result<Vec<(String, Option<u64>)>, StoreError> {
        let _ = (list, now_ms);
        Err(unsupported("list_entries"))
    }

    /// An identifier's standing on a limit without consuming: a zero-cost look under its
    /// effective policy that writes nothing (not even pruning): what remains and when the quota
    /// is whole again. `TimeSource::Server` reads the store's clock.
    async fn peek(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        time: TimeSource,
    ) -> Result<Verdict, StoreError> {
        let _ = (limit, identifier, time);
        Err(unsupported("peek"))
    }

    /// Deletes the identifier's state on the limit (every algorithm's key: O(1), no SCAN); keeps
    /// its assignment and remembered request ids (a retry must still not double-charge). Returns
    /// whether any state existed.
    async fn reset(&self, limit: &Limit, identifier: &Identifier) -> Result<bool, StoreError> {
        let _ = (limit, identifier);
        Err(unsupported("reset"))
    }
}

fn unsupported(what: &str) -> StoreError {
    StoreError::InvalidInput(format!("this store does not support `{what}`"))
}
