//! [`Calls`]: a client of the Durable Objects as a `Store` and a `Control`. Every operation is
//! one [`WireCall`] sent and its [`WireAnswer`] read back; only the sending differs between clients — the
//! Worker to an object's stub (`client`), edgelimit-admin to the Worker's admin route — so each
//! says how it sends ([`SendCall`]) and this module says, once, what each operation sends and
//! how its answer reads.

use async_trait::async_trait;
use edgelimit::control::list::ListEntry;
use edgelimit::control::{Assignment, AssignmentKind};
use edgelimit::store::MaybeSendSync;
use edgelimit::{Check, Control, Identifier, Limit, Store, StoreError, TimeSource, Verdict};

use super::{
    assignment_of, assignment_text, check_call, WireAnswer, WireBytes, WireCall, WireLimit,
    WireVerdict,
};

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

fn unexpected(answer: WireAnswer) -> StoreError {
    StoreError::Protocol(format!("an answer to another call: {answer:?}"))
}

fn wire(limit: &Limit, identifier: &Identifier) -> (WireLimit, WireBytes) {
    (WireLimit::of(limit), WireBytes::of(identifier.as_bytes()))
}

impl<T: SendCall> Calls<T> {
    /// Sends a call whose answer is `Done`.
    async fn done(&self, call: WireCall) -> Result<(), StoreError> {
        match self.0.call(&call).await? {
            WireAnswer::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Sends a call whose answer says whether something existed.
    async fn existed(&self, call: WireCall) -> Result<bool, StoreError> {
        match self.0.call(&call).await? {
            WireAnswer::Existed { existed } => Ok(existed),
            other => Err(unexpected(other)),
        }
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl<T: SendCall> Store for Calls<T> {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        match self.0.call(&check_call(checks, time)).await? {
            WireAnswer::Verdicts { verdicts } if verdicts.len() == checks.len() => {
                Ok(verdicts.into_iter().map(WireVerdict::verdict).collect())
            }
            other => Err(unexpected(other)),
        }
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl<T: SendCall> Control for Calls<T> {
    async fn assign(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        assignment: Option<&Assignment>,
        until_ms: Option<u64>,
    ) -> Result<(), StoreError> {
        let (limit, identifier) = wire(limit, identifier);
        self.done(WireCall::Assign {
            limit,
            identifier,
            assignment: assignment.map(|a| assignment_text(a, until_ms)),
            until_ms,
        })
        .await
    }

    async fn clear_assignment(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        kind: AssignmentKind,
    ) -> Result<(), StoreError> {
        let (limit, identifier) = wire(limit, identifier);
        self.done(WireCall::ClearAssignment {
            limit,
            identifier,
            kind: kind.letter().to_string(),
        })
        .await
    }

    async fn assignments(
        &self,
        limit: &Limit,
        identifier: &Identifier,
    ) -> Result<Vec<(Assignment, Option<u64>)>, StoreError> {
        let (limit, identifier) = wire(limit, identifier);
        match self
            .0
            .call(&WireCall::Assignments { limit, identifier })
            .await?
        {
            WireAnswer::Assignments { assignments } => assignments
                .iter()
                .map(|(text, _)| assignment_of(text))
                .collect(),
            other => Err(unexpected(other)),
        }
    }

    async fn list_add(
        &self,
        list: &str,
        entry: &ListEntry,
        until_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        self.done(WireCall::ListAdd {
            list: list.to_string(),
            entry: entry.member(),
            until_ms,
            now_ms,
        })
        .await
    }

    async fn list_remove(&self, list: &str, entry: &ListEntry) -> Result<bool, StoreError> {
        self.existed(WireCall::ListRemove {
            list: list.to_string(),
            entry: entry.member(),
        })
        .await
    }

    async fn list_entries(
        &self,
        list: &str,
        now_ms: u64,
    ) -> Result<Vec<(String, Option<u64>)>, StoreError> {
        let call = WireCall::ListEntries {
            list: list.to_string(),
            now_ms,
        };
        match self.0.call(&call).await? {
            WireAnswer::Entries { entries } => Ok(entries),
            other => Err(unexpected(other)),
        }
    }

    async fn peek(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        time: TimeSource,
    ) -> Result<Verdict, StoreError> {
        let (limit, identifier) = wire(limit, identifier);
        let call = WireCall::Peek {
            limit,
            identifier,
            at_ms: time.at_ms(),
        };
        match self.0.call(&call).await? {
            WireAnswer::Verdict { verdict } => Ok(verdict.verdict()),
            other => Err(unexpected(other)),
        }
    }

    async fn reset(&self, limit: &Limit, identifier: &Identifier) -> Result<bool, StoreError> {
        let (limit, identifier) = wire(limit, identifier);
        self.existed(WireCall::Reset { limit, identifier }).await
    }
}
