//! The `Store` trait: one batch of checks in, one verdict per check out, in one round trip.

use async_trait::async_trait;

use super::check::{Check, Identifier, Limit, TimeSource, Verdict};
use super::error::StoreError;
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
#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
pub trait Store: MaybeSendSync {
    /// Decides a batch of checks, in one round trip where the store allows, one verdict per
    /// check in order. An error means no verdict is known for any check of the batch.
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError>;

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
        Err(unsupported())
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
        Err(unsupported())
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
        Err(unsupported())
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
}

fn unsupported() -> StoreError {
    StoreError::InvalidInput("this store does not support assignments (tiers and overrides)".into())
}
