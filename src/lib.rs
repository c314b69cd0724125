//! # edgelimit
//!
//! Exact rate limiting for the edge. Five algorithms — fixed window, sliding window log, sliding
//! window counter, token bucket and GCRA — written once as pure steps, run in a Cloudflare
//! Worker (wasm32) against Redis over the Upstash REST protocol, in native services over RESP,
//! and in the `sim` simulator, which replays real traffic through this very code.
//!
//! ```
//! use edgelimit::{Check, Limit, MemoryStore, Policy, TimeSource};
//!
//! let store = MemoryStore::new();
//! let per_ip = Limit::new("per-ip", "gcra 10/1s burst 20".parse::<Policy>().unwrap());
//! let verdicts = store.direct().check(&[Check::single(&per_ip, "203.0.113.7", 1)], 1_700_000_000_000);
//! assert!(verdicts[0].allowed);
//! assert_eq!(verdicts[0].decisions[0].remaining, 19);
//! ```
//!
//! # Layout
//!
//! - [`policy`]: `Policy` (algorithm, limit, window, burst) and its `"gcra 10/1s burst 20"` specs.
//! - [`decision`]: `Decision`, everything a caller and the HTTP layer need.
//! - [`algorithm`]: one module per algorithm — pure `step`s, no clock, no I/O, integer ms; each
//!   documents its exact semantics, guarantee and worst case.
//! - [`store`]: the `Store` trait, `MemoryStore`, `RespStore` (native), the all-or-nothing rule,
//!   Redis key encoding.
//! - [`script`]: the Redis twin — one Lua script per algorithm and the multi-limit script, with
//!   the transport-neutral plan/reply contract every Redis store shares.
//! - [`limiter`]: `Limiter`: denial cache, failure modes, counters, over any store.
//! - [`metrics`]: per-limit decision counters and a store-latency histogram, as Prometheus text.
//! - [`http`]: decisions → `RateLimit-Policy`/`RateLimit`/`X-RateLimit-*`/`Retry-After` headers
//!   and RFC 9457 problem bodies.
//! - [`clock`]: the only place a wall clock is read.
//! - [`global`]: global limits across regions — static shares, the home's pool, leases.
//! - [`control`]: live control — per-identifier tiers and overrides, deny and allow lists.
//! - [`net`]: client addresses — the client behind trusted proxies, IPv6 grouped by prefix.
//! - [`redact`]: secrets out of text (URL user-info, tokens, passwords), for every log line,
//!   error message and report the hosts and tools write.
//!
//! One rule carries the design: **state carries its own timestamps; TTLs only collect garbage.**

#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]

// The README's examples compile (and the complete ones run) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub mod algorithm;
pub mod clock;
pub mod control;
pub mod decision;
pub mod global;
pub mod http;
pub mod limiter;
pub mod metrics;
pub mod net;
pub mod policy;
pub mod redact;
pub mod script;
pub mod store;

pub use clock::{Clock, ManualClock, Stopwatch, SystemClock};
pub use control::{Assignment, Tiers};
pub use decision::{Decision, Reason, RETRY_NEVER};
pub use limiter::{Checked, Limiter, TimeMode};
pub use net::{AddressGrouping, ClientAddress, IpPrefix, ProxyHeader, TrustedProxies};
pub use policy::{Algorithm, Policy, PolicyError};
#[cfg(all(feature = "resp", not(target_arch = "wasm32")))]
pub use store::RespStore;
#[cfg(feature = "rest")]
pub use store::RestStore;
pub use store::{
    Check, CheckItem, Coalescing, Control, FailMode, FailureClass, Identifier, Limit, MemoryStore,
    Reservation, Store, StoreError, TimeSource, Verdict,
};
