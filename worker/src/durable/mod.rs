//! State in Durable Objects (`store = "durable-object"`): the Worker's zero-setup store
//! (docs/design.md §4, "Durable Objects"). The calls and answers between the Worker, its objects
//! and the admin route are the engine's [`edgelimit_engine::wire`].
//!
//! - [`object_state`]: what an object decides with, writes to its storage and collects from it,
//!   within its bound (pure).
//! - `object` (wasm32 only): the Durable Object class `EdgeLimitState` around it.
//! - `client` (wasm32 only): the objects as one store for the Worker.

#[cfg(target_arch = "wasm32")]
pub mod client;
#[cfg(target_arch = "wasm32")]
pub mod object;
pub mod object_state;
