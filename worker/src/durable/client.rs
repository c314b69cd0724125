//! The Worker's side of its Durable Objects (wasm32 only): [`ObjectStub`], how a [`WireCall`] reaches
//! one object and its [`WireAnswer`] comes back ([`ObjectShard`]: the object as a store), and
//! [`object_store`], the objects of the namespace as one store — identifiers spread over them by
//! rendezvous hashing keyed with the deployment's secret ([`placement_key`]), every limit of an
//! identifier in one object, a check split over objects decided all or nothing with compensating
//! refunds (`ShardedStore`).

use std::time::Duration;

use async_trait::async_trait;
use edgelimit::store::{PlacementKey, Shard, ShardedStore};
use edgelimit::StoreError;
use futures_util::future::{select, Either};
use worker::{console_log, Delay, Method, ObjectNamespace, Request, RequestInit};

use edgelimit_engine::wire::calls::{Calls, SendCall};
use edgelimit_engine::wire::{error_of, WireAnswer, WireCall};

/// The objects' names: `edgelimit-0` … `edgelimit-<n-1>`.
pub fn object_name(index: u32) -> String {
    format!("edgelimit-{index}")
}

/// The secret that keys which object an identifier lands on.
pub const SHARD_KEY_VAR: &str = "EDGELIMIT_SHARD_KEY";

/// The name of the object whose id keys the placement when [`SHARD_KEY_VAR`] is not set. It is
/// never created: only its id is derived.
const DERIVED_KEY_NAME: &str = "edgelimit-shard-key";

/// The deployment's placement key: `secret` (the [`SHARD_KEY_VAR`] secret) when set, else the
/// id of an object named [`DERIVED_KEY_NAME`] in `namespace`, which is the same for every
/// isolate of the deployment, differs between deployments (namespaces) and is never sent to a
/// client, but is no secret the operator chose (docs/design.md §4, "Placement").
pub fn placement_key(
    secret: Option<&str>,
    namespace: &ObjectNamespace,
) -> Result<PlacementKey, StoreError> {
    if let Some(secret) = secret {
        return Ok(PlacementKey::new(secret.as_bytes()));
    }
    let id = namespace
        .id_from_name(DERIVED_KEY_NAME)
        .map_err(|e| StoreError::Unreachable(format!("{DERIVED_KEY_NAME}: {e}")))?
        .to_string();
    console_log!(
        "edgelimit: {SHARD_KEY_VAR} is not set: identifiers are placed by a key derived from the \
         Durable Object namespace (`wrangler secret put {SHARD_KEY_VAR}` to choose it)"
    );
    Ok(PlacementKey::new(id.as_bytes()))
}

/// The `objects` objects of `namespace` as one store, identifiers placed by `key`, each call timed
/// out after `timeout`.
pub fn object_store(
    namespace: &ObjectNamespace,
    objects: u32,
    timeout: Duration,
    key: PlacementKey,
) -> Result<ShardedStore<ObjectShard>, StoreError> {
    let shards = (0..objects)
        .map(|i| {
            let name = object_name(i);
            Shard::new(
                name.clone(),
                Calls(ObjectStub {
                    namespace: namespace.clone(),
                    name,
                    timeout,
                }),
            )
        })
        .collect();
    Ok(ShardedStore::new(shards)?.by_identifier().keyed(key))
}

/// One Durable Object as a store.
pub type ObjectShard = Calls<ObjectStub>;

/// One Durable Object, reached through its stub.
#[derive(Debug)]
pub struct ObjectStub {
    namespace: ObjectNamespace,
    name: String,
    timeout: Duration,
}

#[async_trait(?Send)]
impl SendCall for ObjectStub {
    /// Sends `call` to the object and reads its answer, within the timeout.
    async fn call(&self, call: &WireCall) -> Result<WireAnswer, StoreError> {
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
        let answer: WireAnswer = serde_json::from_str(&text).map_err(|e| {
            StoreError::Protocol(format!("{} answered what is not an answer: {e}", self.name))
        })?;
        match answer {
            WireAnswer::Failed {
                message,
                invalid_input,
            } => Err(error_of(message, invalid_input)),
            answer => Ok(answer),
        }
    }
}
