//! Request ids remembered by [`super::MemoryStore`]: an admitted check carrying request ids is
//! remembered, per item, beside its (limit, identifier), so that a repeat within the limit's
//! window answers the first decisions and charges nothing (docs/design.md §3), as multi.lua does.
//!
//! The memory is one bounded [`ExpiringMap`] behind a lock of its own, apart from the states'
//! shards: only checks that carry a request id take it, and they hold it across the whole
//! recall–decide–remember, so an original and its retry racing on two threads decide one after
//! the other and the retry charges nothing. Checks without request ids never touch it.

use std::sync::Arc;

use super::check::{Check, CheckItem, Identifier, Verdict};
use super::expiring_map::ExpiringMap;
use crate::decision::Decision;

/// The remembered requests, dropped [`super::GC_GRACE_MS`] after their window (see
/// [`remember`]).
pub(crate) type RequestMap = ExpiringMap<RequestKey, Remembered>;

/// A remembered request, as the Lua twin keys it: beside the (limit, identifier), whatever the
/// algorithm.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct RequestKey {
    name: Arc<str>,
    identifier: Identifier,
    request_id: Identifier,
}

/// An admitted decision remembered under a request id until `until_ms` (exclusive).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Remembered {
    until_ms: u64,
    decided_at_ms: u64,
    decision: Decision,
}

/// Whether any item of `check` carries a request id (only such checks are remembered).
pub(crate) fn carries_request_id(check: &Check) -> bool {
    check.items().iter().any(|item| item.request_id.is_some())
}

fn request_key(item: &CheckItem) -> Option<RequestKey> {
    Some(RequestKey {
        name: item.limit.name.clone(),
        identifier: item.identifier.clone(),
        request_id: item.request_id.clone()?,
    })
}

/// What `requests` remembers live at `now_ms` for each item of `check`, or `None` when nothing
/// is: then the check is new and must be decided.
pub(crate) fn recall(
    requests: &RequestMap,
    check: &Check,
    now_ms: u64,
) -> Option<Vec<Option<Remembered>>> {
    let remembered: Vec<Option<Remembered>> = check
        .items()
        .iter()
        .map(|item| {
            let (r, _) = requests.get(&request_key(item)?)?;
            (now_ms < r.until_ms).then_some(*r)
        })
        .collect();
    remembered.iter().any(Option::is_some).then_some(remembered)
}

/// The answer to a repeat, as multi.lua gives it: each item answers its remembered decision, or
/// `look(i, item)` (a zero-cost look at the state of item `i`) if it has none, at the first remembered time;
/// the check is admitted and nothing is charged.
pub(crate) fn repeat(
    check: &Check,
    remembered: Vec<Option<Remembered>>,
    mut look: impl FnMut(usize, &CheckItem) -> Decision,
) -> Verdict {
    let decided_at_ms = remembered
        .iter()
        .flatten()
        .next()
        .map_or(0, |r| r.decided_at_ms);
    let decisions = check
        .items()
        .iter()
        .zip(remembered)
        .enumerate()
        .map(|(i, (item, r))| r.map_or_else(|| look(i, item), |r| r.decision))
        .collect();
    Verdict {
        allowed: true,
        decisions,
        atomic: true,
        decided_at_ms,
        listed: Vec::new(),
    }
}

/// Remembers an admitted check's decisions under each item's request id for its window, kept
/// [`super::GC_GRACE_MS`] longer like every state.
pub(crate) fn remember(requests: &mut RequestMap, check: &Check, verdict: &Verdict, now_ms: u64) {
    for (item, decision) in check.items().iter().zip(&verdict.decisions) {
        if let Some(key) = request_key(item) {
            let until_ms = now_ms.saturating_add(item.remember_ms());
            let remembered = Remembered {
                until_ms,
                decided_at_ms: now_ms,
                decision: *decision,
            };
            let keep_until = until_ms.saturating_add(super::GC_GRACE_MS);
            requests.insert(key, remembered, keep_until);
        }
    }
}

/// The entry remembered for `request_id` of (name, identifier), kept or not: what a store saving
/// its entries elsewhere keeps of it (see [`super::Saved`]).
pub(crate) fn saved(
    requests: &RequestMap,
    name: &Arc<str>,
    identifier: &Identifier,
    request_id: &Identifier,
) -> Option<super::Saved> {
    let key = RequestKey {
        name: name.clone(),
        identifier: identifier.clone(),
        request_id: request_id.clone(),
    };
    let (r, keep_until_ms) = requests.get(&key)?;
    Some(super::Saved::Request {
        limit: name.to_string(),
        identifier: identifier.as_bytes().to_vec(),
        request_id: request_id.as_bytes().to_vec(),
        until_ms: r.until_ms,
        decided_at_ms: r.decided_at_ms,
        decision: r.decision,
        keep_until_ms,
    })
}

/// Puts back a remembered request saved by [`saved`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn restore(
    requests: &mut RequestMap,
    name: Arc<str>,
    identifier: Identifier,
    request_id: Identifier,
    until_ms: u64,
    decided_at_ms: u64,
    decision: Decision,
    keep_until_ms: u64,
) {
    let key = RequestKey {
        name,
        identifier,
        request_id,
    };
    let remembered = Remembered {
        until_ms,
        decided_at_ms,
        decision,
    };
    requests.insert(key, remembered, keep_until_ms);
}
