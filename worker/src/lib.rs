//! The Cloudflare Worker: a deployable edge rate limiter built on `edgelimit`.
//!
//! Per request: match the configured rules ([`rules`]), take each limit's identifier from the
//! request ([`identify`]), decide every limit in one `/pipeline` round trip to Redis over the
//! Upstash REST protocol, then forward to the origin with `RateLimit` headers or answer 429 with
//! a problem body ([`plan`]). Configuration is the `EDGELIMIT_CONFIG` var, validated once per
//! isolate ([`config`]).
//!
//! Everything but the runtime glue is plain Rust, tested natively and under wasm32; the glue
//! (`edge`, reading the request, calling fetch) exists only on wasm32.

#![warn(missing_docs, rust_2018_idioms)]

pub mod config;
pub mod identify;
pub mod plan;
pub mod rules;

#[cfg(target_arch = "wasm32")]
mod edge;

pub use config::{Config, ConfigError, CONFIG_VAR};
pub use identify::{IdentifierSource, RequestView};
pub use plan::{Action, Outcome, Plan};
