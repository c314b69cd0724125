//! `ShardedStore`: client-side sharding of identifiers over several stores, for users who outgrow
//! one Redis (GitHub's design: several independent Redis deployments, each owning a share of keys).
//!
//! Each (limit, identifier) belongs to the shard with the highest rendezvous score
//! `score(shard name, limit name, identifier)`. Adding a shard moves only the ~1/N of identifiers
//! it now wins; removing one moves only its own. The score is a fixed, documented hash (FNV-1a
//! then a 64-bit finaliser) so every process — a Worker in wasm32 and a native service alike —
//! agrees on where a key lives.
//!
//! Where identifiers are chosen by clients, a store of many small shards (the Worker's Durable
//! Objects) keys the score with a secret of the deployment ([`ShardedStore::keyed`],
//! [`PlacementKey`]): without it, anyone can compute identifiers that all land on one shard.
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
use sha2::{Digest, Sha256};

use super::check::{Check, CheckItem, TimeSource, Verdict};
use super::error::StoreError;
use super::traits::{Control, Store};
use crate::algorithm::Charge;
use crate::control::list::Listed;
use crate::control::{ControlAnswer, ControlOp};
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
    /// The secret placement, if keyed: the key and each shard's seed (by position).
    keyed: Option<(PlacementKey, Vec<u64>)>,
}

/// A deployment's secret that keys where identifiers land ([`ShardedStore::keyed`]), so that
/// nobody without it can choose identifiers that pile onto one shard.
///
/// The score of a shard for (limit name, identifier) is then `mix(seed(shard) ^ d)`, where `d` is
/// the first 64 bits of SHA-256 over a block derived from the secret followed by the limit name
/// and the identifier: one keyed digest per item (the secret's block is absorbed once, when the
/// key is made), then a multiply-xor finaliser per shard. Adding or removing a shard still moves
/// only the identifiers it wins or held.
#[derive(Clone)]
pub struct PlacementKey(Sha256);

impl std::fmt::Debug for PlacementKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PlacementKey(secret)")
    }
}

impl PlacementKey {
    /// A key from `secret` (any length; 32 random bytes, e.g. `openssl rand -hex 32`, are
    /// plenty). The same secret places every identifier on the same shard in every process.
    pub fn new(secret: &[u8]) -> PlacementKey {
        // One whole block of SHA-256's input, so each digest starts from a state the secret set.
        let mut block = [0u8; 64];
        block[..32].copy_from_slice(&Sha256::digest(secret));
        block[32..].copy_from_slice(b"edgelimit shard placement key v1");
        PlacementKey(Sha256::new_with_prefix(block))
    }

    /// The keyed digest of (limit name, identifier). A name is UTF-8, which never holds `0xff`,
    /// so the separator keeps every pair apart.
    fn digest(&self, limit_name: &str, identifier: &[u8]) -> u64 {
        let mut hash = self.0.clone();
        hash.update(limit_name.as_bytes());
        hash.update([0xff]);
        hash.update(identifier);
        let out = hash.finalize();
        u64::from_le_bytes(out[..8].try_into().expect("SHA-256 gives 32 bytes"))
    }
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
    finalise(hash)
}

/// SplitMix64's finaliser: every bit of the input moves about half of the output's.
fn finalise(mut hash: u64) -> u64 {
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
            keyed: None,
        })
    }

    /// The same store placing identifiers by a score keyed with `key` ([`PlacementKey`]): only
    /// who holds the key can tell which shard an identifier lands on. Every process sharing the
    /// store must use the same key; keys move between shards when it changes.
    pub fn keyed(mut self, key: PlacementKey) -> ShardedStore<S> {
        let seeds = self
            .shards
            .iter()
            .map(|shard| rendezvous_score(&shard.name, "", b""))
            .collect();
        self.keyed = Some((key, seeds));
        self
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
        if let Some((key, seeds)) = &self.keyed {
            let digest = key.digest(limit_name, identifier);
            let mut best = (0, 0);
            for (i, &seed) in seeds.iter().enumerate() {
                let score = finalise(seed ^ digest);
                if i == 0 || score > best.1 {
                    best = (i, score);
                }
            }
            return best.0;
        }
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
    /// An operation on one (limit, identifier) goes to the shard owning it: an assignment is
    /// stored beside the state it governs. Every shard holds every list (docs/design.md §"Deny
    /// and allow lists"), so a gated check is decided on whichever shard owns its items, in its
    /// one round trip: list writes go to every shard concurrently (one that fails fails the
    /// call, and the write should be repeated: it is idempotent), and reads take the first
    /// shard's copy.
    async fn apply(&self, op: ControlOp) -> Result<ControlAnswer, StoreError> {
        if let Some((limit, identifier)) = op.subject() {
            let owner = self.shard_of(&limit.name, identifier.as_bytes());
            return self.shards[owner].store.apply(op).await;
        }
        match op {
            ControlOp::ListEntries { .. } => self.shards[0].store.apply(op).await,
            write => {
                let calls = self
                    .shards
                    .iter()
                    .map(|shard| shard.store.apply(write.clone()));
                let answers = join_all(calls)
                    .await
                    .into_iter()
                    .collect::<Result<Vec<_>, _>>()?;
                if let ControlOp::ListRemove { .. } = write {
                    let mut removed = false;
                    for answer in answers {
                        removed |= answer.existed()?;
                    }
                    Ok(ControlAnswer::Existed(removed))
                } else {
                    answers
                        .into_iter()
                        .try_for_each(ControlAnswer::done)
                        .map(|()| ControlAnswer::Done)
                }
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    fn stores(names: impl IntoIterator<Item = String>) -> ShardedStore<MemoryStore> {
        let shards = names
            .into_iter()
            .map(|name| Shard::new(name, MemoryStore::with_capacity(1)))
            .collect();
        ShardedStore::new(shards).unwrap().by_identifier()
    }

    fn named(count: usize) -> Vec<String> {
        (0..count).map(|i| format!("edgelimit-{i}")).collect()
    }

    #[test]
    fn a_keyed_placement_spreads_evenly_and_differs_by_key() {
        let a = stores(named(64)).keyed(PlacementKey::new(b"deployment a"));
        let b = stores(named(64)).keyed(PlacementKey::new(b"deployment b"));
        let mut per_shard = vec![0usize; 64];
        let mut same = 0;
        for i in 0..64_000 {
            let id = format!("id-{i}");
            let shard = a.shard_of("", id.as_bytes());
            per_shard[shard] += 1;
            same += usize::from(shard == b.shard_of("", id.as_bytes()));
        }
        // 1000 expected on each; a binomial spread stays well within ±15 %.
        assert!(
            per_shard.iter().all(|&n| (850..1150).contains(&n)),
            "{per_shard:?}"
        );
        // Another key places identifiers independently: 1 in 64 by chance (1000 expected).
        assert!((800..1200).contains(&same), "{same} placed alike");
    }

    #[test]
    fn identifiers_piled_onto_one_shard_unkeyed_spread_out_keyed() {
        // What an attacker computes from the documented unkeyed score: identifiers that all land
        // on one shard.
        let unkeyed = stores(named(64));
        let piled: Vec<String> = (0..200_000)
            .map(|i| format!("attacker-{i}"))
            .filter(|id| unkeyed.shard_of("", id.as_bytes()) == 0)
            .take(640)
            .collect();
        assert_eq!(piled.len(), 640);
        let keyed = stores(named(64)).keyed(PlacementKey::new(b"a secret"));
        let mut per_shard = vec![0usize; 64];
        for id in &piled {
            per_shard[keyed.shard_of("", id.as_bytes())] += 1;
        }
        // 10 expected on each: none holds more than a small multiple of that.
        let most = per_shard.iter().max().unwrap();
        assert!(*most <= 30, "{per_shard:?}");
    }

    #[test]
    fn a_keyed_placement_moves_only_what_an_added_shard_wins() {
        let key = PlacementKey::new(b"k");
        let before = stores(named(8)).keyed(key.clone());
        let after = stores(named(9)).keyed(key);
        let mut moved = 0;
        for i in 0..9_000 {
            let id = format!("id-{i}");
            let (was, is) = (
                before.shard_of("", id.as_bytes()),
                after.shard_of("", id.as_bytes()),
            );
            if was != is {
                assert_eq!(is, 8, "{id} moved between old shards");
                moved += 1;
            }
        }
        assert!(
            (800..1200).contains(&moved),
            "{moved} moved to the new shard"
        );
    }

    #[test]
    fn the_key_is_never_printed() {
        let key = PlacementKey::new(b"hunter2");
        assert_eq!(format!("{key:?}"), "PlacementKey(secret)");
    }
}
