//! What a copy of a `MemoryStore` kept elsewhere needs (a Durable Object's storage): the entries
//! a check or a control operation changed, in their saved form, and each put back.

use super::*;

impl MemoryStore {
    /// The entries `checks` could have changed, as this store holds them now — each item's
    /// state under its limit's algorithm, each request id it carries, the capacity lease of
    /// each item spending or crediting one, and the block of each item a block applies to — keyed by
    /// [`Saved::key`], `None` for an entry not held (to drop wherever it was kept). Called after
    /// the checks were decided, it is what keeps a copy of the store elsewhere up to date.
    pub fn saved_for(&self, checks: &[Check]) -> Vec<(String, Option<Saved>)> {
        let mut out: Vec<(String, Option<Saved>)> = Vec::new();
        let mut push = |key: String, saved: Option<Saved>| {
            if !out.iter().any(|(k, _)| *k == key) {
                out.push((key, saved));
            }
        };
        for item in checks.iter().flat_map(Check::items) {
            let (name, id) = (&item.limit.name, item.identifier.as_bytes());
            let algorithm = item.limit.policy.algorithm();
            push(
                saved::state_key(name, algorithm, id),
                self.saved_state(name, algorithm, id),
            );
            if let Some(request_id) = &item.request_id {
                let requests = self.requests.lock().unwrap_or_else(|e| e.into_inner());
                push(
                    saved::request_key(name, id, request_id.as_bytes()),
                    remembered::saved(&requests, name, &item.identifier, request_id),
                );
            }
            if item.uses_lease() {
                let leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
                let held = leases.get(&(name.clone(), item.identifier.clone()));
                push(
                    saved::lease_key(name, id),
                    held.map(|(lease, keep_until_ms)| Saved::CapacityLease {
                        limit: name.to_string(),
                        identifier: id.to_vec(),
                        balance: lease.balance(),
                        until_ms: lease.until_ms(),
                        keep_until_ms,
                    }),
                );
            }
            if item.applies_block() {
                push(saved::block_key(name, id), self.saved_block(name, id));
            }
        }
        out
    }
    /// The state of (limit, identifier) under every algorithm and its block, as
    /// [`MemoryStore::saved_for`] gives them: what a [`Control::reset`] changed.
    pub fn saved_states(&self, limit: &Limit, identifier: &[u8]) -> Vec<(String, Option<Saved>)> {
        Algorithm::EVERY
            .into_iter()
            .map(|algorithm| {
                (
                    saved::state_key(&limit.name, algorithm, identifier),
                    self.saved_state(&limit.name, algorithm, identifier),
                )
            })
            .chain([(
                saved::block_key(&limit.name, identifier),
                self.saved_block(&limit.name, identifier),
            )])
            .collect()
    }
    /// The assignments of (limit, identifier), as [`MemoryStore::saved_for`] gives entries.
    pub fn saved_assignments(
        &self,
        limit: &Limit,
        identifier: &Identifier,
    ) -> (String, Option<Saved>) {
        let key = saved::assignments_key(&limit.name, identifier.as_bytes());
        let held = self.assignments_now(limit, identifier);
        let saved = (!held.is_empty()).then(|| Saved::Assignments {
            limit: limit.name.to_string(),
            identifier: identifier.as_bytes().to_vec(),
            held: held.iter().map(|(a, until)| a.encode(*until)).collect(),
        });
        (key, saved)
    }
    /// The list `name`, as [`MemoryStore::saved_for`] gives entries.
    pub fn saved_list(&self, name: &str) -> (String, Option<Saved>) {
        let lists = self.lists.lock().unwrap_or_else(|e| e.into_inner());
        let saved = lists.get(name).filter(|m| !m.is_empty()).map(|members| {
            let mut members: Vec<(String, u64)> =
                members.iter().map(|(m, l)| (m.clone(), *l)).collect();
            members.sort();
            Saved::List {
                name: name.to_string(),
                members,
            }
        });
        (saved::list_key(name), saved)
    }
    /// Puts back an entry saved by [`MemoryStore::saved_for`] and friends, replacing what the
    /// store holds under its key. An entry whose time has passed is dropped at the next purge,
    /// as any; one that does not read back (an assignment in an unknown form, a lease beyond its
    /// bounds) is an error.
    pub fn restore(&self, saved: Saved) -> Result<(), StoreError> {
        match saved {
            Saved::State {
                limit,
                identifier,
                state,
                keep_until_ms,
            } => {
                let name: Arc<str> = limit.into();
                let key = KeyRef::new(&name, state.algorithm(), &identifier);
                let hash = key.hash(&self.hasher);
                let mut map = lock(self.shard(hash));
                match map.find_mut(hash, &key) {
                    Some(mut held) => {
                        held.set(state);
                        held.set_expiry(keep_until_ms);
                    }
                    None => map.insert_absent(hash, &key, &name, state, keep_until_ms),
                }
            }
            Saved::Request {
                limit,
                identifier,
                request_id,
                until_ms,
                decided_at_ms,
                decision,
                keep_until_ms,
            } => {
                let mut requests = self.requests.lock().unwrap_or_else(|e| e.into_inner());
                remembered::restore(
                    &mut requests,
                    limit.into(),
                    identifier.into(),
                    request_id.into(),
                    until_ms,
                    decided_at_ms,
                    decision,
                    keep_until_ms,
                );
            }
            Saved::Assignments {
                limit,
                identifier,
                held,
            } => {
                let held = held
                    .iter()
                    .map(|text| Assignment::decode(text))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| {
                        StoreError::InvalidInput(format!("a saved assignment of `{limit}`: {e}"))
                    })?;
                let mut map = self.assignments.lock().unwrap_or_else(|e| e.into_inner());
                map.insert((limit.into(), identifier.into()), held);
                self.assigned.store(map.len(), Ordering::Relaxed);
            }
            Saved::List { name, members } => {
                let mut lists = self.lists.lock().unwrap_or_else(|e| e.into_inner());
                lists.insert(name, members.into_iter().collect());
            }
            Saved::Block {
                limit,
                identifier,
                until_ms,
                keep_until_ms,
            } => {
                let mut blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
                blocks.insert((limit.into(), identifier.into()), until_ms, keep_until_ms);
            }
            Saved::CapacityLease {
                limit,
                identifier,
                balance,
                until_ms,
                keep_until_ms,
            } => {
                let lease = CapacityLease::new(balance, until_ms).ok_or_else(|| {
                    StoreError::InvalidInput(format!(
                        "a saved capacity lease of `{limit}`: {balance} units until {until_ms} \
                         is beyond a lease's bounds"
                    ))
                })?;
                let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
                leases.insert((limit.into(), identifier.into()), lease, keep_until_ms);
            }
        }
        Ok(())
    }
    /// Whether this store holds an entry under `saved`'s key ([`Saved::key`]), whatever its
    /// value: what tells a copy kept elsewhere which of its entries the store has let go of
    /// (evicted when full, or dropped after their time) and it may delete too.
    pub fn holds(&self, saved: &Saved) -> bool {
        let by = |limit: &str, identifier: &[u8]| {
            (Arc::<str>::from(limit), Identifier::from(identifier))
        };
        match saved {
            Saved::State {
                limit,
                identifier,
                state,
                ..
            } => {
                let key = KeyRef::new(limit, state.algorithm(), identifier);
                let hash = key.hash(&self.hasher);
                lock(self.shard(hash)).find_mut(hash, &key).is_some()
            }
            Saved::Request {
                limit,
                identifier,
                request_id,
                ..
            } => {
                let requests = self.requests.lock().unwrap_or_else(|e| e.into_inner());
                remembered::saved(
                    &requests,
                    &Arc::from(limit.as_str()),
                    &Identifier::from(identifier.as_slice()),
                    &Identifier::from(request_id.as_slice()),
                )
                .is_some()
            }
            Saved::Assignments {
                limit, identifier, ..
            } => {
                let map = self.assignments.lock().unwrap_or_else(|e| e.into_inner());
                map.contains_key(&by(limit, identifier))
            }
            Saved::CapacityLease {
                limit, identifier, ..
            } => {
                let leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
                leases.get(&by(limit, identifier)).is_some()
            }
            Saved::Block {
                limit, identifier, ..
            } => {
                let blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
                blocks.get(&by(limit, identifier)).is_some()
            }
            Saved::List { name, .. } => {
                let lists = self.lists.lock().unwrap_or_else(|e| e.into_inner());
                lists.get(name).is_some_and(|members| !members.is_empty())
            }
        }
    }

    /// The saved form of one block, if held.
    fn saved_block(&self, name: &Arc<str>, identifier: &[u8]) -> Option<Saved> {
        let blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        let (until_ms, keep_until_ms) =
            blocks.get(&(name.clone(), Identifier::from(identifier)))?;
        Some(Saved::Block {
            limit: name.to_string(),
            identifier: identifier.to_vec(),
            until_ms: *until_ms,
            keep_until_ms,
        })
    }

    /// The saved form of one state, if held.
    fn saved_state(
        &self,
        name: &Arc<str>,
        algorithm: Algorithm,
        identifier: &[u8],
    ) -> Option<Saved> {
        let key = KeyRef::new(name, algorithm, identifier);
        let hash = key.hash(&self.hasher);
        let mut map = lock(self.shard(hash));
        let held = map.find_mut(hash, &key)?;
        Some(Saved::State {
            limit: name.to_string(),
            identifier: identifier.to_vec(),
            state: held.state(),
            keep_until_ms: held.expire_at(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_tells_what_the_store_let_go_of() {
        let store = MemoryStore::with_capacity(2);
        let limit =
            Limit::new("per-user", "fixed 1/1s".parse::<Policy>().unwrap()).with_block_for(5_000);
        let check = |id: &str| Check::single(&limit, id, 1).with_request_id(format!("r-{id}"));
        store.check_now(&[check("a")], 0);
        // Denied: blocked.
        store.check_now(&[Check::single(&limit, "a", 1)], 1);
        let saved: Vec<Saved> = store
            .saved_for(&[check("a")])
            .into_iter()
            .filter_map(|(_, saved)| saved)
            .collect();
        let kinds = |saved: &[Saved]| {
            saved
                .iter()
                .map(|s| s.key()[..1].to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(kinds(&saved), ["s", "r", "b"], "{saved:?}");
        assert!(saved.iter().all(|s| store.holds(s)));
        // States ending later displace a's from the full store; its block and request stay.
        store.check_now(&[Check::single(&limit, "b", 1)], 1_500);
        store.check_now(&[Check::single(&limit, "c", 1)], 2_500);
        let held: Vec<bool> = saved.iter().map(|s| store.holds(s)).collect();
        assert_eq!(held, [false, true, true]);
        // Past their times, they go too.
        store.check_now(&[], 10 * GC_GRACE_MS);
        assert!(saved.iter().all(|s| !store.holds(s)));
        let list = Saved::List {
            name: "deny".into(),
            members: vec![],
        };
        assert!(!store.holds(&list));
    }
}
