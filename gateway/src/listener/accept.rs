//! The accept loop: each new connection admitted by its address's cap and the global cap (making
//! room by evicting a connection not yet authenticated), then served on a task of its own until
//! a shutdown, which it lets finish what is in flight.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use super::connection::{connection, Permit};
use super::occupancy::Occupancy;
use super::phase::Phase;
use crate::config::Config;
use crate::metrics::ConnectionCounters;

/// The limits [`serve`] holds connections to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a request's headers may take to arrive.
    pub header_read_timeout: Duration,
    /// How long a connection may wait between requests.
    pub idle_timeout: Duration,
    /// Until a connection has presented a valid token, how long it may wait in either of the
    /// two (and for its TLS handshake).
    pub unauthenticated_timeout: Duration,
    /// Most connections served at once (0 counts as 1).
    pub max_connections: usize,
    /// Most connections from one client address (an IPv6 /64) at once (0 counts as 1).
    pub max_connections_per_address: usize,
}

impl From<&Config> for ConnectionLimits {
    fn from(config: &Config) -> ConnectionLimits {
        ConnectionLimits {
            header_read_timeout: config.header_read_timeout,
            idle_timeout: config.idle_timeout,
            unauthenticated_timeout: config.unauthenticated_timeout,
            max_connections: config.max_connections,
            max_connections_per_address: config.max_connections_per_address,
        }
    }
}

/// Most requests in flight at once on one HTTP/2 connection (further ones are refused by the
/// protocol's own flow control: the client waits). Enough for one client process's whole
/// concurrency on one connection, which is what HTTP/2 is for here.
pub const MAX_CONCURRENT_STREAMS: u32 = 256;

/// Serves `router` on `listener` until `shutdown` completes, then lets each connection finish
/// the request in flight (idle ones close at once) and returns when all have closed. What it
/// does to connections is counted in `counters` ([`ConnectionCounters::default`] for none).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    counters: ConnectionCounters,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, router, limits, counters, None, shutdown).await
}

/// [`serve`] over TLS: each connection's handshake by `tls` (see the module's documentation for
/// how it is timed).
pub async fn serve_tls(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    counters: ConnectionCounters,
    tls: TlsAcceptor,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, router, limits, counters, Some(tls), shutdown).await
}

async fn serve_with(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    counters: ConnectionCounters,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let occupancy = Occupancy::new(limits.max_connections_per_address, counters.clone());
    let (stop, stopped) = watch::channel(false);
    let mut http = auto::Builder::new(TokioExecutor::new());
    // The watchdog enforces it instead (see the module's documentation).
    http.http1().header_read_timeout(None);
    http.http2().max_concurrent_streams(MAX_CONCURRENT_STREAMS);
    let mut shutdown = pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = accept(&listener) => accepted,
        };
        let Some(seat) = occupancy.admit(peer.ip()) else {
            counters.refused.inc();
            tracing::debug!("closing a new connection: its address holds its most already");
            continue;
        };
        let phase = Arc::new(Phase::new());
        let permit = match permits.clone().try_acquire_owned() {
            Ok(permit) => Permit::Held(permit),
            // Every place is taken: the connection without a token heard from longest ago gives
            // its place up, which the new one waits for on its own task while this loop goes on
            // accepting (a burst of connections then never sits in the listen queue behind one
            // waiting for a place).
            Err(_) if occupancy.evict_unauthenticated() => {
                counters.evicted.inc();
                Permit::Freed(permits.clone())
            }
            // Every connection has presented a token: this one, and the listen queue behind
            // it, wait for one to close.
            Err(_) => tokio::select! {
                biased;
                () = &mut shutdown => break,
                permit = permits.clone().acquire_owned() => {
                    Permit::Held(permit.expect("the semaphore is never closed"))
                }
            },
        };
        // A connection holding a place can be evicted from now on, before its task first runs:
        // else a burst of connections whose tasks wait to be scheduled would hold every place
        // out of eviction's reach, and this loop would wait for one to close by itself.
        if let Permit::Held(_) = permit {
            occupancy.watch(&seat, phase.clone());
        }
        tokio::spawn(connection(
            stream,
            seat,
            phase,
            permit,
            occupancy.clone(),
            tls.clone(),
            router.clone(),
            http.clone(),
            limits,
            counters.clone(),
            stopped.clone(),
        ));
    }
    let _ = stop.send(true);
    drop(stopped);
    // Every connection task holds a receiver: all are gone when the channel closes.
    stop.closed().await;
    Ok(())
}

/// The next connection and its peer's address.
async fn accept(listener: &TcpListener) -> (TcpStream, std::net::SocketAddr) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                // Small request/response exchanges: send each answer at once, not after the
                // client's ACK.
                if let Err(e) = stream.set_nodelay(true) {
                    tracing::trace!(error = %e, "cannot set TCP_NODELAY");
                }
                return (stream, peer);
            }
            // Out of file descriptors or the like: wait for some to close rather than spin.
            Err(e) => {
                tracing::warn!(error = %e, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
