//! `sim suggest`: for each algorithm and window, the least limit (and burst, for the buckets)
//! under which at most a share of clients — or of requests — would ever have been denied, found
//! exactly and verified by replaying it and the policy one step smaller; beside it, per window,
//! the distribution of clients' peak rates and the suggestion as configuration to paste.
//!
//! - `traffic`: the requests held in trace order and by client.
//! - `search`: the exact search (per-client thresholds, bisection) and the curve.
//! - `target`: `--spare` and `--by`.
//! - `verify`: the suggestion and one less, replayed.
//! - `parallel`: clients spread over threads, results in client order.
//! - `peaks`: clients' peak rates per window, their percentiles.
//! - `paste`: the suggestions as shadow rules to paste, and the command replaying them.
//! - [`run_suggest`]: one run end to end; [`SuggestReport`] rendered by [`table`], [`html`] and
//!   as JSON.

pub mod html;
mod parallel;
pub mod paste;
pub mod peaks;
pub mod report;
pub mod run;
pub mod search;
pub mod table;
pub mod target;
pub mod traffic;
pub mod verify;

pub use peaks::{PeakCount, PeakRates};
pub use report::{SuggestReport, Suggestion};
pub use run::{run_suggest, SuggestOptions, DEFAULT_WINDOWS_MS};
pub use target::{By, Share};
