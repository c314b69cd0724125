//! # edgelimit-sim
//!
//! Replays traffic traces through edgelimit's own algorithm steps — the code that runs in the
//! Worker — and reports what each policy admits, how far it strays from an exact sliding window,
//! and the bursts a fixed window lets through at its boundaries.
//!
//! # Layout
//!
//! - [`readers`]: Apache/nginx, HAProxy, Cloudflare Logpush and CSV/NDJSON parsers, and the
//!   streaming [`readers::TraceReader`] (gzip, bad-line accounting, reorder buffer).
//! - [`input`]: opening files, standard input and the bundled trace; gzip by magic bytes.
//! - [`event`]: the event type and the client interner (names → dense ids).
//! - [`generate`]: seeded synthetic traces (Poisson, bursty, heavy-tailed, boundary attack).
//! - [`replay`]: the replay engine, the exact ground truth and every metric.
//! - [`report`]: the terminal table, JSON and the self-contained HTML/SVG report.
//! - [`run`]: one replay end to end (read, replay, chart data); [`store`]: `--store`.
//! - [`edge`]: `--config`: a deployed Worker configuration replayed through the Worker's own
//!   code, with per-rule and per-limit reports, what-if and outages.
//! - [`bundled`]: the real trace compiled into the binary and its default policies.
//! - [`mod@bench`]: parse and replay throughput, peak memory.
//! - [`cli`]: the command line (the `sim` binary only parses arguments and calls it).

// Denied, not forbidden: the one exception is a cache prefetch hint (`edge::prefetch`).
#![deny(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]

pub mod bench;
pub mod bundled;
pub mod cli;
pub mod edge;
pub mod error;
pub mod event;
pub mod generate;
pub mod input;
pub mod readers;
pub mod replay;
pub mod report;
pub mod run;
pub mod store;

pub use error::SimError;
pub use event::{Event, Interner};
