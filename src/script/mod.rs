//! The Redis twin: one Lua script per algorithm, and the multi-limit script, with everything a
//! transport needs to run them — which script, its keys and arguments, and how to read the reply.
//!
//! This module is the contract shared by every Redis store, whatever carries the commands:
//! [`crate::store::RespStore`] (RESP, native) and the REST store (Upstash REST over HTTP, also on
//! wasm32). It does no I/O and depends on no Redis client:
//!
//! 1. [`CheckPlan::new`] turns a [`crate::Check`] into [`Invocation`]s (`EVALSHA sha numkeys
//!    keys… args…`): one script for the whole check when its keys may be touched together (always on
//!    one node; on a Cluster only when they share a slot), else one script per item — and then the
//!    verdict says `atomic: false`.
//! 2. The transport sends them (EVALSHA, and EVAL with [`Script::source`] when the reply says
//!    [`is_noscript`]), turning each reply into a transport-neutral [`Reply`].
//! 3. [`CheckPlan::verdict`] reads the replies back into a [`crate::Verdict`].
//!
//! The Lua files beside this one (`prelude.lua`, `capacity_lease.lua`, one per algorithm,
//! `single.lua`, `multi.lua`, `take.lua`) are concatenated at compile time; each algorithm file opens with
//! its `KEYS`/`ARGV` and the docs/design.md §2 rule it implements, and decides bit for bit as its
//! Rust step — `capacity_lease.lua` likewise for the capacity leases of §9
//! (`crate::algorithm::capacity_lease`).

mod call;
pub mod control;
mod invocation;
mod reply;
mod source;

pub use call::{Parts, PartsIter};
pub use invocation::{
    encode_cost, read_taken, take_invocation, CheckPlan, Invocation, Topology, MAX_SCRIPT_COST,
    MAX_SCRIPT_TIME_MS,
};
pub use reply::{is_noscript, Reply};
pub use source::Script;
