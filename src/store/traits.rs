//! The `Store` trait: one batch of checks in, one verdict per check out, in one round trip.

use async_trait::async_trait;

use super::check::{Check, TimeSource, Verdict};
use super::error::StoreError;

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
}
