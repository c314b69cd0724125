//! `sim`: parses arguments and hands them to the library (`edgelimit_sim::cli`).

use clap::Parser;

fn main() -> anyhow::Result<()> {
    edgelimit_sim::cli::main(edgelimit_sim::cli::Cli::parse())
}
