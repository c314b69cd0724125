//! [`Calls`]: a client of the Durable Objects as a `Store` and a `Control`. Every operation is
//! one [`WireCall`] sent and its [`WireAnswer`] read back; only the sending differs between
//! clients — the Worker to an object's stub (`client`), edgelimit-admin to the Worker's admin
//! route — so each says how it sends ([`SendCall`]), and the wire's `control` module says, once,
//! what each control operation sends and how its answer reads.

use async_trait::async_trait;
use edgelimit::control::{ControlAnswer, ControlOp};
use edgelimit::store::MaybeSendSync;
use edgelimit::{Check, Control, Store, StoreError, TimeSource, Verdict};

use super::{check_call, WireAnswer, WireCall, WireVerdict};

/// How a client sends a [`WireCall`] to the objects: its answer, a `Failed` answer already turned
/// into its error.
#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
pub trait SendCall: MaybeSendSync {
    /// Sends `call` and reads its answer.
    async fn call(&self, call: &WireCall) -> Result<WireAnswer, StoreError>;
}

/// A client that sends calls (`T`) as a `Store` and a `Control`.
#[derive(Debug)]
pub struct Calls<T>(pub T);

#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl<T: SendCall> Store for Calls<T> {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        match self.0.call(&check_call(checks, time)).await? {
            WireAnswer::Verdicts { verdicts } if verdicts.len() == checks.len() => {
                Ok(verdicts.into_iter().map(WireVerdict::verdict).collect())
            }
            other => Err(StoreError::Protocol(format!(
                "an answer to another call: {other:?}"
            ))),
        }
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl<T: SendCall> Control for Calls<T> {
    async fn apply(&self, op: ControlOp) -> Result<ControlAnswer, StoreError> {
        self.0.call(&WireCall::of(&op)).await?.control_answer()
    }
}
