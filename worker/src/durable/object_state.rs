//! What one Durable Object decides with, apart from the runtime: the library's `MemoryStore` (the
//! same steps as every store) as the object's in-memory copy, restored from its storage when the
//! object starts; each call answered by [`serve`], then the entries the call changed, for the
//! object to write to its storage before it answers. Pure, so a native test drives it exactly as
//! the object does.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use edgelimit::store::Saved;
use edgelimit::{MemoryStore, StoreError};

use edgelimit_engine::wire::serve::serve;
use edgelimit_engine::wire::{checks_of, entry_of, WireAnswer, WireCall};

/// What a call changed: the entries to write (`Some`) or delete (`None`), by key.
pub type Changes = Vec<(String, Option<Saved>)>;

/// The object's state: its store.
#[derive(Debug)]
pub struct ObjectState {
    store: MemoryStore,
}

impl Default for ObjectState {
    fn default() -> Self {
        ObjectState::new()
    }
}

impl ObjectState {
    /// An object holding nothing. Its store evicts nothing: the object's storage keeps every
    /// state until its time, so its memory must too.
    pub fn new() -> ObjectState {
        ObjectState {
            store: MemoryStore::with_capacity(usize::MAX >> 1),
        }
    }

    /// Puts back what the object's storage held (its entries as saved).
    pub fn restore(&self, saved: impl IntoIterator<Item = Saved>) -> Result<(), StoreError> {
        for entry in saved {
            self.store.restore(entry)?;
        }
        Ok(())
    }

    /// The store, for reading.
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// Answers `call` at `now_ms` (the object's clock: what `time = "server"` decides at), and
    /// says what to write before answering.
    pub fn handle(&self, call: &WireCall, now_ms: u64) -> (WireAnswer, Changes) {
        let answer = ready(serve(&self.store, call, Some(now_ms)));
        let changes = match answer {
            WireAnswer::Failed { .. } => Vec::new(),
            _ => self.changes(call),
        };
        (answer, changes)
    }

    /// The entries `call` may have changed, as the store holds them now.
    fn changes(&self, call: &WireCall) -> Changes {
        let store = &self.store;
        let limit = |wire: &edgelimit_engine::wire::WireLimit,
                     id: &edgelimit_engine::wire::WireBytes| {
            Some((wire.limit().ok()?, id.identifier().ok()?))
        };
        match call {
            WireCall::Check {
                limits,
                checks,
                at_ms,
            } => checks_of(limits, checks, *at_ms)
                .map(|(checks, _)| store.saved_for(&checks))
                .unwrap_or_default(),
            WireCall::Reset {
                limit: l,
                identifier,
            } => limit(l, identifier)
                .map(|(l, id)| store.saved_states(&l, id.as_bytes()))
                .unwrap_or_default(),
            WireCall::Assign {
                limit: l,
                identifier,
                ..
            }
            | WireCall::ClearAssignment {
                limit: l,
                identifier,
                ..
            } => limit(l, identifier)
                .map(|(l, id)| vec![store.saved_assignments(&l, &id)])
                .unwrap_or_default(),
            WireCall::ListAdd { list, entry, .. } | WireCall::ListRemove { list, entry } => {
                match entry_of(entry) {
                    Ok(_) => vec![store.saved_list(list)],
                    Err(_) => Vec::new(),
                }
            }
            WireCall::Peek { .. } | WireCall::Assignments { .. } | WireCall::ListEntries { .. } => {
                Vec::new()
            }
        }
    }
}

/// Polls a future that must be ready at once: the memory store never waits.
fn ready<F: Future>(future: F) -> F::Output {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => unreachable!("the memory store answers at once"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgelimit::{Check, Limit, TimeSource};
    use edgelimit_engine::wire::{check_call, WireBytes, WireLimit};

    fn kept(store: &mut std::collections::HashMap<String, String>, changes: Changes) {
        for (key, saved) in changes {
            match saved {
                Some(saved) => {
                    store.insert(key, serde_json::to_string(&saved).unwrap());
                }
                None => {
                    store.remove(&key);
                }
            }
        }
    }

    /// An object restarted from what it wrote answers as the object that kept running: the
    /// tier it was given, the quota it spent, the list entry it holds.
    #[test]
    fn an_object_restarted_from_its_storage_answers_as_before() {
        let limit = Limit::new("per-user", "fixed 2/1m".parse().unwrap())
            .with_tiers([("pro", "fixed 4/1m".parse().unwrap())])
            .unwrap();
        let object = ObjectState::new();
        let mut storage = std::collections::HashMap::new();
        let assign = WireCall::Assign {
            limit: WireLimit::of(&limit),
            identifier: WireBytes::of(b"alice"),
            assignment: Some("0 t pro".into()),
            until_ms: None,
        };
        let (answer, changes) = object.handle(&assign, 0);
        assert_eq!(answer, WireAnswer::Done, "{answer:?}");
        kept(&mut storage, changes);
        let check = check_call(&[Check::single(&limit, "alice", 1)], TimeSource::Server);
        for now in 1..=3 {
            let (answer, changes) = object.handle(&check, now);
            kept(&mut storage, changes);
            assert!(matches!(answer, WireAnswer::Verdicts { ref verdicts } if verdicts[0].allowed));
        }
        let deny = WireCall::ListAdd {
            list: "deny".into(),
            entry: "ip 198.51.100.0/24".into(),
            until_ms: None,
            now_ms: 3,
        };
        kept(&mut storage, object.handle(&deny, 3).1);

        let restarted = ObjectState::new();
        restarted
            .restore(
                storage
                    .values()
                    .map(|text| serde_json::from_str(text).unwrap()),
            )
            .unwrap();
        for o in [&object, &restarted] {
            let (answer, _) = o.handle(&check, 4);
            let WireAnswer::Verdicts { verdicts } = answer else {
                panic!("{answer:?}")
            };
            assert!(verdicts[0].allowed, "the fourth of the pro tier's four");
            assert_eq!(verdicts[0].decisions[0].remaining, 0);
            let (answer, _) = o.handle(&check, 5);
            assert!(
                matches!(answer, WireAnswer::Verdicts { ref verdicts } if !verdicts[0].allowed)
            );
            let entries = WireCall::ListEntries {
                list: "deny".into(),
                now_ms: 5,
            };
            assert!(matches!(
                o.handle(&entries, 5).0,
                WireAnswer::Entries { ref entries } if entries.len() == 1
            ));
        }
    }

    #[test]
    fn a_bad_call_fails_and_changes_nothing() {
        let object = ObjectState::new();
        let bad = WireCall::ListAdd {
            list: "deny".into(),
            entry: "nonsense".into(),
            until_ms: None,
            now_ms: 0,
        };
        let (answer, changes) = object.handle(&bad, 0);
        assert!(
            matches!(
                answer,
                WireAnswer::Failed {
                    invalid_input: true,
                    ..
                }
            ),
            "{answer:?}"
        );
        assert!(changes.is_empty());
    }
}
