//! The control command line (feature `cli`): `edgelimit-admin`'s grammar and its checks against
//! the configuration, shared with `sim --overrides`, whose lines are the same commands. A
//! command becomes a [`Planned`] [`edgelimit::control::ControlOp`], carried out on any
//! `Control` store.
//!
//! - [`grammar`]: the command line, as clap parses it ([`Cli`]).
//! - [`checked`]: a command checked against the configuration ([`plan`] → [`Planned`]), and
//!   identifiers keyed as the Worker keys them ([`keyed`]).
//! - [`argument`]: what is wrong with an argument ([`ArgumentError`]); durations.

pub mod argument;
pub mod checked;
pub mod grammar;

pub use argument::{duration_ms, ttl_ms, ArgumentError};
pub use checked::{keyed, plan, ListKind, Planned, Subject};
pub use grammar::{Cli, Command, ListCommand, OverrideCommand, Target, TierCommand, Token};
