//! # edgelimit-js
//!
//! edgelimit for JavaScript: the library compiled to wasm32 and exported through wasm-bindgen,
//! behind the `edgelimit` npm package (its TypeScript wrapper is `ts/`, its build
//! `scripts/build-js`). No algorithm is written in JavaScript: the policies, the multi-limit
//! script, the plans and the reply parsing, the denial cache, the fail modes, the headers and the
//! problem bodies are the library's, so a quota is shared — same keys, same scripts — by this
//! package, the Rust Worker and native services.
//!
//! # Layout
//!
//! - [`options`]: `new Ratelimit(options)` parsed and validated into a [`Setup`].
//! - [`request`]: one call's identifiers and options into the checks it decides.
//! - [`answer`]: the verdicts into what `limit()` resolves to (headers, problem body), and
//!   `json`, the JSON text it crosses as.
//! - [`settlement`]: what an admitted call took, as the ticket `settle` and `release` commit.
//! - [`error`]: the typed error every bad input throws.
//! - [`exchange`]: the store whose round trips the wrapper posts with `fetch`, and a call run
//!   one round trip at a time.
//! - `bindings` (wasm32): `Core`, what the wrapper calls.
//!
//! Everything but the two wasm32 modules is plain Rust, tested natively.

#![deny(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]

pub mod answer;
pub mod error;
pub mod exchange;
mod json;
pub mod options;
pub mod request;
pub mod settlement;

#[cfg(target_arch = "wasm32")]
mod bindings;

pub use answer::{DecisionOut, LimitResult, ProblemOut};
pub use error::{Error, ErrorCode};
pub use options::{ConfiguredLimit, Setup};
pub use request::LimitCall;
pub use settlement::Ticket;
