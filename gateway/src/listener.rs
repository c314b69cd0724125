//! Accepting connections: HTTP/1.1, and HTTP/2 over cleartext TCP with prior knowledge (h2c,
//! told apart by its preface on the same port), with a header-read timeout, an idle keep-alive
//! timeout and a cap on open connections, graceful shutdown, and closing a connection without an
//! answer when a handler asks for it ([`DropConnection`]).
//!
//! `axum::serve` has none of the three limits: a client that sends half its headers, or opens a
//! connection and says nothing, holds it forever. Hyper's own `header_read_timeout` runs from the
//! end of the previous answer, so it would also be the idle timeout; here each connection keeps
//! its phase and one watchdog enforces both:
//!
//! - *head*: from the connection's opening, or the first byte after an idle spell, until the
//!   request's headers are complete: at most `header_read_timeout` (handlers bound the body by
//!   the same time);
//! - *busy*: a request is being handled: no limit here (Redis round trips have their own);
//! - *idle*: after the last answer, until the next byte: at most `idle_timeout`.
//!
//! On an HTTP/2 connection many requests are in flight at once (each on its own task): the
//! connection is busy while any is, and idle when none is. Bytes arriving while idle do not start
//! a *head* phase there, since HTTP/2 sends frames that are no request (window updates, pings,
//! settings acknowledgements): an idle HTTP/2 connection is closed `idle_timeout` after its last
//! answer, whatever it sends meanwhile, and a request head begun then is bounded by that time.
//! At most [`MAX_CONCURRENT_STREAMS`] requests run at once on one HTTP/2 connection.
//!
//! Over TLS ([`serve_tls`]) the handshake is part of the first *head* phase: a client must
//! finish it and send its first request's headers within `header_read_timeout` of connecting.
//! The phases watch the bytes on the socket, under the encryption.
//!
//! Beyond `max_connections` the accept loop stops accepting, so new connections wait in the
//! kernel's listen queue until one closes. On HTTP/2 a handler's [`DropConnection`] closes the
//! whole connection, and with it the other requests in flight on it.

use std::convert::Infallible;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use axum::Router;
use hyper::body::Incoming;
use hyper::Version;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

use crate::config::Config;

/// The limits [`serve`] holds connections to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a request's headers may take to arrive.
    pub header_read_timeout: Duration,
    /// How long a connection may wait between requests.
    pub idle_timeout: Duration,
    /// Most connections served at once (0 counts as 1).
    pub max_connections: usize,
}

impl From<&Config> for ConnectionLimits {
    fn from(config: &Config) -> ConnectionLimits {
        ConnectionLimits {
            header_read_timeout: config.header_read_timeout,
            idle_timeout: config.idle_timeout,
            max_connections: config.max_connections,
        }
    }
}

/// Most requests in flight at once on one HTTP/2 connection (further ones are refused by the
/// protocol's own flow control: the client waits). Enough for one client process's whole
/// concurrency on one connection, which is what HTTP/2 is for here.
pub const MAX_CONCURRENT_STREAMS: u32 = 256;

/// A response extension asking [`serve`] to close the connection instead of sending the
/// response: the client sees its request vanish (the fault the gateway injects for tests of
/// retries, `Config::drop_responses_every`).
#[derive(Debug, Clone, Copy)]
pub struct DropConnection;

/// Serves `router` on `listener` until `shutdown` completes, then lets each connection finish
/// the request in flight (idle ones close at once) and returns when all have closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, router, limits, None, shutdown).await
}

/// [`serve`] over TLS: each connection's handshake by `tls` (see the module's documentation for
/// how it is timed).
pub async fn serve_tls(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    tls: TlsAcceptor,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, router, limits, Some(tls), shutdown).await
}

async fn serve_with(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (stop, stopped) = watch::channel(false);
    let mut http = auto::Builder::new(TokioExecutor::new());
    // The watchdog enforces it instead (see the module's documentation).
    http.http1().header_read_timeout(None);
    http.http2().max_concurrent_streams(MAX_CONCURRENT_STREAMS);
    let mut shutdown = pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = accept(&listener, &permits) => accepted,
        };
        let (stream, permit) = accepted;
        let connection = connection(
            stream,
            tls.clone(),
            router.clone(),
            http.clone(),
            limits,
            stopped.clone(),
            permit,
        );
        tokio::spawn(connection);
    }
    let _ = stop.send(true);
    drop(stopped);
    // Every connection task holds a receiver: all are gone when the channel closes.
    stop.closed().await;
    Ok(())
}

/// The next connection, once there is room for it.
async fn accept(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
) -> (TcpStream, OwnedSemaphorePermit) {
    let permit = permits
        .clone()
        .acquire_owned()
        .await
        .expect("the semaphore is never closed");
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                // Small request/response exchanges: send each answer at once, not after the
                // client's ACK.
                if let Err(e) = stream.set_nodelay(true) {
                    tracing::trace!(error = %e, "cannot set TCP_NODELAY");
                }
                return (stream, permit);
            }
            // Out of file descriptors or the like: wait for some to close rather than spin.
            Err(e) => {
                tracing::warn!(error = %e, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn connection(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    router: Router,
    http: auto::Builder<TokioExecutor>,
    limits: ConnectionLimits,
    mut stopped: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
) {
    let phase = Arc::new(Phase::new());
    let watched = Watched {
        inner: stream,
        phase: phase.clone(),
    };
    let Some(tls) = tls else {
        return drive(watched, phase, router, http, limits, stopped).await;
    };
    let deadline = phase
        .deadline(&limits)
        .expect("a new connection is reading its head");
    let handshake = tokio::time::timeout_at(deadline, tls.accept(watched));
    let encrypted = tokio::select! {
        done = handshake => match done {
            Ok(Ok(encrypted)) => encrypted,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(phase = "TLS handshake", "closing a connection that timed out");
                return;
            }
        },
        // A stop (or the accept loop gone) before the handshake ends: nothing is in flight.
        _ = stopped.changed() => return,
    };
    drive(encrypted, phase, router, http, limits, stopped).await;
}

/// Serves one connection's requests over `io`, whose reads tell `phase` when bytes arrive.
async fn drive<I>(
    io: I,
    phase: Arc<Phase>,
    router: Router,
    http: auto::Builder<TokioExecutor>,
    limits: ConnectionLimits,
    mut stopped: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(io);
    let service = Service {
        router,
        phase: phase.clone(),
    };
    let mut conn = pin!(http.serve_connection(io, service));
    // Declared after `conn`, so dropped first: wakes the handlers waiting for the end.
    let _closed = ClosedOnDrop(phase.clone());
    let mut closing = *stopped.borrow();
    if closing {
        conn.as_mut().graceful_shutdown();
    }
    loop {
        let deadline = phase.deadline(&limits);
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "connection closed with an error");
                }
                return;
            }
            () = phase.changed.notified() => {}
            () = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {}
            changed = stopped.changed(), if !closing => {
                // An error: the accept loop is gone, which is a stop too.
                if changed.is_err() || *stopped.borrow() {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
        if phase.dropped.load(Ordering::Relaxed) {
            tracing::debug!("closing a connection without its answer, as asked");
            return;
        }
        if let Some(expired) = phase.expired(&limits) {
            tracing::debug!(phase = expired, "closing a connection that timed out");
            return;
        }
    }
}

const HEAD: u8 = 0;
const BUSY: u8 = 1;
const IDLE: u8 = 2;

/// Where a connection is in its request/answer cycle, and since when. Written by the connection's
/// reads and service calls and by its requests' ends (on their own tasks under HTTP/2), read by
/// its watchdog.
struct Phase {
    origin: Instant,
    state: Mutex<State>,
    /// The connection speaks HTTP/2 (known from its first request).
    http2: AtomicBool,
    /// A handler asked to close without answering.
    dropped: AtomicBool,
    /// Wakes the watchdog when the phase (and so the deadline) changes.
    changed: Notify,
    /// Wakes the handlers that asked to drop the connection once it is gone: under HTTP/2 each
    /// request runs on a task of its own, which would otherwise wait forever.
    closed: Notify,
}

/// The phase, when it began, and the requests in flight, changed together under one lock so a
/// request ending on one task and the next beginning on another cannot leave the phase behind.
struct State {
    phase: u8,
    since: Duration,
    in_flight: usize,
}

impl Phase {
    fn new() -> Phase {
        Phase {
            origin: Instant::now(),
            state: Mutex::new(State {
                phase: HEAD,
                since: Duration::ZERO,
                in_flight: 0,
            }),
            http2: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
            changed: Notify::new(),
            closed: Notify::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing panics while holding it; if something did, the state is still whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn enter(&self, state: &mut State, phase: u8) {
        state.since = self.origin.elapsed();
        state.phase = phase;
        self.changed.notify_one();
    }

    /// A request's headers are in: busy until it and every other in flight are done.
    fn request_began(&self) {
        let mut state = self.state();
        state.in_flight += 1;
        if state.phase != BUSY {
            self.enter(&mut state, BUSY);
        }
    }

    /// A request was answered (or its future dropped): idle when it was the last.
    fn request_ended(&self) {
        let mut state = self.state();
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0 {
            self.enter(&mut state, IDLE);
        }
    }

    /// A read returned bytes: after an idle spell, a new HTTP/1.1 request's head has begun.
    fn bytes_arrived(&self) {
        if self.http2.load(Ordering::Relaxed) {
            return;
        }
        let mut state = self.state();
        if state.phase == IDLE {
            self.enter(&mut state, HEAD);
        }
    }

    fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        let state = self.state();
        let limit = match state.phase {
            HEAD => limits.header_read_timeout,
            IDLE => limits.idle_timeout,
            _ => return None,
        };
        Some(self.origin + state.since + limit)
    }

    /// The phase whose time ran out, if one did.
    fn expired(&self, limits: &ConnectionLimits) -> Option<&'static str> {
        let deadline = self.deadline(limits)?;
        (Instant::now() >= deadline).then(|| match self.state().phase {
            HEAD => "reading headers",
            _ => "idle",
        })
    }
}

/// Tells a connection's handlers, when dropped, that the connection is gone.
struct ClosedOnDrop(Arc<Phase>);

impl Drop for ClosedOnDrop {
    fn drop(&mut self) {
        self.0.closed.notify_waiters();
    }
}

/// The socket, telling the connection's [`Phase`] when bytes arrive.
struct Watched {
    inner: TcpStream,
    phase: Arc<Phase>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.phase.bytes_arrived();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The router for one connection, marking its phase busy while a request is handled.
#[derive(Clone)]
struct Service {
    router: Router,
    phase: Arc<Phase>,
}

/// One request in flight while alive: its end is counted when the handler is done (or its
/// future dropped).
struct Busy(Arc<Phase>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

impl hyper::service::Service<hyper::Request<Incoming>> for Service {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        if request.version() == Version::HTTP_2 {
            self.phase.http2.store(true, Ordering::Relaxed);
        }
        self.phase.request_began();
        let busy = Busy(self.phase.clone());
        let router = self.router.clone();
        Box::pin(async move {
            let response = router.oneshot(request.map(Body::new)).await?;
            if response.extensions().get::<DropConnection>().is_some() {
                // Listening before asking, so the end cannot slip by unheard.
                let closed = busy.0.closed.notified();
                let mut closed = pin!(closed);
                closed.as_mut().enable();
                busy.0.dropped.store(true, Ordering::Relaxed);
                busy.0.changed.notify_one();
                // Never answer: the watchdog closes the connection. Under HTTP/1.1 this future
                // is dropped with it; under HTTP/2 it runs on its own task and ends here, its
                // answer sent nowhere.
                closed.await;
            }
            drop(busy);
            Ok(response)
        })
    }
}
