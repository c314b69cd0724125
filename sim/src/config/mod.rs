//! `--config`: replaying a deployed Worker configuration. Every request of a trace goes through
//! the Worker's own request path — its rules, identifiers, plan and answers (`edgelimit-engine`,
//! shared as a dependency, never copied) and the library's `Limiter` with the Worker's time mode
//! and denial cache — and is tallied per rule and per limit (docs/design.md §4, §6).
//!
//! - The configuration file (`wrangler.toml` or the `EDGELIMIT_CONFIG` table alone) is read by
//!   `edgelimit_engine::config::file`, shared with `edgelimit-admin`, failing with the Worker's
//!   own messages.
//! - [`engine`]: one configuration replayed request by request; `extract`: each request's
//!   identifiers and rules, prepared ahead of its step; `tally`: what is counted per rule and
//!   limit; `ready`: the Worker's futures polled once (nothing waits).
//! - [`store`]: the states the replay decides against, on the trace's clocks, down during
//!   [`outage`]s; [`identifiers`]: the dense ids both the store and the truths find an
//!   identifier's states by ([`slots`]: their table; [`prefetch`]: fetching ahead into cache).
//! - [`overrides`]: `--overrides`, tiers, overrides and lists given as `edgelimit-admin`
//!   commands, applied to the replay's `MemoryStore` at the first request.
//! - [`truth`]: each limit's exact sliding log, for the boundary metrics.
//! - [`against`]: each request's replayed log line against the Worker's own (`--format
//!   edgelimit`).
//! - [`whatif`]: a candidate against a baseline configuration.
//! - [`decisions`]: `--decisions`, every limit's decision as a CSV row, written as it is
//!   tallied.
//! - `global`: a configuration with a `global` section decided in its regions (a `GlobalStore`
//!   per region over one home), compared with the exact reference (the replay itself).
//! - [`run`]: one replay end to end; [`parallel`]: over threads, the requests split into
//!   `groups` sharing no state (`denial_spans`: whether the denial cache could have joined
//!   them).
//! - [`report`]: what it measured, with [`series`] (the charts' data) and [`names`] (identifiers
//!   as shown), rendered as text by [`table`], as a page by [`html`], as JSON by
//!   [`ConfigReport::to_json`] — all through the report kit (`crate::report`).

pub mod against;
pub mod decisions;
mod denial_spans;
pub mod engine;
mod extract;
mod global;
pub mod groups;
pub mod html;
pub mod identifiers;
pub mod names;
pub mod outage;
pub mod overrides;
pub mod parallel;
pub mod prefetch;
mod ready;
pub mod report;
pub mod run;
pub mod series;
pub mod slots;
pub mod store;
pub mod table;
mod tally;
#[cfg(test)]
mod testing;
pub mod truth;
pub mod whatif;

pub use engine::{EdgeReplay, PREPARE_AHEAD};
pub use report::ConfigReport;
pub use run::{run_config, run_config_on, EdgeRunOptions, RegionOptions};
pub use tally::TotalsReport;
