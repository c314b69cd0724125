//! The Cloudflare Worker: a deployable edge rate limiter built on `edgelimit`.
//!
//! Per request: match the configured rules ([`rules`]), take each limit's identifier from the
//! request ([`identify`]), decide every limit in one `/pipeline` round trip to Redis over the
//! Upstash REST protocol, then forward to the origin with `RateLimit` headers or answer 429 with
//! a problem body ([`plan`]). Configuration is the `EDGELIMIT_CONFIG` var, validated once per
//! isolate ([`config`]). See docs/design.md §4.
//!
//! # Layout
//!
//! - [`identify`]: what a request offers ([`RequestView`]) and where identifiers come from.
//! - [`rules`]: rules, the limits they apply, and matching by host, method and path.
//! - [`config`]: `EDGELIMIT_CONFIG` parsed and validated into rules, every error naming its field.
//! - [`lists`]: deny and allow lists at the edge: static entries, the request's probe, the
//!   isolate's cache of dynamic denials (pure).
//! - [`plan`]: request → checks → status, headers, problem body, log line (pure).
//! - `edge` (wasm32 only): the fetch handler — the runtime glue and nothing else.
//!
//! Everything but the glue is plain Rust, tested natively and under wasm32, and shared with the
//! simulator, which replays configurations through it.

#![warn(missing_docs, rust_2018_idioms)]

pub mod config;
#[cfg(not(target_arch = "wasm32"))]
pub mod config_file;
pub mod identify;
pub mod lists;
pub mod plan;
pub mod rules;

#[cfg(target_arch = "wasm32")]
mod edge;

pub use config::{Config, ConfigError, CONFIG_VAR};
pub use identify::{IdentifierSource, OwnedRequest, RequestView};
pub use lists::{Denial, DenyCache, ProbeSource, StaticList, Via};
pub use plan::{Absent, Action, Binding, Outcome, Plan, Ruling, Settlement};
pub use rules::{CostSource, Missing, Rule, RuleLimit, Settle};
