//! What the Redis benches share, one copy each (`control`, `lists`, `idempotency`, `resp`,
//! `sharded`, `rest`; `memstore` takes its median from here too): the load loop (N clients × M
//! checks, timed), Redis's own readings of a run (`INFO commandstats`, `used_memory`, `MEMORY
//! USAGE`), the interleaved "median of R rounds" comparison, and the process-CPU and percentile
//! arithmetic.
//!
//! Why a module of the benches (`mod support;` in each; Cargo builds `benches/support/` as no
//! target of its own) rather than functions in `edgelimit-testkit`: the testkit holds what tests
//! share (servers, the RESP client, `INFO` fields), and what is here is bench quantities built on
//! it: no test drives a timed load or asserts on script time or memory, so splitting them off into
//! the testkit would only make two places to look. Should a test need one, it moves down to the
//! testkit then.
//!
//! Each bench uses some of this, not all, so the parts (and re-exports) a bench leaves unused are
//! no warning there.

#![allow(dead_code, unused_imports)]

mod info;
mod load;
mod stats;

pub use info::{
    interleaved, memory_usage, redis_pid, reset_stats, script_usec_per_call, used_memory, Cost,
};
pub use load::{check_at, listing, measured, on_redis, rate, runtime, Run};
pub use stats::{median, percentile_us};
