//! The exact limits both replays hold their decisions against, and how far a replay strays from
//! them: a policy's exact sliding-log reference ([`mod@reference`]), the exact in-flight count of a
//! concurrency limit (`inflight`, which also replays the limit's own leases for `--policy`), and
//! disagreements as a share of requests.

pub(crate) mod inflight;
pub mod reference;
mod share;

pub(crate) use share::pct;
