//! Every command checked against the configuration before the store is contacted, by the
//! engine's own checks (shared with `sim --overrides`): what comes out, a [`Planned`] control
//! operation, can only be well formed; an error names the argument and what is wrong with it,
//! and nothing is written.

pub use edgelimit_engine::command::{
    duration_ms, keyed, plan, ttl_ms, ArgumentError, ListKind, Planned, Subject,
};
