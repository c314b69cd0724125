//! A running gateway: bound, connected, serving until shut down.

use std::net::SocketAddr;

use tokio::net::TcpListener;

use crate::app::router;
use crate::config::Config;
use crate::error::GatewayError;
use crate::listener::{serve, ConnectionLimits};

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
        tracing::info!(?config, "starting");
        let bind_error = |source| GatewayError::Bind {
            addr: config.listen,
            source,
        };
        let listener = TcpListener::bind(config.listen).await.map_err(bind_error)?;
        let addr = listener.local_addr().map_err(bind_error)?;
        let limits = ConnectionLimits::from(&config);
        let router = router(config).await?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let stopped = async {
                let _ = rx.await;
            };
            if let Err(e) = serve(listener, router, limits, stopped).await {
                tracing::warn!(error = %e, "the listener failed");
            }
        });
        tracing::info!(%addr, "listening");
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
