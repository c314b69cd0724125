//! The store's side of the wire: one [`WireCall`] answered by any store that decides and is
//! controlled (`Control`) — the Durable Object's `MemoryStore`, or whatever store the Worker's
//! admin route reaches.

use edgelimit::{Control, StoreError, TimeSource};

use super::{checks_of, failed, WireAnswer, WireCall, WireVerdict};

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
    Ok(match call {
        WireCall::Check {
            limits,
            checks,
            at_ms,
        } => {
            let (checks, _) = checks_of(limits, checks, *at_ms)?;
            let time = match at_ms.or(server_now_ms) {
                Some(ms) => TimeSource::At(ms),
                None => TimeSource::Server,
            };
            let verdicts = store.check(&checks, time).await?;
            WireAnswer::Verdicts {
                verdicts: verdicts.iter().map(WireVerdict::of).collect(),
            }
        }
        control => WireAnswer::of(&store.apply(control.operation(server_now_ms)?).await?),
    })
}
