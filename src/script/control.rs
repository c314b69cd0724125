//! The control calls every Redis store shares (docs/design.md §"Deny and allow lists", §"Peek
//! and reset"): list writes and reads, the list read a Cluster makes before a gated check, peek
//! and reset — each one [`Invocation`], and how to read its reply. No I/O, as the rest of
//! [`super`].

use super::invocation::{algorithm_code, Invocation, MAX_SCRIPT_TIME_MS};
use super::reply::{int, parse, protocol, Reply};
use super::source::Script;
use crate::control::list::{until_of, Candidates, ListEntry};
use crate::store::key::{push_block_key, push_control_key, push_list_key, push_state_key};
use crate::store::{Identifier, Limit, StoreError, TimeSource, Verdict};
use crate::Algorithm;

/// `now` as a script argument: the caller's time, or empty for Redis `TIME`.
fn time_arg(time: TimeSource) -> Result<String, StoreError> {
    match time {
        TimeSource::At(ms) if ms >= MAX_SCRIPT_TIME_MS => Err(StoreError::InvalidInput(format!(
            "time {ms} ms is past 2^52 ms, beyond what the Redis scripts compute exactly"
        ))),
        TimeSource::At(ms) => Ok(ms.to_string()),
        TimeSource::Server => Ok(String::new()),
    }
}

/// A call of the list script on `list`, its arguments still to add.
fn list_call(namespace: &str, list: &str) -> Invocation {
    let mut call = Invocation::new(Script::list());
    call.write_key(|out| push_list_key(out, namespace, list));
    call
}

/// Adds `member` to `list` to lapse at `lapse_ms` (see `list.lua`, `add`). Reply: 1.
pub fn list_add(
    namespace: &str,
    list: &str,
    member: &ListEntry,
    lapse_ms: u64,
    now_ms: u64,
) -> Result<Invocation, StoreError> {
    let now = time_arg(TimeSource::At(now_ms))?;
    let mut call = list_call(namespace, list);
    call.push_arg("add");
    call.push_arg(&now);
    call.push_int_arg(lapse_ms);
    call.push_arg(&member.member());
    Ok(call)
}

/// Removes `member` from `list`. Reply: [`read_removed`].
pub fn list_remove(namespace: &str, list: &str, member: &ListEntry) -> Invocation {
    let mut call = list_call(namespace, list);
    call.push_arg("remove");
    call.push_arg(&member.member());
    call
}

/// The live entries of `list` at `now_ms`. Reply: [`read_entries`].
pub fn list_entries(namespace: &str, list: &str, now_ms: u64) -> Result<Invocation, StoreError> {
    let now = time_arg(TimeSource::At(now_ms))?;
    let mut call = list_call(namespace, list);
    call.push_arg("entries");
    call.push_arg(&now);
    Ok(call)
}

/// Which of `candidates` is the first live member of `list` (a Cluster's read before a gated
/// check). Reply: [`read_match`].
pub fn list_match(
    namespace: &str,
    list: &str,
    candidates: &Candidates,
    time: TimeSource,
) -> Result<Invocation, StoreError> {
    let now = time_arg(time)?;
    let mut call = list_call(namespace, list);
    call.push_arg("match");
    call.push_arg(&now);
    for candidate in candidates {
        call.push_arg(candidate);
    }
    Ok(call)
}

/// Reads a `remove` reply: whether the member was there.
pub fn read_removed(reply: &Reply) -> Result<bool, StoreError> {
    match reply {
        Reply::Error(message) => Err(StoreError::from_error_reply(message)),
        other => match int(other)? {
            0 => Ok(false),
            1 => Ok(true),
            n => Err(protocol(format!("a list removal answered {n}"))),
        },
    }
}

/// Reads an `add` reply (1).
pub fn read_added(reply: &Reply) -> Result<(), StoreError> {
    match reply {
        Reply::Error(message) => Err(StoreError::from_error_reply(message)),
        other if int(other)? == 1 => Ok(()),
        other => Err(protocol(format!("a list addition answered {other:?}"))),
    }
}

/// Reads an `entries` reply: (member, lapse time; `None` for never).
pub fn read_entries(reply: &Reply) -> Result<Vec<(String, Option<u64>)>, StoreError> {
    let values = match reply {
        Reply::Array(values) if values.len() % 2 == 0 => values,
        Reply::Error(message) => return Err(StoreError::from_error_reply(message)),
        other => {
            return Err(protocol(format!(
                "expected member, lapse pairs, got {other:?}"
            )))
        }
    };
    values
        .chunks_exact(2)
        .map(|pair| {
            let member = match &pair[0] {
                Reply::Bulk(bytes) => String::from_utf8(bytes.clone())
                    .map_err(|_| protocol("a list member is not UTF-8".to_string()))?,
                other => return Err(protocol(format!("expected a member, got {other:?}"))),
            };
            let lapse = u64::try_from(int(&pair[1])?)
                .map_err(|_| protocol(format!("negative lapse time {:?}", pair[1])))?;
            Ok((member, until_of(lapse)))
        })
        .collect()
}

/// Reads a `match` reply: the time the list was read at and the 0-based index of the first live
/// candidate, if any.
pub fn read_match(reply: &Reply, candidates: usize) -> Result<(u64, Option<usize>), StoreError> {
    let values = match reply {
        Reply::Array(values) if values.len() == 2 => values,
        Reply::Error(message) => return Err(StoreError::from_error_reply(message)),
        other => return Err(protocol(format!("expected {{now, index}}, got {other:?}"))),
    };
    let now = u64::try_from(int(&values[0])?)
        .map_err(|_| protocol(format!("negative time {:?}", values[0])))?;
    match int(&values[1])? {
        0 => Ok((now, None)),
        i if i >= 1 && (i as u64) <= candidates as u64 => Ok((now, Some(i as usize - 1))),
        i => Err(protocol(format!(
            "candidate {i} of {candidates} matched a list"
        ))),
    }
}

/// A zero-cost look at `identifier`'s state on `limit` that writes nothing, under its effective
/// policy: the script reads the identifier's control key (same hash tag as the state key, so one
/// call on a Cluster too) as the deciding scripts do with `ctl`, and a delaying GCRA limit
/// sends its longest wait. Reply: [`read_peek`].
pub fn peek(
    namespace: &str,
    limit: &Limit,
    identifier: &Identifier,
    time: TimeSource,
) -> Result<Invocation, StoreError> {
    let policy = &limit.policy;
    let now = time_arg(time)?;
    let mut call = Invocation::new(Script::peek());
    call.write_key(|out| {
        push_state_key(out, namespace, &limit.name, policy.algorithm(), identifier)
    });
    call.write_key(|out| push_control_key(out, namespace, &limit.name, identifier));
    call.push_arg(&now);
    call.push_int_arg(algorithm_code(policy.algorithm()));
    call.push_int_arg(policy.limit());
    call.push_int_arg(policy.script_window());
    call.push_int_arg(policy.capacity());
    call.push_arg(limit.tiers.script_table());
    // A delaying GCRA limit's look reads its queue as its steps do (docs/design.md §2,
    // "Delays"); any other limit sends what it always has.
    if limit.delay_ms() > 0 {
        call.push_int_arg(limit.delay_ms());
    }
    Ok(call)
}

/// Reads a peek reply into a one-decision verdict.
pub fn read_peek(reply: &Reply) -> Result<Verdict, StoreError> {
    let parsed = parse(reply, 1)?;
    Ok(Verdict {
        allowed: parsed.allowed,
        decisions: parsed.decisions,
        atomic: true,
        decided_at_ms: parsed.decided_at_ms,
        listed: Vec::new(),
    })
}

/// Deletes `identifier`'s state on `limit` under every algorithm, and its block: one `DEL` of
/// keys sharing one hash tag, O(1) in the keyspace. Reply: [`read_reset`].
pub fn reset(namespace: &str, limit: &Limit, identifier: &Identifier) -> Invocation {
    let mut call = Invocation::new(Script::reset());
    for algorithm in Algorithm::EVERY {
        call.write_key(|out| push_state_key(out, namespace, &limit.name, algorithm, identifier));
    }
    // The block goes with the state (docs/design.md §2, "Blocks"): same hash tag, same DEL.
    call.write_key(|out| push_block_key(out, namespace, &limit.name, identifier));
    call
}

/// Reads a reset reply: whether any state existed.
pub fn read_reset(reply: &Reply) -> Result<bool, StoreError> {
    match reply {
        Reply::Error(message) => Err(StoreError::from_error_reply(message)),
        other => match int(other)? {
            n if n >= 0 => Ok(n > 0),
            n => Err(protocol(format!("a reset answered {n}"))),
        },
    }
}
