//! edgelimit's request path, for any host: the configuration model and the pipeline that the
//! Cloudflare Worker, the tower layer, `sim replay --config` and `edgelimit-admin` all drive
//! (docs/design.md §4).
//!
//! Per request: match the configured rules, take each limit's identifier from the request,
//! decide every limit in one all-or-nothing call to the store, then either forward with
//! `RateLimit` headers or answer 429 with a problem body; after the response, run the work it
//! left (settle what it reserved, the store's upkeep). The host converts its request into a
//! [`RequestView`], calls [`Edge::handle`], and does the I/O around it; nothing here touches a
//! network or a runtime.
//!
//! The crate's README shows a request through the pipeline, end to end.
//!
//! # Layout
//!
//! - [`config`]: `EDGELIMIT_CONFIG` parsed and validated into rules, every error naming its
//!   field; [`config::file`] (native): the same from a `wrangler.toml`; [`config::global`]:
//!   regions and the home of global limits.
//! - [`normalize`]: a request's path and host as the origin reads them, which rules match.
//! - [`rules`]: rules, the limits they apply, and matching by host, method and path.
//! - [`identify`]: what a request offers ([`RequestView`]) and where identifiers come from.
//! - [`reading`]: the request as the path reads it, once for every host: path and host as the
//!   origin serves them, each field one value ([`reading::Duplicates`]).
//! - [`lists`]: deny and allow lists at the edge: static entries, the request's probe, the
//!   isolate's memory of dynamic denials.
//! - [`plan`]: request → checks ([`Plan`]).
//! - [`read_ahead`]: a request read and matched before the request path, for a host that
//!   passes unlimited requests through untouched (tower).
//! - [`ruling`]: verdicts → the answer ([`Outcome`]) → header fields and problem body.
//! - [`settlement`]: what a request settles once its response is known.
//! - [`after_response`]: the work a request leaves for after its response — its settlement and
//!   the store's upkeep — as one value every host runs.
//! - [`own_id`]: the path's own request ids, which no client chooses.
//! - [`pipeline`]: the request path, written once — [`Edge::handle`] and what it answers.
//! - [`admin_route`]: live control through a host's admin route (`admin_path`).
//! - [`route_answer`]: what the limiter's own routes answer — status, header fields, body —
//!   written by every host as it is.
//! - `command` (feature `cli`): the control command line of `edgelimit-admin` and `sim
//!   --overrides`, checked against the configuration into a control operation.
//! - [`route_guard`]: the door of the guarded routes (admin, metrics): the token, and failed
//!   attempts limited per client address.
//! - [`wire`]: the calls and answers between a host and its Durable Objects or admin route.
//! - [`exceed_counters`]: what `soft`, staged enforcement and delays did, on the metrics page.
//! - [`metrics_page`]: the metrics page's content type and the configuration's gauges.
//! - [`request_decision`]: what the path decided for a request, in one word for every host.
//! - [`trace`]: the request path's spans (feature `tracing`).
//! - [`log_line`]: the decision log line, written by the hosts and read by `sim`.

#![warn(missing_docs, rust_2018_idioms)]

// The README's example compiles and runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub mod admin_route;
pub mod after_response;
#[cfg(feature = "cli")]
pub mod command;
pub mod config;
pub mod exceed_counters;
pub mod identify;
pub mod lists;
pub mod log_line;
pub mod metrics_page;
pub mod normalize;
pub mod own_id;
pub mod pipeline;
pub mod plan;
pub mod read_ahead;
pub mod reading;
pub mod request_decision;
pub mod route_answer;
pub mod route_guard;
pub mod rules;
pub mod ruling;
pub mod settlement;
pub mod trace;
pub mod wire;

pub use after_response::{AfterResponse, AfterResponseDone, ResponseView};
pub use config::{Config, ConfigError, CustomSource, CONFIG_VAR};
pub use identify::{IdentifierSource, OwnedRequest, RequestView};
pub use lists::{Denial, DenyCache, ProbeSource, StaticList, Via};
pub use log_line::{LimitLine, LogLine};
pub use metrics_page::METRICS_CONTENT_TYPE;
pub use pipeline::{AnalyticsPoint, Edge, Handled, Route};
pub use plan::{Absent, Decided, Incoming, Plan};
pub use request_decision::RequestDecision;
pub use rules::{
    CostSource, Enforce, Exceed, Missing, Rule, RuleLimit, Scope, Settle, StatusSet, Unenforced,
};
pub use ruling::{Action, Binding, Outcome, Response, EXCEEDED_HEADER};
pub use settlement::Settlement;
pub use trace::TraceIdentifiers;
