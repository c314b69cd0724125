//! Client addresses (docs/design.md §8): which address a request is limited by.
//!
//! Two rules, written once for every front end (the Worker, native services, the simulator):
//! behind proxies, the client is the right-most address of the forwarding chain that no trusted
//! proxy wrote; and an IPv6 client is limited by its network (a `/64` by default), since it holds
//! at least that many addresses.
//!
//! # Layout
//!
//! - [`prefix`]: [`IpPrefix`], the one parser of addresses and networks (`203.0.113.0/24`),
//!   shared with the deny lists, and their canonical text.
//! - [`text`]: [`AddressText`], that text held inline (no allocation).
//! - [`grouping`]: [`AddressGrouping`], an address → the identifier it is limited by.
//! - `forwarded`: reading `X-Forwarded-For`, `Forwarded` (RFC 7239) and `X-Real-IP` hop by hop.
//! - [`proxies`]: [`TrustedProxies`], [`ProxyHeader`] and [`ClientAddress`], the walk that
//!   finds the client; `named`: the named sets of networks it accepts.
//! - [`error`]: the [`AddressError`] every parser here returns.

pub mod error;
mod forwarded;
pub mod grouping;
mod named;
pub mod prefix;
pub mod proxies;
pub mod text;

pub use error::AddressError;
pub use grouping::AddressGrouping;
pub use prefix::IpPrefix;
pub use proxies::{ClientAddress, ProxyHeader, TrustedProxies};
pub use text::AddressText;
