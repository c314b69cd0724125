//! One connection: its TLS handshake, its requests served by hyper, and the watchdog that closes
//! it when its time runs out, when a handler asks, or when the accept loop evicts it.

use std::convert::Infallible;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::Response;
use axum::Router;
use hyper::body::Incoming;
use hyper::Version;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

use super::occupancy::{Occupancy, Seat};
use super::phase::{Expired, Phase};
use super::ConnectionLimits;
use crate::metrics::ConnectionCounters;

/// A response extension asking the accept loop to close the connection instead of sending the
/// response: the client sees its request vanish (the fault the gateway injects for tests of
/// retries, `Config::drop_responses_every`).
#[derive(Debug, Clone, Copy)]
pub struct DropConnection;

/// The connection a request came on, as a request extension: how the token check tells the
/// accept loop what it learnt. Absent when the router is served by something else.
#[derive(Clone)]
pub struct ClientConnection(Arc<Phase>);

impl std::fmt::Debug for ClientConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConnection")
            .field("authenticated", &self.0.is_authenticated())
            .finish()
    }
}

impl ClientConnection {
    /// The request presented a valid token: from now on the connection waits as long as
    /// `header_read_timeout` and `idle_timeout` allow, and is never evicted to make room.
    pub fn authenticated(&self) {
        self.0.authenticate();
    }

    /// Close the connection once the answers in flight are sent (HTTP/1.1: after this answer;
    /// HTTP/2: a GOAWAY, then the streams in flight finish).
    pub fn close_after_answer(&self) {
        self.0.request_close();
    }
}

/// A new connection's place under the global cap: held already, or to be taken once the
/// connection evicted for it has closed.
pub(super) enum Permit {
    Held(OwnedSemaphorePermit),
    Freed(Arc<Semaphore>),
}

/// Serves one accepted connection until it closes; its address's `seat` and its place are given
/// back then.
#[allow(clippy::too_many_arguments)]
pub(super) async fn connection(
    stream: TcpStream,
    seat: Seat,
    phase: Arc<Phase>,
    permit: Permit,
    occupancy: Arc<Occupancy>,
    tls: Option<TlsAcceptor>,
    router: Router,
    http: auto::Builder<TokioExecutor>,
    limits: ConnectionLimits,
    counters: ConnectionCounters,
    mut stopped: watch::Receiver<bool>,
) {
    // The place an eviction freed for it comes in a few microseconds; only then may it be evicted
    // in turn (before, evicting it would free no place).
    let _permit = match permit {
        Permit::Held(permit) => permit,
        Permit::Freed(places) => {
            let permit = tokio::select! {
                permit = places.acquire_owned() => permit.expect("the semaphore is never closed"),
                _ = stopped.changed() => return,
            };
            occupancy.watch(&seat, phase.clone());
            permit
        }
    };
    let _seat = seat;
    let watched = Watched {
        inner: stream,
        phase: phase.clone(),
    };
    let Some(tls) = tls else {
        return drive(watched, phase, router, http, limits, &counters, stopped).await;
    };
    let deadline = phase
        .deadline(&limits)
        .expect("a new connection is reading its head");
    let mut handshake = pin!(tokio::time::timeout_at(deadline, tls.accept(watched)));
    let encrypted = loop {
        tokio::select! {
            done = &mut handshake => match done {
                Ok(Ok(encrypted)) => break encrypted,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    timed_out(
                        Expired { phase: "TLS handshake", unauthenticated: true },
                        &counters,
                    );
                    return;
                }
            },
            () = phase.changed.notified() => {
                if phase.is_evicted() {
                    tracing::debug!("closing a connection mid-handshake to make room");
                    return;
                }
            }
            // A stop (or the accept loop gone) before the handshake ends: nothing is in flight.
            _ = stopped.changed() => return,
        }
    };
    drive(encrypted, phase, router, http, limits, &counters, stopped).await;
}

fn timed_out(expired: Expired, counters: &ConnectionCounters) {
    if expired.unauthenticated {
        counters.unauthenticated_timeouts.inc();
    }
    tracing::debug!(
        phase = expired.phase,
        unauthenticated = expired.unauthenticated,
        "closing a connection that timed out"
    );
}

/// Serves one connection's requests over `io`, whose reads tell `phase` when bytes arrive.
async fn drive<I>(
    io: I,
    phase: Arc<Phase>,
    router: Router,
    http: auto::Builder<TokioExecutor>,
    limits: ConnectionLimits,
    counters: &ConnectionCounters,
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
        if phase.is_dropped() {
            tracing::debug!("closing a connection without its answer, as asked");
            return;
        }
        if phase.is_evicted() {
            tracing::debug!("closing a connection not yet authenticated to make room");
            return;
        }
        if phase.close_requested() && !closing {
            // hyper sends what is in flight, then closes.
            closing = true;
            conn.as_mut().graceful_shutdown();
        }
        if let Some(expired) = phase.expired(&limits) {
            timed_out(expired, counters);
            return;
        }
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

/// The router for one connection, marking its phase busy while a request is handled and
/// handing each request the [`ClientConnection`].
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

    fn call(&self, mut request: hyper::Request<Incoming>) -> Self::Future {
        self.phase
            .request_began(request.version() == Version::HTTP_2);
        request
            .extensions_mut()
            .insert(ClientConnection(self.phase.clone()));
        let busy = Busy(self.phase.clone());
        let router = self.router.clone();
        Box::pin(async move {
            let response = router.oneshot(request.map(Body::new)).await?;
            if response.extensions().get::<DropConnection>().is_some() {
                // Listening before asking, so the end cannot slip by unheard.
                let closed = busy.0.closed.notified();
                let mut closed = pin!(closed);
                closed.as_mut().enable();
                busy.0.request_drop();
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
