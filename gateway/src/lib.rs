//! # edgelimit-gateway
//!
//! A server that speaks the Upstash REST protocol in front of a real Redis: the single-command,
//! path, `/pipeline` and `/multi-exec` forms, bearer tokens (header or `_token`), base64 results,
//! `upstash-sync-token`, and the rewrite of scripts carrying the Upstash-only
//! `#!lua flags=allow-key-locking` shebang. It is how tests, local development and self-hosters
//! run the edgelimit Worker (or any Upstash client) without an Upstash account.
//!
//! # Layout
//!
//! - [`config`]: what it is told — address, Redis, tokens, allow-list, limits.
//! - [`auth`]: tokens from the header or query, compared in constant time.
//! - [`command`]: JSON and path forms into commands, the allow-list, script rewrites.
//! - [`reply`]: Redis replies into `{"result"}` / `{"error"}` JSON, base64 on request.
//! - [`server`]: routes, body limits, running commands, graceful shutdown.
//! - [`metrics`]: the optional Prometheus page, `GET /metrics`.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

pub mod auth;
pub mod command;
pub mod config;
pub mod metrics;
pub mod reply;
pub mod server;

pub use config::{Config, MetricsPage};
pub use server::{router, serve, Gateway, GatewayError};
