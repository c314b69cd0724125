//! Request ids remembered by [`super::MemoryStore`]: an admitted check's items that carry request
//! ids are remembered, each beside its (limit, identifier), so that a repeat within the limit's
//! window answers those items' first decisions and charges them nothing (docs/design.md §3), as
//! multi.lua does. Only the remembered items are answered from memory: the check's other items
//! are decided as if the request were new, so a repeated id lifts no limit it was not given to.
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

/// Whether every item of a check is remembered ([`recall`]'s answer): then the check is a pure
/// repeat, answered whole by [`repeat`]; else only the remembered items are ([`partial_repeat`]).
pub(crate) fn all_remembered(remembered: &[Option<Remembered>]) -> bool {
    remembered.iter().all(Option::is_some)
}

/// The answer to a pure repeat (every item remembered), as multi.lua gives it: each item answers
/// its remembered decision at the first remembered time; the check is admitted and nothing is
/// charged.
pub(crate) fn repeat(remembered: &[Option<Remembered>]) -> Verdict {
    let decided_at_ms = remembered
        .iter()
        .flatten()
        .next()
        .map_or(0, |r| r.decided_at_ms);
    Verdict {
        allowed: true,
        decisions: remembered.iter().flatten().map(|r| r.decision).collect(),
        atomic: true,
        decided_at_ms,
        listed: Vec::new(),
    }
}

/// The items of `check` that are not remembered, in order: what a partial repeat decides anew.
pub(crate) fn unremembered(check: &Check, remembered: &[Option<Remembered>]) -> Check {
    let mut rest = Check::new();
    for (item, r) in check.items().iter().zip(remembered) {
        if r.is_none() {
            rest = rest.with_item(item.clone());
        }
    }
    rest
}

/// The answer to a repeat in which only some items are remembered, as multi.lua gives it: the
/// other items were decided anew (`fresh`, the verdict on [`unremembered`]), and the check is
/// theirs — admitted when they all admit. Admitted, a remembered item answers its remembered
/// decision; denied, it answers `look(i, item)` (a zero-cost look at the state of item `i`), as
/// every item that would have admitted alone does.
pub(crate) fn partial_repeat(
    check: &Check,
    remembered: &[Option<Remembered>],
    fresh: Verdict,
    mut look: impl FnMut(usize, &CheckItem) -> Decision,
) -> Verdict {
    let mut decided = fresh.decisions.into_iter();
    let decisions = check
        .items()
        .iter()
        .zip(remembered)
        .enumerate()
        .map(|(i, (item, r))| match r {
            Some(r) if fresh.allowed => r.decision,
            Some(_) => look(i, item),
            None => decided
                .next()
                .expect("the fresh verdict has a decision per unremembered item"),
        })
        .collect();
    Verdict {
        allowed: fresh.allowed,
        decisions,
        atomic: true,
        decided_at_ms: fresh.decided_at_ms,
        listed: Vec::new(),
    }
}

/// Remembers an admitted check's decisions under each item's request id for its window, kept
/// [`super::GC_GRACE_MS`] longer like every state (a partial repeat remembers the items it
/// decided anew: the remembered ones keep their first memory).
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
