//! Seeded synthetic traces: Poisson, bursty on/off, heavy-tailed clients, the boundary attack.

mod kinds;
mod rng;

pub use kinds::{write_csv, CsvStream, Generator, Kind};
pub use rng::Rng;
