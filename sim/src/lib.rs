//! # edgelimit-sim
//!
//! Replays traffic traces through edgelimit's own algorithm steps — the code that runs in the
//! Worker — and reports what each policy admits, how far it strays from an exact sliding window,
//! and the bursts a fixed window lets through at its boundaries; or, given a Worker
//! configuration, what the deployment would have answered, through the Worker's own request path.
//!
//! # Layout
//!
//! Reading a trace:
//! - [`readers`]: Apache/nginx, HAProxy, Cloudflare Logpush and CSV/NDJSON parsers, and the
//!   streaming [`readers::TraceReader`] (gzip, bad-line accounting, reorder buffer).
//! - [`input`]: opening files, standard input and the bundled trace; gzip by magic bytes.
//! - [`event`]: the event type and the client interner (names → dense ids).
//! - [`generate`]: seeded synthetic traces (Poisson, bursty, heavy-tailed, boundary attack).
//! - [`bundled`]: the real trace compiled into the binary and its default policies.
//!
//! The two replays, each with its engine, its run end to end and its report:
//! - [`policy`]: `--policy`, bare policies per client beside their exact references, in memory or
//!   through a real store (`--store`).
//! - [`config`]: `--config`, a deployed Worker configuration replayed through the Worker's own
//!   request path, with per-rule and per-limit reports, what-if, overrides, outages, the
//!   comparison with the Worker's own log and the decisions as CSV (`--decisions`).
//! - [`regions`]: for a configuration with global limits, the region each request is decided
//!   in (`--assign-regions`) and each region's latency to the home (`--rtt`).
//!
//! What both share:
//! - [`exact`]: the exact limits decisions are held against (a policy's sliding-log reference, the
//!   exact in-flight count of a concurrency limit).
//! - `due`: requests landing after their durations, in time order.
//! - `progress`: the progress bar while a trace is read.
//! - [`report`]: the report kit both render through — terminal text, JSON, the self-contained
//!   HTML page and its SVG charts.
//!
//! And around them:
//! - [`suggest`]: `sim suggest`, the least limit per algorithm and window that spares a share of
//!   clients or requests, searched exactly and verified by replay.
//! - [`mod@bench`]: parse and replay throughput, peak memory.
//! - [`cli`]: the command line (the `sim` binary only parses arguments and calls it).
//! - [`error`]: [`SimError`], every way a replay fails.

// Denied, not forbidden: the one exception is a cache prefetch hint (`config::prefetch`).
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
pub mod config;
mod due;
pub mod error;
pub mod event;
pub mod exact;
pub mod generate;
pub mod input;
pub mod policy;
mod progress;
pub mod readers;
pub mod regions;
pub mod report;
pub mod suggest;

pub use error::SimError;
pub use event::{Event, Interner};
