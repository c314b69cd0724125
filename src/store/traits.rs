//! The two traits of a store: [`Store`] decides (one batch of checks in, one verdict per check
//! out, in one round trip); [`Control`] changes and reads what decides (tiers and overrides,
//! deny and allow lists, peek and reset), for the stores that keep it.

use async_trait::async_trait;

use super::check::{Check, Identifier, Limit, TimeSource, Verdict};
use super::error::StoreError;
use crate::control::list::ListEntry;
use crate::control::{Assignment, AssignmentKind, ControlAnswer, ControlOp};
use crate::global::take::{Take, Taken};

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

    /// Low-level: [`Store::check`] answering into `verdicts`, which then holds one verdict per
    /// check in order (nothing on an error). Implement [`Store::check`]; override this only in a
    /// store deciding in process that reuses what the buffer holds, each verdict's `decisions`
    /// included ([`Verdict::reuse`]), so a caller deciding batch after batch with one buffer (a
    /// replay) allocates nothing for its answers. The default moves [`Store::check`]'s answer
    /// in: over a network the allocations are noise.
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

    /// Takes up to each take's want from its source, in order, each decided on its own (a take
    /// never fails another): a global limit's ask of the home's pool or of a lender
    /// ([`crate::global::take`]). One round trip; one script call on a Redis store. The default
    /// decides each take as a batch of request checks of `r, 2^m, …, 2, 1` units and a look,
    /// which grants the same units; short of a take's need, its decision is then the smallest
    /// refused part's that covers the shortfall (else the largest refused), not the shortfall's
    /// own.
    async fn take(&self, takes: &[Take], time: TimeSource) -> Result<Vec<Taken>, StoreError> {
        crate::global::take::take_by_checks(self, takes, time).await
    }

    /// Whether the store has queued work of its own to do once a response is out (a global
    /// store's lease refills, [`crate::global::GlobalStore`]): a host then leaves
    /// [`Store::upkeep`] to run after the response, off the request path. Most stores have
    /// none; asking costs no I/O.
    fn upkeep_due(&self) -> bool {
        false
    }

    /// Does the work [`Store::upkeep_due`] announced, at `now_ms` (epoch ms, the caller's
    /// clock). Each call does what was queued when it runs, so two concurrent calls never do
    /// one piece twice; what fails is queued again by the next request that needs it.
    async fn upkeep(&self, now_ms: u64) -> Result<(), StoreError> {
        let _ = now_ms;
        Ok(())
    }
}

/// Live control of what a [`Store`] decides with: per-identifier tiers and overrides (the
/// effective policy, docs/design.md §2 "Policy changes"), deny and allow lists (§3 "Deny and
/// allow lists"), and an identifier's standing (§3 "Peek and reset"). Every bundled store keeps
/// them; a wrapper ([`super::Coalescing`], [`super::ShardedStore`]) has them when what it wraps
/// does.
///
/// A store implements one method, [`Control::apply`], taking any [`ControlOp`]: a wrapper then
/// forwards one call, and the wire to a remote store sends one value. The typed methods are the
/// way in for callers; each builds its operation and reads its answer.
#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
pub trait Control: Store {
    /// Carries out `op`, answering with the [`ControlAnswer`] of its kind (the typed method of
    /// the same name says what each operation does).
    async fn apply(&self, op: ControlOp) -> Result<ControlAnswer, StoreError>;

    /// Assigns `identifier` on `limit` a tier or an override until `until_ms` (epoch ms on the
    /// callers' clock; `None`: until cleared), replacing the assignment of that kind it held (an
    /// identifier holds at most one tier and one override: a temporary override of a `pro`
    /// customer lapses back to `pro`). `assignment` `None` clears both. Every later check of the
    /// pair decides with the effective policy.
    async fn assign(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        assignment: Option<&Assignment>,
        until_ms: Option<u64>,
    ) -> Result<(), StoreError> {
        self.apply(ControlOp::Assign {
            limit: limit.clone(),
            identifier: identifier.clone(),
            assignment: assignment.cloned(),
            until_ms,
        })
        .await?
        .done()
    }

    /// Clears the assignment of one kind (the tier or the override) of `identifier` on `limit`,
    /// keeping the other.
    async fn clear_assignment(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        kind: AssignmentKind,
    ) -> Result<(), StoreError> {
        self.apply(ControlOp::ClearAssignment {
            limit: limit.clone(),
            identifier: identifier.clone(),
            kind,
        })
        .await?
        .done()
    }

    /// Every assignment `identifier` holds on `limit`, each with when it lapses, the override
    /// first; as stored, so a lapsed one may be listed until it is collected (compare `until`
    /// with now, or use [`crate::control::effective_policy`]).
    async fn assignments(
        &self,
        limit: &Limit,
        identifier: &Identifier,
    ) -> Result<Vec<(Assignment, Option<u64>)>, StoreError> {
        self.apply(ControlOp::Assignments {
            limit: limit.clone(),
            identifier: identifier.clone(),
        })
        .await?
        .assignments()
    }

    /// The first of [`Control::assignments`] (the override if one is held, else the tier), or
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
    /// (expiry is data, compared with now).
    async fn list_add(
        &self,
        list: &str,
        entry: &ListEntry,
        until_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        self.apply(ControlOp::ListAdd {
            list: list.to_string(),
            entry: entry.clone(),
            until_ms,
            now_ms,
        })
        .await?
        .done()
    }

    /// Removes `entry` from `list`; whether it was there (live or lapsed).
    async fn list_remove(&self, list: &str, entry: &ListEntry) -> Result<bool, StoreError> {
        self.apply(ControlOp::ListRemove {
            list: list.to_string(),
            entry: entry.clone(),
        })
        .await?
        .existed()
    }

    /// The entries of `list` live at `now_ms`: (member, lapse time; `None` for never), soonest
    /// lapsing first, ties by member.
    async fn list_entries(
        &self,
        list: &str,
        now_ms: u64,
    ) -> Result<Vec<(String, Option<u64>)>, StoreError> {
        self.apply(ControlOp::ListEntries {
            list: list.to_string(),
            now_ms,
        })
        .await?
        .entries()
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
        self.apply(ControlOp::Peek {
            limit: limit.clone(),
            identifier: identifier.clone(),
            time,
        })
        .await?
        .verdict()
    }

    /// Deletes the identifier's state on the limit (every algorithm's key: O(1), no SCAN); keeps
    /// its assignment and remembered request ids (a retry must still not double-charge). Returns
    /// whether any state existed.
    async fn reset(&self, limit: &Limit, identifier: &Identifier) -> Result<bool, StoreError> {
        self.apply(ControlOp::Reset {
            limit: limit.clone(),
            identifier: identifier.clone(),
        })
        .await?
        .existed()
    }
}

/// A boxed store decides as the store it holds: shards of different kinds
/// (`ShardedStore<Box<dyn Store>>`) and stores chosen at run time.
#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl<S: Store + ?Sized> Store for Box<S> {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        (**self).check(checks, time).await
    }

    async fn check_into(
        &self,
        checks: &[Check],
        time: TimeSource,
        verdicts: &mut Vec<Verdict>,
    ) -> Result<(), StoreError> {
        (**self).check_into(checks, time, verdicts).await
    }

    async fn take(&self, takes: &[Take], time: TimeSource) -> Result<Vec<Taken>, StoreError> {
        (**self).take(takes, time).await
    }

    fn upkeep_due(&self) -> bool {
        (**self).upkeep_due()
    }

    async fn upkeep(&self, now_ms: u64) -> Result<(), StoreError> {
        (**self).upkeep(now_ms).await
    }
}

/// A shared store decides as the store it holds: one home's store behind the global stores of
/// several regions, one store behind several layers.
#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        (**self).check(checks, time).await
    }

    async fn check_into(
        &self,
        checks: &[Check],
        time: TimeSource,
        verdicts: &mut Vec<Verdict>,
    ) -> Result<(), StoreError> {
        (**self).check_into(checks, time, verdicts).await
    }

    async fn take(&self, takes: &[Take], time: TimeSource) -> Result<Vec<Taken>, StoreError> {
        (**self).take(takes, time).await
    }

    fn upkeep_due(&self) -> bool {
        (**self).upkeep_due()
    }

    async fn upkeep(&self, now_ms: u64) -> Result<(), StoreError> {
        (**self).upkeep(now_ms).await
    }
}

/// A boxed store is controlled as the store it holds (`Box<dyn Control>`).
#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl<S: Control + ?Sized> Control for Box<S> {
    async fn apply(&self, op: ControlOp) -> Result<ControlAnswer, StoreError> {
        (**self).apply(op).await
    }
}

/// A shared store is controlled as the store it holds.
#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl<S: Control + ?Sized> Control for std::sync::Arc<S> {
    async fn apply(&self, op: ControlOp) -> Result<ControlAnswer, StoreError> {
        (**self).apply(op).await
    }
}
