//! What every request goes through around its route: the token check, and the counting, logging
//! and `upstash-sync-token` of its answer.
//!
//! Two layers, because a request with a method its route does not take is answered 405 before
//! any token is asked for: [`authenticate`] is a route layer (it runs only when a route takes the
//! request), [`observe`] a layer around everything, and the request's span
//! ([`crate::telemetry`]).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode, Version};
use axum::middleware::Next;
use axum::response::Response;
use tracing::{Instrument, Span};

use crate::auth::{access, presented_token};
use crate::config::MetricsPage;
use crate::listener::ClientConnection;
use crate::metrics::Route;
use crate::respond::{error, Commands};
use crate::state::Shared;
use crate::telemetry;

/// Admits a request whose token (header or `_token`) is the token or the read-only token, tells
/// its connection it has authenticated, and hands its [`Access`](crate::auth::Access) to the
/// route as a request extension. Else 401, and the connection closes once that is sent: a client
/// with a wrong token holds no place (see [`crate::listener`]). The public metrics page needs no
/// token.
pub(crate) async fn authenticate(
    State(shared): State<Arc<Shared>>,
    mut request: Request,
    next: Next,
) -> Response {
    let public_page = shared.config.metrics == MetricsPage::Public
        && shared.is_metrics_page(request.method(), request.uri().path());
    if public_page {
        return next.run(request).await;
    }
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let token = presented_token(authorization, request.uri().query());
    let config = &shared.config;
    let connection = request.extensions().get::<ClientConnection>().cloned();
    match access(
        token.as_deref(),
        &config.token,
        config.read_only_token.as_deref(),
    ) {
        Some(access) => {
            if let Some(connection) = connection {
                connection.authenticated();
            }
            request.extensions_mut().insert(access);
            next.run(request).await
        }
        None => {
            if let Some(m) = &shared.metrics {
                m.auth_failure();
            }
            let mut refused = error(StatusCode::UNAUTHORIZED, "Unauthorized");
            // HTTP/1.1 closes on the header (hyper honours it); HTTP/2 has no such header, and
            // closes by the accept loop's GOAWAY.
            if request.version() < Version::HTTP_2 {
                refused
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            if let Some(connection) = connection {
                connection.close_after_answer();
            }
            refused
        }
    }
}

/// Gives every JSON answer its `upstash-sync-token`, and counts and logs (at debug: one line per
/// request costs CPU under load) every request but the metrics page's. The log line names the
/// route, never the path or query, which may carry data or the token.
pub(crate) async fn observe(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let page = shared.is_metrics_page(&method, request.uri().path());
    let route = Route::of_path(request.uri().path());
    let span = if page {
        Span::none()
    } else {
        telemetry::request_span(&method, route)
    };
    let mut response = next.run(request).instrument(span.clone()).await;
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if json {
        let token = HeaderValue::from(shared.next_sync_token());
        response.headers_mut().insert("upstash-sync-token", token);
    }
    if !page {
        let status = response.status();
        if let Some(m) = &shared.metrics {
            m.request(route, status.as_u16());
        }
        let commands = response.extensions().get::<Commands>().map_or(0, |c| c.0);
        telemetry::answered(&span, status.as_u16(), commands);
        tracing::debug!(
            %method,
            route = route.as_str(),
            status = status.as_u16(),
            commands,
            elapsed_us = started.elapsed().as_micros() as u64,
            "request"
        );
    }
    response
}
