//! What the engine's integration tests share: the servers they read requests through.

pub mod nginx;
