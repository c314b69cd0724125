//! Loans between regions: what the home's pool could not grant, borrowed from the other
//! regions' unused static shares (docs/design.md §9, "Capacity follows demand").

use super::*;

impl<R: Store, H: Store, P: Store> GlobalStore<R, H, P> {
    /// Borrows from the other regions' stores what the home's pool could not grant `asks`
    /// (`grants` is what it did): the unused part of their static shares, charged to those
    /// shares exactly as a request there would be, so that they admit that much less — the
    /// sum of the parts is still the whole. A region alone on the identifier's pool takes all
    /// its peers' shares hold (they are not serving it); otherwise each peer is asked for the
    /// shortfall. One round trip to each peer holding a share, all at once; a peer that cannot
    /// be reached lends nothing. The grants made, as the checks crediting them.
    pub(super) async fn borrow(
        &self,
        asks: &[Ask<'_>],
        grants: &[Check],
        now_ms: u64,
    ) -> Vec<Check> {
        if self.peers.is_empty() {
            return Vec::new();
        }
        let granted = |ask: &Ask<'_>| -> u64 {
            grants
                .iter()
                .map(|c| &c.items()[0])
                .filter(|i| {
                    *i.limit.name == *ask.limit.whole.name && i.identifier == ask.identifier
                })
                .map(|i| i.cost as u64)
                .sum()
        };
        // (ask, shortfall, alone) of every ask the pool left short.
        let short: Vec<(&Ask<'_>, u64, bool)> = {
            let ledger = self.ledger();
            asks.iter()
                .filter_map(|a| {
                    let short = a.need.saturating_sub(granted(a));
                    let key = (&a.limit.whole.name, &a.identifier);
                    (short > 0)
                        .then(|| (a, short, ledger.alone(key, now_ms, &self.sizing(a.limit))))
                })
                .collect()
        };
        if short.is_empty() {
            return Vec::new();
        }
        let calls = self.peers.iter().filter_map(|(index, store)| {
            let mut checks = Vec::new();
            // Per check: which ask, and whether it spends the lender's lease.
            let mut parts = Vec::new();
            for (at, &(ask, shortfall, alone)) in short.iter().enumerate() {
                if let Some((_, share)) = ask.limit.peers.iter().find(|(i, _)| i == index) {
                    let units = if alone {
                        largest(share)
                    } else {
                        shortfall.min(largest(share))
                    };
                    for part in up_to(units) {
                        checks.push(Check::new().with_item(CheckItem::new(
                            share.clone(),
                            ask.identifier.clone(),
                            part as i64,
                        )));
                        parts.push((at, false));
                    }
                }
                // A region sharing the identifier may find what it lacks in another's lease:
                // units the home granted there, not yet spent (the lease's key is the limit's
                // name and the identifier's, whatever the part).
                if !alone {
                    for part in up_to(shortfall.min(largest(&ask.limit.whole))) {
                        let mut item = CheckItem::new(
                            ask.limit.whole.clone(),
                            ask.identifier.clone(),
                            part as i64,
                        );
                        item.spend_lease = LeaseSpending::Only;
                        checks.push(Check::new().with_item(item));
                        parts.push((at, true));
                    }
                }
            }
            (!checks.is_empty()).then_some(async move {
                bump(&self.counters.peer_round_trips, 1);
                bump(&self.counters.peer_script_calls, script_calls(&checks));
                let answers = store.check(&checks, TimeSource::At(now_ms)).await;
                (checks, parts, answers)
            })
        });
        let mut credits = Vec::new();
        let mut lent_in_all = vec![0u64; short.len()];
        for (checks, parts, answers) in join_all(calls).await {
            let Ok(answers) = answers else {
                continue;
            };
            // Per ask, from this lender's share and from its lease: units lent, and one of the
            // admitting decisions (a share's says which window its units were charged in, a
            // lease's when the lease ends: a loan ends no later).
            let mut lent: Vec<[(u64, Option<Decision>); 2]> = vec![[(0, None); 2]; short.len()];
            for ((check, (at, lease)), answer) in checks.iter().zip(parts).zip(&answers) {
                let decision = answer.decisions[0];
                if decision.allowed {
                    let slot = &mut lent[at][usize::from(lease)];
                    slot.0 += check.items()[0].cost as u64;
                    slot.1 = Some(decision);
                }
            }
            for (at, (&(ask, _, _), [share, lease])) in short.iter().zip(lent).enumerate() {
                if let (units, Some(decision)) = share {
                    credits.push(self.credit_check(ask, units, &decision, now_ms));
                    lent_in_all[at] += units;
                }
                if let (units, Some(decision)) = lease {
                    credits.push(self.credit_until(ask, units, decision.reset_at_ms));
                    lent_in_all[at] += units;
                }
            }
        }
        bump(&self.counters.borrowed, lent_in_all.iter().sum());
        // Lenders that could not cover a request are not asked again for a horizon: a request
        // beyond the whole limit must not cost a round trip to every region.
        let until = now_ms.saturating_add(self.horizon_ms());
        let mut ledger = self.ledger();
        for (&(ask, shortfall, _), lent) in short.iter().zip(lent_in_all) {
            if lent < shortfall {
                ledger.note_peers_short((&ask.limit.whole.name, &ask.identifier), until);
            }
        }
        credits
    }
}
