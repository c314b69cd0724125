//! `Control` of a `MemoryStore`: tiers and overrides, the deny and allow lists, peek and reset,
//! each decided synchronously in memory (the async trait's methods call these; so does
//! [`Direct`](super::Direct)).

use super::*;

impl MemoryStore {
    /// [`Control::peek`](crate::Control::peek) at `now_ms`: a zero-cost look at the held state under the identifier's
    /// effective policy, changing nothing (not even the purge of expired states a check makes).
    /// A capacity lease is not looked at: the answer is the state's, as a zero-cost look at a
    /// spending item's is.
    pub(super) fn peek_now(&self, limit: &Limit, identifier: &[u8], now_ms: u64) -> Verdict {
        // As `check_one`: assignments are looked up only while the store holds any.
        let policy = if self.assigned.load(Ordering::Relaxed) > 0 {
            self.effective_policy(limit, &Identifier::from(identifier), now_ms)
        } else {
            limit.policy
        };
        let key = KeyRef::new(&limit.name, policy.algorithm(), identifier);
        let hash = key.hash(&self.hasher);
        let state = {
            let mut map = lock(self.shard(hash));
            map.find_mut(hash, &key).map(|held| held.state())
        };
        let mut state = state.unwrap_or_else(|| State::fresh(policy.algorithm()));
        // A delaying GCRA limit's look reads its queue as its steps do.
        let decision = state
            .apply_charge_delaying(&policy, now_ms, 0, Charge::Request, limit.delay_ms())
            .decision;
        Verdict {
            allowed: decision.allowed,
            decisions: vec![decision],
            atomic: true,
            decided_at_ms: now_ms,
            listed: Vec::new(),
        }
    }
    /// [`Control::reset`](crate::Control::reset): drops the identifier's state on the limit under every algorithm,
    /// and its block.
    pub(super) fn reset_now(&self, limit: &Limit, identifier: &[u8]) -> bool {
        let mut existed = false;
        for algorithm in Algorithm::EVERY {
            let key = KeyRef::new(&limit.name, algorithm, identifier);
            let hash = key.hash(&self.hasher);
            let mut map = lock(self.shard(hash));
            existed |= map.remove(hash, &key);
        }
        // A reset lifts the identifier's block on the limit too (docs/design.md §2, "Blocks").
        let mut blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        let id = Identifier::from(identifier);
        existed |= blocks.remove(&(limit.name.clone(), id)).is_some();
        existed
    }
    /// [`Control::list_add`](crate::Control::list_add), synchronously.
    pub(super) fn list_add_now(
        &self,
        list: &str,
        entry: &ListEntry,
        until_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        let lapse = list::checked_addition(list, until_ms, now_ms)?;
        let mut lists = self.lists.lock().unwrap_or_else(|e| e.into_inner());
        let members = lists.entry(list.to_string()).or_default();
        // Writers drop what has lapsed, as list.lua does.
        members.retain(|_, &mut l| l > now_ms);
        members.insert(entry.member(), lapse);
        Ok(())
    }
    /// [`Control::list_remove`](crate::Control::list_remove), synchronously.
    pub(super) fn list_remove_now(&self, list: &str, entry: &ListEntry) -> bool {
        let mut lists = self.lists.lock().unwrap_or_else(|e| e.into_inner());
        let Some(members) = lists.get_mut(list) else {
            return false;
        };
        let removed = members.remove(&entry.member()).is_some();
        if members.is_empty() {
            lists.remove(list);
        }
        removed
    }
    /// [`Control::list_entries`](crate::Control::list_entries), synchronously.
    pub(super) fn list_entries_now(&self, list: &str, now_ms: u64) -> Vec<(String, Option<u64>)> {
        let lists = self.lists.lock().unwrap_or_else(|e| e.into_inner());
        let mut live: Vec<(u64, &String)> = lists
            .get(list)
            .into_iter()
            .flatten()
            .filter(|(_, lapse)| **lapse > now_ms)
            .map(|(member, lapse)| (*lapse, member))
            .collect();
        // A sorted set's order: by score, then by member bytes.
        live.sort();
        live.into_iter()
            .map(|(lapse, member)| (member.clone(), list::until_of(lapse)))
            .collect()
    }
    /// What [`Control::assign`](crate::Control::assign) does, synchronously: `assignment` replaces the identifier's
    /// assignment of its kind until `until_ms`; `None` clears both kinds.
    pub(super) fn assign_now(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        assignment: Option<&Assignment>,
        until_ms: Option<u64>,
    ) {
        match assignment {
            // Stored as its text reads back, so every store answers alike (`Some(0)` is 1).
            Some(a) => self.change_assignments(limit, identifier, a.kind(), |held| {
                held.push((a.clone(), until_ms.map(|u| u.max(1))));
                held.sort_by_key(|(a, _)| a.kind() == AssignmentKind::Tier);
            }),
            None => self.change_assignments(limit, identifier, AssignmentKind::Tier, Vec::clear),
        }
    }
    /// What [`Control::clear_assignment`](crate::Control::clear_assignment) does, synchronously.
    pub(super) fn clear_assignment_now(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        kind: AssignmentKind,
    ) {
        self.change_assignments(limit, identifier, kind, |_| {});
    }
    /// Drops the identifier's assignment of `kind`, then lets `change` edit what is held.
    fn change_assignments(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        kind: AssignmentKind,
        change: impl FnOnce(&mut Vec<(Assignment, Option<u64>)>),
    ) {
        let mut map = self.assignments.lock().unwrap_or_else(|e| e.into_inner());
        let key = (limit.name.clone(), identifier.clone());
        let mut held = map.remove(&key).unwrap_or_default();
        held.retain(|(a, _)| a.kind() != kind);
        change(&mut held);
        if !held.is_empty() {
            map.insert(key, held);
        }
        self.assigned.store(map.len(), Ordering::Relaxed);
    }
    /// What [`Control::assignments`](crate::Control::assignments) answers, synchronously: the override first.
    pub(super) fn assignments_now(
        &self,
        limit: &Limit,
        identifier: &Identifier,
    ) -> Vec<(Assignment, Option<u64>)> {
        if self.assigned.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        let map = self.assignments.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&(limit.name.clone(), identifier.clone()))
            .cloned()
            .unwrap_or_default()
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl Control for MemoryStore {
    async fn apply(&self, op: ControlOp) -> Result<ControlAnswer, StoreError> {
        Ok(match op {
            ControlOp::Assign {
                limit,
                identifier,
                assignment,
                until_ms,
            } => {
                self.assign_now(&limit, &identifier, assignment.as_ref(), until_ms);
                ControlAnswer::Done
            }
            ControlOp::ClearAssignment {
                limit,
                identifier,
                kind,
            } => {
                self.clear_assignment_now(&limit, &identifier, kind);
                ControlAnswer::Done
            }
            ControlOp::Assignments { limit, identifier } => {
                ControlAnswer::Assignments(self.assignments_now(&limit, &identifier))
            }
            ControlOp::ListAdd {
                list,
                entry,
                until_ms,
                now_ms,
            } => {
                self.list_add_now(&list, &entry, until_ms, now_ms)?;
                ControlAnswer::Done
            }
            ControlOp::ListRemove { list, entry } => {
                ControlAnswer::Existed(self.list_remove_now(&list, &entry))
            }
            ControlOp::ListEntries { list, now_ms } => {
                ControlAnswer::Entries(self.list_entries_now(&list, now_ms))
            }
            ControlOp::Peek {
                limit,
                identifier,
                time,
            } => {
                let now_ms = match time {
                    TimeSource::At(ms) => ms,
                    TimeSource::Server => self.clock.now_ms(),
                };
                ControlAnswer::Verdict(self.peek_now(&limit, identifier.as_bytes(), now_ms))
            }
            ControlOp::Reset { limit, identifier } => {
                ControlAnswer::Existed(self.reset_now(&limit, identifier.as_bytes()))
            }
        })
    }
}
