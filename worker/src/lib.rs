//! The Cloudflare Worker: a deployable edge rate limiter. Everything it decides is decided by
//! `edgelimit-engine` (the configuration, the request path [`edgelimit_engine::Edge`]); this
//! crate holds only what needs Cloudflare's runtime (docs/design.md §4):
//!
//! - `edge` (wasm32 only): the fetch handler — converts the JS request and response, does the
//!   I/O (the store, the origin, the console, Analytics Engine, `waitUntil`) around the engine,
//!   and serves the admin route.
//! - [`durable`]: state in Durable Objects — the object class and the Worker's client of it.

#![warn(missing_docs, rust_2018_idioms)]

pub mod durable;

#[cfg(target_arch = "wasm32")]
mod edge;
