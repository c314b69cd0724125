//! An axum service whose `/api/` is limited per API key (`x-api-key`, hashed) and per client
//! address, both in one store call, all or nothing: in this process's memory, or on Redis so
//! that every instance started with the same `--redis-url` shares one quota.
//!
//! With `EDGELIMIT_METRICS_TOKEN` set (at least 32 bytes, `openssl rand -hex 32`), `/metrics`
//! shows the layer's counters to `Authorization: Bearer <token>`.
//!
//! ```sh
//! cargo run -p edgelimit-tower --example axum -- --listen 127.0.0.1:3000 [--redis-url redis://127.0.0.1:6379/]
//! curl -i -H 'x-api-key: k1' http://127.0.0.1:3000/api/hello
//! ```

use std::error::Error;
use std::net::SocketAddr;

use axum::routing::get;
use axum::Router;
use edgelimit::redact::redact;
use edgelimit::{MemoryStore, Store};
use edgelimit_tower::{
    redis_store, Builder, Config, ConfigBuilder, LimitBuilder, RateLimitLayer, RuleBuilder,
};

const USAGE: &str = "usage: axum --listen ADDR [--redis-url URL]";

/// The command line.
struct Args {
    listen: SocketAddr,
    redis_url: Option<String>,
}

impl Args {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut listen = None;
        let mut redis_url = None;
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or(format!("{arg} needs a value\n{USAGE}"));
            match arg.as_str() {
                "--listen" => {
                    let text = value()?;
                    listen =
                        Some(text.parse().map_err(|e| {
                            format!("--listen `{text}`: {e} (e.g. 127.0.0.1:3000)")
                        })?);
                }
                "--redis-url" => redis_url = Some(value()?),
                other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
            }
        }
        Ok(Args {
            listen: listen.ok_or(format!("--listen is required\n{USAGE}"))?,
            redis_url,
        })
    }
}

/// The metrics page's token, from the environment: the page is served only with one.
const METRICS_TOKEN_VAR: &str = "EDGELIMIT_METRICS_TOKEN";

/// Five requests a second per key (bursts of ten), and 100 a minute per client address;
/// `/metrics` when `metrics`.
fn config(metrics: bool) -> Result<Config, edgelimit_tower::ConfigError> {
    let builder = if metrics {
        ConfigBuilder::new().metrics_path("/metrics")
    } else {
        ConfigBuilder::new()
    };
    builder
        .rule(
            RuleBuilder::new("api")
                .path_prefix("/api/")
                .limit(
                    LimitBuilder::new("per-key", "gcra 5/1s burst 10")
                        .identifier("api-key:header:x-api-key")
                        .missing("deny"),
                )
                .limit(LimitBuilder::new("per-ip", "sliding-counter 100/1m")),
        )
        .build()
}

/// Serves the routes behind `layer` on `listen` (the layer answers `/metrics` itself).
async fn serve<S: Store + 'static>(
    layer: RateLimitLayer<S>,
    listen: SocketAddr,
    store: &str,
) -> Result<(), Box<dyn Error>> {
    let app = Router::new()
        .route("/api/hello", get(|| async { "hello\n" }))
        .layer(layer);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    // The store's URL may carry its password.
    println!(
        "listening on http://{} ({})",
        listener.local_addr()?,
        redact(store)
    );
    // The peer address is what the `ip` identifier is resolved from.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let metrics_token = std::env::var(METRICS_TOKEN_VAR).ok();
    let config = config(metrics_token.is_some())?;
    let builder = match &metrics_token {
        Some(token) => Builder::new(config.clone()).metrics_token(token),
        None => Builder::new(config.clone()),
    };
    match args.redis_url {
        Some(url) => {
            let store = redis_store(&url, &config).await?;
            serve(builder.build(store)?, args.listen, &url).await
        }
        None => {
            let layer = builder.build(MemoryStore::new())?;
            serve(layer, args.listen, "in memory").await
        }
    }
}
