//! Accepting connections: HTTP/1.1, and HTTP/2 over cleartext TCP with prior knowledge (h2c,
//! told apart by its preface on the same port), with timeouts, connection caps, graceful
//! shutdown, and closing a connection without an answer when a handler asks for it
//! ([`DropConnection`]).
//!
//! `axum::serve` has none of these limits: a client that sends half its headers, or opens a
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
//! **Until a connection has presented a valid token** (the token check tells it through the
//! [`ClientConnection`] each request carries), its *head* and *idle* phases are held to the
//! shorter `unauthenticated_timeout`: a connection opened only to hold a place is let go within
//! it. An answer `401` closes its connection once sent (`Connection: close` under HTTP/1.1, a
//! GOAWAY under HTTP/2), so a client with a wrong token holds no place either.
//!
//! On an HTTP/2 connection many requests are in flight at once (each on its own task): the
//! connection is busy while any is, and idle when none is. Bytes arriving while idle do not start
//! a *head* phase there, since HTTP/2 sends frames that are no request (window updates, pings,
//! settings acknowledgements): an idle HTTP/2 connection is closed `idle_timeout` after its last
//! answer, whatever it sends meanwhile, and a request head begun then is bounded by that time.
//! At most [`MAX_CONCURRENT_STREAMS`] requests run at once on one HTTP/2 connection.
//!
//! Over TLS ([`serve_tls`]) the handshake is part of the first *head* phase: a client must
//! finish it and send its first request's headers within `header_read_timeout` of connecting,
//! and within `unauthenticated_timeout` when that is shorter (it always is before a token).
//! The phases watch the bytes on the socket, under the encryption.
//!
//! **Caps.** A client address (an IPv6 address by its /64) holds at most
//! `max_connections_per_address` connections: one more is closed as it arrives, before any
//! handshake. At most `max_connections` are served in all: when every place is taken, a new
//! connection takes the place of a connection that has not authenticated yet, the one heard from
//! longest ago (closed at once; see `occupancy`); when every connection has, the new one waits in
//! the kernel's listen queue until one closes. So neither idle handshakes nor clients with a wrong token can keep a client with the
//! token out (`tests/abuse.rs`). On HTTP/2 a handler's [`DropConnection`] closes the whole
//! connection, and with it the other requests in flight on it.

mod accept;
mod connection;
mod occupancy;
mod phase;

pub use accept::{serve, serve_tls, ConnectionLimits, MAX_CONCURRENT_STREAMS};
pub use connection::{ClientConnection, DropConnection};
