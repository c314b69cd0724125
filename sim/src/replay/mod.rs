//! Replay: events through every policy's own library step, beside the exact ground truth.
//!
//! The memory replay keeps each policy's states in a vector indexed by dense client id and calls
//! `edgelimit::algorithm::*::step` directly — the code `MemoryStore` and the Worker run, minus
//! the map lookup. A store-backed replay (`--store`) sends the same checks to a real store on a
//! virtual clock and counts any decision that differs from the steps.

mod boundary;
mod engine;
mod lane;
mod metrics;
pub mod reference;
mod window;

pub use boundary::{boundary_series, BoundarySeries, Point};
pub use engine::Replay;
pub use lane::Lane;
pub use metrics::{ClientError, ErrorBucket, PerClient, PolicyResult, WorstWindow};
pub use window::Trailing;
