//! # edgelimit-gateway
//!
//! A server that speaks the Upstash REST protocol in front of a real Redis: the single-command,
//! path, `/pipeline` and `/multi-exec` forms, bearer tokens (header or `_token`), base64 results,
//! `upstash-sync-token`, and the rewrite of scripts carrying the Upstash-only
//! `#!lua flags=allow-key-locking` shebang. It is how tests, local development and self-hosters
//! run the edgelimit Worker (or any Upstash client) without an Upstash account (docs/design.md
//! §5).
//!
//! Its boundary: a token may run the commands on the allow-list and nothing else, scripts
//! included — every command runs as a Redis ACL user allowed exactly that list ([`acl`]), and
//! no command reaches another database than the Redis URL's. The default list is what edgelimit
//! itself sends and its scripts call ([`config::DEFAULT_COMMANDS`]). Clients that stall or hold
//! places are cut off: a header-read timeout, an idle keep-alive timeout, a shorter timeout until
//! a connection has presented a valid token, a connection closed after its `401`, a cap per
//! client address and a global one whose places connections without a token give up first
//! ([`listener`]). What a request can grow is bounded: its body, its pipeline (parsed once,
//! stopped at the limit) and the map of rewritten scripts ([`scripts`]). It serves HTTPS from a
//! certificate and key ([`tls`]), so it can face the internet without a proxy in front.
//!
//! # Layout
//!
//! - [`config`]: what it is told — address, Redis, tokens, allow-list, limits, timeouts.
//! - [`gateway`]: [`Gateway`], started and shut down.
//! - [`error`]: [`GatewayError`], why it could not start.
//! - [`listener`]: the accept loop — timeouts, connection caps, graceful shutdown.
//! - [`tls`]: HTTPS from a certificate and key, reloaded while serving.
//! - `app`: the router — routes, the 405 fallback, the two middleware layers.
//! - `middleware`: around every request — the token check; counting, logging, sync token.
//! - `routes`: one module per route — `single` (`POST /` and the path form), `pipeline`,
//!   `transaction` (`/multi-exec`), `metrics_page`; `call` is what they share (body limits,
//!   allow-list check, script rewrite).
//! - `state`: what handlers share; `respond`: the gateway's own JSON answers.
//! - `redis_exec`: the Redis connections, round trips, recovery after a Redis restart.
//! - [`acl`]: the Redis ACL user that holds scripts to the allow-list.
//! - [`auth`]: tokens from the header or query, compared in constant time.
//! - [`command`]: JSON and path forms into commands (one pass), the allow-list.
//! - [`scripts`]: the rewrite of scripts with the Upstash-only flag, and its bounded map.
//! - [`reply`]: Redis replies into `{"result"}` / `{"error"}` JSON, base64 on request.
//! - [`metrics`]: the optional Prometheus page, `GET /metrics`.
//! - `telemetry`: the spans of a request and of its round trips to Redis.
//! - `otel` (feature `otel`): the spans and the metrics page exported over OpenTelemetry.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

pub mod acl;
mod app;
pub mod auth;
pub mod command;
pub mod config;
pub mod error;
pub mod gateway;
pub mod listener;
pub mod metrics;
mod middleware;
#[cfg(feature = "otel")]
pub mod otel;
mod redis_exec;
pub mod reply;
mod respond;
mod routes;
pub mod scripts;
mod state;
mod telemetry;
pub mod tls;

pub use app::router;
pub use config::{Config, MetricsPage, RedisAcl};
pub use error::GatewayError;
pub use gateway::Gateway;
pub use listener::{serve, serve_tls};
pub use tls::{Certificates, TlsError, TlsFiles};
