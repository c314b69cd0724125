//! The one `Control` of both Redis transports, RESP ([`super::RespStore`]) and Upstash REST
//! ([`super::RestStore`]): every operation is the same command or script on either, read the
//! same way; only how one command reaches Redis differs ([`RedisCalls`]).

use async_trait::async_trait;

use super::check::{Identifier, Limit, TimeSource, Verdict};
use super::error::StoreError;
use super::key::control_key;
use super::traits::MaybeSendSync;
use crate::control::assignment::{assign_command, read_assignments};
use crate::control::list::{self, ListEntry};
use crate::control::{Assignment, AssignmentKind, ControlAnswer, ControlOp};
use crate::script::{control, Invocation, Reply};

/// How a Redis transport sends one control command. Every control command is idempotent (an
/// assignment writes the same line again, a list add sets the same lapse, a peek reads, a reset
/// deletes), so a transport may resend one whose answer was lost.

#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
pub(super) trait RedisCalls: MaybeSendSync {
    /// The keys' namespace.
    fn namespace(&self) -> &str;

    /// One plain command (`GET` of a control key, the assignment script's `EVAL`), sent to the
    /// node holding its key.
    async fn plain(&self, command: &[String]) -> Result<Reply, StoreError>;

    /// One control script.
    async fn script(&self, invocation: &Invocation) -> Result<Reply, StoreError>;
}

/// `impl Control for $store` by [`RedisCalls`]: the same operations for both transports,
/// written once in [`apply`]. (A blanket `impl<T: RedisCalls> Control for T` would collide with
/// `Control for Box<S>`.)
macro_rules! redis_control {
    ($store:ty) => {
        #[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
        #[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
        impl $crate::store::Control for $store {
            async fn apply(
                &self,
                op: $crate::control::ControlOp,
            ) -> Result<$crate::control::ControlAnswer, $crate::StoreError> {
                super::redis_control::apply(self, op).await
            }
        }
    };
}
pub(super) use redis_control;

/// `Control::apply` on either Redis transport.
pub(super) async fn apply(
    store: &(impl RedisCalls + ?Sized),
    op: ControlOp,
) -> Result<ControlAnswer, StoreError> {
    Ok(match op {
        ControlOp::Assign {
            limit,
            identifier,
            assignment,
            until_ms,
        } => {
            assign(store, &limit, &identifier, assignment.as_ref(), until_ms).await?;
            ControlAnswer::Done
        }
        ControlOp::ClearAssignment {
            limit,
            identifier,
            kind,
        } => {
            clear_assignment(store, &limit, &identifier, kind).await?;
            ControlAnswer::Done
        }
        ControlOp::Assignments { limit, identifier } => {
            ControlAnswer::Assignments(assignments(store, &limit, &identifier).await?)
        }
        ControlOp::ListAdd {
            list,
            entry,
            until_ms,
            now_ms,
        } => {
            list_add(store, &list, &entry, until_ms, now_ms).await?;
            ControlAnswer::Done
        }
        ControlOp::ListRemove { list, entry } => {
            ControlAnswer::Existed(list_remove(store, &list, &entry).await?)
        }
        ControlOp::ListEntries { list, now_ms } => {
            ControlAnswer::Entries(list_entries(store, &list, now_ms).await?)
        }
        ControlOp::Peek {
            limit,
            identifier,
            time,
        } => ControlAnswer::Verdict(peek(store, &limit, &identifier, time).await?),
        ControlOp::Reset { limit, identifier } => {
            ControlAnswer::Existed(reset(store, &limit, &identifier).await?)
        }
    })
}

async fn assign(
    store: &(impl RedisCalls + ?Sized),
    limit: &Limit,
    identifier: &Identifier,
    assignment: Option<&Assignment>,
    until_ms: Option<u64>,
) -> Result<(), StoreError> {
    let key = control_key(store.namespace(), &limit.name, identifier);
    change_assignments(store, assign_command(key, assignment, until_ms, None)).await
}

async fn clear_assignment(
    store: &(impl RedisCalls + ?Sized),
    limit: &Limit,
    identifier: &Identifier,
    kind: AssignmentKind,
) -> Result<(), StoreError> {
    let key = control_key(store.namespace(), &limit.name, identifier);
    change_assignments(store, assign_command(key, None, None, Some(kind))).await
}

async fn assignments(
    store: &(impl RedisCalls + ?Sized),
    limit: &Limit,
    identifier: &Identifier,
) -> Result<Vec<(Assignment, Option<u64>)>, StoreError> {
    let key = control_key(store.namespace(), &limit.name, identifier);
    let reply = store.plain(&["GET".to_string(), key.clone()]).await?;
    read_assignments(reply, &key)
}

async fn list_add(
    store: &(impl RedisCalls + ?Sized),
    list: &str,
    entry: &ListEntry,
    until_ms: Option<u64>,
    now_ms: u64,
) -> Result<(), StoreError> {
    let lapse = list::checked_addition(list, until_ms, now_ms)?;
    let call = control::list_add(store.namespace(), list, entry, lapse, now_ms)?;
    control::read_added(&store.script(&call).await?)
}

async fn list_remove(
    store: &(impl RedisCalls + ?Sized),
    list: &str,
    entry: &ListEntry,
) -> Result<bool, StoreError> {
    let call = control::list_remove(store.namespace(), list, entry);
    control::read_removed(&store.script(&call).await?)
}

async fn list_entries(
    store: &(impl RedisCalls + ?Sized),
    list: &str,
    now_ms: u64,
) -> Result<Vec<(String, Option<u64>)>, StoreError> {
    let call = control::list_entries(store.namespace(), list, now_ms)?;
    control::read_entries(&store.script(&call).await?)
}

async fn peek(
    store: &(impl RedisCalls + ?Sized),
    limit: &Limit,
    identifier: &Identifier,
    time: TimeSource,
) -> Result<Verdict, StoreError> {
    let call = control::peek(store.namespace(), limit, identifier, time)?;
    control::read_peek(&store.script(&call).await?)
}

async fn reset(
    store: &(impl RedisCalls + ?Sized),
    limit: &Limit,
    identifier: &Identifier,
) -> Result<bool, StoreError> {
    let call = control::reset(store.namespace(), limit, identifier);
    control::read_reset(&store.script(&call).await?)
}

/// Runs the control key's `EVAL` of [`assign_command`].
async fn change_assignments<T: RedisCalls + ?Sized>(
    store: &T,
    command: Vec<String>,
) -> Result<(), StoreError> {
    match store.plain(&command).await? {
        Reply::Error(e) => Err(StoreError::from_error_reply(&e)),
        _ => Ok(()),
    }
}
