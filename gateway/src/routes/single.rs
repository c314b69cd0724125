//! One command: `POST /` with a JSON array, or the path form (`GET`/`POST /set/k/v`, a POST body
//! as the last argument). Its reply is the whole answer; a Redis error is a 400.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::Response;
use redis::Value;

use super::call::{answer, prepare, Call};
use crate::command::{self, Command};
use crate::redis_exec::{to_cmd, Lane};
use crate::reply::write_entry;
use crate::respond::{bad_request, error, json_text, with_commands};
use crate::state::Shared;

/// `POST /`: one command as a JSON array.
pub(crate) async fn single(State(shared): State<Arc<Shared>>, call: Call) -> Response {
    let response = match command::from_json_text(&call.body) {
        Ok(command) => run(&shared, command, &call).await,
        Err(e) => bad_request(e),
    };
    with_commands(response, 1)
}

/// `GET` or `POST /<command>/<arg>/…`.
pub(crate) async fn path_form(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    call: Call,
) -> Response {
    let body = (method == Method::POST).then_some(&call.body[..]);
    let response = match command::from_path(uri.path(), body) {
        Ok(command) => run(&shared, command, &call).await,
        Err(e) => bad_request(e),
    };
    with_commands(response, 1)
}

async fn run(shared: &Shared, mut command: Command, call: &Call) -> Response {
    let loaded_as = match prepare(shared, &mut command, call.access) {
        Ok(l) => l,
        Err(e) => return bad_request(e),
    };
    let mut pipe = redis::pipe();
    pipe.add_command(to_cmd(&command)).ignore_errors();
    let mut values = match shared.round_trip(&pipe, Lane::Shared).await {
        Ok(values) if values.len() == 1 => values,
        Ok(_) => return error(StatusCode::BAD_GATEWAY, "ERR redis answered no reply"),
        Err(unavailable) => return unavailable,
    };
    shared.count_commands([&command]);
    let value = answer(values.remove(0), loaded_as);
    let status = match value {
        Value::ServerError(_) => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    };
    let mut body = Vec::with_capacity(64);
    write_entry(&mut body, &value, call.encoding);
    json_text(status, body)
}
