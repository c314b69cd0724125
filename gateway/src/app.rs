//! The routes and the layers around them, over fresh Redis connections.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::middleware::from_fn_with_state;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;

use crate::config::{Config, MetricsPage};
use crate::error::GatewayError;
use crate::metrics::Metrics;
use crate::middleware::{authenticate, observe};
use crate::redis_exec::RedisExec;
use crate::respond::error;
use crate::routes::{metrics_page, multi_exec, path_form, pipeline, single};
use crate::state::Shared;

/// The gateway's routes for `config`, connected to its Redis (and with its ACL user made, unless
/// `config.redis_acl` is off).
pub async fn router(config: Config) -> Result<Router, GatewayError> {
    let redis = RedisExec::connect(&config).await?;
    let metrics = (config.metrics != MetricsPage::Off).then(|| Metrics::new(&config.allowed));
    let shared = Arc::new(Shared::new(config, redis, metrics));
    let mut routes = Router::new()
        .route("/", post(single))
        .route("/pipeline", post(pipeline))
        .route("/multi-exec", post(multi_exec))
        .route("/{*command}", get(path_form).post(path_form));
    if shared.metrics.is_some() {
        // Only when on: off, `/metrics` is left to the path form like any other command name,
        // and so is every method but GET when on.
        routes = routes.route("/metrics", get(metrics_page).post(path_form));
    }
    Ok(routes
        .route_layer(from_fn_with_state(shared.clone(), authenticate))
        .method_not_allowed_fallback(method_not_allowed)
        .layer(from_fn_with_state(shared.clone(), observe))
        .with_state(shared))
}

async fn method_not_allowed() -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "ERR method not allowed: use POST for /, /pipeline and /multi-exec",
    )
}
