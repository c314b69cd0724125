//! Origins for the Worker's end-to-end tests: any axum app served on a free loopback port, and
//! the usual one, an echo of what reached it. Each serves until the tokio runtime it was started
//! on shuts down (a `#[tokio::test]`'s ends with the test).

use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::Request;
use axum::http::HeaderMap;
use axum::{Json, Router};
use serde_json::{json, Value};

/// Serves `app` on a free loopback port; its address.
pub async fn serve(app: Router) -> SocketAddr {
    // Port 0: the system picks the port, so nothing can take it first.
    let listener = crate::net::loopback_listener().await;
    let addr = listener.local_addr().expect("the listener's address");
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    addr
}

/// An origin that answers every request with JSON saying what reached it: `origin: true`, the
/// method, path, query, body and the `x-user` header.
pub async fn start_origin() -> SocketAddr {
    async fn echo(headers: HeaderMap, request: Request) -> Json<Value> {
        let (parts, body) = request.into_parts();
        let body: Bytes = axum::body::to_bytes(body, 1 << 20)
            .await
            .unwrap_or_default();
        Json(json!({
            "origin": true,
            "method": parts.method.as_str(),
            "path": parts.uri.path(),
            "query": parts.uri.query(),
            "body": String::from_utf8_lossy(&body),
            "x_user": headers.get("x-user").and_then(|v| v.to_str().ok()),
        }))
    }
    serve(Router::new().fallback(echo)).await
}
