//! The HTTP side: routes, authentication, body limits, and running commands on Redis.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::body::{to_bytes, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use axum::Router;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Value;
use serde_json::{json, Value as Json};
use tokio::net::TcpListener;

use crate::auth::{access, presented_token, Access};
use crate::command::{self, check_allowed, Command, CommandError, Scripts};
use crate::config::{redact_url, Config, MetricsPage};
use crate::metrics::{self, Metrics, Route};
use crate::reply::{error_text, write_entry, write_error, Encoding};

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Redis could not be reached at start.
    #[error("cannot connect to Redis at {url}: {source}")]
    Redis {
        /// The URL, credentials redacted.
        url: String,
        /// Why.
        source: redis::RedisError,
    },
}

struct Shared {
    config: Config,
    connections: Vec<ConnectionManager>,
    // Transactions run on a connection of their own, so MULTI…EXEC never shares a socket with
    // the pipelines of other requests.
    transactions: ConnectionManager,
    next: AtomicUsize,
    scripts: Scripts,
    // A counter of answered requests, emitted as `upstash-sync-token`. One Redis gives
    // read-your-writes already; the token only has to exist and move forward.
    sync: AtomicU64,
    // Present only when the metrics page is on: a gateway without it counts nothing.
    metrics: Option<Metrics>,
}

impl Shared {
    fn connection(&self) -> ConnectionManager {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.connections.len();
        self.connections[i].clone()
    }

    /// Sends `pipe` on `connection`, timing the round trip for the metrics.
    async fn round_trip(
        &self,
        pipe: &redis::Pipeline,
        connection: &mut ConnectionManager,
    ) -> redis::RedisResult<Vec<Value>> {
        let started = Instant::now();
        let result = pipe.query_async::<Vec<Value>>(connection).await;
        if let (Some(m), Ok(_)) = (&self.metrics, &result) {
            m.redis_round_trip(started.elapsed());
        }
        result
    }

    /// Counts commands Redis answered.
    fn count_commands<'a>(&self, commands: impl IntoIterator<Item = &'a Command>) {
        if let Some(m) = &self.metrics {
            for c in commands {
                m.command(&c[0]);
            }
        }
    }

    /// Counts an answered request.
    fn count_request(&self, route: Route, status: StatusCode) {
        if let Some(m) = &self.metrics {
            m.request(route, status.as_u16());
        }
    }

    /// The 401 answer, counted.
    fn unauthorized(&self) -> Response {
        if let Some(m) = &self.metrics {
            m.auth_failure();
        }
        error(StatusCode::UNAUTHORIZED, "Unauthorized", self)
    }
}

/// A running gateway.
#[derive(Debug)]
pub struct Gateway {
    addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Gateway {
    /// Binds `config.listen`, connects to Redis, and serves until [`Gateway::shutdown`].
    pub async fn start(config: Config) -> Result<Gateway, GatewayError> {
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| GatewayError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let addr = listener.local_addr().map_err(|source| GatewayError::Bind {
            addr: config.listen,
            source,
        })?;
        let router = router(config).await?;
        let task = tokio::spawn(async move {
            let _ = serve(listener, router, async {
                let _ = rx.await;
            })
            .await;
        });
        Ok(Gateway {
            addr,
            shutdown: Some(tx),
            task,
        })
    }

    /// The address it listens on (the real port when `listen` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, finishes requests in flight, and returns.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.task).await;
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then drains requests in flight.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt as _;
    // Small request/response exchanges: send each answer at once, not after the client's ACK.
    let listener = listener.tap_io(|stream| {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::trace!(error = %e, "cannot set TCP_NODELAY");
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

/// The routes, over fresh Redis connections.
pub async fn router(config: Config) -> Result<Router, GatewayError> {
    let connect = || async {
        let client = redis::Client::open(config.redis_url.as_str()).map_err(|source| {
            GatewayError::Redis {
                url: redact_url(&config.redis_url),
                source,
            }
        })?;
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(std::time::Duration::from_secs(2)))
            .set_response_timeout(Some(std::time::Duration::from_secs(5)))
            .set_number_of_retries(1);
        ConnectionManager::new_with_config(client, manager_config)
            .await
            .map_err(|source| GatewayError::Redis {
                url: redact_url(&config.redis_url),
                source,
            })
    };
    let mut connections = Vec::new();
    for _ in 0..config.connections.max(1) {
        connections.push(connect().await?);
    }
    let transactions = connect().await?;
    let metrics = (config.metrics != MetricsPage::Off).then(|| Metrics::new(&config.allowed));
    let page = metrics.is_some();
    let shared = Arc::new(Shared {
        config,
        connections,
        transactions,
        next: AtomicUsize::new(0),
        scripts: Scripts::default(),
        sync: AtomicU64::new(0),
        metrics,
    });
    let mut router = Router::new()
        .route("/", post(single))
        .route("/pipeline", post(pipeline))
        .route("/multi-exec", post(multi_exec))
        .route("/{*command}", any(path_form));
    if page {
        // Only when on: off, `/metrics` is left to the path form like any other command name.
        router = router.route("/metrics", any(metrics_page));
    }
    Ok(router
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(shared))
}

fn json_response(status: StatusCode, body: Json, shared: &Shared) -> Response {
    let response = (status, axum::Json(body)).into_response();
    with_sync_token(response, shared)
}

/// A response whose body is JSON text already written: as [`json_response`] would answer it.
fn json_text_response(status: StatusCode, body: Vec<u8>, shared: &Shared) -> Response {
    let response = (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response();
    with_sync_token(response, shared)
}

fn with_sync_token(mut response: Response, shared: &Shared) -> Response {
    let token = shared.sync.fetch_add(1, Ordering::Relaxed) + 1;
    response
        .headers_mut()
        .insert("upstash-sync-token", HeaderValue::from(token));
    response
}

fn error(status: StatusCode, message: impl Into<String>, shared: &Shared) -> Response {
    json_response(status, json!({ "error": message.into() }), shared)
}

async fn method_not_allowed(State(shared): State<Arc<Shared>>, uri: Uri) -> Response {
    shared.count_request(Route::of_path(uri.path()), StatusCode::METHOD_NOT_ALLOWED);
    method_not_allowed_response(&shared)
}

fn method_not_allowed_response(shared: &Shared) -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "ERR method not allowed: use POST for /, /pipeline and /multi-exec",
        shared,
    )
}

/// `GET /metrics`, routed only when the page is on. Any other method is the path form, as
/// `/metrics` would be with the page off.
async fn metrics_page(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let Some(m) = shared
        .metrics
        .as_ref()
        .filter(|_| request.method() == Method::GET)
    else {
        return path_form(State(shared), request).await;
    };
    if shared.config.metrics != MetricsPage::Public {
        let header = request
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        let token = presented_token(header, request.uri().query());
        let granted = access(
            token.as_deref(),
            &shared.config.token,
            shared.config.read_only_token.as_deref(),
        );
        if granted.is_none() {
            return shared.unauthorized();
        }
    }
    match m.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics").into_response(),
    }
}

/// Authenticates, reads the body within its limit, and says how to encode results.
async fn admit(
    shared: &Shared,
    request: Request,
) -> Result<(Access, Encoding, Bytes, Uri), Response> {
    let (parts, body) = request.into_parts();
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let token = presented_token(header("authorization"), parts.uri.query());
    let Some(access) = access(
        token.as_deref(),
        &shared.config.token,
        shared.config.read_only_token.as_deref(),
    ) else {
        return Err(shared.unauthorized());
    };
    let encoding = match header("upstash-encoding") {
        Some(e) if e.eq_ignore_ascii_case("base64") => Encoding::Base64,
        _ => Encoding::Plain,
    };
    let max = shared.config.max_body_bytes;
    let body = match to_bytes(body, max).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("ERR request body exceeds the limit of {max} bytes"),
                shared,
            ))
        }
    };
    Ok((access, encoding, body, parts.uri))
}

/// The command list of a `/pipeline` or `/multi-exec` body.
fn parse_list(shared: &Shared, body: &[u8]) -> Result<Vec<Command>, CommandError> {
    command::list_from_json_text(body, shared.config.max_pipeline)
}

/// Checks and rewrites commands; returns, per command, the SHA a rewritten SCRIPT LOAD answers.
fn prepare(
    shared: &Shared,
    commands: &mut [Command],
    access: Access,
) -> Result<Vec<Option<String>>, CommandError> {
    commands
        .iter_mut()
        .map(|c| {
            check_allowed(c, &shared.config, access)?;
            Ok(shared.scripts.rewrite(c))
        })
        .collect()
}

fn to_cmd(command: &Command) -> redis::Cmd {
    let mut cmd = redis::Cmd::new();
    // As `redis::cmd(name)` would: the name as text (borrowed when it is valid UTF-8).
    cmd.arg(String::from_utf8_lossy(&command[0]).as_bytes());
    for arg in &command[1..] {
        cmd.arg(arg.as_slice());
    }
    cmd
}

/// A failure to talk to Redis at all (not a command's own error): 503, so clients retry.
fn unreachable(e: &redis::RedisError, shared: &Shared) -> Response {
    tracing::warn!(error = %e, "redis unreachable");
    if let Some(m) = &shared.metrics {
        m.redis_error();
    }
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("ERR redis unavailable: {e}"),
        shared,
    )
}

/// The reply with a rewritten SCRIPT LOAD answering the SHA the client computed.
fn answer(value: Value, loaded_as: Option<String>) -> Value {
    match (value, loaded_as) {
        (Value::BulkString(_), Some(client_sha)) => Value::BulkString(client_sha.into_bytes()),
        (value, _) => value,
    }
}

async fn run_single(
    shared: &Shared,
    mut command: Command,
    access: Access,
    encoding: Encoding,
) -> Response {
    let loaded_as = match prepare(shared, std::slice::from_mut(&mut command), access) {
        Ok(mut l) => l.remove(0),
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string(), shared),
    };
    let mut pipe = redis::pipe();
    pipe.add_command(to_cmd(&command)).ignore_errors();
    match shared.round_trip(&pipe, &mut shared.connection()).await {
        Ok(mut values) if values.len() == 1 => {
            shared.count_commands([&command]);
            let value = answer(values.remove(0), loaded_as);
            let status = match value {
                Value::ServerError(_) => StatusCode::BAD_REQUEST,
                _ => StatusCode::OK,
            };
            let mut body = Vec::with_capacity(64);
            write_entry(&mut body, &value, encoding);
            json_text_response(status, body, shared)
        }
        Ok(_) => error(
            StatusCode::BAD_GATEWAY,
            "ERR redis answered no reply",
            shared,
        ),
        Err(e) => unreachable(&e, shared),
    }
}

fn log(method: &Method, endpoint: &str, status: StatusCode, started: Instant, commands: usize) {
    tracing::info!(
        %method,
        endpoint,
        status = status.as_u16(),
        commands,
        elapsed_us = started.elapsed().as_micros() as u64,
        "request"
    );
}

async fn single(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let response = match admit(&shared, request).await {
        Err(r) => r,
        Ok((access, encoding, body, _)) => match command::from_json_text(&body) {
            Ok(command) => run_single(&shared, command, access, encoding).await,
            Err(e) => error(StatusCode::BAD_REQUEST, e.to_string(), &shared),
        },
    };
    shared.count_request(Route::Single, response.status());
    log(&method, "/", response.status(), started, 1);
    response
}

async fn path_form(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    if method != Method::GET && method != Method::POST {
        shared.count_request(Route::Path, StatusCode::METHOD_NOT_ALLOWED);
        return method_not_allowed_response(&shared);
    }
    let response = match admit(&shared, request).await {
        Err(r) => r,
        Ok((access, encoding, body, uri)) => {
            let body = (method == Method::POST).then_some(&body[..]);
            match command::from_path(uri.path(), body) {
                Ok(command) => run_single(&shared, command, access, encoding).await,
                Err(e) => error(StatusCode::BAD_REQUEST, e.to_string(), &shared),
            }
        }
    };
    shared.count_request(Route::Path, response.status());
    log(&method, "path", response.status(), started, 1);
    response
}

async fn pipeline(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let (response, n) = match admit(&shared, request).await {
        Err(r) => (r, 0),
        Ok((access, encoding, body, _)) => run_pipeline(&shared, &body, access, encoding).await,
    };
    shared.count_request(Route::Pipeline, response.status());
    log(&method, "/pipeline", response.status(), started, n);
    response
}

async fn run_pipeline(
    shared: &Shared,
    body: &[u8],
    access: Access,
    encoding: Encoding,
) -> (Response, usize) {
    let mut commands = match parse_list(shared, body) {
        Ok(c) => c,
        Err(e) => return (error(StatusCode::BAD_REQUEST, e.to_string(), shared), 0),
    };
    let n = commands.len();
    // A command that is not allowed fails alone, as Redis's own errors do; the rest still run.
    let mut refused: Vec<Option<String>> = vec![None; n];
    let mut loaded_as: Vec<Option<String>> = vec![None; n];
    let mut pipe = redis::pipe();
    let mut sent = Vec::new();
    for (i, c) in commands.iter_mut().enumerate() {
        match check_allowed(c, &shared.config, access) {
            Ok(()) => {
                loaded_as[i] = shared.scripts.rewrite(c);
                pipe.add_command(to_cmd(c));
                sent.push(i);
            }
            Err(e) => refused[i] = Some(e.to_string()),
        }
    }
    let mut values: Vec<Option<Value>> = vec![None; n];
    if !sent.is_empty() {
        pipe.ignore_errors();
        match shared.round_trip(&pipe, &mut shared.connection()).await {
            Ok(replies) if replies.len() == sent.len() => {
                shared.count_commands(sent.iter().map(|&i| &commands[i]));
                for (i, v) in sent.into_iter().zip(replies) {
                    values[i] = Some(v);
                }
            }
            Ok(_) => {
                return (
                    error(
                        StatusCode::BAD_GATEWAY,
                        "ERR redis answered too few replies",
                        shared,
                    ),
                    n,
                )
            }
            Err(e) => return (unreachable(&e, shared), n),
        }
    }
    let mut out = Vec::with_capacity(2 + 48 * n);
    out.push(b'[');
    for (i, ((value, refused), loaded_as)) in
        values.into_iter().zip(refused).zip(loaded_as).enumerate()
    {
        if i > 0 {
            out.push(b',');
        }
        match (value, refused) {
            (Some(v), _) => write_entry(&mut out, &answer(v, loaded_as), encoding),
            (None, Some(message)) => write_error(&mut out, &message),
            (None, None) => write_error(&mut out, "ERR not run"),
        }
    }
    out.push(b']');
    (json_text_response(StatusCode::OK, out, shared), n)
}

async fn multi_exec(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let (response, n) = match admit(&shared, request).await {
        Err(r) => (r, 0),
        Ok((access, encoding, body, _)) => run_transaction(&shared, &body, access, encoding).await,
    };
    shared.count_request(Route::MultiExec, response.status());
    log(&method, "/multi-exec", response.status(), started, n);
    response
}

async fn run_transaction(
    shared: &Shared,
    body: &[u8],
    access: Access,
    encoding: Encoding,
) -> (Response, usize) {
    let mut commands = match parse_list(shared, body) {
        Ok(c) => c,
        Err(e) => return (error(StatusCode::BAD_REQUEST, e.to_string(), shared), 0),
    };
    let n = commands.len();
    // All or nothing: one refused command refuses the transaction, as a queue-time error would.
    let loaded_as = match prepare(shared, &mut commands, access) {
        Ok(l) => l,
        Err(e) => return (error(StatusCode::BAD_REQUEST, e.to_string(), shared), n),
    };
    let mut pipe = redis::pipe();
    pipe.add_command(redis::cmd("MULTI"));
    for c in &commands {
        pipe.add_command(to_cmd(c));
    }
    pipe.add_command(redis::cmd("EXEC")).ignore_errors();
    let mut transactions = shared.transactions.clone();
    let replies = match shared.round_trip(&pipe, &mut transactions).await {
        Ok(r) if r.len() == n + 2 => {
            shared.count_commands(&commands);
            r
        }
        Ok(_) => {
            return (
                error(
                    StatusCode::BAD_GATEWAY,
                    "ERR redis answered too few replies",
                    shared,
                ),
                n,
            )
        }
        Err(e) => return (unreachable(&e, shared), n),
    };
    // A command refused while queueing aborts the whole transaction: report that error.
    if let Some(Value::ServerError(e)) = replies[1..=n]
        .iter()
        .find(|v| matches!(v, Value::ServerError(_)))
    {
        return (error(StatusCode::BAD_REQUEST, error_text(e), shared), n);
    }
    match &replies[n + 1] {
        Value::Array(results) => {
            let mut out = Vec::with_capacity(2 + 48 * results.len());
            out.push(b'[');
            for (i, (v, l)) in results.iter().cloned().zip(loaded_as).enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_entry(&mut out, &answer(v, l), encoding);
            }
            out.push(b']');
            (json_text_response(StatusCode::OK, out, shared), n)
        }
        Value::ServerError(e) => (error(StatusCode::BAD_REQUEST, error_text(e), shared), n),
        other => (
            error(
                StatusCode::BAD_GATEWAY,
                format!("ERR unexpected EXEC reply {other:?}"),
                shared,
            ),
            n,
        ),
    }
}
