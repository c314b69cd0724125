//! The command line, as clap parses it: the engine's control grammar, which `sim --overrides`
//! reads too. Nothing here is validated beyond its shape: [`crate::command::plan`] turns it
//! into a checked [`crate::command::Planned`] operation first.

pub use edgelimit_engine::command::grammar::*;
