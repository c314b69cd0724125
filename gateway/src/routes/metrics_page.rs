//! `GET /metrics`, routed only when the page is on (its token, if any, was checked before).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::metrics::CONTENT_TYPE;
use crate::state::Shared;

/// The Prometheus page.
pub(crate) async fn metrics_page(State(shared): State<Arc<Shared>>) -> Response {
    let Some(m) = &shared.metrics else {
        return StatusCode::NOT_FOUND.into_response();
    };
    match m.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics").into_response(),
    }
}
