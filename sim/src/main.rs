//! `sim`: parses arguments and hands them to the library (`edgelimit_sim::cli`).

use std::process::ExitCode;

use clap::Parser;

/// The replay's allocator: faster than the system's for the small, short-lived buffers a replay
/// makes on every request (sim/Cargo.toml says why; docs/decisions.md, "Crates", what it
/// measured).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    match edgelimit_sim::cli::main(edgelimit_sim::cli::Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The message and its causes, one line: bad input is a user's error, not a crash, so
            // no backtrace even when RUST_BACKTRACE is set.
            eprintln!("sim: {e:#}");
            ExitCode::FAILURE
        }
    }
}
