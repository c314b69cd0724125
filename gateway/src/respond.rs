//! The gateway's answers: JSON text with a status, errors as `{"error": "…"}`, and what a handler
//! tells the middleware about the request.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::reply::write_error;

/// An answer whose JSON text is written already.
pub(crate) fn json_text(status: StatusCode, body: Vec<u8>) -> Response {
    let content_type = HeaderValue::from_static("application/json");
    (status, [(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// `{"error": message}` with `status`.
pub(crate) fn error(status: StatusCode, message: impl AsRef<str>) -> Response {
    let mut body = Vec::with_capacity(16 + message.as_ref().len());
    write_error(&mut body, message.as_ref());
    json_text(status, body)
}

/// A command the gateway refused or could not parse: 400 with the reason.
pub(crate) fn bad_request(message: impl std::fmt::Display) -> Response {
    error(StatusCode::BAD_REQUEST, message.to_string())
}

/// How many commands a request carried: a response extension the request's log line reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Commands(pub(crate) usize);

/// `response`, noting that its request carried `n` commands.
pub(crate) fn with_commands(mut response: Response, n: usize) -> Response {
    response.extensions_mut().insert(Commands(n));
    response
}
