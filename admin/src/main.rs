//! `edgelimit-admin`: parses arguments and hands them to the library (`edgelimit_admin::main`).

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use edgelimit::redact::redact;
use edgelimit_admin::Cli;

fn main() -> ExitCode {
    // The grammar is the engine's: `--version` is this binary's.
    let mut matches = Cli::command()
        .version(env!("CARGO_PKG_VERSION"))
        .get_matches();
    let cli = Cli::from_arg_matches_mut(&mut matches).unwrap_or_else(|e| e.exit());
    match edgelimit_admin::main(&cli, |name| std::env::var(name).ok()) {
        Ok(report) => {
            if cli.json {
                println!(
                    "{}",
                    serde_json::to_string(&report).expect("reports are plain data")
                );
            } else {
                print!("{report}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            // A message may quote what it was given (a URL, a store's own error): whatever
            // secret it holds stays out of the terminal.
            if cli.json {
                eprintln!("{}", redact(&e.to_json()));
            } else {
                eprintln!("edgelimit-admin: {}", redact(&e.to_string()));
            }
            ExitCode::from(e.exit_code())
        }
    }
}
