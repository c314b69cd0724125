//! `gateway`: serve the Upstash REST protocol in front of a Redis. See `gateway --help`.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{Parser, ValueEnum};
use edgelimit_gateway::config::{
    parse_duration, DEFAULT_ACL_USER, DEFAULT_COMMANDS, DEFAULT_CONNECTIONS,
    DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_ADDRESS, DEFAULT_MAX_SCRIPTS, DEFAULT_UNAUTHENTICATED_TIMEOUT,
    UPSTASH_CLIENT_COMMANDS,
};
#[cfg(feature = "otel")]
use edgelimit_gateway::otel;
use edgelimit_gateway::{Config, Gateway, MetricsPage, RedisAcl, TlsFiles};
#[cfg(feature = "otel")]
use tracing_subscriber::filter::Targets;
use tracing_subscriber::filter::{filter_fn, FilterExt};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// Serves the Upstash REST protocol (single command, path form, /pipeline, /multi-exec, base64
/// results) in front of a real Redis, so the edgelimit Worker and the official Upstash clients
/// run against your own Redis. Every flag can also be set by the environment variable shown.
///
/// The boundary: a token may run the commands on the allow-list (--list-commands,
/// --allow-command) and nothing else, inside scripts too: every command runs as a Redis ACL user
/// allowed exactly that list (--redis-acl), so `EVAL "return redis.call('FLUSHALL')" 0` is
/// refused like FLUSHALL itself.
#[derive(Debug, Parser)]
#[command(name = "gateway", version)]
struct Args {
    /// Address to listen on. Loopback by default: exposing the gateway is a deliberate choice.
    #[arg(long, env = "GATEWAY_LISTEN", default_value = "127.0.0.1:8079")]
    listen: SocketAddr,

    /// Serve HTTPS with this PEM certificate chain (the server's certificate first, as in an
    /// ACME client's fullchain.pem) instead of cleartext HTTP. Needs --tls-key. On SIGHUP both
    /// files are read again and new connections get the new pair; open connections keep
    /// theirs, and a pair that fails to load leaves the old one serving.
    #[arg(
        long,
        env = "GATEWAY_TLS_CERT",
        requires = "tls_key",
        value_name = "PEM"
    )]
    tls_cert: Option<PathBuf>,

    /// The PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1). Needs --tls-cert.
    #[arg(
        long,
        env = "GATEWAY_TLS_KEY",
        requires = "tls_cert",
        value_name = "PEM"
    )]
    tls_key: Option<PathBuf>,

    /// The Redis to serve (also spelled --redis).
    #[arg(
        long,
        visible_alias = "redis",
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379/"
    )]
    redis_url: String,

    /// How scripts are held to the allow-list. `create`: at start (and again after Redis
    /// restarts and forgets it) create or reset the ACL user --redis-acl-user, allowed every key,
    /// no pub/sub channel and exactly the allowed commands, and run every command as that user;
    /// Redis then refuses inside EVAL what the gateway refuses outside. The --redis-url user needs
    /// the right to run ACL SETUSER (the default user has it). `off`: run as the --redis-url user;
    /// scripts may then call anything that user may, so only with a user you restricted yourself
    /// (ACL SETUSER … -@all +COMMAND for each allowed one), or when every token holder may do anything
    /// to this Redis.
    #[arg(long, env = "GATEWAY_REDIS_ACL", value_enum, default_value_t = AclMode::Create)]
    redis_acl: AclMode,

    /// The ACL user --redis-acl create makes. Its password derives from --token, so gateways
    /// sharing a Redis, this name and the token agree; give gateways with other tokens or
    /// allow-lists other names.
    #[arg(long, env = "GATEWAY_REDIS_ACL_USER", default_value = DEFAULT_ACL_USER)]
    redis_acl_user: String,

    /// The bearer token clients must present (`Authorization: Bearer …` or `?_token=…`). Required.
    #[arg(long, env = "GATEWAY_TOKEN", hide_env_values = true)]
    token: String,

    /// A second token that may run read-only commands only.
    #[arg(long, env = "GATEWAY_READ_ONLY_TOKEN", hide_env_values = true)]
    read_only_token: Option<String>,

    /// Also allow these commands (comma-separated, e.g. `INCR,PING`, or `SCRIPT EXISTS`),
    /// directly and inside scripts. The default list is exactly what edgelimit sends and its
    /// scripts call (--list-commands). `@upstash` adds what the official Upstash clients and
    /// every feature of @upstash/ratelimit 2.2 send (SCAN and DEL among them: a token can then
    /// list and delete every key). SELECT, SWAPDB, MOVE, COPY and FLUSHALL reach other
    /// databases and are never allowed.
    #[arg(long, env = "GATEWAY_ALLOW_COMMANDS", value_delimiter = ',')]
    allow_command: Vec<String>,

    /// Largest request body accepted, in bytes (larger: 413).
    #[arg(long, env = "GATEWAY_MAX_BODY_BYTES", default_value_t = 1 << 20)]
    max_body_bytes: usize,

    /// Most commands in one /pipeline or /multi-exec (more: 400, the body parsed no further).
    #[arg(long, env = "GATEWAY_MAX_PIPELINE", default_value_t = 1000)]
    max_pipeline: usize,

    /// Multiplexed Redis connections shared by requests (transactions get one more of their own).
    #[arg(long, env = "GATEWAY_CONNECTIONS", default_value_t = DEFAULT_CONNECTIONS)]
    connections: usize,

    /// How long a client may take to send a request's headers, counted from the connection's
    /// opening or from the first byte after an idle spell; then the connection is closed. The
    /// body must then arrive within the same time (else 408). Takes 500ms, 10s, 2m or seconds.
    #[arg(long, env = "GATEWAY_HEADER_READ_TIMEOUT", default_value_t = Timeout(DEFAULT_HEADER_READ_TIMEOUT))]
    header_read_timeout: Timeout,

    /// How long a keep-alive connection may wait for its next request before it is closed.
    #[arg(long, env = "GATEWAY_IDLE_TIMEOUT", default_value_t = Timeout(DEFAULT_IDLE_TIMEOUT))]
    idle_timeout: Timeout,

    /// Until a connection has presented a valid token: how long it may take for its TLS
    /// handshake and first request's headers, and wait between answers (when shorter than the
    /// two timeouts above); then it is closed. A 401 closes its connection at once.
    #[arg(long, env = "GATEWAY_UNAUTHENTICATED_TIMEOUT", default_value_t = Timeout(DEFAULT_UNAUTHENTICATED_TIMEOUT))]
    unauthenticated_timeout: Timeout,

    /// Most client connections served at once. When all are taken, a new connection takes the
    /// place of the one without a valid token heard from longest ago; when every one has one,
    /// it waits in the listen queue until one closes. Keep it below the open-file limit
    /// (`ulimit -n`).
    #[arg(long, env = "GATEWAY_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,

    /// Most connections one client address (an IPv6 address: its /64) may hold at once; one
    /// more is closed as it arrives. Raise it when many clients share an address (a proxy, a
    /// NAT, a Worker's requests from Cloudflare's addresses).
    #[arg(long, env = "GATEWAY_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = DEFAULT_MAX_CONNECTIONS_PER_ADDRESS)]
    max_connections_per_address: usize,

    /// Most scripts remembered for the rewrite of the Upstash-only `allow-key-locking` flag;
    /// beyond it those unused longest are let go (their clients get NOSCRIPT once and send them
    /// again).
    #[arg(long, env = "GATEWAY_MAX_SCRIPTS", default_value_t = DEFAULT_MAX_SCRIPTS)]
    max_scripts: usize,

    /// Serve Prometheus metrics at GET /metrics (text format 0.0.4): requests by route and
    /// status, commands by name, the Redis round-trip time, Redis failures (503s) and
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

    /// Log filter (tracing's syntax). `info` logs start-up, and Redis failures as warnings;
    /// `edgelimit_gateway=debug` adds one line per request (route, status, commands, time) and
    /// per closed stalled connection. Tokens and request paths are never logged.
    #[arg(long, env = "GATEWAY_LOG", default_value = "info")]
    log: String,

    /// Export the spans (`edgelimit.gateway.request`, `edgelimit.gateway.redis`) and the
    /// metrics page's counters and gauges over OTLP, to the collector the standard `OTEL_*`
    /// variables name (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL `http/protobuf`
    /// or `grpc`, OTEL_EXPORTER_OTLP_HEADERS, OTEL_SERVICE_NAME, OTEL_METRIC_EXPORT_INTERVAL).
    /// The counters need --metrics.
    #[cfg(feature = "otel")]
    #[arg(long, env = "GATEWAY_OTEL")]
    otel: bool,

    /// Print the default command allow-list and exit.
    #[arg(long)]
    list_commands: bool,

    /// For tests of clients' retries only: every N-th /pipeline runs on Redis, then its
    /// connection is closed without an answer.
    #[arg(long, hide = true)]
    test_drop_response: Option<NonZeroU32>,
}

/// A timeout flag: parsed by [`parse_duration`], shown as it takes it.
#[derive(Debug, Clone, Copy)]
struct Timeout(Duration);

impl std::str::FromStr for Timeout {
    type Err = String;
    fn from_str(text: &str) -> Result<Timeout, String> {
        parse_duration(text).map(Timeout)
    }
}

impl std::fmt::Display for Timeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.subsec_millis() {
            0 => write!(f, "{}s", self.0.as_secs()),
            _ => write!(f, "{}ms", self.0.as_millis()),
        }
    }
}

/// `--redis-acl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AclMode {
    /// Create the ACL user and run commands as it.
    Create,
    /// Run commands as the --redis-url user.
    Off,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if args.list_commands {
        println!("{}", DEFAULT_COMMANDS.join("\n"));
        return ExitCode::SUCCESS;
    }
    // The log takes events only: the spans are for an exporter, and a span the log's filter
    // took would cost every request its bookkeeping for nothing.
    let log = tracing_subscriber::EnvFilter::new(&args.log)
        .and(filter_fn(|metadata| !metadata.is_span()));
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(log);
    #[cfg(feature = "otel")]
    let telemetry = match args
        .otel
        .then(|| otel::Telemetry::from_env(otel::SERVICE_NAME))
    {
        Some(Err(e)) => {
            eprintln!("gateway: --otel: {e}");
            return ExitCode::from(2);
        }
        Some(Ok(telemetry)) => Some(telemetry),
        None => None,
    };
    #[cfg(feature = "otel")]
    let spans = telemetry.as_ref().map(|t| {
        t.tracing_layer()
            .with_filter(Targets::new().with_target("edgelimit", tracing::Level::INFO))
    });
    #[cfg(not(feature = "otel"))]
    let spans: Option<tracing_subscriber::layer::Identity> = None;
    tracing_subscriber::registry().with(log).with(spans).init();
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
    config.header_read_timeout = args.header_read_timeout.0;
    config.idle_timeout = args.idle_timeout.0;
    config.unauthenticated_timeout = args.unauthenticated_timeout.0;
    config.max_connections = args.max_connections.max(1);
    config.max_connections_per_address = args.max_connections_per_address.max(1);
    config.max_scripts = args.max_scripts.max(2);
    config.redis_acl = match args.redis_acl {
        AclMode::Create => RedisAcl::Create {
            user: args.redis_acl_user,
        },
        AclMode::Off => {
            tracing::warn!(
                "--redis-acl off: scripts may call any command the Redis URL's user may"
            );
            RedisAcl::Off
        }
    };
    config.tls = match (args.tls_cert, args.tls_key) {
        (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
        _ => None,
    };
    config.drop_responses_every = args.test_drop_response;
    if let Some(n) = config.drop_responses_every {
        tracing::warn!(
            every = n,
            "dropping the answer of every N-th /pipeline, for tests"
        );
    }
    config.metrics = match (args.metrics, args.metrics_public) {
        (false, _) => MetricsPage::Off,
        (true, false) => MetricsPage::Token,
        (true, true) => MetricsPage::Public,
    };
    widen(&mut config.allowed, &args.allow_command);
    let gateway = match Gateway::start(config).await {
        Ok(g) => g,
        Err(e) => {
            eprintln!("gateway: {e}");
            return ExitCode::FAILURE;
        }
    };
    #[cfg(feature = "otel")]
    if let Some(telemetry) = &telemetry {
        otel::export_metrics(&gateway, telemetry);
    }
    // The first line on stdout is the address, so a parent process can find a port-0 gateway.
    println!(
        "listening on {}://{}",
        gateway.scheme(),
        gateway.local_addr()
    );
    tokio::select! {
        () = shutdown_signal() => {}
        () = reload_on_hangup(&gateway) => {}
    }
    tracing::info!("shutting down: finishing requests in flight");
    gateway.shutdown().await;
    #[cfg(feature = "otel")]
    if let Some(telemetry) = telemetry {
        // The exporters block while they flush; the runtime's other threads keep serving them.
        let flushed = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
        if let Ok(Err(e)) = flushed {
            tracing::warn!(error = %e, "OpenTelemetry: the last export failed");
        }
    }
    ExitCode::SUCCESS
}

/// Adds `--allow-command`'s entries to `allowed`: upper-cased, blanks collapsed (`script  load`
/// is `SCRIPT LOAD`), and `@upstash` as every command of [`UPSTASH_CLIENT_COMMANDS`].
fn widen(allowed: &mut BTreeSet<String>, entries: &[String]) {
    for entry in entries {
        let entry = entry.split_whitespace().collect::<Vec<_>>().join(" ");
        if entry.eq_ignore_ascii_case(UPSTASH_CLIENTS) {
            allowed.extend(UPSTASH_CLIENT_COMMANDS.iter().map(|c| c.to_string()));
        } else if !entry.is_empty() {
            allowed.insert(entry.to_ascii_uppercase());
        }
    }
}

/// The `--allow-command` entry standing for [`UPSTASH_CLIENT_COMMANDS`].
const UPSTASH_CLIENTS: &str = "@upstash";

/// Reloads the TLS certificate on every SIGHUP (`systemctl reload`, an ACME client's deploy
/// hook); never returns unless the signal cannot be listened for.
async fn reload_on_hangup(gateway: &Gateway) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut hangup) = signal(SignalKind::hangup()) else {
            tracing::warn!("cannot listen for SIGHUP: the certificate cannot be reloaded");
            return std::future::pending().await;
        };
        while hangup.recv().await.is_some() {
            match gateway.reload_tls() {
                Ok(true) => tracing::info!("SIGHUP: TLS certificate and key reloaded"),
                Ok(false) => tracing::info!("SIGHUP: no TLS certificate to reload"),
                Err(e) => {
                    tracing::error!(error = %e, "SIGHUP: TLS reload failed, the old certificate stays")
                }
            }
        }
    }
    std::future::pending().await
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_is_spelled_either_way_and_timeouts_take_units() {
        let args = Args::try_parse_from([
            "gateway",
            "--token",
            "t",
            "--redis",
            "redis://example:1/",
            "--header-read-timeout",
            "500ms",
            "--idle-timeout",
            "2m",
            "--unauthenticated-timeout",
            "1500ms",
        ])
        .unwrap();
        assert_eq!(args.redis_url, "redis://example:1/");
        assert_eq!(args.header_read_timeout.0, Duration::from_millis(500));
        assert_eq!(args.idle_timeout.0, Duration::from_secs(120));
        assert_eq!(args.unauthenticated_timeout.0, Duration::from_millis(1500));
        let args =
            Args::try_parse_from(["gateway", "--token", "t", "--redis-url", "redis://b/"]).unwrap();
        assert_eq!(args.redis_url, "redis://b/");
        assert!(Args::try_parse_from(["gateway", "--token", "t", "--idle-timeout", "0"]).is_err());
    }

    #[test]
    fn allowed_commands_are_upper_cased_and_upstash_names_the_clients_list() {
        let args = Args::try_parse_from([
            "gateway",
            "--token",
            "t",
            "--allow-command",
            "incr, script  flush",
        ])
        .unwrap();
        let mut allowed = BTreeSet::new();
        widen(&mut allowed, &args.allow_command);
        assert_eq!(
            allowed,
            BTreeSet::from(["INCR".to_string(), "SCRIPT FLUSH".to_string()])
        );
        widen(&mut allowed, &["@Upstash".to_string()]);
        assert!(
            allowed.contains("SCAN") && allowed.contains("PING"),
            "{allowed:?}"
        );
        // INCR is on that list already; SCRIPT FLUSH is not.
        assert_eq!(allowed.len(), UPSTASH_CLIENT_COMMANDS.len() + 1);
    }

    #[test]
    fn tls_cert_and_key_come_together() {
        let args = Args::try_parse_from([
            "gateway",
            "--token",
            "t",
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
        ])
        .unwrap();
        assert_eq!(args.tls_cert, Some(PathBuf::from("c.pem")));
        assert_eq!(args.tls_key, Some(PathBuf::from("k.pem")));
        for lone in ["--tls-cert", "--tls-key"] {
            let error = Args::try_parse_from(["gateway", "--token", "t", lone, "x.pem"])
                .unwrap_err()
                .to_string();
            assert!(error.contains("--tls-"), "{lone} alone: {error}");
        }
    }

    #[test]
    fn the_flags_defaults_are_the_configs() {
        let args = Args::try_parse_from(["gateway", "--token", "t"]).unwrap();
        let config = Config::new(args.listen, args.redis_url, args.token);
        assert_eq!(args.header_read_timeout.0, config.header_read_timeout);
        assert_eq!(args.idle_timeout.0, config.idle_timeout);
        assert_eq!(
            args.unauthenticated_timeout.0,
            config.unauthenticated_timeout
        );
        assert_eq!(args.max_connections, config.max_connections);
        assert_eq!(
            args.max_connections_per_address,
            config.max_connections_per_address
        );
        assert_eq!(args.max_scripts, config.max_scripts);
        assert_eq!(args.connections, config.connections);
        assert_eq!(
            RedisAcl::Create {
                user: args.redis_acl_user
            },
            config.redis_acl
        );
        assert_eq!(args.test_drop_response, None);
        assert_eq!((args.tls_cert, config.tls), (None, None));
    }
}
