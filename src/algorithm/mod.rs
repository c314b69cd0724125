//! The five rate algorithms and the concurrency limit as pure steps: no clock, no I/O, integer milliseconds,
//! and the capacity lease a global limit's item spends when its own step denies
//! ([`capacity_lease`], docs/design.md §9).
//!
//! Each module states its exact semantics (docs/design.md §2), its guarantee and its worst case, and
//! offers `step(policy, &mut state, now_ms, cost) -> StepOutcome`, which leaves the state untouched
//! unless the outcome says `changed` (denials and zero-cost peeks never change it). [`step`] is
//! the algorithm-independent functional form over [`State`]. Times past [`MAX_TIME_MS`] read as
//! [`MAX_TIME_MS`]. The fixed-size states also have a flat form as `u64` words ([`Words`]).

pub mod calendar;
pub mod capacity_lease;
pub mod concurrency;
pub mod fixed_window;
pub mod gcra;
mod outcome;
pub mod sliding_counter;
pub mod sliding_log;
mod state;
pub mod token_bucket;
mod words;

pub use crate::decision::Decision;
pub use capacity_lease::{CapacityLease, LeaseSpending};
pub use concurrency::ConcurrencyState;
pub use fixed_window::FixedWindowState;
pub use gcra::GcraState;
pub use outcome::{StepOutcome, MAX_TIME_MS};
pub use sliding_counter::SlidingCounterState;
pub use sliding_log::SlidingLogState;
pub use state::{step, Charge, State, Step};
pub use token_bucket::TokenBucketState;
pub use words::Words;
