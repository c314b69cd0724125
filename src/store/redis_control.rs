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
use crate::control::{Assignment, AssignmentKind};
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

/// `impl Control for $store` by [`RedisCalls`]: the same nine operations for both transports,
/// written once below. (A blanket `impl<T: RedisCalls> Control for T` would collide with
/// `Control for Box<S>`.)
macro_rules! redis_control {
    ($store:ty) => {
        #[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
        #[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
        impl $crate::store::Control for $store {
            async fn assign(
                &self,
                limit: &$crate::Limit,
                identifier: &$crate::Identifier,
                assignment: Option<&$crate::Assignment>,
                until_ms: Option<u64>,
            ) -> Result<(), $crate::StoreError> {
                super::redis_control::assign(self, limit, identifier, assignment, until_ms).await
            }

            async fn clear_assignment(
                &self,
                limit: &$crate::Limit,
                identifier: &$crate::Identifier,
                kind: $crate::control::AssignmentKind,
            ) -> Result<(), $crate::StoreError> {
                super::redis_control::clear_assignment(self, limit, identifier, kind).await
            }

            async fn assignments(
                &self,
                limit: &$crate::Limit,
                identifier: &$crate::Identifier,
            ) -> Result<Vec<($crate::Assignment, Option<u64>)>, $crate::StoreError> {
                super::redis_control::assignments(self, limit, identifier).await
            }

            async fn list_add(
                &self,
                list: &str,
                entry: &$crate::control::list::ListEntry,
                until_ms: Option<u64>,
                now_ms: u64,
            ) -> Result<(), $crate::StoreError> {
                super::redis_control::list_add(self, list, entry, until_ms, now_ms).await
            }

            async fn list_remove(
                &self,
                list: &str,
                entry: &$crate::control::list::ListEntry,
            ) -> Result<bool, $crate::StoreError> {
                super::redis_control::list_remove(self, list, entry).await
            }

            async fn list_entries(
                &self,
                list: &str,
                now_ms: u64,
            ) -> Result<Vec<(String, Option<u64>)>, $crate::StoreError> {
                super::redis_control::list_entries(self, list, now_ms).await
            }

            async fn peek(
                &self,
                limit: &$crate::Limit,
                identifier: &$crate::Identifier,
                time: $crate::TimeSource,
            ) -> Result<$crate::Verdict, $crate::StoreError> {
                super::redis_control::peek(self, limit, identifier, time).await
            }

            async fn reset(
                &self,
                limit: &$crate::Limit,
                identifier: &$crate::Identifier,
            ) -> Result<bool, $crate::StoreError> {
                super::redis_control::reset(self, limit, identifier).await
            }
        }
    };
}
pub(super) use redis_control;

pub(super) async fn assign(
    store: &(impl RedisCalls + ?Sized),
    limit: &Limit,
    identifier: &Identifier,
    assignment: Option<&Assignment>,
    until_ms: Option<u64>,
) -> Result<(), StoreError> {
    let key = control_key(store.namespace(), &limit.name, identifier);
    change_assignments(store, assign_command(key, assignment, until_ms, None)).await
}

pub(super) async fn clear_assignment(
    store: &(impl RedisCalls + ?Sized),
    limit: &Limit,
    identifier: &Identifier,
    kind: AssignmentKind,
) -> Result<(), StoreError> {
    let key = control_key(store.namespace(), &limit.name, identifier);
    change_assignments(store, assign_command(key, None, None, Some(kind))).await
}

pub(super) async fn assignments(
    store: &(impl RedisCalls + ?Sized),
    limit: &Limit,
    identifier: &Identifier,
) -> Result<Vec<(Assignment, Option<u64>)>, StoreError> {
    let key = control_key(store.namespace(), &limit.name, identifier);
    let reply = store.plain(&["GET".to_string(), key.clone()]).await?;
    read_assignments(reply, &key)
}

pub(super) async fn list_add(
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

pub(super) async fn list_remove(
    store: &(impl RedisCalls + ?Sized),
    list: &str,
    entry: &ListEntry,
) -> Result<bool, StoreError> {
    let call = control::list_remove(store.namespace(), list, entry);
    control::read_removed(&store.script(&call).await?)
}

pub(super) async fn list_entries(
    store: &(impl RedisCalls + ?Sized),
    list: &str,
    now_ms: u64,
) -> Result<Vec<(String, Option<u64>)>, StoreError> {
    let call = control::list_entries(store.namespace(), list, now_ms)?;
    control::read_entries(&store.script(&call).await?)
}

pub(super) async fn peek(
    store: &(impl RedisCalls + ?Sized),
    limit: &Limit,
    identifier: &Identifier,
    time: TimeSource,
) -> Result<Verdict, StoreError> {
    let call = control::peek(store.namespace(), limit, identifier, time)?;
    control::read_peek(&store.script(&call).await?)
}

pub(super) async fn reset(
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
