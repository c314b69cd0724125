//! Where limiter state lives: the [`Store`] trait and its implementations.

mod batch;
mod check;
mod coalescing;
mod error;
mod expiring_map;
mod expiry_index;
pub mod key;
mod key_hasher;
mod memory;
mod remembered;
mod reservation;
#[cfg(not(target_arch = "wasm32"))]
mod resp;
mod rest;
mod sharded;
mod state_key;
mod traits;

pub use batch::{decide, decide_into, Outcomes};
pub use check::{Check, CheckItem, FailMode, Identifier, Limit, TimeSource, Verdict};
pub use coalescing::{Coalescing, DEFAULT_MAX_BATCH};
pub use error::StoreError;
pub use expiring_map::ExpiringMap;
pub use key::DEFAULT_NAMESPACE;
pub(crate) use key_hasher::KeyHasher;
pub use memory::{MemoryStore, DEFAULT_CAPACITY, GC_GRACE_MS};
pub use reservation::{Reservation, Reserved};
#[cfg(not(target_arch = "wasm32"))]
pub use resp::RespStore;
pub use rest::{
    decode_pipeline, eval_pipeline_body, evalsha_pipeline_body, RestStore, REST_TOKEN_VAR,
    REST_URL_VAR,
};
pub use sharded::{rendezvous_score, Shard, ShardedStore};
pub use traits::{MaybeSendSync, Store};
