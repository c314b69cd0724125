//! State in Durable Objects (`store = "durable-object"`): the Worker's zero-setup store
//! (docs/design.md §4, "Durable Objects").
//!
//! - [`wire`]: the calls and answers between the Worker, its objects and the admin route.

pub mod wire;
