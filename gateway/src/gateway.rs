//! A running gateway: bound, connected, serving until shut down.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpSocket};

use crate::app::{routes, Page};
use crate::config::Config;
use crate::error::GatewayError;
use crate::listener::{serve, serve_tls, ConnectionLimits};
use crate::tls::{Certificates, TlsError};

/// Connections the kernel may hold for the gateway before it accepts them (it caps the number at
/// `net.core.somaxconn`, 4096 by default on Linux). Beyond it the kernel drops new connections'
/// packets and their clients resend after a second or more: the queue must absorb a burst of
/// connections, which the accept loop takes as fast as it can make room for them, rather than
/// tokio's default of 1024.
pub const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `addr` with [`LISTEN_BACKLOG`] (and `SO_REUSEADDR`, as tokio's own `bind`).
fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// A running gateway.
pub struct Gateway {
    addr: SocketAddr,
    certificates: Option<Arc<Certificates>>,
    page: Page,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("addr", &self.addr)
            .field("tls", &self.certificates.is_some())
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// Reads the TLS certificate if one is configured, binds `config.listen`, connects to
    /// Redis, and serves until [`Gateway::shutdown`].
    pub async fn start(config: Config) -> Result<Gateway, GatewayError> {
        tracing::info!(?config, "starting");
        // Before binding: a bad certificate is the operator's mistake to hear about first.
        let certificates = config.tls.clone().map(Certificates::load).transpose()?;
        let bind_error = |source| GatewayError::Bind {
            addr: config.listen,
            source,
        };
        let listener = bind(config.listen).map_err(bind_error)?;
        let addr = listener.local_addr().map_err(bind_error)?;
        let limits = ConnectionLimits::from(&config);
        let (router, counters, page) = routes(config).await?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let acceptor = certificates.as_ref().map(Certificates::acceptor);
        let task = tokio::spawn(async move {
            let stopped = async {
                let _ = rx.await;
            };
            let served = match acceptor {
                Some(tls) => serve_tls(listener, router, limits, counters, tls, stopped).await,
                None => serve(listener, router, limits, counters, stopped).await,
            };
            if let Err(e) = served {
                tracing::warn!(error = %e, "the listener failed");
            }
        });
        tracing::info!(%addr, tls = certificates.is_some(), "listening");
        Ok(Gateway {
            addr,
            certificates,
            page,
            shutdown: Some(tx),
            task,
        })
    }

    /// The address it listens on (the real port when `listen` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The metrics page as `GET /metrics` serves it, read anew at each call (for an exporter
    /// such as the `otel` feature's); `None` when the page is off.
    pub fn metrics_text(&self) -> Option<impl Fn() -> String + Send + Sync + 'static> {
        self.page.metrics.as_ref()?;
        let page = self.page.clone();
        Some(move || {
            page.metrics
                .as_ref()
                .and_then(|m| m.encode().ok())
                .unwrap_or_default()
        })
    }

    /// The metrics page's counters, when the page is on (for the `otel` feature's
    /// histogram).
    #[cfg(feature = "otel")]
    pub(crate) fn metrics(&self) -> Option<&crate::metrics::Metrics> {
        self.page.metrics.as_ref()
    }

    /// `https` when serving TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        match self.certificates {
            Some(_) => "https",
            None => "http",
        }
    }

    /// Reads the TLS certificate and key files again and serves the new pair to every
    /// connection from now on; established connections keep theirs. `Ok(false)` when the
    /// gateway serves cleartext HTTP. On an error the pair in use stays.
    pub fn reload_tls(&self) -> Result<bool, TlsError> {
        match &self.certificates {
            Some(certificates) => certificates.reload().map(|()| true),
            None => Ok(false),
        }
    }

    /// Stops accepting, finishes requests in flight, and returns.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.task).await;
    }
}
