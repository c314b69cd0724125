//! `POST /pipeline`: commands in one round trip, not atomic; each command answers for itself, a
//! refused one included.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use redis::Value;

use super::call::{answer, prepare, Call};
use crate::command;
use crate::listener::DropConnection;
use crate::redis_exec::{to_cmd, Lane};
use crate::reply::{write_array, write_entry, write_error};
use crate::respond::{bad_request, error, json_text, with_commands};
use crate::state::Shared;

/// One command's outcome: Redis's reply, or why the gateway did not send it.
enum Outcome {
    Replied(Value),
    Refused(String),
}

/// `POST /pipeline`.
pub(crate) async fn pipeline(State(shared): State<Arc<Shared>>, call: Call) -> Response {
    let mut commands = match command::list_from_json_text(&call.body, shared.config.max_pipeline) {
        Ok(c) => c,
        Err(e) => return with_commands(bad_request(e), 0),
    };
    let n = commands.len();
    // A command that is not allowed fails alone, as Redis's own errors do; the rest still run.
    let mut outcomes = Vec::with_capacity(n);
    let mut loaded_as = Vec::with_capacity(n);
    let mut pipe = redis::pipe();
    let mut sent = Vec::with_capacity(n);
    for (i, c) in commands.iter_mut().enumerate() {
        match prepare(&shared, c, call.access) {
            Ok(l) => {
                pipe.add_command(to_cmd(c));
                sent.push(i);
                loaded_as.push(l);
                outcomes.push(None);
            }
            Err(e) => {
                loaded_as.push(None);
                outcomes.push(Some(Outcome::Refused(e.to_string())));
            }
        }
    }
    if !sent.is_empty() {
        pipe.ignore_errors();
        let replies = match shared.round_trip(&pipe, Lane::Shared).await {
            Ok(r) if r.len() == sent.len() => r,
            Ok(_) => {
                let e = error(
                    StatusCode::BAD_GATEWAY,
                    "ERR redis answered too few replies",
                );
                return with_commands(e, n);
            }
            Err(unavailable) => return with_commands(unavailable, n),
        };
        shared.count_commands(sent.iter().map(|&i| &commands[i]));
        for (i, reply) in sent.into_iter().zip(replies) {
            outcomes[i] = Some(Outcome::Replied(reply));
        }
        if shared.drop_this_pipeline() {
            let mut lost = error(StatusCode::OK, "ERR dropped for a test");
            lost.extensions_mut().insert(DropConnection);
            return with_commands(lost, n);
        }
    }
    let mut out = Vec::with_capacity(2 + 48 * n);
    let entries = outcomes.into_iter().zip(loaded_as);
    write_array(
        &mut out,
        entries,
        |out, (outcome, loaded_as)| match outcome {
            Some(Outcome::Replied(v)) => write_entry(out, &answer(v, loaded_as), call.encoding),
            Some(Outcome::Refused(message)) => write_error(out, &message),
            None => write_error(out, "ERR not run"),
        },
    );
    with_commands(json_text(StatusCode::OK, out), n)
}
