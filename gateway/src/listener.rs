//! Accepting connections: HTTP/1.1 with a header-read timeout, an idle keep-alive timeout and a
//! cap on open connections, graceful shutdown, and closing a connection without an answer when a
//! handler asks for it ([`DropConnection`]).
//!
//! `axum::serve` has none of the three limits: a client that sends half its headers, or opens a
//! connection and says nothing, holds it forever. Hyper's own `header_read_timeout` runs from the
//! end of the previous answer, so it would also be the idle timeout; here each connection keeps
//! its phase and one watchdog enforces both:
//!
//! - *head*: from the connection's opening, or the first byte after an idle spell, until the
//!   request's headers are complete: at most `header_read_timeout` (handlers bound the body by
//!   the same time);
//! - *busy*: the request is being handled: no limit here (Redis round trips have their own);
//! - *idle*: after an answer, until the next byte: at most `idle_timeout`.
//!
//! Beyond `max_connections` the accept loop stops accepting, so new connections wait in the
//! kernel's listen queue until one closes.

use std::convert::Infallible;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
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
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (stop, stopped) = watch::channel(false);
    let mut http = hyper::server::conn::http1::Builder::new();
    // The watchdog enforces it instead (see the module's documentation).
    http.header_read_timeout(None);
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
    router: Router,
    http: hyper::server::conn::http1::Builder,
    limits: ConnectionLimits,
    mut stopped: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
) {
    let phase = Arc::new(Phase::new());
    let io = TokioIo::new(Watched {
        inner: stream,
        phase: phase.clone(),
    });
    let service = Service {
        router,
        phase: phase.clone(),
    };
    let mut conn = pin!(http.serve_connection(io, service));
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
/// own reads and service, read by its watchdog: all on one task, so relaxed atomics suffice.
struct Phase {
    origin: Instant,
    phase: AtomicU8,
    /// When the phase began, in µs since `origin`.
    since_us: AtomicU64,
    /// A handler asked to close without answering.
    dropped: AtomicBool,
    /// Wakes the watchdog when the phase (and so the deadline) changes.
    changed: Notify,
}

impl Phase {
    fn new() -> Phase {
        Phase {
            origin: Instant::now(),
            phase: AtomicU8::new(HEAD),
            since_us: AtomicU64::new(0),
            dropped: AtomicBool::new(false),
            changed: Notify::new(),
        }
    }

    fn enter(&self, phase: u8) {
        let now = self.origin.elapsed().as_micros() as u64;
        self.since_us.store(now, Ordering::Relaxed);
        self.phase.store(phase, Ordering::Relaxed);
        self.changed.notify_one();
    }

    /// A read returned bytes: after an idle spell, a new request's head has begun.
    fn bytes_arrived(&self) {
        if self.phase.load(Ordering::Relaxed) == IDLE {
            self.enter(HEAD);
        }
    }

    fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        let limit = match self.phase.load(Ordering::Relaxed) {
            HEAD => limits.header_read_timeout,
            IDLE => limits.idle_timeout,
            _ => return None,
        };
        let since = Duration::from_micros(self.since_us.load(Ordering::Relaxed));
        Some(self.origin + since + limit)
    }

    /// The phase whose time ran out, if one did.
    fn expired(&self, limits: &ConnectionLimits) -> Option<&'static str> {
        let deadline = self.deadline(limits)?;
        (Instant::now() >= deadline).then(|| match self.phase.load(Ordering::Relaxed) {
            HEAD => "reading headers",
            _ => "idle",
        })
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

/// Busy while alive: idle again when the handler is done (or its future dropped).
struct Busy(Arc<Phase>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.enter(IDLE);
    }
}

impl hyper::service::Service<hyper::Request<Incoming>> for Service {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        self.phase.enter(BUSY);
        let busy = Busy(self.phase.clone());
        let router = self.router.clone();
        Box::pin(async move {
            let response = router.oneshot(request.map(Body::new)).await?;
            if response.extensions().get::<DropConnection>().is_some() {
                busy.0.dropped.store(true, Ordering::Relaxed);
                busy.0.changed.notify_one();
                // Never answer: the watchdog closes the connection.
                std::future::pending::<()>().await;
            }
            drop(busy);
            Ok(response)
        })
    }
}
