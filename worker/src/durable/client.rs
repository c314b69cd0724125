//! The Worker's side of its Durable Objects (wasm32 only): [`ObjectShard`], one object as a
//! `Store` and `Control` (a [`Call`] sent to it, its [`Answer`] read back), and
//! [`object_store`], the objects of the namespace as one store — identifiers spread over them by
//! rendezvous hashing, every limit of an identifier in one object, a check split over objects
//! decided all or nothing with compensating refunds (`ShardedStore`).

use std::time::Duration;

use async_trait::async_trait;
use edgelimit::control::list::ListEntry;
use edgelimit::control::{Assignment, AssignmentKind};
use edgelimit::store::{Shard, ShardedStore};
use edgelimit::{Check, Control, Identifier, Limit, Store, StoreError, TimeSource, Verdict};
use futures_util::future::{select, Either};
use worker::{Delay, Method, ObjectNamespace, Request, RequestInit};

use super::wire::{
    assignment_of, assignment_text, check_call, error_of, Answer, Call, WireBytes, WireLimit,
    WireVerdict,
};

/// The objects' names: `edgelimit-0` … `edgelimit-<n-1>`.
pub fn object_name(index: u32) -> String {
    format!("edgelimit-{index}")
}

/// The `objects` objects of `namespace` as one store, each call timed out after `timeout`.
pub fn object_store(
    namespace: &ObjectNamespace,
    objects: u32,
    timeout: Duration,
) -> Result<ShardedStore<ObjectShard>, StoreError> {
    let shards = (0..objects)
        .map(|i| {
            let name = object_name(i);
            Shard::new(
                name.clone(),
                ObjectShard {
                    namespace: namespace.clone(),
                    name,
                    timeout,
                },
            )
        })
        .collect();
    Ok(ShardedStore::new(shards)?.by_identifier())
}

/// One Durable Object as a store.
#[derive(Debug)]
pub struct ObjectShard {
    namespace: ObjectNamespace,
    name: String,
    timeout: Duration,
}

impl ObjectShard {
    /// Sends `call` to the object and reads its answer, within the timeout.
    async fn call(&self, call: &Call) -> Result<Answer, StoreError> {
        let unreachable = |e: worker::Error| StoreError::Unreachable(format!("{}: {e}", self.name));
        let body = serde_json::to_string(call)
            .map_err(|e| StoreError::Protocol(format!("cannot encode a call: {e}")))?;
        let stub = self
            .namespace
            .id_from_name(&self.name)
            .and_then(|id| id.get_stub())
            .map_err(unreachable)?;
        let mut init = RequestInit::new();
        init.with_method(Method::Post).with_body(Some(body.into()));
        let request =
            Request::new_with_init("https://edgelimit.state/call", &init).map_err(unreachable)?;
        let exchange = async {
            let mut response = stub.fetch_with_request(request).await?;
            response.text().await
        };
        let timeout = Delay::from(self.timeout);
        let text = match select(Box::pin(exchange), timeout).await {
            Either::Left((answered, _)) => answered.map_err(unreachable)?,
            Either::Right(_) => {
                return Err(StoreError::Timeout {
                    after_ms: self.timeout.as_millis() as u64,
                })
            }
        };
        let answer: Answer = serde_json::from_str(&text).map_err(|e| {
            StoreError::Protocol(format!("{} answered what is not an answer: {e}", self.name))
        })?;
        match answer {
            Answer::Failed {
                message,
                invalid_input,
            } => Err(error_of(message, invalid_input)),
            answer => Ok(answer),
        }
    }
}

fn unexpected(answer: Answer) -> StoreError {
    StoreError::Protocol(format!("unexpected answer {answer:?}"))
}

fn limit_call(limit: &Limit, identifier: &Identifier) -> (WireLimit, WireBytes) {
    (WireLimit::of(limit), WireBytes::of(identifier.as_bytes()))
}

#[async_trait(?Send)]
impl Store for ObjectShard {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        match self.call(&check_call(checks, time)).await? {
            Answer::Verdicts { verdicts } if verdicts.len() == checks.len() => {
                Ok(verdicts.into_iter().map(WireVerdict::verdict).collect())
            }
            other => Err(unexpected(other)),
        }
    }
}

#[async_trait(?Send)]
impl Control for ObjectShard {
    async fn assign(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        assignment: Option<&Assignment>,
        until_ms: Option<u64>,
    ) -> Result<(), StoreError> {
        let (limit, identifier) = limit_call(limit, identifier);
        let call = Call::Assign {
            limit,
            identifier,
            assignment: assignment.map(|a| assignment_text(a, until_ms)),
            until_ms,
        };
        match self.call(&call).await? {
            Answer::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    async fn clear_assignment(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        kind: AssignmentKind,
    ) -> Result<(), StoreError> {
        let (limit, identifier) = limit_call(limit, identifier);
        let call = Call::ClearAssignment {
            limit,
            identifier,
            kind: kind.letter().to_string(),
        };
        match self.call(&call).await? {
            Answer::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    async fn assignments(
        &self,
        limit: &Limit,
        identifier: &Identifier,
    ) -> Result<Vec<(Assignment, Option<u64>)>, StoreError> {
        let (limit, identifier) = limit_call(limit, identifier);
        match self.call(&Call::Assignments { limit, identifier }).await? {
            Answer::Assignments { assignments } => assignments
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
        let call = Call::ListAdd {
            list: list.to_string(),
            entry: entry.member(),
            until_ms,
            now_ms,
        };
        match self.call(&call).await? {
            Answer::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    async fn list_remove(&self, list: &str, entry: &ListEntry) -> Result<bool, StoreError> {
        let call = Call::ListRemove {
            list: list.to_string(),
            entry: entry.member(),
        };
        match self.call(&call).await? {
            Answer::Existed { existed } => Ok(existed),
            other => Err(unexpected(other)),
        }
    }

    async fn list_entries(
        &self,
        list: &str,
        now_ms: u64,
    ) -> Result<Vec<(String, Option<u64>)>, StoreError> {
        let call = Call::ListEntries {
            list: list.to_string(),
            now_ms,
        };
        match self.call(&call).await? {
            Answer::Entries { entries } => Ok(entries),
            other => Err(unexpected(other)),
        }
    }

    async fn peek(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        time: TimeSource,
    ) -> Result<Verdict, StoreError> {
        let (limit, identifier) = limit_call(limit, identifier);
        let call = Call::Peek {
            limit,
            identifier,
            at_ms: time.at_ms(),
        };
        match self.call(&call).await? {
            Answer::Verdict { verdict } => Ok(verdict.verdict()),
            other => Err(unexpected(other)),
        }
    }

    async fn reset(&self, limit: &Limit, identifier: &Identifier) -> Result<bool, StoreError> {
        let (limit, identifier) = limit_call(limit, identifier);
        match self.call(&Call::Reset { limit, identifier }).await? {
            Answer::Existed { existed } => Ok(existed),
            other => Err(unexpected(other)),
        }
    }
}
