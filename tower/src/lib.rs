//! # edgelimit-tower
//!
//! Rate limiting for axum, tonic and hyper services as a [`tower_layer::Layer`], over any of
//! edgelimit's stores: in memory for one process, or one Redis that every instance of a
//! service shares, deciding against one quota.
//!
//! ```no_run
//! use std::net::SocketAddr;
//!
//! use axum::{routing::get, Router};
//! use edgelimit::MemoryStore;
//! use edgelimit_tower::{Builder, ConfigBuilder, LimitBuilder, RuleBuilder};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = ConfigBuilder::new()
//!     .rule(
//!         RuleBuilder::new("api")
//!             .path_prefix("/api/")
//!             // Both limits in one store call, all or nothing: a request one denies is
//!             // charged to neither.
//!             .limit(LimitBuilder::new("per-key", "gcra 10/1s burst 20").identifier("api-key:header:x-api-key"))
//!             .limit(LimitBuilder::new("per-ip", "fixed 1000/1h")),
//!     )
//!     .build()?;
//! let layer = Builder::new(config).build(MemoryStore::new())?;
//! let app = Router::new().route("/api/items", get(|| async { "items" })).layer(layer);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! // The peer address: what the `ip` identifier is resolved from.
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(())
//! # }
//! ```
//!
//! A request goes down the request path the Cloudflare Worker runs (`edgelimit_engine::Edge`):
//! the rules that match it (host, method, path), each limit's identifier, the lists, one store
//! call deciding every limit all or nothing, each limit's fail mode when the store cannot
//! answer; then it is forwarded with the IETF `RateLimit-Policy` and `RateLimit` headers, or
//! answered 429 (with `Retry-After`), 503, 400 or 403 with an RFC 9457 problem body. Once the
//! service has answered, a cost read from its response is settled and concurrency leases are
//! released. The configuration is the Worker's too — TOML or JSON (`config_file`), or
//! [`ConfigBuilder`] in code — see docs/configuration.md.
//!
//! The client address is the peer, or behind trusted proxies the right-most address of the one
//! forwarding header they write that none of them wrote (`edgelimit::net::ClientAddress`): a
//! client cannot choose its own identifier by sending `X-Forwarded-For`. IPv6 clients are
//! counted by their `/64` network (`ipv6_prefix`).
//!
//! # Layout
//!
//! - [`layer`]: [`RateLimitLayer`], and its [`Builder`] (client addresses, exemptions, custom
//!   sources).
//! - [`service`]: [`RateLimit`], the limited service, and its response future.
//! - [`builder`]: the configuration in code: [`ConfigBuilder`], [`RuleBuilder`],
//!   [`LimitBuilder`].
//! - `request`: an `http` request as the request path reads it.
//! - [`peer`]: where the peer's address is recorded ([`PeerAddr`], axum's `ConnectInfo`).
//! - `custom`: the service's own identifiers and costs, by name.
//! - `exempt`: CORS preflights and exempt paths.
//! - [`body`]: [`ResponseBody`], the service's body or the layer's answer.
//! - [`error`]: [`BuildError`], what a layer cannot be built from.
//! - `redis` (feature `resp`): [`redis_store`], Redis set up as the configuration says.
//! - `trace`: the layer's `edgelimit.layer` span around each limited request.
//! - `otel` (feature `otel`): spans and the metrics page exported over OpenTelemetry.

#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]

// The README's examples compile (and the complete ones run) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub mod body;
pub mod builder;
mod custom;
pub mod error;
mod exempt;
pub mod layer;
#[cfg(feature = "otel")]
pub mod otel;
pub mod peer;
#[cfg(feature = "resp")]
mod redis;
mod request;
pub mod service;
mod shared;
mod trace;

pub use body::ResponseBody;
pub use builder::{ConfigBuilder, LimitBuilder, RuleBuilder};
pub use edgelimit_engine::config::file as config_file;
pub use edgelimit_engine::{Config, ConfigError, TraceIdentifiers};
pub use error::BuildError;
pub use layer::{Builder, RateLimitLayer};
pub use peer::{default_peer, PeerAddr};
#[cfg(feature = "resp")]
pub use redis::redis_store;
pub use service::{RateLimit, ResponseFuture};
