//! What every command route starts from: the caller's access, the encoding it asked for, and the
//! body, read within its size and time limits; and what they all do to commands before and after
//! Redis.

use std::sync::Arc;

use axum::body::{to_bytes, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::Response;
use redis::Value;

use crate::auth::Access;
use crate::command::{check_allowed, Command, CommandError};
use crate::reply::Encoding;
use crate::respond::error;
use crate::state::Shared;

/// A request admitted to a command route.
pub(crate) struct Call {
    pub(super) access: Access,
    pub(super) encoding: Encoding,
    pub(super) body: Bytes,
}

impl FromRequest<Arc<Shared>> for Call {
    type Rejection = Response;

    async fn from_request(request: Request, shared: &Arc<Shared>) -> Result<Call, Response> {
        let (parts, body) = request.into_parts();
        // Set by the token check that runs before every command route.
        let Some(&access) = parts.extensions.get::<Access>() else {
            return Err(error(StatusCode::UNAUTHORIZED, "Unauthorized"));
        };
        let encoding = match parts.headers.get("upstash-encoding") {
            Some(e) if e.as_bytes().eq_ignore_ascii_case(b"base64") => Encoding::Base64,
            _ => Encoding::Plain,
        };
        let max = shared.config.max_body_bytes;
        let timeout = shared.config.header_read_timeout;
        let body = match tokio::time::timeout(timeout, to_bytes(body, max)).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(_)) => {
                return Err(error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("ERR request body exceeds the limit of {max} bytes"),
                ))
            }
            Err(_) => {
                return Err(error(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "ERR request body did not arrive within {} ms",
                        timeout.as_millis()
                    ),
                ))
            }
        };
        Ok(Call {
            access,
            encoding,
            body,
        })
    }
}

/// Checks `command` against the allow-list and the token's access, and rewrites it for Redis;
/// returns the SHA a rewritten SCRIPT LOAD must answer (see [`answer`]).
pub(super) fn prepare(
    shared: &Shared,
    command: &mut Command,
    access: Access,
) -> Result<Option<String>, CommandError> {
    check_allowed(command, &shared.config, access)?;
    Ok(shared.scripts.rewrite(command))
}

/// The reply, with a rewritten SCRIPT LOAD answering the SHA the client computed.
pub(super) fn answer(value: Value, loaded_as: Option<String>) -> Value {
    match (value, loaded_as) {
        (Value::BulkString(_), Some(client_sha)) => Value::BulkString(client_sha.into_bytes()),
        (value, _) => value,
    }
}
