//! The routes and the layers around them, over fresh Redis connections.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::middleware::from_fn_with_state;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;

use crate::command::Scripts;
use crate::config::{never_allowed, Config, MetricsPage};
use crate::error::GatewayError;
use crate::metrics::{ConnectionCounters, Metrics};
use crate::middleware::{authenticate, observe};
use crate::redis_exec::RedisExec;
use crate::respond::error;
use crate::routes::{metrics_page, multi_exec, path_form, pipeline, single};
use crate::state::Shared;

/// The gateway's routes for `config`, connected to its Redis (and with its ACL user made, unless
/// `config.redis_acl` is off).
pub async fn router(config: Config) -> Result<Router, GatewayError> {
    Ok(routes(config).await?.0)
}

/// What a host reads the metrics page through besides `GET /metrics`: the OpenTelemetry export
/// ([`crate::Gateway::metrics_text`]).
pub(crate) type Page = Arc<Shared>;

/// [`router`], and the counters the accept loop keeps for its metrics page (counting for no one
/// when the page is off).
pub(crate) async fn routes(
    config: Config,
) -> Result<(Router, ConnectionCounters, Page), GatewayError> {
    if let Some(entry) = never_allowed(&config.allowed) {
        return Err(GatewayError::NeverAllowed {
            entry: entry.to_string(),
        });
    }
    let redis = RedisExec::connect(&config).await?;
    let scripts = Scripts::new(config.max_scripts);
    let metrics = (config.metrics != MetricsPage::Off).then(|| {
        Metrics::new(&config.allowed, scripts.counters())
            .with_bounds(config.max_connections, config.max_scripts)
    });
    let counters = metrics
        .as_ref()
        .map_or_else(ConnectionCounters::default, Metrics::connections);
    let shared = Arc::new(Shared::new(config, redis, scripts, metrics));
    let mut paths = Router::new()
        .route("/", post(single))
        .route("/pipeline", post(pipeline))
        .route("/multi-exec", post(multi_exec))
        .route("/{*command}", get(path_form).post(path_form));
    if shared.metrics.is_some() {
        // Only when on: off, `/metrics` is left to the path form like any other command name,
        // and so is every method but GET when on.
        paths = paths.route("/metrics", get(metrics_page).post(path_form));
    }
    let router = paths
        .route_layer(from_fn_with_state(shared.clone(), authenticate))
        .method_not_allowed_fallback(method_not_allowed)
        .layer(from_fn_with_state(shared.clone(), observe))
        .with_state(shared.clone());
    Ok((router, counters, shared))
}

async fn method_not_allowed() -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "ERR method not allowed: use POST for /, /pipeline and /multi-exec",
    )
}
