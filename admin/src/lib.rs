//! # edgelimit-admin
//!
//! Live control of an edgelimit deployment without a redeploy: an identifier's standing
//! (`peek`), forgetting it (`reset`), tiers and overrides, deny and allow lists — written
//! straight to the deployment's Redis (`redis://`, a Redis Cluster, or Upstash REST), or, when
//! the Worker keeps its state in Durable Objects, sent to the Worker's admin route (`--worker`),
//! under the namespace and with the limits of the very configuration file the Worker runs on.
//!
//! Every command is validated against that configuration before the store is contacted, so a
//! mistake writes nothing; bad input exits 2 naming the argument, a store failure exits 1.
//!
//! # Layout
//!
//! - [`cli`]: the command line (clap).
//! - [`command`]: the command checked against the configuration: a [`Planned`] control
//!   operation.
//! - [`store`]: `--store` (or `--worker`) parsed and connected.
//! - [`worker`]: a Worker's admin route as a store.
//! - [`run`](mod@run): an operation carried out on a store, at a given time.
//! - [`report`]: the answers, as JSON (stable field names) and as tables.
//! - [`time`]: instants and durations for people.

#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]

pub mod cli;
pub mod command;
pub mod error;
pub mod report;
pub mod run;
pub mod store;
pub mod time;
pub mod worker;

use std::time::Duration;

use edgelimit::{Clock, SystemClock, TimeMode, TimeSource};

pub use cli::Cli;
pub use command::Planned;
pub use error::AdminError;
pub use report::Report;
pub use store::StoreUrl;

/// Runs a parsed command line: reads the configuration, validates the command, and only then
/// connects and carries it out. `env` reads environment variables (the process's in the binary).
pub fn main(cli: &Cli, env: impl Fn(&str) -> Option<String>) -> Result<Report, AdminError> {
    let file = cli.config.display().to_string();
    let config = edgelimit_engine::config::file::load(&cli.config)
        .map_err(|e| AdminError::input("--config", e.to_string()))?;
    let operation = command::plan(&cli.command, &config, &file, cli.raw_identifier)?;
    let store =
        match &cli.worker {
            Some(worker) => StoreUrl::for_worker(worker, cli.token.as_ref(), &config, &file, env)?,
            None if cli.token.is_some() => return Err(AdminError::input(
                "--token",
                "is the admin route's: it goes with --worker (a Redis store's token comes from \
                 UPSTASH_REDIS_REST_TOKEN)",
            )),
            None => StoreUrl::for_config(cli.store.as_deref(), cli.cluster, &config, env)?,
        };
    let timeout = Duration::from_millis(command::duration_ms("--timeout", &cli.timeout)?);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| AdminError::Store(format!("cannot start a runtime: {e}")))?;
    runtime.block_on(async {
        let store = store.connect(&config.namespace, timeout).await?;
        // Looks are decided on the clock the Worker decides on.
        let time = match config.time {
            TimeMode::Server => TimeSource::Server,
            TimeMode::Local => TimeSource::At(SystemClock.now_ms()),
        };
        run::execute(&operation, &*store, time, SystemClock.now_ms()).await
    })
}
