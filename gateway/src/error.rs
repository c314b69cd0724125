//! Why the gateway could not start. Its own module so that what fails at start — the TLS
//! certificate and binding (`gateway`), Redis and its ACL user (`redis_exec`), the router
//! (`app`) — shares the error without importing one another.

use std::net::SocketAddr;

use crate::acl::AclError;
use crate::tls::TlsError;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// The ACL user that holds scripts to the allow-list could not be made.
    #[error(transparent)]
    Acl(#[from] AclError),
    /// The allow-list names a command that reaches another database than the Redis URL's.
    #[error(
        "`{entry}` cannot be allowed: it reaches another database than the one the Redis URL \
         names (SELECT, SWAPDB, MOVE, COPY and FLUSHALL never are; FLUSHDB empties this one)"
    )]
    NeverAllowed {
        /// The allow-list's entry.
        entry: String,
    },
    /// The TLS certificate or key could not be used.
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
}
