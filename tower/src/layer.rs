//! [`RateLimitLayer`] and its [`Builder`]: a configuration, a store, and how this service finds
//! its clients, exemptions and custom sources.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use edgelimit::net::ClientAddress;
use edgelimit::{Clock, Store, SystemClock};
use edgelimit_engine::config::{RouteToken, METRICS_TOKEN_VAR};
use edgelimit_engine::route_guard::RouteGuard;
use edgelimit_engine::rules::PathMatch;
use edgelimit_engine::{Config, Edge, TraceIdentifiers};
use http::header::HeaderName;
use http::{request, response};
use tower_layer::Layer;

use crate::error::BuildError;
use crate::exempt::Exemptions;
use crate::peer::Peer;
use crate::request::Reading;
use crate::service::RateLimit;
use crate::shared::Shared;

/// A rate-limiting [`Layer`] for `http` services (axum, tonic, hyper): every request goes down
/// the one request path (`edgelimit_engine::Edge`) — rules, one all-or-nothing store call, the
/// answer — and its response gets the `RateLimit` headers. Cheap to clone: every clone, and
/// every service it wraps, shares one path over one store. Built by [`Builder`].
pub struct RateLimitLayer<S> {
    pub(crate) shared: Arc<Shared<S>>,
}

impl<S> Clone for RateLimitLayer<S> {
    fn clone(&self) -> RateLimitLayer<S> {
        RateLimitLayer {
            shared: self.shared.clone(),
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for RateLimitLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("edge", &self.shared.edge)
            .field("reading", &self.shared.reading)
            .field("exempt", &self.shared.exempt)
            .finish()
    }
}

impl<S> RateLimitLayer<S> {
    /// The request path: its configuration, its limiter (the store, for live control), and
    /// its counters ([`Edge::metrics_text`]).
    pub fn edge(&self) -> &Edge<S> {
        &self.shared.edge
    }
}

impl<S, Svc> Layer<Svc> for RateLimitLayer<S> {
    type Service = RateLimit<Svc, S>;

    fn layer(&self, inner: Svc) -> RateLimit<Svc, S> {
        RateLimit::new(inner, self.shared.clone())
    }
}

/// Builds a [`RateLimitLayer`] from a configuration (`Config`: TOML or JSON, or
/// [`crate::ConfigBuilder`]) and a store.
///
/// By default the client is the peer (no forwarding header is believed), and the configuration
/// may name no `custom:` source. CORS preflights are requests like any other unless the
/// configuration gives them a limit of their own (`preflight_limit`).
pub struct Builder {
    config: Config,
    reading: Reading,
    exempt: Exemptions,
    exempt_error: Option<BuildError>,
    clock: Arc<dyn Clock>,
    metrics_token: Option<String>,
    trace_identifiers: TraceIdentifiers,
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("config", &self.config)
            .field("reading", &self.reading)
            .field("exempt", &self.exempt)
            .field(
                "metrics_token",
                &self.metrics_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl Builder {
    /// A layer deciding as `config` says.
    pub fn new(config: Config) -> Builder {
        Builder {
            config,
            reading: Reading::default(),
            exempt: Exemptions::default(),
            exempt_error: None,
            clock: Arc::new(SystemClock),
            metrics_token: None,
            trace_identifiers: TraceIdentifiers::default(),
        }
    }

    /// The bearer token the configuration's `metrics_path` answers (at least 32 bytes), as the
    /// Worker's `EDGELIMIT_METRICS_TOKEN`: the page is served to `Authorization: Bearer
    /// <token>` only, failed attempts limited per client address, unless the configuration
    /// says `metrics_public = true`.
    pub fn metrics_token(mut self, token: &str) -> Builder {
        self.metrics_token = Some(token.to_string());
        self
    }

    /// How the client address is found: behind trusted proxies, from the one header they write
    /// (`ClientAddress::behind`), or the peer itself (`ClientAddress::direct`, the default).
    /// A forwarding header from a peer that is not a trusted proxy is never read.
    pub fn client_address(mut self, client: ClientAddress) -> Builder {
        self.reading.client = client;
        self
    }

    /// Where the peer's address is recorded, when not where [`crate::default_peer`] looks
    /// (axum's `ConnectInfo<SocketAddr>`, [`crate::PeerAddr`]): e.g. tonic's `TcpConnectInfo`.
    pub fn peer(
        mut self,
        peer: impl Fn(&request::Parts) -> Option<IpAddr> + Send + Sync + 'static,
    ) -> Builder {
        self.reading.peer = Peer(Arc::new(peer));
        self
    }

    /// Requests to paths matching `pattern` pass unlimited and unannounced: a path, with `*`
    /// for one segment and a final `**` for the rest (`/health`, `/static/**`), as a rule's
    /// `path`.
    pub fn exempt_path(mut self, pattern: &str) -> Builder {
        match PathMatch::pattern(pattern) {
            Ok(path) => self.exempt.paths.push(path),
            Err(problem) => {
                self.exempt_error.get_or_insert(BuildError::ExemptPath {
                    path: pattern.to_string(),
                    problem,
                });
            }
        }
        self
    }

    /// The identifier `custom:<name>`: what `identify` finds in a request (an authenticated
    /// user an earlier layer put in the extensions, a claim, a tenant), `None` when it has
    /// none (the limit's `missing` then applies). Hashed as any value when the configuration
    /// says `api-key:custom:<name>`.
    pub fn custom_identifier(
        mut self,
        name: &str,
        identify: impl Fn(&request::Parts) -> Option<String> + Send + Sync + 'static,
    ) -> Builder {
        self.reading
            .customs
            .add_identifier(name.to_string(), Arc::new(identify));
        self
    }

    /// The cost `custom:<name>` counts a response when `counts` says so, and nothing
    /// otherwise: a limit with `cost = { reserve = 1, from = "custom:<name>" }` reserves one
    /// request before the service runs (denying once the quota is spent) and keeps it only
    /// for the responses `counts` selects — e.g. 401s, to throttle failed logins alone.
    pub fn count_when(
        self,
        name: &str,
        counts: impl Fn(&response::Parts) -> bool + Send + Sync + 'static,
    ) -> Builder {
        self.response_cost(name, move |response| Some(u64::from(counts(response))))
    }

    /// The cost `custom:<name>`: what a response costs (`None`: the reserved estimate stands),
    /// committed in place of the estimate `cost = { reserve = N, from = "custom:<name>" }`
    /// reserved.
    pub fn response_cost(
        mut self,
        name: &str,
        cost: impl Fn(&response::Parts) -> Option<u64> + Send + Sync + 'static,
    ) -> Builder {
        self.reading
            .customs
            .add_cost(name.to_string(), Arc::new(cost));
        self
    }

    /// How the spans write the identifier of the limit an answer is about
    /// (`edgelimit.identifier`): a keyed hash by default, in clear only where traces are kept
    /// as privately as the store's keys, or not at all (docs/observability.md, "Spans").
    pub fn trace_identifiers(mut self, identifiers: TraceIdentifiers) -> Builder {
        self.trace_identifiers = identifiers;
        self
    }

    /// The clock "now" is read from (the system's by default): a test's manual clock, shared
    /// with its store.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Builder {
        self.clock = clock;
        self
    }

    /// The layer over `store`. An error names a `custom:` source without its closure, a
    /// closure no limit names, an exempt path that is no pattern, or a metrics page without its
    /// token (or with one too short).
    pub fn build<S: Store>(self, store: S) -> Result<RateLimitLayer<S>, BuildError> {
        if let Some(e) = self.exempt_error {
            return Err(e);
        }
        self.reading.customs.check(&self.config)?;
        refuse_worker_only(&self.config)?;
        let metrics_token = metrics_token(&self.config, self.metrics_token)?;
        let mut reading = self.reading;
        reading.request_id = self
            .config
            .request_id_header
            .as_deref()
            .and_then(|name| HeaderName::from_bytes(name.as_bytes()).ok());
        reading.client_always = self.config.reads_client_always();
        let edge = Edge::new(self.config, store)
            .with_clock(self.clock.clone())
            .with_trace_identifiers(self.trace_identifiers);
        Ok(RateLimitLayer {
            shared: Arc::new(Shared {
                edge,
                clock: self.clock,
                reading,
                exempt: self.exempt,
                metrics_token,
                guard: RouteGuard::new(),
                #[cfg(feature = "otel")]
                store_latency: std::sync::OnceLock::new(),
            }),
        })
    }
}

/// The metrics page's token: the one given, checked as the Worker checks its
/// `EDGELIMIT_METRICS_TOKEN` (the rule is the configuration's, [`Config::route_tokens`]); `None`
/// without a metrics page or with a public one.
fn metrics_token(config: &Config, given: Option<String>) -> Result<Option<RouteToken>, BuildError> {
    let tokens = config
        .route_tokens(|name| (name == METRICS_TOKEN_VAR).then(|| given.clone()).flatten())
        .map_err(|e| BuildError::MetricsToken {
            problem: if e.field == "metrics_path" {
                "the page answers a bearer token: give the layer one with \
                 `.metrics_token(…)` (at least 32 bytes), or set metrics_public = true"
                    .to_string()
            } else {
                e.problem
            },
        })?;
    Ok(tokens.metrics)
}

/// Refuses what only the Cloudflare Worker runs: global limits, whose regions are Workers
/// placed by Cloudflare, each with its own Upstash database (one shared Redis already gives a
/// tower service one exact quota for every instance), and the admin route (a service's Redis is
/// controlled directly, by edgelimit-admin).
fn refuse_worker_only(config: &Config) -> Result<(), BuildError> {
    if config.global.is_some() {
        return Err(BuildError::WorkerOnly {
            field: "global",
            why: "global limits span Cloudflare regions, each Worker with its own Upstash \
                  database; a tower service shares one Redis (or Redis Cluster) between its \
                  instances instead: drop the section and build the layer over that store",
        });
    }
    if config.admin_path.is_some() {
        return Err(BuildError::WorkerOnly {
            field: "admin_path",
            why: "the admin route reaches the Worker's Durable Objects; a tower service's \
                  Redis is controlled directly (edgelimit-admin --store redis://…)",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use edgelimit::MemoryStore;
    use serde_json::json;

    use super::*;

    fn config(limit: serde_json::Value) -> Config {
        Config::from_value(json!({"rules": [{"name": "api", "limits": [limit]}]})).unwrap()
    }

    #[test]
    fn what_only_the_worker_runs_is_refused_naming_its_key() {
        let mut value = json!({"rules": [{"name": "api", "limits": [
            {"name": "per-ip", "policy": "fixed 5/1m", "identifier": "ip"}]}]});
        value["admin_path"] = json!("/__edgelimit/admin");
        let with_admin = Config::from_value(value.clone()).unwrap();
        let e = Builder::new(with_admin)
            .build(MemoryStore::new())
            .unwrap_err();
        assert!(e.to_string().starts_with("admin_path: "), "{e}");
        value.as_object_mut().unwrap().remove("admin_path");
        value["global"] = json!({
            "home": {"url_var": "HOME_URL", "token_var": "HOME_TOKEN"},
            "regions": [
                {"name": "eu", "url_var": "EU_URL", "token_var": "EU_TOKEN", "continents": ["EU"]},
                {"name": "us", "url_var": "US_URL", "token_var": "US_TOKEN", "continents": ["NA"]}
            ]
        });
        let global = Config::from_value(value).unwrap();
        let e = Builder::new(global).build(MemoryStore::new()).unwrap_err();
        assert!(e.to_string().starts_with("global: "), "{e}");
    }

    #[test]
    fn a_metrics_page_needs_a_long_enough_token_unless_public() {
        let mut value = json!({"metrics_path": "/metrics", "rules": [{"name": "api", "limits": [
            {"name": "per-ip", "policy": "fixed 5/1m", "identifier": "ip"}]}]});
        let guarded = Config::from_value(value.clone()).unwrap();
        let e = Builder::new(guarded.clone())
            .build(MemoryStore::new())
            .unwrap_err();
        assert!(
            e.to_string().starts_with("metrics_path: ")
                && e.to_string().contains(".metrics_token("),
            "{e}"
        );
        let e = Builder::new(guarded.clone())
            .metrics_token("short")
            .build(MemoryStore::new())
            .unwrap_err();
        assert!(e.to_string().contains("is 5 bytes"), "{e}");
        assert!(Builder::new(guarded)
            .metrics_token(&"t".repeat(32))
            .build(MemoryStore::new())
            .is_ok());
        value["metrics_public"] = json!(true);
        let public = Config::from_value(value).unwrap();
        assert!(Builder::new(public).build(MemoryStore::new()).is_ok());
    }

    #[test]
    fn every_custom_source_needs_its_closure_and_every_closure_a_use() {
        let by_user = config(
            json!({"name": "per-user", "policy": "fixed 5/1m", "identifier": "custom:user"}),
        );
        let e = Builder::new(by_user.clone())
            .build(MemoryStore::new())
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "rules[0] \"api\" → limits[0] \"per-user\" → identifier: `custom:user` has no \
             closure: register one with `.custom_identifier(\"user\", …)`"
        );
        assert!(Builder::new(by_user.clone())
            .custom_identifier("user", |_| None)
            .build(MemoryStore::new())
            .is_ok());
        let e = Builder::new(by_user)
            .custom_identifier("user", |_| None)
            .custom_identifier("usr", |_| None)
            .build(MemoryStore::new())
            .unwrap_err();
        assert_eq!(
            e,
            BuildError::Unused {
                name: "usr".into(),
                cost: false
            }
        );
        let logins = config(
            json!({"name": "logins", "policy": "fixed 5/15m", "identifier": "ip",
            "cost": {"reserve": 1, "from": "custom:failed"}}),
        );
        let e = Builder::new(logins.clone())
            .build(MemoryStore::new())
            .unwrap_err();
        assert!(
            e.to_string().contains("`.count_when(\"failed\", …)`"),
            "{e}"
        );
        // A cost's closure is not an identifier's.
        assert!(Builder::new(logins.clone())
            .custom_identifier("failed", |_| None)
            .build(MemoryStore::new())
            .is_err());
        assert!(Builder::new(logins)
            .count_when("failed", |r| r.status == 401)
            .build(MemoryStore::new())
            .is_ok());
    }

    #[test]
    fn exempt_paths_must_be_patterns() {
        let c = config(json!({"name": "per-ip", "policy": "fixed 5/1m", "identifier": "ip"}));
        let e = Builder::new(c)
            .exempt_path("health")
            .build(MemoryStore::new())
            .unwrap_err();
        assert!(e.to_string().starts_with("exempt path `health`: "), "{e}");
    }
}
