//! State in Durable Objects (`store = "durable-object"`): the Worker's zero-setup store
//! (docs/design.md §4, "Durable Objects").
//!
//! - [`wire`]: the calls and answers between the Worker, its objects and the admin route.
//! - [`calls`]: any client of the objects (the Worker's, edgelimit-admin's) as a store.
//! - [`serve`]: the store's side of the wire — one call answered by any controlled store.
//! - [`object_state`]: what an object decides with and writes to its storage (pure).
//! - `object` (wasm32 only): the Durable Object class `EdgeLimitState` around it.
//! - `client` (wasm32 only): the objects as one store for the Worker.

pub mod calls;
#[cfg(target_arch = "wasm32")]
pub mod client;
#[cfg(target_arch = "wasm32")]
pub mod object;
pub mod object_state;
pub mod serve;
pub mod wire;
