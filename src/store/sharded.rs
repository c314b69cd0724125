//! `ShardedStore`: client-side sharding of identifiers over several stores, for users who outgrow
//! one Redis (GitHub's design: several independent Redis deployments, each owning a share of keys).
//!
//! Each (limit, identifier) belongs to the shard with the highest rendezvous score
//! `score(shard name, limit name, identifier)`. Adding a shard moves only the ~1/N of identifiers
//! it now wins; removing one moves only its own. The score is a fixed, documented hash (FNV-1a
//! then a 64-bit finaliser) so every process — a Worker in wasm32 and a native service alike —
//! agrees on where a key lives.
//!
//! A check whose items all land on one shard is sent whole and stays all or nothing. A check
//! split over shards goes out as one sub-check per shard, all shards concurrently in one round
//! trip each; when some shard admits its part and another denies, the cost the admitting parts
//! took is refunded (a refund gives back exactly what was taken), so quota is not lost — but
//! between the two round trips the taken quota was briefly in use, which is why such a verdict
//! says `atomic: false`. A refund (negative cost) inside a denied split check stands: a refund is
//! clamped at what was taken, so it has no exact inverse. An item admitted from its capacity
//! lease ([`crate::Reason::Leased`], docs/design.md §9) has its cost credited back to the lease
//! (if still live), not refunded to its state, which it never charged; a lease credit inside a
//! denied split check stands, as a refund does (credit in a check of its own). A refund gives
//! back cost, not time: a state that admitted and was refunded keeps the latest time it saw.
//! Each part remembers its own items' request ids, and a repeat's verdict carries the latest of
//! its parts' times and the caller's.

use async_trait::async_trait;
use futures_util::future::join_all;

use super::check::{Check, CheckItem, Identifier, Limit, TimeSource, Verdict};
use super::error::StoreError;
use super::traits::{Control, Store};
use crate::algorithm::Charge;
use crate::control::list::{ListEntry, Listed};
use crate::control::{Assignment, AssignmentKind};
use crate::decision::Reason;

/// One shard: a stable name (e.g. its URL without credentials) and its store. The name, not the
/// position, decides ownership, so reordering the list moves nothing. Shards of different kinds
/// are boxed: `Shard<Box<dyn Store>>` (or `Box<dyn Control>` to control them too).
pub struct Shard<S = Box<dyn Store>> {
    name: String,
    store: S,
}

impl<S> std::fmt::Debug for Shard<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard").field("name", &self.name).finish()
    }
}

impl<S: Store> Shard<S> {
    /// A shard named `name` over `store`.
    pub fn new(name: impl Into<String>, store: S) -> Shard<S> {
        Shard {
            name: name.into(),
            store,
        }
    }

    /// The shard's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A store that spreads identifiers over several stores by rendezvous hashing.
#[derive(Debug)]
pub struct ShardedStore<S = Box<dyn Store>> {
    shards: Vec<Shard<S>>,
    /// Whether the owner is chosen by the identifier alone (every limit of an identifier on one
    /// shard) rather than by (limit name, identifier).
    by_identifier: bool,
}

/// The rendezvous score of `shard` for (limit name, identifier): FNV-1a over the three, with
/// separators, then the SplitMix64 finaliser to spread FNV's weak low bits.
pub fn rendezvous_score(shard: &str, limit_name: &str, identifier: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [shard.as_bytes(), limit_name.as_bytes(), identifier] {
        for &b in part.iter().chain(&[0xff]) {
            hash ^= b as u64;
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    hash ^= hash >> 30;
    hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash ^= hash >> 27;
    hash = hash.wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

impl<S: Store> ShardedStore<S> {
    /// A store over `shards`; errors if there are none or two share a name.
    pub fn new(shards: Vec<Shard<S>>) -> Result<ShardedStore<S>, StoreError> {
        if shards.is_empty() {
            return Err(StoreError::InvalidInput(
                "a sharded store needs at least one shard".into(),
            ));
        }
        for (i, shard) in shards.iter().enumerate() {
            if shards[..i].iter().any(|s| s.name == shard.name) {
                return Err(StoreError::InvalidInput(format!(
                    "two shards are named `{}`; names decide key ownership and must be unique",
                    shard.name
                )));
            }
        }
        Ok(ShardedStore {
            shards,
            by_identifier: false,
        })
    }

    /// The same store choosing each owner by the identifier alone, so that the limits of one
    /// identifier (a user's per-second and per-day limits) live on one shard and a check of them
    /// stays whole there: what a store of many small shards wants (the Worker's Durable Objects).
    /// Keys move between shards when this changes.
    pub fn by_identifier(mut self) -> ShardedStore<S> {
        self.by_identifier = true;
        self
    }

    /// The shards, in the order given.
    pub fn shards(&self) -> &[Shard<S>] {
        &self.shards
    }

    /// The index of the shard that owns (limit name, identifier).
    pub fn shard_of(&self, limit_name: &str, identifier: &[u8]) -> usize {
        let limit_name = if self.by_identifier { "" } else { limit_name };
        let mut best = (0, 0);
        for (i, shard) in self.shards.iter().enumerate() {
            let score = rendezvous_score(&shard.name, limit_name, identifier);
            if i == 0 || score > best.1 {
                best = (i, score);
            }
        }
        best.0
    }
}

/// Where each part of a check went: (shard, position in that shard's batch, item indexes).
type Routing = Vec<(usize, usize, Vec<usize>)>;

#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl<S: Store> Store for ShardedStore<S> {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        // The common case — every item of the batch on one shard (always so for one request
        // with one limit) — goes through untouched: no copies, one call, atomic as that store.
        let mut owners = checks
            .iter()
            .flat_map(|c| c.items())
            .map(|i| self.shard_of(&i.limit.name, i.identifier.as_bytes()));
        let first = owners.next().unwrap_or(0);
        if owners.all(|o| o == first) {
            return self.shards[first].store.check(checks, time).await;
        }
        let mut batches: Vec<Vec<Check>> = vec![Vec::new(); self.shards.len()];
        let mut routes: Vec<Routing> = Vec::with_capacity(checks.len());
        for check in checks {
            let mut parts: Vec<(usize, Vec<usize>)> = Vec::new();
            for (i, item) in check.items().iter().enumerate() {
                let shard = self.shard_of(&item.limit.name, item.identifier.as_bytes());
                match parts.iter_mut().find(|(s, _)| *s == shard) {
                    Some((_, items)) => items.push(i),
                    None => parts.push((shard, vec![i])),
                }
            }
            if parts.is_empty() && check.is_gated() {
                // A check of lists alone still asks them: every shard holds every list.
                parts.push((0, Vec::new()));
            }
            let routing = parts
                .into_iter()
                .map(|(shard, items)| {
                    // Each part carries every gate: every shard holds every list, so a part
                    // decides its own items' gates in its own round trip.
                    let mut part = if check.is_gated() {
                        Check::new().gated(check.probe().clone(), check.gates().to_vec())
                    } else {
                        Check::new()
                    };
                    for &i in &items {
                        part = part.with_item(check.items()[i].clone());
                    }
                    batches[shard].push(part);
                    (shard, batches[shard].len() - 1, items)
                })
                .collect();
            routes.push(routing);
        }
        let answers = self.call_shards(&batches, time).await?;
        let mut verdicts = Vec::with_capacity(checks.len());
        let mut refunds: Vec<Vec<Check>> = vec![Vec::new(); self.shards.len()];
        // (verdict, shard, position in the shard's refund batch, item indexes)
        let mut refunded: Vec<(usize, usize, usize, &[usize])> = Vec::new();
        for (check, routing) in checks.iter().zip(&routes) {
            let mut decisions = vec![None; check.items().len()];
            let mut allowed = true;
            let mut atomic = routing.len() <= 1;
            let mut decided_at_ms = time.at_ms().unwrap_or(0);
            let mut listed = vec![Listed::No; check.gates().len()];
            for (shard, position, items) in routing {
                let verdict = &answers[*shard][*position];
                for (merged, found) in listed.iter_mut().zip(&verdict.listed) {
                    // Parts agree unless a list write reached some shards only: then the
                    // strongest finding stands (a deny over an allow over nothing).
                    if strength(found) > strength(merged) {
                        *merged = found.clone();
                    }
                }
                allowed &= verdict.allowed;
                atomic &= verdict.atomic;
                decided_at_ms = decided_at_ms.max(verdict.decided_at_ms);
                for (&i, decision) in items.iter().zip(&verdict.decisions) {
                    decisions[i] = Some(*decision);
                }
            }
            if !allowed && routing.len() > 1 {
                // Give back what the admitting shards took: all or nothing, eventually.
                for (shard, position, items) in routing {
                    if answers[*shard][*position].allowed {
                        let mut refund = Check::new();
                        let mut credits = Check::new();
                        let part = &answers[*shard][*position];
                        for (item, decision) in batches[*shard][*position]
                            .items()
                            .iter()
                            .zip(&part.decisions)
                        {
                            // Only taken cost is given back; a look, a settlement (never part of
                            // a denial), a release, a lease credit and an allowlisted item give
                            // back nothing. What a lease paid goes back to the lease, not to the
                            // share: a credit ending at 0 adds to a lease still live and leaves
                            // an ended one ended, the exact inverse of the spend.
                            let taken = match (item.charge, decision.reason) {
                                (Charge::LeaseCredit { .. }, _) => {
                                    // A look at the lease, which reports the credit that stood.
                                    let look = CheckItem::new(
                                        item.limit.clone(),
                                        item.identifier.clone(),
                                        0,
                                    );
                                    refund.add_item(look.charged(item.charge));
                                    continue;
                                }
                                (Charge::Request, Reason::Leased) => {
                                    let back = CheckItem::new(
                                        item.limit.clone(),
                                        item.identifier.clone(),
                                        item.cost,
                                    );
                                    credits.add_item(
                                        back.charged(Charge::LeaseCredit { until_ms: 0 }),
                                    );
                                    0
                                }
                                (Charge::Request, reason) if reason != Reason::Allowlisted => {
                                    item.cost.max(0)
                                }
                                _ => 0,
                            };
                            refund =
                                refund.with(item.limit.clone(), item.identifier.clone(), -taken);
                        }
                        refunds[*shard].push(refund);
                        let at = refunds[*shard].len() - 1;
                        refunded.push((verdicts.len(), *shard, at, items));
                        // After the refund, whose looks report the shares as a denied check's
                        // items do; its own verdict is not reported.
                        if !credits.items().is_empty() {
                            refunds[*shard].push(credits);
                        }
                    }
                }
            }
            let decisions = decisions
                .into_iter()
                .map(|d| d.ok_or_else(|| StoreError::Protocol("a shard skipped an item".into())))
                .collect::<Result<Vec<_>, _>>()?;
            verdicts.push(Verdict {
                allowed,
                decisions,
                atomic,
                decided_at_ms,
                listed,
            });
        }
        if !refunded.is_empty() {
            // A refunded item reports its standing quota, as a single store reports an item that
            // would have admitted a denied check. If the refund fails, the verdicts stand and the
            // taken quota comes back when its window passes.
            if let Ok(answers) = self.call_shards(&refunds, time).await {
                for (verdict, shard, at, items) in refunded {
                    for (&i, decision) in items.iter().zip(&answers[shard][at].decisions) {
                        verdicts[verdict].decisions[i] = *decision;
                    }
                }
            }
        }
        Ok(verdicts)
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl<S: Control> Control for ShardedStore<S> {
    /// Stored by the shard owning (limit, identifier), beside the state it governs.
    async fn assign(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        assignment: Option<&Assignment>,
        until_ms: Option<u64>,
    ) -> Result<(), StoreError> {
        let shard = self.shard_of(&limit.name, identifier.as_bytes());
        self.shards[shard]
            .store
            .assign(limit, identifier, assignment, until_ms)
            .await
    }

    async fn clear_assignment(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        kind: AssignmentKind,
    ) -> Result<(), StoreError> {
        let shard = self.shard_of(&limit.name, identifier.as_bytes());
        self.shards[shard]
            .store
            .clear_assignment(limit, identifier, kind)
            .await
    }

    async fn assignments(
        &self,
        limit: &Limit,
        identifier: &Identifier,
    ) -> Result<Vec<(Assignment, Option<u64>)>, StoreError> {
        let shard = self.shard_of(&limit.name, identifier.as_bytes());
        self.shards[shard]
            .store
            .assignments(limit, identifier)
            .await
    }

    // Every shard holds every list (docs/design.md §"Deny and allow lists"), so a gated check
    // is decided on whichever shard owns its items, in its one round trip. Writes go to every
    // shard concurrently; one that fails fails the call, and the write should be repeated (it
    // is idempotent).

    async fn list_add(
        &self,
        list: &str,
        entry: &ListEntry,
        until_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        let calls = self
            .shards
            .iter()
            .map(|shard| shard.store.list_add(list, entry, until_ms, now_ms));
        join_all(calls).await.into_iter().collect()
    }

    async fn list_remove(&self, list: &str, entry: &ListEntry) -> Result<bool, StoreError> {
        let calls = self
            .shards
            .iter()
            .map(|shard| shard.store.list_remove(list, entry));
        let removed = join_all(calls)
            .await
            .into_iter()
            .collect::<Result<Vec<bool>, _>>()?;
        Ok(removed.into_iter().any(|r| r))
    }

    async fn list_entries(
        &self,
        list: &str,
        now_ms: u64,
    ) -> Result<Vec<(String, Option<u64>)>, StoreError> {
        // The first shard's copy: every write reaches every shard.
        self.shards[0].store.list_entries(list, now_ms).await
    }

    async fn peek(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        time: TimeSource,
    ) -> Result<Verdict, StoreError> {
        let owner = self.shard_of(&limit.name, identifier.as_bytes());
        self.shards[owner].store.peek(limit, identifier, time).await
    }

    async fn reset(&self, limit: &Limit, identifier: &Identifier) -> Result<bool, StoreError> {
        let owner = self.shard_of(&limit.name, identifier.as_bytes());
        self.shards[owner].store.reset(limit, identifier).await
    }
}

/// How much a gate's finding weighs when parts of a split check disagree.
fn strength(listed: &Listed) -> u8 {
    match listed {
        Listed::No => 0,
        Listed::Allowed { .. } => 1,
        Listed::Denied { .. } => 2,
    }
}

impl<S: Store> ShardedStore<S> {
    /// Sends each non-empty batch to its shard, all concurrently; one answer list per shard.
    async fn call_shards(
        &self,
        batches: &[Vec<Check>],
        time: TimeSource,
    ) -> Result<Vec<Vec<Verdict>>, StoreError> {
        let calls = self
            .shards
            .iter()
            .zip(batches)
            .map(|(shard, batch)| async move {
                if batch.is_empty() {
                    return Ok(Vec::new());
                }
                let answers = shard.store.check(batch, time).await?;
                if answers.len() != batch.len() {
                    return Err(StoreError::Protocol(format!(
                        "shard `{}` answered {} verdicts for {} checks",
                        shard.name,
                        answers.len(),
                        batch.len()
                    )));
                }
                Ok(answers)
            });
        let mut answers = Vec::with_capacity(batches.len());
        let mut failed: Option<StoreError> = None;
        for answer in join_all(calls).await {
            match answer {
                Ok(verdicts) => answers.push(verdicts),
                // Several shards failing: a refusal wins over an outage, so a broken shard's
                // credentials or scripts are counted, logged and failed as what they are.
                Err(e) => {
                    let worse = failed.as_ref().is_none_or(|f| {
                        !f.class().is_misconfiguration() && e.class().is_misconfiguration()
                    });
                    if worse {
                        failed = Some(e);
                    }
                }
            }
        }
        failed.map_or(Ok(answers), Err)
    }
}
