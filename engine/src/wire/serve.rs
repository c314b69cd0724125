//! The store's side of the wire: one [`WireCall`] answered by any store that decides and is
//! controlled (`Control`) — the Durable Object's `MemoryStore`, or whatever store the Worker's
//! admin route reaches.

use edgelimit::{Control, StoreError, TimeSource, Verdict};

use super::{
    assignment_of, checks_of, entry_of, failed, kind_of, WireAnswer, WireCall, WireVerdict,
};

/// Answers `call` from `store`. `server_now_ms` is the store's own clock when the caller has
/// one to give (a Durable Object's, which is its store's); `None` leaves "the store's clock" to
/// the store (`TimeSource::Server`).
pub async fn serve<S: Control + ?Sized>(
    store: &S,
    call: &WireCall,
    server_now_ms: Option<u64>,
) -> WireAnswer {
    match answer(store, call, server_now_ms).await {
        Ok(answer) => answer,
        Err(e) => failed(&e),
    }
}

async fn answer<S: Control + ?Sized>(
    store: &S,
    call: &WireCall,
    server_now_ms: Option<u64>,
) -> Result<WireAnswer, StoreError> {
    let time = |at_ms: Option<u64>| match at_ms.or(server_now_ms) {
        Some(ms) => TimeSource::At(ms),
        None => TimeSource::Server,
    };
    Ok(match call {
        WireCall::Check {
            limits,
            checks,
            at_ms,
        } => {
            let (checks, _) = checks_of(limits, checks, *at_ms)?;
            let verdicts = store.check(&checks, time(*at_ms)).await?;
            WireAnswer::Verdicts {
                verdicts: verdicts.iter().map(WireVerdict::of).collect(),
            }
        }
        WireCall::Peek {
            limit,
            identifier,
            at_ms,
        } => {
            let verdict: Verdict = store
                .peek(&limit.limit()?, &identifier.identifier()?, time(*at_ms))
                .await?;
            WireAnswer::Verdict {
                verdict: WireVerdict::of(&verdict),
            }
        }
        WireCall::Reset { limit, identifier } => WireAnswer::Existed {
            existed: store
                .reset(&limit.limit()?, &identifier.identifier()?)
                .await?,
        },
        WireCall::Assign {
            limit,
            identifier,
            assignment,
            until_ms,
        } => {
            let assignment = assignment
                .as_deref()
                .map(assignment_of)
                .transpose()?
                .map(|(a, _)| a);
            store
                .assign(
                    &limit.limit()?,
                    &identifier.identifier()?,
                    assignment.as_ref(),
                    *until_ms,
                )
                .await?;
            WireAnswer::Done
        }
        WireCall::ClearAssignment {
            limit,
            identifier,
            kind,
        } => {
            store
                .clear_assignment(&limit.limit()?, &identifier.identifier()?, kind_of(kind)?)
                .await?;
            WireAnswer::Done
        }
        WireCall::Assignments { limit, identifier } => WireAnswer::Assignments {
            assignments: store
                .assignments(&limit.limit()?, &identifier.identifier()?)
                .await?
                .iter()
                .map(|(a, until)| (a.encode(*until), *until))
                .collect(),
        },
        WireCall::ListAdd {
            list,
            entry,
            until_ms,
            now_ms,
        } => {
            store
                .list_add(list, &entry_of(entry)?, *until_ms, *now_ms)
                .await?;
            WireAnswer::Done
        }
        WireCall::ListRemove { list, entry } => WireAnswer::Existed {
            existed: store.list_remove(list, &entry_of(entry)?).await?,
        },
        WireCall::ListEntries { list, now_ms } => WireAnswer::Entries {
            entries: store.list_entries(list, *now_ms).await?,
        },
    })
}
