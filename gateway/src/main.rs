//! `gateway`: serve the Upstash REST protocol in front of a Redis. See `gateway --help`.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::builder::BoolishValueParser;
use clap::Parser;
use edgelimit_gateway::config::DEFAULT_COMMANDS;
use edgelimit_gateway::{Config, Gateway, MetricsPage};

/// Serves the Upstash REST protocol (single command, path form, /pipeline, /multi-exec, base64
/// results) in front of a real Redis, so the edgelimit Worker and the official Upstash clients
/// run against your own Redis. Every flag can also be set by the environment variable shown.
#[derive(Debug, Parser)]
#[command(name = "gateway", version)]
struct Args {
    /// Address to listen on. Loopback by default: exposing the gateway is a deliberate choice.
    #[arg(long, env = "GATEWAY_LISTEN", default_value = "127.0.0.1:8079")]
    listen: SocketAddr,

    /// The Redis to serve.
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379/")]
    redis_url: String,

    /// The bearer token clients must present (`Authorization: Bearer …` or `?_token=…`). Required.
    #[arg(long, env = "GATEWAY_TOKEN", hide_env_values = true)]
    token: String,

    /// A second token that may run read-only commands only.
    #[arg(long, env = "GATEWAY_READ_ONLY_TOKEN", hide_env_values = true)]
    read_only_token: Option<String>,

    /// Also allow these commands (comma-separated, e.g. `KEYS,FLUSHDB`, or `SCRIPT FLUSH`). The
    /// default list covers the limiter's scripts and the official clients' basic use.
    #[arg(long, env = "GATEWAY_ALLOW_COMMANDS", value_delimiter = ',')]
    allow_command: Vec<String>,

    /// Largest request body accepted, in bytes (larger: 413).
    #[arg(long, env = "GATEWAY_MAX_BODY_BYTES", default_value_t = 1 << 20)]
    max_body_bytes: usize,

    /// Most commands in one /pipeline or /multi-exec (more: 400).
    #[arg(long, env = "GATEWAY_MAX_PIPELINE", default_value_t = 1000)]
    max_pipeline: usize,

    /// Multiplexed Redis connections shared by requests (transactions get one more of their own).
    #[arg(long, env = "GATEWAY_CONNECTIONS", default_value_t = edgelimit_gateway::config::DEFAULT_CONNECTIONS)]
    connections: usize,

    /// Serve Prometheus metrics at GET /metrics, in the OpenMetrics text format: requests by
    /// route and status, commands by name, the Redis round-trip time, Redis failures (503s) and
    /// token failures (401s), all named `edgelimit_gateway_*`. The page asks for the token or the
    /// read-only token, like any request, unless --metrics-public. Off by default, and then
    /// /metrics is the path form of a command named `metrics`, refused as any unknown command.
    /// The variables of these two flags take 1/0, true/false, yes/no or on/off.
    #[arg(long, env = "GATEWAY_METRICS", value_parser = BoolishValueParser::new())]
    metrics: bool,

    /// Serve /metrics without a token, to anyone who can reach the gateway: only where the
    /// listen address is private. Needs --metrics.
    #[arg(long, env = "GATEWAY_METRICS_PUBLIC", value_parser = BoolishValueParser::new())]
    metrics_public: bool,

    /// Log filter (tracing's syntax), e.g. `info` or `edgelimit_gateway=debug`. Tokens are never
    /// logged.
    #[arg(long, env = "GATEWAY_LOG", default_value = "info")]
    log: String,

    /// Print the default command allow-list and exit.
    #[arg(long)]
    list_commands: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if args.list_commands {
        println!("{}", DEFAULT_COMMANDS.join("\n"));
        return ExitCode::SUCCESS;
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(&args.log))
        .with_writer(std::io::stderr)
        .init();
    if args.token.trim().is_empty() {
        eprintln!("gateway: --token (GATEWAY_TOKEN) must not be empty");
        return ExitCode::from(2);
    }
    if args.metrics_public && !args.metrics {
        eprintln!(
            "gateway: --metrics-public (GATEWAY_METRICS_PUBLIC) needs --metrics (GATEWAY_METRICS)"
        );
        return ExitCode::from(2);
    }
    let mut config = Config::new(args.listen, args.redis_url, args.token);
    config.read_only_token = args.read_only_token.filter(|t| !t.is_empty());
    config.max_body_bytes = args.max_body_bytes;
    config.max_pipeline = args.max_pipeline.max(1);
    config.connections = args.connections.max(1);
    config.metrics = match (args.metrics, args.metrics_public) {
        (false, _) => MetricsPage::Off,
        (true, false) => MetricsPage::Token,
        (true, true) => MetricsPage::Public,
    };
    for command in args.allow_command {
        let command = command.trim().to_ascii_uppercase();
        if !command.is_empty() {
            config
                .allowed
                .insert(command.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    tracing::info!(?config, "starting");
    let gateway = match Gateway::start(config).await {
        Ok(g) => g,
        Err(e) => {
            eprintln!("gateway: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The first line on stdout is the address, so a parent process can find a port-0 gateway.
    println!("listening on http://{}", gateway.local_addr());
    shutdown_signal().await;
    tracing::info!("shutting down: finishing requests in flight");
    gateway.shutdown().await;
    ExitCode::SUCCESS
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
