//! Regions of a configuration with global limits (docs/design.md §9): which region decides each
//! request of a trace, and how far each region is from the home.
//!
//! - [`place`]: a request's region by what its line says — a region named outright, else its
//!   colo, else its continent (given, or its country's) as the Worker maps them, else
//!   `--assign-regions`, else the first region — resolved once per configuration, counted.
//! - [`continents`]: ISO 3166-1 countries to the continent codes of `request.cf.continent`.
//! - [`assign`]: `--assign-regions`, a region per client by a stable hash.
//! - [`rtt`]: `--rtt`, the one-way latencies from each region to the home.

pub mod assign;
pub mod continents;
pub mod place;
pub mod rtt;
#[cfg(test)]
pub(crate) mod testing;

pub use assign::{AssignSpec, Assignment};
pub use continents::Continents;
pub use place::{Attribution, Place, PlaceCounts, Regions};
pub use rtt::{Rtt, RttSpec};

use edgelimit_engine::config::global::Global;

/// `global`'s region names, comma-separated, for messages.
fn known_regions(global: &Global) -> String {
    global
        .regions
        .iter()
        .map(|r| r.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
