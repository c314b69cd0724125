//! `edgelimit-admin`: parses arguments and hands them to the library (`edgelimit_admin::main`).

use std::process::ExitCode;

use clap::Parser;
use edgelimit_admin::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
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
            if cli.json {
                eprintln!("{}", e.to_json());
            } else {
                eprintln!("edgelimit-admin: {e}");
            }
            ExitCode::from(e.exit_code())
        }
    }
}
