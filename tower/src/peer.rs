//! The peer: the address that connected, which the client address is resolved from
//! (`edgelimit::net::ClientAddress`). A server puts it in the request's extensions: axum's
//! `ConnectInfo<SocketAddr>` (`into_make_service_with_connect_info`), or [`PeerAddr`] from a
//! hyper service's accept loop; any other (tonic's `TcpConnectInfo`) is read by a closure
//! ([`crate::Builder::peer`]).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::request::Parts;

/// The address a request's connection came from, as a server without axum's `ConnectInfo`
/// records it: insert it into each request's extensions (a hyper accept loop knows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

/// Reads the peer from a request.
pub(crate) type PeerFn = Arc<dyn Fn(&Parts) -> Option<IpAddr> + Send + Sync>;

/// How the layer finds the peer: the extensions a server sets ([`default_peer`]), or a closure.
#[derive(Clone)]
pub(crate) struct Peer(pub(crate) PeerFn);

impl Default for Peer {
    fn default() -> Peer {
        Peer(Arc::new(default_peer))
    }
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Peer(..)")
    }
}

/// The peer as servers record it: axum's `ConnectInfo<SocketAddr>` (with the `axum` feature),
/// else a [`PeerAddr`]; `None` when the request carries neither.
pub fn default_peer(parts: &Parts) -> Option<IpAddr> {
    #[cfg(feature = "axum")]
    if let Some(info) = parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(info.0.ip());
    }
    parts.extensions.get::<PeerAddr>().map(|peer| peer.0.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts() -> Parts {
        http::Request::new(()).into_parts().0
    }

    #[test]
    fn the_peer_comes_from_the_extensions_servers_set() {
        let mut request = parts();
        assert_eq!(default_peer(&request), None);
        request
            .extensions
            .insert(PeerAddr("198.51.100.7:4000".parse().unwrap()));
        assert_eq!(
            default_peer(&request),
            Some("198.51.100.7".parse().unwrap())
        );
        #[cfg(feature = "axum")]
        {
            // axum's own record wins: it is what the server accepted.
            request.extensions.insert(axum::extract::ConnectInfo(
                "[2001:db8::1]:443".parse::<SocketAddr>().unwrap(),
            ));
            assert_eq!(default_peer(&request), Some("2001:db8::1".parse().unwrap()));
        }
    }
}
