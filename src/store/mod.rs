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
#[cfg(any(feature = "rest", all(feature = "resp", not(target_arch = "wasm32"))))]
mod redis_control;
mod remembered;
mod reservation;
#[cfg(all(feature = "resp", not(target_arch = "wasm32")))]
mod resp;
#[cfg(feature = "rest")]
mod rest;
mod saved;
mod sharded;
mod spec;
mod state_key;
mod state_map;
mod traits;
pub mod upstash;

pub use batch::{decide, decide_into, StepOutcomes};
pub use check::{Check, CheckItem, FailMode, Identifier, Limit, TimeSource, Verdict};
pub use coalescing::{Coalescing, DEFAULT_MAX_BATCH};
pub use error::{FailureClass, StoreError};
pub(crate) use expiring_map::ExpiringMap;
pub use key::DEFAULT_NAMESPACE;
pub(crate) use key_hasher::KeyHasher;
pub use memory::{Direct, MemoryStore, DEFAULT_CAPACITY, GC_GRACE_MS};
pub use reservation::{Reservation, Reserved};
#[cfg(all(feature = "resp", not(target_arch = "wasm32")))]
pub use resp::RespStore;
#[cfg(feature = "rest")]
pub use rest::RestStore;
pub use saved::{Saved, UnreadableEntry, STORED_VERSION};
pub use sharded::{rendezvous_score, PlacementKey, Shard, ShardedStore};
pub use spec::{RestEndpoint, StoreSpec, StoreSpecError};
pub use traits::{Control, MaybeSendSync, Store};
pub use upstash::{REST_TOKEN_VAR, REST_URL_VAR};
