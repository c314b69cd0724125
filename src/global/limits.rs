//! What one region decides a global limit with (docs/design.md §9): its static share as a limit
//! of its own, the home's pool as another, and how a lease granted from the pool ends.

use std::collections::HashMap;
use std::sync::Arc;

use super::split::{Split, SplitError};
use crate::decision::Decision;
use crate::policy::{Algorithm, Policy, MAX_SCALED};
use crate::store::Limit;

/// One global limit as a region holds it.
#[derive(Debug, Clone)]
pub struct RegionalLimit {
    /// The limit the rules apply: its policy and tiers are the whole.
    pub whole: Arc<Limit>,
    /// What the region's store decides: the static share (the same name, so the same key), its
    /// tiers split likewise; `None` when the region's share rounds down to nothing and every
    /// request spends the lease alone.
    pub share: Option<Arc<Limit>>,
    /// What the home decides a lease with: the pool, its tiers split likewise; `None` when the
    /// static shares take the whole limit (no leases, no home).
    pub pool: Option<Arc<Limit>>,
    /// The other regions' static shares, by region index (none where a share rounds down to
    /// nothing): what the region may borrow, unused, from their stores (docs/design.md §9,
    /// "Capacity follows demand").
    pub peers: Vec<(usize, Arc<Limit>)>,
    /// Where the regions that share the identifier's pool say so at the home: a count, per
    /// window of the policy, of what they asked for (docs/design.md §9, "Capacity follows
    /// demand"); `None` without a pool.
    pub demand: Option<Arc<Limit>>,
    /// Each share policy's capacity beside the whole's, the default first then each tier: how a
    /// regional decision is reported as the whole limit's.
    capacities: Vec<(u64, u64)>,
}

impl RegionalLimit {
    /// The limit the region's store is asked: the share, or (with none) the whole, which only
    /// names the key — every request of a share-less region spends its lease alone.
    pub fn regional(&self) -> &Arc<Limit> {
        self.share.as_ref().unwrap_or(&self.whole)
    }

    /// When a lease granted at `granted_ms` ends: a fixed window's with the pool's window it was
    /// charged in (the pool decision's `reset_at_ms`), a bucket's `lease_ms` after the grant.
    pub fn lease_end(&self, pool_decision: &Decision, granted_ms: u64, lease_ms: u64) -> u64 {
        match self.whole.policy.algorithm() {
            Algorithm::FixedWindow => pool_decision.reset_at_ms,
            _ => granted_ms.saturating_add(lease_ms),
        }
    }

    /// `decision`, made by the region's store with the share (or the lease), reported as the
    /// whole limit's: its capacity the whole's, so headers advertise the configured limit. What
    /// remains is the region's own view (its share and its lease), never more than the whole.
    pub fn as_whole(&self, mut decision: Decision) -> Decision {
        if let Some(&(_, whole)) = self.capacities.iter().find(|(c, _)| *c == decision.limit) {
            decision.limit = whole;
        } else if self.share.is_none() {
            decision.limit = self.whole.policy.capacity();
        }
        decision.remaining = decision.remaining.min(decision.limit);
        decision
    }
}

/// Why a configuration's global limits cannot be held by a region.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("global limit `{limit}`{}: {error}", tier.as_ref().map(|t| format!(", tier `{t}`")).unwrap_or_default())]
pub struct GlobalLimitError {
    /// The limit's name.
    pub limit: String,
    /// The tier whose policy cannot be split, if it was a tier's.
    pub tier: Option<String>,
    /// Why.
    pub error: SplitError,
}

/// Every global limit of a configuration as one region holds them, by name.
#[derive(Debug, Clone, Default)]
pub struct RegionalLimits {
    by_name: HashMap<Arc<str>, RegionalLimit>,
}

impl RegionalLimits {
    /// The global `limits` as region `region` (an index into `weights`) holds them, the regions
    /// together holding `static_share` parts per million for good and the home the rest.
    pub fn new<'a>(
        limits: impl IntoIterator<Item = &'a Limit>,
        weights: &[u64],
        static_share: u64,
        region: usize,
    ) -> Result<RegionalLimits, GlobalLimitError> {
        let mut by_name = HashMap::new();
        for limit in limits {
            let fail = |tier: Option<&str>, error| GlobalLimitError {
                limit: limit.name.to_string(),
                tier: tier.map(str::to_string),
                error,
            };
            let split = |policy: &Policy, tier| {
                Split::new(policy, weights, static_share).map_err(|e| fail(tier, e))
            };
            let whole = split(&limit.policy, None)?;
            let tiers = limit
                .tiers
                .iter()
                .map(|(name, policy)| Ok((name, split(policy, Some(name))?)))
                .collect::<Result<Vec<_>, GlobalLimitError>>()?;
            let part = |pick: &dyn Fn(&Split) -> Option<Policy>| -> Option<Arc<Limit>> {
                let policy = pick(&whole)?;
                // A tier whose part rounds to nothing keeps the default's part: an identifier
                // assigned it is held no looser than the default.
                let tiers = tiers
                    .iter()
                    .map(|(name, s)| (*name, pick(s).unwrap_or(policy)))
                    .collect::<Vec<_>>();
                let part = Limit {
                    policy,
                    ..Limit::clone(limit)
                };
                Some(Arc::new(part.with_tiers(tiers).unwrap_or_else(|_| Limit {
                    tiers: Default::default(),
                    ..Limit::clone(limit)
                })))
            };
            let share = part(&|s: &Split| s.shares.get(region).copied().flatten());
            let peers = (0..weights.len())
                .filter(|&other| other != region)
                .filter_map(|other| {
                    Some((
                        other,
                        part(&|s: &Split| s.shares.get(other).copied().flatten())?,
                    ))
                })
                .collect();
            let pool = part(&|s: &Split| s.pool);
            let demand = pool.as_ref().map(|_| Arc::new(demand_limit(limit)));
            let mut capacities = Vec::new();
            if let Some(share) = &share {
                capacities.push((share.policy.capacity(), limit.policy.capacity()));
                for (name, policy) in limit.tiers.iter() {
                    if let Some(part) = share.tiers.get(name) {
                        capacities.push((part.capacity(), policy.capacity()));
                    }
                }
            }
            by_name.insert(
                limit.name.clone(),
                RegionalLimit {
                    whole: Arc::new(limit.clone()),
                    share,
                    pool,
                    peers,
                    demand,
                    capacities,
                },
            );
        }
        Ok(RegionalLimits { by_name })
    }

    /// The global limit of this name, if it is one.
    pub fn get(&self, name: &str) -> Option<&RegionalLimit> {
        self.by_name.get(name)
    }

    /// Whether no limit is global.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// The count of what the regions sharing `limit`'s pool asked for, per window of its policy
/// (`#` is no configured name's: it never meets a limit of the configuration). Its capacity is
/// the largest a window allows; should the count reach it, a look still reads it as counted.
fn demand_limit(limit: &Limit) -> Limit {
    let window_ms = limit.policy.window_ms().max(1);
    let policy = Policy::new(
        Algorithm::FixedWindow,
        (MAX_SCALED / window_ms).max(1),
        window_ms,
        None,
    )
    .expect("a fixed window no larger than the scaled bound");
    Limit::new(format!("{}#demand", limit.name), policy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::Reason;
    use crate::global::MILLION;

    fn limit(name: &str, spec: &str) -> Limit {
        Limit::new(name, spec.parse().unwrap())
    }

    #[test]
    fn a_region_holds_its_share_and_asks_the_pool_under_the_same_name() {
        let whole = limit("api", "fixed 90/1m");
        let limits = RegionalLimits::new([&whole], &[1, 1, 1], MILLION / 2, 1).unwrap();
        let held = limits.get("api").unwrap();
        assert_eq!(held.share.as_ref().unwrap().policy.limit(), 15);
        assert_eq!(held.pool.as_ref().unwrap().policy.limit(), 45);
        assert_eq!(&*held.regional().name, "api");
        assert!(limits.get("other").is_none());
    }

    #[test]
    fn tiers_are_split_as_the_limit_is_and_reported_as_the_whole() {
        let whole = limit("api", "gcra 10/1s burst 20")
            .with_tiers([("pro", "gcra 100/1s burst 200".parse().unwrap())])
            .unwrap();
        let limits = RegionalLimits::new([&whole], &[1, 1], MILLION / 2, 0).unwrap();
        let held = limits.get("api").unwrap();
        let share = held.share.as_ref().unwrap();
        assert_eq!(share.policy.burst(), 5);
        assert_eq!(share.tiers.get("pro").unwrap().burst(), 50);
        let decided = Decision {
            allowed: true,
            limit: 50,
            remaining: 49,
            reset_at_ms: 0,
            retry_after_ms: 0,
            reason: Reason::Admitted,
        };
        assert_eq!(held.as_whole(decided).limit, 200);
    }

    #[test]
    fn a_limit_that_cannot_be_global_is_named() {
        let sliding = limit("s", "sliding-log 5/1m");
        let e = RegionalLimits::new([&sliding], &[1], MILLION / 2, 0).unwrap_err();
        assert_eq!(e.limit, "s");
        assert!(e.to_string().starts_with("global limit `s`: "), "{e}");
    }

    #[test]
    fn a_fixed_window_lease_ends_with_the_pool_window_a_bucket_lease_after_lease_ms() {
        let decided = |reset_at_ms| Decision {
            allowed: true,
            limit: 1,
            remaining: 0,
            reset_at_ms,
            retry_after_ms: 0,
            reason: Reason::Admitted,
        };
        let fixed = limit("f", "fixed 100/1m");
        let bucket = limit("b", "token-bucket 10/1s burst 10");
        let limits = RegionalLimits::new([&fixed, &bucket], &[1, 1], MILLION / 2, 0).unwrap();
        assert_eq!(
            limits
                .get("f")
                .unwrap()
                .lease_end(&decided(60_000), 1_000, 500),
            60_000
        );
        assert_eq!(
            limits
                .get("b")
                .unwrap()
                .lease_end(&decided(60_000), 1_000, 500),
            1_500
        );
    }
}
