//! `POST /multi-exec`: commands in MULTI…EXEC, all or nothing, on the transaction connection.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use redis::Value;

use super::call::{answer, prepare, Call};
use crate::command;
use crate::redis_exec::{to_cmd, Lane};
use crate::reply::{error_text, write_array, write_entry};
use crate::respond::{bad_request, error, json_text, with_commands};
use crate::state::Shared;

/// `POST /multi-exec`.
pub(crate) async fn multi_exec(State(shared): State<Arc<Shared>>, call: Call) -> Response {
    let (response, n) = run(&shared, &call).await;
    with_commands(response, n)
}

async fn run(shared: &Shared, call: &Call) -> (Response, usize) {
    let mut commands = match command::list_from_json_text(&call.body, shared.config.max_pipeline) {
        Ok(c) => c,
        Err(e) => return (bad_request(e), 0),
    };
    let n = commands.len();
    // All or nothing: one refused command refuses the transaction, as a queue-time error would.
    let loaded_as = match commands
        .iter_mut()
        .map(|c| prepare(shared, c, call.access))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(l) => l,
        Err(e) => return (bad_request(e), n),
    };
    let mut pipe = redis::pipe();
    pipe.add_command(redis::cmd("MULTI"));
    for c in &commands {
        pipe.add_command(to_cmd(c));
    }
    pipe.add_command(redis::cmd("EXEC")).ignore_errors();
    let replies = match shared.round_trip(&pipe, Lane::Transaction).await {
        Ok(r) if r.len() == n + 2 => r,
        Ok(_) => {
            let e = error(
                StatusCode::BAD_GATEWAY,
                "ERR redis answered too few replies",
            );
            return (e, n);
        }
        Err(unavailable) => return (unavailable, n),
    };
    shared.count_commands(&commands);
    // A command refused while queueing aborts the whole transaction: report that error.
    if let Some(Value::ServerError(e)) = replies[1..=n]
        .iter()
        .find(|v| matches!(v, Value::ServerError(_)))
    {
        return (bad_request(error_text(e)), n);
    }
    let response = match &replies[n + 1] {
        Value::Array(results) => {
            let mut out = Vec::with_capacity(2 + 48 * results.len());
            let entries = results.iter().cloned().zip(loaded_as);
            write_array(&mut out, entries, |out, (v, l)| {
                write_entry(out, &answer(v, l), call.encoding)
            });
            json_text(StatusCode::OK, out)
        }
        Value::ServerError(e) => bad_request(error_text(e)),
        other => error(
            StatusCode::BAD_GATEWAY,
            format!("ERR unexpected EXEC reply {other:?}"),
        ),
    };
    (response, n)
}
