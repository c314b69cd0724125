//! What one Durable Object decides with, apart from the runtime: the library's `MemoryStore` (the
//! same steps as every store), bounded, as the object's in-memory copy, restored from its storage
//! page by page when the object starts; each call answered by [`serve`], then the entries the
//! call changed, for the object to write to its storage before it answers; and, page by page,
//! which stored rows a collection deletes. Pure, so a native test drives it exactly as the object
//! does (docs/design.md §4, "Durable Objects").

use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use edgelimit::store::{Saved, UnreadableEntry};
use edgelimit::MemoryStore;

use edgelimit_engine::wire::serve::serve;
use edgelimit_engine::wire::{checks_of, entry_of, WireAnswer, WireCall};

/// What a call changed: the entries to write (`Some`) or delete (`None`), by key.
pub type Changes = Vec<(String, Option<Saved>)>;

/// How many entries of each kind (limiter states, remembered requests, blocks, leases) an object
/// holds at most. When full, a new entry displaces the one whose time ends soonest, and the
/// collection deletes the displaced entry's row (docs/decisions.md, "Durable Object state").
pub const OBJECT_CAPACITY: usize = 10_000;

/// The object's state: its store, and what it counted.
#[derive(Debug)]
pub struct ObjectState {
    store: MemoryStore,
    capacity: usize,
    counters: Cell<Counters>,
}

/// What an object counted since it started (its instance: the counts start again with it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Stored rows put back into memory by loading.
    pub restored: u64,
    /// Stored rows that could not be read (an unknown format version, a damaged entry): skipped
    /// by loading, deleted by the collection.
    pub unreadable: u64,
    /// Rows the collection deleted because their entry's time had passed.
    pub expired: u64,
    /// Rows the collection deleted because memory had let their entry go before its time: the
    /// entries displaced when the object was full.
    pub evicted: u64,
    /// Rows new keys added while the object was nearly full (each may displace an entry).
    pub added_when_full: u64,
}

impl std::ops::Add for Counters {
    type Output = Counters;
    fn add(self, other: Counters) -> Counters {
        Counters {
            restored: self.restored + other.restored,
            unreadable: self.unreadable + other.unreadable,
            expired: self.expired + other.expired,
            evicted: self.evicted + other.evicted,
            added_when_full: self.added_when_full + other.added_when_full,
        }
    }
}

/// What loading one page of rows found.
#[derive(Debug, Default)]
pub struct Restored {
    /// The rows that could not be read, each with why (a collection deletes them).
    pub unreadable: Vec<(String, UnreadableEntry)>,
    /// The soonest time a row read may be deleted (one already due included).
    pub soonest_ms: Option<u64>,
}

/// What the collection does with one page of rows.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Collected {
    /// The rows to delete.
    pub delete: Vec<String>,
    /// The soonest time a row kept may be dropped.
    pub soonest_ms: Option<u64>,
    /// Why: how many rows of the page each reason deletes.
    pub counted: Counters,
}

impl Default for ObjectState {
    fn default() -> Self {
        ObjectState::new()
    }
}

impl ObjectState {
    /// An object holding nothing, bounded at [`OBJECT_CAPACITY`].
    pub fn new() -> ObjectState {
        ObjectState::with_capacity(OBJECT_CAPACITY)
    }

    /// An object holding nothing, at most `capacity` entries of each kind.
    pub fn with_capacity(capacity: usize) -> ObjectState {
        ObjectState {
            store: MemoryStore::with_capacity(capacity),
            capacity,
            counters: Cell::new(Counters::default()),
        }
    }

    /// Puts back what the object's storage held: its stored rows, (key, text), skipping (and
    /// counting) what cannot be read and what has had its time at `now_ms`.
    pub fn restore(
        &self,
        rows: impl IntoIterator<Item = (String, String)>,
        now_ms: u64,
    ) -> Restored {
        let mut found = Restored::default();
        let mut restored = 0;
        for (key, text) in rows {
            let saved = match Saved::from_stored(&text) {
                Ok(saved) => saved,
                Err(why) => {
                    found.unreadable.push((key, why));
                    continue;
                }
            };
            let until = saved.keep_until_ms();
            found.soonest_ms = soonest(found.soonest_ms, until);
            if until.is_some_and(|until| until <= now_ms) {
                continue; // the collection deletes it
            }
            if let Err(why) = self.store.restore(saved) {
                found
                    .unreadable
                    .push((key, UnreadableEntry::Malformed(why.to_string())));
                continue;
            }
            restored += 1;
        }
        self.count(Counters {
            restored,
            unreadable: found.unreadable.len() as u64,
            ..Counters::default()
        });
        found
    }

    /// Which of `rows` (key, text) the collection deletes at `now_ms`: those that cannot be
    /// read, those whose time has passed, and those memory no longer holds (displaced when the
    /// object was full, or dropped after their time) — storage keeps what memory keeps.
    pub fn collect<'a>(
        &self,
        rows: impl IntoIterator<Item = (&'a str, &'a str)>,
        now_ms: u64,
    ) -> Collected {
        let mut out = Collected::default();
        for (key, text) in rows {
            let saved = match Saved::from_stored(text) {
                Ok(saved) => saved,
                Err(_) => {
                    out.counted.unreadable += 1;
                    out.delete.push(key.to_string());
                    continue;
                }
            };
            let until = saved.keep_until_ms();
            if until.is_some_and(|until| until <= now_ms) {
                out.counted.expired += 1;
            } else if !self.store.holds(&saved) {
                // Assignments and lists have no time: one memory no longer holds lapsed.
                if until.is_some() {
                    out.counted.evicted += 1;
                } else {
                    out.counted.expired += 1;
                }
            } else {
                out.soonest_ms = soonest(out.soonest_ms, until);
                continue;
            }
            out.delete.push(key.to_string());
        }
        self.count(Counters {
            expired: out.counted.expired,
            evicted: out.counted.evicted,
            ..Counters::default()
        });
        out
    }

    /// The store, for reading.
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// What the object counted so far.
    pub fn counters(&self) -> Counters {
        self.counters.get()
    }

    fn count(&self, more: Counters) {
        self.counters.set(self.counters.get() + more);
    }

    /// Whether the states nearly fill the object: a new one may then displace another (the
    /// store's shards fill unevenly, so some fill before the whole does).
    fn nearly_full(&self) -> bool {
        self.store.len() >= self.capacity - self.capacity / 8
    }

    /// Answers `call` at `now_ms` (the object's clock: what `time = "server"` decides at), and
    /// says what to write before answering.
    pub fn handle(&self, call: &WireCall, now_ms: u64) -> (WireAnswer, Changes) {
        // Nearly full, the keys held before the call tell the rows it adds.
        let held_before: Option<Vec<String>> = self.nearly_full().then(|| {
            let mut held: Vec<String> = self
                .changes(call)
                .into_iter()
                .filter_map(|(key, saved)| saved.map(|_| key))
                .collect();
            held.sort_unstable();
            held
        });
        let answer = ready(serve(&self.store, call, Some(now_ms)));
        let changes = match answer {
            WireAnswer::Failed { .. } => Vec::new(),
            _ => self.changes(call),
        };
        if let Some(before) = held_before {
            let added = changes
                .iter()
                .filter(|(key, saved)| saved.is_some() && before.binary_search(key).is_err())
                .count();
            self.count(Counters {
                added_when_full: added as u64,
                ..Counters::default()
            });
        }
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

/// The sooner of a time so far and another, if any.
pub fn soonest(so_far: Option<u64>, other: Option<u64>) -> Option<u64> {
    match (so_far, other) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
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

    /// An object's storage: rows by key, in key order as `list` gives them.
    type Storage = std::collections::BTreeMap<String, String>;

    /// Writes what a call changed, as the object does.
    fn kept(store: &mut Storage, changes: Changes) {
        for (key, saved) in changes {
            match saved {
                Some(saved) => {
                    store.insert(key, saved.to_stored());
                }
                None => {
                    store.remove(&key);
                }
            }
        }
    }

    /// Every row, as the object reads them.
    fn rows(store: &Storage) -> Vec<(String, String)> {
        store.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// Collects `store` page by page at `now_ms`, as the alarm does; what it counted.
    fn collect_all(
        object: &ObjectState,
        store: &mut Storage,
        now_ms: u64,
        page: usize,
    ) -> Collected {
        let mut total = Collected::default();
        let mut after: Option<String> = None;
        loop {
            let rows: Vec<(String, String)> = store
                .iter()
                .filter(|(k, _)| after.as_ref().is_none_or(|a| *k > a))
                .take(page)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let found = object.collect(rows.iter().map(|(k, v)| (k.as_str(), v.as_str())), now_ms);
            for key in &found.delete {
                store.remove(key);
            }
            total.delete.extend(found.delete);
            total.soonest_ms = soonest(total.soonest_ms, found.soonest_ms);
            total.counted = total.counted + found.counted;
            if rows.len() < page {
                return total;
            }
            after = rows.last().map(|(k, _)| k.clone());
        }
    }

    fn one_check(limit: &Limit, id: &str) -> WireCall {
        check_call(&[Check::single(limit, id, 1)], TimeSource::Server)
    }

    /// An object restarted from what it wrote answers as the object that kept running: the
    /// tier it was given, the quota it spent, the list entry it holds.
    #[test]
    fn an_object_restarted_from_its_storage_answers_as_before() {
        let limit = Limit::new("per-user", "fixed 2/1m".parse().unwrap())
            .with_tiers([("pro", "fixed 4/1m".parse().unwrap())])
            .unwrap();
        let object = ObjectState::new();
        let mut storage = Storage::new();
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
        let restored = restarted.restore(rows(&storage), 3);
        assert!(restored.unreadable.is_empty(), "{restored:?}");
        assert_eq!(restarted.counters().restored, storage.len() as u64);
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

    /// Stored rows that cannot be read — a newer version's, a damaged one — are skipped and
    /// counted, the rest put back, and the collection deletes them.
    #[test]
    fn unreadable_rows_are_skipped_counted_and_collected() {
        let limit = Limit::new("per-user", "fixed 2/1h".parse().unwrap());
        let object = ObjectState::new();
        let mut storage = Storage::new();
        for id in ["alice", "bob"] {
            kept(&mut storage, object.handle(&one_check(&limit, id), 1_000).1);
        }
        let good = storage.len();
        assert_eq!(good, 2);
        // A bare entry, as written before versions, reads as version 0.
        let (key, text) = storage.pop_first().unwrap();
        let bare = serde_json::to_string(&Saved::from_stored(&text).unwrap()).unwrap();
        storage.insert(key, bare);
        storage.insert("s/00/fixed/01".into(), r#"{"v":9,"entry":{}}"#.into());
        storage.insert("s/00/fixed/02".into(), "{damaged".into());

        let restarted = ObjectState::new();
        let restored = restarted.restore(rows(&storage), 2_000);
        let skipped: Vec<&str> = restored
            .unreadable
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(skipped, ["s/00/fixed/01", "s/00/fixed/02"]);
        assert!(matches!(
            restored.unreadable[0].1,
            UnreadableEntry::Version(9)
        ));
        let counted = restarted.counters();
        assert_eq!((counted.restored, counted.unreadable), (2, 2));
        // Both identifiers' spent quota came back: one request left each.
        for id in ["alice", "bob"] {
            let (answer, _) = restarted.handle(&one_check(&limit, id), 2_000);
            assert!(
                matches!(answer, WireAnswer::Verdicts { ref verdicts } if verdicts[0].decisions[0].remaining == 0)
            );
        }
        let collected = collect_all(&restarted, &mut storage, 2_000, 1_000);
        assert_eq!(collected.counted.unreadable, 2);
        assert_eq!(storage.len(), good, "{storage:?}");
    }

    /// The collection deletes what is past its time, keeps the rest, and says when it is next
    /// due; page by page it finds the same as in one go.
    #[test]
    fn the_collection_deletes_rows_past_their_time_page_by_page() {
        let short = Limit::new("short", "fixed 5/2s".parse().unwrap());
        let long = Limit::new("long", "fixed 5/1h".parse().unwrap());
        let object = ObjectState::new();
        let mut storage = Storage::new();
        for i in 0..250 {
            let id = format!("id-{i}");
            kept(
                &mut storage,
                object.handle(&one_check(&short, &id), 1_000).1,
            );
            if i % 5 == 0 {
                kept(&mut storage, object.handle(&one_check(&long, &id), 1_000).1);
            }
        }
        assert_eq!(storage.len(), 300);
        // The short window ends at 2 s, its rows are kept a grace of 60 s past it.
        let before_due = collect_all(&object, &mut storage, 61_999, 7);
        assert!(before_due.delete.is_empty());
        assert_eq!(before_due.soonest_ms, Some(62_000));
        let due = collect_all(&object, &mut storage, 62_000, 7);
        assert_eq!(due.counted.expired, 250);
        assert_eq!(due.counted.evicted, 0);
        assert_eq!(storage.len(), 50);
        assert_eq!(due.soonest_ms, Some(3_600_000 + 60_000));
        assert_eq!(object.counters().expired, 250);
    }

    /// At its bound an object holds its capacity: each new identifier displaces the entry whose
    /// time ends soonest, the rows of the displaced are counted and deleted by the collection,
    /// and the object restarted from what is left holds the same.
    #[test]
    fn a_full_object_displaces_the_soonest_ending_entries_and_storage_follows() {
        let capacity = 100;
        // GCRA: an identifier seen later is kept later.
        let limit = Limit::new("per-user", "gcra 1/1s burst 5".parse().unwrap());
        let object = ObjectState::with_capacity(capacity);
        let mut storage = Storage::new();
        for i in 0..300u64 {
            let call = one_check(&limit, &format!("id-{i:03}"));
            kept(&mut storage, object.handle(&call, 1_000 + i).1);
        }
        assert_eq!(object.store().len(), capacity);
        assert_eq!(
            storage.len(),
            300,
            "storage holds the displaced until collected"
        );
        assert!(
            object.counters().added_when_full >= 200,
            "{:?}",
            object.counters()
        );
        let collected = collect_all(&object, &mut storage, 2_000, 64);
        assert_eq!(
            (collected.counted.evicted, collected.counted.expired),
            (200, 0)
        );
        assert_eq!(storage.len(), capacity);
        // What is left is the 100 identifiers seen last.
        let held = |object: &ObjectState, i: u64| {
            let call = WireCall::Peek {
                limit: WireLimit::of(&limit),
                identifier: WireBytes::of(format!("id-{i:03}").as_bytes()),
                at_ms: Some(2_000),
            };
            match object.handle(&call, 2_000).0 {
                WireAnswer::Verdict { verdict } => verdict.decisions[0].remaining < 5,
                other => panic!("{other:?}"),
            }
        };
        assert!((200..300).all(|i| held(&object, i)));
        assert!((0..200).all(|i| !held(&object, i)));

        let restarted = ObjectState::with_capacity(capacity);
        restarted.restore(rows(&storage), 2_000);
        assert_eq!(restarted.store().len(), capacity);
        assert!((200..300).all(|i| held(&restarted, i)));
        assert!(collect_all(&restarted, &mut storage, 2_000, 64)
            .delete
            .is_empty());
    }

    /// Storage that outgrew the bound (rows the collection had not yet deleted) loads into a
    /// full object, and the collection then deletes what memory did not keep.
    #[test]
    fn storage_beyond_the_bound_loads_into_a_full_object() {
        let limit = Limit::new("per-user", "gcra 1/1s burst 5".parse().unwrap());
        let unbounded = ObjectState::new();
        let mut storage = Storage::new();
        for i in 0..500u64 {
            let call = one_check(&limit, &format!("id-{i:03}"));
            kept(&mut storage, unbounded.handle(&call, 1_000 + i).1);
        }
        let object = ObjectState::with_capacity(100);
        object.restore(rows(&storage), 2_000);
        assert_eq!(object.store().len(), 100);
        let collected = collect_all(&object, &mut storage, 2_000, 128);
        assert_eq!(collected.counted.evicted, 400);
        assert_eq!(storage.len(), 100);
    }
}
