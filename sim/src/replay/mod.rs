//! Replay: events through every policy's own library step, beside the exact ground truth.
//!
//! The memory replay keeps every policy's state in client-major vectors indexed by dense client
//! id and steps them with the library's per-algorithm steps — the code `State::apply`,
//! `MemoryStore` and the Worker run, minus the map lookup. A
//! store-backed replay (`--store`) sends the same checks to a real store on a virtual clock and
//! counts any decision that differs from the steps. Concurrency policies replay apart
//! (`inflight`): their leases are released when requests land, by their durations.

mod boundary;
mod clients;
pub(crate) mod due;
mod engine;
pub(crate) mod inflight;
mod layout;
mod metrics;
pub mod reference;
mod ring;
mod states;

pub use boundary::{boundary_series, BoundarySeries, Point};
pub use engine::Replay;
pub(crate) use metrics::pct;
pub use metrics::{
    ClientError, ErrorBucket, InFlightResult, PeakInFlight, PerClient, PolicyResult, WorstWindow,
};
