//! The Cloudflare Worker: a deployable edge rate limiter built on `edgelimit`, and its request
//! path as a pure, store-generic pipeline ([`Edge`]) that the simulator drives too.
//!
//! Per request: match the configured rules, take each limit's identifier from the request,
//! decide every limit in one round trip to the store, then forward to the origin with
//! `RateLimit` headers or answer 429 with a problem body; after the response, settle what it
//! reserved. Configuration is the `EDGELIMIT_CONFIG` var, validated once per isolate. See
//! docs/design.md §4.
//!
//! # Layout
//!
//! - [`pipeline`]: the request path, written once — [`Edge::handle`] and what it answers.
//! - [`config`]: `EDGELIMIT_CONFIG` parsed and validated into rules, every error naming its field;
//!   [`config_file`] (native): the same from a `wrangler.toml`, for the native tools.
//! - [`rules`]: rules, the limits they apply, and matching by host, method and path.
//! - [`global_config`]: regions and the home of global limits.
//! - [`identify`]: what a request offers ([`RequestView`]) and where identifiers come from.
//! - [`lists`]: deny and allow lists at the edge: static entries, the request's probe, the
//!   isolate's memory of dynamic denials.
//! - [`plan`]: request → checks ([`Plan`]).
//! - [`ruling`]: verdicts → the answer ([`Outcome`]) → header fields and problem body.
//! - [`settlement`]: what a request settles once its response is known.
//! - [`durable`]: state in Durable Objects — the wire to them, the object, the store over them.
//! - [`admin_route`]: live control through the Worker (`admin_path`), for any store.
//! - [`log_line`]: the decision log line, written by the Worker and read by `sim`.
//! - `edge` (wasm32 only): the fetch handler — converts the JS request and response, does the
//!   I/O, and calls the pipeline.
//!
//! Everything but the glue is plain Rust, tested natively and under wasm32.

#![warn(missing_docs, rust_2018_idioms)]

pub mod admin_route;
pub mod config;
#[cfg(not(target_arch = "wasm32"))]
pub mod config_file;
pub mod durable;
pub mod global_config;
pub mod identify;
pub mod lists;
pub mod log_line;
pub mod pipeline;
pub mod plan;
pub mod rules;
pub mod ruling;
pub mod settlement;

#[cfg(target_arch = "wasm32")]
mod edge;

pub use config::{Config, ConfigError, CustomSource, CONFIG_VAR};
pub use identify::{IdentifierSource, OwnedRequest, RequestView};
pub use lists::{Denial, DenyCache, ProbeSource, StaticList, Via};
pub use log_line::{LimitLine, LogLine};
pub use pipeline::{AnalyticsPoint, Edge, Handled, Settled};
pub use plan::{Absent, Decided, Incoming, Plan};
pub use rules::{CostSource, Missing, Rule, RuleLimit, Scope, Settle};
pub use ruling::{Action, Binding, Outcome, Response};
pub use settlement::Settlement;
