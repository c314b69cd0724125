//! Test support for edgelimit: what more than one crate's tests (and benches) need, in one place.
//! Every server a test starts listens on a free `127.0.0.1` port — bound as port 0 by the server
//! itself, or picked and retried on a fresh one when taken, all through [`net`] — and stops when
//! dropped; every wait is bounded.
//!
//! ```no_run
//! use edgelimit_testkit::{RedisCluster, RedisServer};
//!
//! let server = RedisServer::start(); // killed when dropped
//! println!("{}", server.url()); // redis://127.0.0.1:<port>/
//! let cluster = RedisCluster::start(3);
//! println!("{:?}", cluster.urls());
//! ```
//!
//! Starting a server panics with a clear message when its program is missing (`scripts/test`
//! installs `redis-server`; `scripts/setup.d/worker-toolchain.sh` wrangler) or it does not come
//! up: these are test helpers, and a test without its server cannot say anything useful.
//!
//! # Layout
//!
//! Servers:
//! - [`redis`]: one throwaway `redis-server` ([`RedisServer`]), persisting nothing.
//! - [`cluster`]: a throwaway Redis Cluster ([`RedisCluster`]), replicas optional.
//! - [`gateway`]: the gateway in process in front of a test's Redis ([`GatewayServer`]).
//! - [`wrangler`]: the built Worker (or another project's) under `wrangler dev`.
//! - [`origin`]: origins for the Worker: an echo, or any axum app.
//! - [`edge`]: the Worker's end-to-end stack (origin, Worker, and Redis with the gateway or the
//!   Worker's own Durable Objects) and its queries.
//! - [`objects`]: what the Worker's Durable Objects hold under `wrangler dev`.
//!
//! Clients and parsers:
//! - [`resp`]: a minimal RESP client ([`command`], [`Reply`]) for setup and assertions.
//! - [`http`]: a response header as text; raw HTTP/1.1 on a socket.
//! - [`metrics`]: a Prometheus/OpenMetrics page, scraped and parsed.
//! - `otlp` (feature `otlp`): an OTLP receiver, HTTP/protobuf and gRPC, decoding what arrives.
//! - [`sf`]: structured-field lists (`RateLimit`, `RateLimit-Policy`).
//! - [`tls`]: a certificate authority and server certificates made at test time.
//!
//! Plumbing:
//! - [`net`]: how every server gets its port ([`net::start_on_free_port`], port 0); a listener
//!   that never answers.
//! - [`dir`]: temporary directories removed on drop; the checkout's root.
//! - [`wait`]: polling a condition with a bound.
//! - [`task`]: a two-thread tokio runtime; a test's concurrent clients as tasks, joined.
//! - [`rng`]: the seeded generator tests draw their inputs from.
//!
//! What one crate's tests alone use stays beside them (the library's conformance and
//! differential bodies in `tests/common`, the admin CLI's suite in `admin/tests/common`).

#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]

pub mod cluster;
pub mod delay_proxy;
pub mod dir;
pub mod edge;
pub mod gateway;
pub mod http;
pub mod metrics;
pub mod net;
pub mod objects;
pub mod origin;
#[cfg(feature = "otlp")]
pub mod otlp;
pub mod redis;
pub mod resp;
pub mod rng;
pub mod sf;
pub mod task;
pub mod tls;
pub mod wait;
pub mod wrangler;

pub use cluster::RedisCluster;
pub use delay_proxy::DelayProxy;
pub use gateway::GatewayServer;
pub use redis::RedisServer;
pub use resp::{command, Reply};
pub use wrangler::WranglerDev;
