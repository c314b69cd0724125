//! `--policy`: bare policies replayed per client — one limit per distinct `--key` value — each
//! beside its exact reference, and the policy report.
//!
//! The memory replay keeps every policy's state in client-major vectors indexed by dense client
//! id and steps them with the library's per-algorithm steps — the code `State::apply`,
//! `MemoryStore` and the Worker run, minus the map lookup. A store-backed replay (`--store`)
//! sends the same checks to a real store on a virtual clock and counts any decision that differs
//! from the steps. Concurrency policies replay apart (`exact::inflight`): their leases are
//! released when requests land, by their durations.
//!
//! - [`Replay`] (`engine`): events through every policy's step and its exact reference, tallied;
//!   `layout`: where each policy's state, reference and trailing sum sit in a client's record;
//!   `clients`: those records and their read-ahead; `states`: stepping a state in its word form;
//!   `ring`: trailing windows; `metrics`: tallies into results; `boundary`: the chart data of a
//!   policy's worst window.
//! - [`ShardedReplay`] (`shards`): the memory replay over threads, split by client, merged into
//!   exactly what one thread reports.
//! - [`StoreChoice`] (`store`): `--store`, where decisions are made.
//! - [`run()`] (`run`): one replay end to end, read with progress, then the charts' second pass.
//! - [`Report`] (`report`), rendered as text by [`table`], as a page by [`html`] with its
//!   [`charts`], as JSON by [`Report::to_json`] — all through the report kit (`crate::report`).

mod boundary;
pub mod charts;
mod clients;
mod engine;
pub mod html;
mod layout;
mod metrics;
mod report;
mod ring;
mod run;
mod shards;
mod states;
mod store;
pub mod table;

pub use boundary::{boundary_series, BoundarySeries, Point};
pub use engine::Replay;
pub use metrics::{
    ClientError, ErrorBucket, InFlightResult, PeakInFlight, PerClient, PolicyResult, WorstWindow,
};
pub use report::Report;
pub use run::{run, RunOptions};
pub(crate) use shards::thread_cpu_seconds;
pub use shards::ShardedReplay;
pub use store::{ExternalStore, StoreChoice};
