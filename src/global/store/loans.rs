//! Loans between regions: what the home's pool could not grant, borrowed from the other
//! regions' unused static shares (docs/design.md §9, "Capacity follows demand").

use super::*;
use crate::global::take::Take;

impl<R: Store, H: Store, P: Store> GlobalStore<R, H, P> {
    /// Borrows from the other regions' stores what the home's pool could not grant `asks`
    /// (`grants` is what it did): the unused part of their static shares, charged to those
    /// shares exactly as a request there would be, so that they admit that much less — the
    /// sum of the parts is still the whole. A region alone on the identifier's pool takes all
    /// its peers' shares hold (they are not serving it); otherwise each peer is asked for the
    /// shortfall. One round trip and one script call to each peer holding a share, all at once
    /// ([`crate::global::take`]); a peer that cannot be reached lends nothing. The grants made, as the checks crediting them.
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
            let mut takes = Vec::new();
            // Per take: which ask, and whether it spends the lender's lease.
            let mut parts = Vec::new();
            for (at, &(ask, shortfall, alone)) in short.iter().enumerate() {
                if let Some((_, share)) = ask.limit.peers.iter().find(|(i, _)| i == index) {
                    let units = if alone {
                        largest(share)
                    } else {
                        shortfall.min(largest(share))
                    };
                    takes.push(Take::new(
                        CheckItem::new(share.clone(), ask.identifier.clone(), units as i64),
                        0,
                    ));
                    parts.push((at, false));
                }
                // A region sharing the identifier may find what it lacks in another's lease:
                // units the home granted there, not yet spent (the lease's key is the limit's
                // name and the identifier's, whatever the part).
                if !alone {
                    let units = shortfall.min(largest(&ask.limit.whole));
                    let mut item = CheckItem::new(
                        ask.limit.whole.clone(),
                        ask.identifier.clone(),
                        units as i64,
                    );
                    item.spend_lease = LeaseSpending::Only;
                    takes.push(Take::new(item, 0));
                    parts.push((at, true));
                }
            }
            (!takes.is_empty()).then_some(async move {
                bump(&self.counters.peer_round_trips, 1);
                bump(&self.counters.peer_script_calls, 1);
                let answers = store.take(&takes, TimeSource::At(now_ms)).await;
                (parts, answers)
            })
        });
        let mut credits = Vec::new();
        let mut lent_in_all = vec![0u64; short.len()];
        // Per ask, the end of the lenders' fixed windows, as their shares' takes say it.
        let mut window_ends: Vec<Option<u64>> = vec![None; short.len()];
        let mut all_answered = true;
        for (parts, answers) in join_all(calls).await {
            let Ok(answers) = answers else {
                all_answered = false;
                continue;
            };
            // A take from a share says which window its units were charged in, one from a
            // lease when the lease ends: a loan ends no later.
            for ((at, lease), taken) in parts.into_iter().zip(answers) {
                let ask = short[at].0;
                if !lease && ask.limit.whole.policy.algorithm() == Algorithm::FixedWindow {
                    let end = &mut window_ends[at];
                    *end = Some(end.unwrap_or(0).max(taken.decision.reset_at_ms));
                }
                if taken.granted == 0 {
                    continue;
                }
                credits.push(if lease {
                    self.credit_until(ask, taken.granted, taken.decision.reset_at_ms)
                } else {
                    self.credit_check(ask, taken.granted, &taken.decision, now_ms)
                });
                lent_in_all[at] += taken.granted;
            }
        }
        bump(&self.counters.borrowed, lent_in_all.iter().sum());
        // Lenders that could not cover a request are not asked again for a horizon: a request
        // beyond the whole limit must not cost a round trip to every region. A fixed window's
        // lenders, every one reached and asked for its share and its lease, gave all they held
        // (a take is of up to what it asks): what a fixed window's share holds only falls within
        // its window, and a lease grows only by the pool, known short, or by loans of what is
        // already drained — so they are not asked again before their window ends.
        let horizon = now_ms.saturating_add(self.horizon_ms());
        let mut ledger = self.ledger();
        for ((&(ask, shortfall, alone), lent), end) in
            short.iter().zip(lent_in_all).zip(window_ends)
        {
            if lent < shortfall {
                let until = match end {
                    Some(end) if all_answered && !alone => horizon.max(end),
                    _ => horizon,
                };
                ledger.note_peers_short((&ask.limit.whole.name, &ask.identifier), until);
            }
        }
        credits
    }
}
