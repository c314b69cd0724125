//! Replay: events through every policy's own library step, beside the exact ground truth.
//!
//! The memory replay keeps every policy's state in client-major vectors indexed by dense client
//! id and steps them with the library's per-algorithm steps — the code `State::apply`,
//! `MemoryStore` and the Worker run, minus the map lookup (see `engine` for the layout). A
//! store-backed replay (`--store`) sends the same checks to a real store on a virtual clock and
//! counts any decision that differs from the steps.

mod boundary;
mod engine;
mod metrics;
pub mod reference;

pub use boundary::{boundary_series, BoundarySeries, Point};
pub use engine::Replay;
pub use metrics::{ClientError, ErrorBucket, PerClient, PolicyResult, WorstWindow};
