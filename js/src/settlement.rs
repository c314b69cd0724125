//! `settle(result, cost)` and `release(result)`: what an admitted `limit()` took, kept (for a call
//! with `settle: true` or a concurrency limit) as a [`Ticket`] the wrapper holds beside the result
//! it resolved to, and the commit that settles it
//! once the work is over — the real cost in place of the estimate, every concurrency slot freed
//! (docs/design.md, "Charges: requests, settlements, releases").
//!
//! The reservation and its commit are the library's [`Reservation`]: the ticket keeps only what
//! `Reservation::new` reads of the admitted checks and their decisions, and rebuilds it from them,
//! so what counts as taken (only what the store admitted: no fail-open or fallback decision, no
//! look or refund) and how a commit settles it are decided in one place, for this package as for
//! the Worker. The commit carries the request id `<id>/commit`: sent twice (a retry after a lost
//! answer, or `settle` then `release`), it is charged once — so the first of the two ends the work.
//!
//! A ticket crosses to JavaScript and back as JSON text. It is the caller's own value, never a
//! client's; it is still checked on the way back (each limit must be one of this `Ratelimit`'s),
//! so a ticket from another `Ratelimit` is refused rather than committed against the wrong limit.

use std::sync::Arc;

use edgelimit::script::MAX_SCRIPT_COST;
use edgelimit::{Algorithm, Check, CheckItem, Checked, Decision, Reason, Reservation, Verdict};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use crate::error::{Error, ErrorCode};
use crate::options::Setup;
use crate::request::LimitCall;

/// What one admitted call took: its id (the call's `requestId`, else one of this instance's own)
/// and, per check that admitted it, the items it reserved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticket {
    id: String,
    reserved: Vec<Vec<TicketItem>>,
}

/// One reserved item: `[limit name, identifier, reserved cost, lease end (concurrency) or null,
/// whether a capacity lease paid for it]` — a tuple, since every admitted call makes one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct TicketItem(String, String, i64, Option<u64>, bool);

/// The real cost a `settle` states, per configured limit (`None`: the estimate stands).
pub type ActualCosts = Vec<Option<u64>>;

impl Ticket {
    /// What `call` took, given the limiter's answer; `None` when it took nothing (denied, or
    /// admitted by no store: a fail mode or the fallback decided it).
    pub fn new(call: &LimitCall, checked: &Checked, id: &str) -> Option<Ticket> {
        let reserved: Vec<Vec<TicketItem>> = call
            .checks
            .iter()
            .zip(&checked.verdicts)
            .filter_map(|(check, verdict)| Reservation::new(check, verdict, id))
            .map(|reservation| {
                reservation
                    .items()
                    .iter()
                    .map(|r| {
                        TicketItem(
                            r.item.limit.name.to_string(),
                            String::from_utf8_lossy(r.item.identifier.as_bytes()).into_owned(),
                            r.item.cost,
                            r.lease_ms,
                            r.leased,
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .filter(|items| !items.is_empty())
            .collect();
        (!reserved.is_empty()).then(|| Ticket {
            id: id.to_string(),
            reserved,
        })
    }

    /// The ticket as the JSON text the wrapper holds.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A ticket the wrapper held, each of its limits one of `setup`'s.
    pub fn from_json(setup: &Setup, text: &str) -> Result<Ticket, Error> {
        let not_ours = || {
            Error::new(
                ErrorCode::InvalidArgument,
                "result",
                "is not a result this Ratelimit's limit() resolved to",
            )
        };
        let ticket: Ticket = serde_json::from_str(text).map_err(|_| not_ours())?;
        let known = ticket
            .reserved
            .iter()
            .flatten()
            .all(|TicketItem(name, ..)| setup.limit(name).is_some());
        if !known || ticket.id.is_empty() {
            return Err(not_ours());
        }
        Ok(ticket)
    }

    /// The checks that end the work: every concurrency slot released, and every other item
    /// whose real cost `actual` states settled by the difference; one check per reservation,
    /// empty ones left out.
    pub fn commits(&self, setup: &Setup, actual: &ActualCosts) -> Vec<Check> {
        let index = |name: &str| setup.limits.iter().position(|l| &*l.limit.name == name);
        self.reserved
            .iter()
            .filter_map(|items| {
                let (check, verdict) = self.rebuilt(setup, items);
                let reservation = Reservation::new(&check, &verdict, self.id.as_str())?;
                let commit = reservation.commit_with(|item: &CheckItem| {
                    index(&item.limit.name).and_then(|i| actual.get(i).copied().flatten())
                });
                (!commit.items().is_empty()).then_some(commit)
            })
            .collect()
    }

    /// The admitted check and verdict `items` were reserved from, as far as
    /// [`Reservation::new`] reads them: the items, and per item an admission by the store
    /// (through a capacity lease when it was one) whose reset is the end of a concurrency lease.
    fn rebuilt(&self, setup: &Setup, items: &[TicketItem]) -> (Check, Verdict) {
        let mut check = Check::new();
        let mut decisions = Vec::with_capacity(items.len());
        for TicketItem(name, identifier, cost, lease_ms, leased) in items {
            let Some(configured) = setup.limit(name) else {
                continue;
            };
            check.add_item(CheckItem::new(
                Arc::clone(&configured.limit),
                identifier.as_str(),
                *cost,
            ));
            decisions.push(Decision {
                allowed: true,
                limit: 0,
                remaining: 0,
                reset_at_ms: lease_ms.unwrap_or(0),
                retry_after_ms: 0,
                reason: if *leased {
                    Reason::Leased
                } else {
                    Reason::Admitted
                },
            });
        }
        let verdict = Verdict {
            allowed: true,
            decisions,
            atomic: true,
            decided_at_ms: 0,
            listed: Vec::new(),
        };
        (check, verdict)
    }
}

/// The real costs `settle` was given (JSON): one for every limit (a number), or per limit name
/// (an object; limits it leaves out keep their estimate). A whole number from 0 to 2^52; a
/// concurrency limit has no cost to settle (its slots are released either way).
pub fn actual_costs(setup: &Setup, cost: &str) -> Result<ActualCosts, Error> {
    let value: Json = serde_json::from_str(cost)
        .map_err(|e| Error::new(ErrorCode::InvalidCost, "cost", format!("not JSON: {e}")))?;
    let settles = |i: usize| setup.limits[i].limit.policy.algorithm() != Algorithm::Concurrency;
    match &value {
        Json::Object(map) => {
            if let Some(unknown) = map.keys().find(|name| setup.limit(name).is_none()) {
                return Err(Error::new(
                    ErrorCode::InvalidCost,
                    format!("cost[{unknown:?}]"),
                    format!(
                        "no limit is named `{unknown}`; the limits are {}",
                        setup.names()
                    ),
                ));
            }
            let mut costs = vec![None; setup.limits.len()];
            for (i, configured) in setup.limits.iter().enumerate() {
                let name = &*configured.limit.name;
                let Some(given) = map.get(name) else { continue };
                let path = || format!("cost[{name:?}]");
                if !settles(i) {
                    return Err(Error::new(
                        ErrorCode::InvalidCost,
                        path(),
                        "a concurrency limit counts requests in flight: its slots are released, \
                         with no cost to settle",
                    ));
                }
                costs[i] = Some(real_cost(given, path)?);
            }
            Ok(costs)
        }
        one => {
            let cost = real_cost(one, || "cost".to_string())?;
            Ok((0..setup.limits.len())
                .map(|i| settles(i).then_some(cost))
                .collect())
        }
    }
}

/// A real cost: a whole number from 0 to 2^52 (the scripts' exact range). `path` names it in the
/// error, made only when there is one.
fn real_cost(value: &Json, path: impl FnOnce() -> String) -> Result<u64, Error> {
    value
        .as_u64()
        .filter(|&c| c <= MAX_SCRIPT_COST as u64)
        .ok_or_else(|| {
            Error::new(
                ErrorCode::InvalidCost,
                path(),
                format!("must be a whole number from 0 to 2^52, got {value}"),
            )
        })
}

/// The ids this instance gives the calls that name none (no `requestId`): its own random number
/// and a count, `<16 hex digits>-<count, hex>` as the engine writes its own, never read from a
/// request, so no client chooses or repeats the id a commit is remembered under.
#[derive(Debug)]
pub struct OwnIds {
    instance: u64,
    next: std::cell::Cell<u64>,
}

impl OwnIds {
    /// Ids under `instance`, a random number of the caller's.
    pub fn seeded(instance: u64) -> OwnIds {
        OwnIds {
            instance,
            next: std::cell::Cell::new(0),
        }
    }

    /// The next call's id.
    pub fn next(&self) -> String {
        let count = self.next.get();
        self.next.set(count.wrapping_add(1));
        format!("{:016x}-{count:x}", self.instance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgelimit::MemoryStore;
    use serde_json::json;

    const T0: u64 = 1_700_000_000_000;

    fn setup() -> Setup {
        Setup::from_json(
            &json!({
                "url": "http://127.0.0.1:1", "token": "t",
                "limits": [
                    { "name": "slots", "policy": "concurrency 1 timeout 30s" },
                    { "name": "tokens", "policy": "fixed 100/1m" },
                    { "name": "trial", "policy": "fixed 100/1m", "shadow": true },
                ],
            })
            .to_string(),
        )
        .unwrap()
    }

    fn decide(store: &MemoryStore, checks: &[Check], at: u64) -> Checked {
        Checked {
            verdicts: store.direct().check(checks, T0 + at),
            local_ms: T0 + at,
            store_ms: Some(0.0),
        }
    }

    /// Decides one call of `cost` (1 on the concurrency limit) at `T0 + at`: whether the
    /// enforced limits admitted it, and its ticket.
    fn limit(store: &MemoryStore, setup: &Setup, cost: i64, at: u64) -> (bool, Option<Ticket>) {
        let cost = json!({ "cost": { "slots": 1, "tokens": cost, "trial": cost } });
        let call = LimitCall::new(setup, "\"u\"", &cost.to_string()).unwrap();
        let checked = decide(store, &call.checks, at);
        let ticket = Ticket::new(&call, &checked, "0000000000000abc-0");
        if let Some(ticket) = &ticket {
            // What crosses to JavaScript comes back the same.
            assert_eq!(
                &Ticket::from_json(setup, &ticket.to_json()).unwrap(),
                ticket
            );
        }
        (checked.verdicts[0].allowed, ticket)
    }

    fn standing(store: &MemoryStore, setup: &Setup, name: &str, at: u64) -> u64 {
        let look = Check::single(setup.limit(name).unwrap().limit.clone(), "u", 0);
        store.direct().check(&[look], T0 + at)[0].decisions[0].remaining
    }

    #[test]
    fn a_release_frees_the_slot_and_leaves_the_estimate() {
        let setup = setup();
        let store = MemoryStore::new();
        let (admitted, ticket) = limit(&store, &setup, 10, 0);
        assert!(admitted);
        assert!(!limit(&store, &setup, 10, 1).0, "the one slot is held");
        let commits = ticket.expect("a ticket").commits(&setup, &vec![None; 3]);
        decide(&store, &commits, 2);
        assert_eq!(
            standing(&store, &setup, "tokens", 3),
            90,
            "the estimate stands"
        );
        assert!(limit(&store, &setup, 10, 3).0, "the slot is free");
    }

    #[test]
    fn a_settle_charges_the_real_cost_once_in_every_check() {
        let setup = setup();
        let store = MemoryStore::new();
        let ticket = limit(&store, &setup, 10, 0).1.expect("admitted");
        assert_eq!(
            ticket.reserved.len(),
            2,
            "the enforced check and the shadow one"
        );
        let actual = actual_costs(&setup, "3").unwrap();
        assert_eq!(actual, [None, Some(3), Some(3)]);
        let commits = ticket.commits(&setup, &actual);
        decide(&store, &commits, 1);
        decide(&store, &commits, 2);
        assert_eq!(standing(&store, &setup, "tokens", 3), 97, "settled once");
        assert_eq!(standing(&store, &setup, "trial", 3), 97);
        assert!(limit(&store, &setup, 1, 3).0, "the slot is free");
    }

    #[test]
    fn a_denied_check_took_nothing_to_settle() {
        let setup = setup();
        let store = MemoryStore::new();
        assert!(limit(&store, &setup, 1, 0).0);
        let (admitted, ticket) = limit(&store, &setup, 1, 1);
        assert!(!admitted);
        // The shadow check admitted and took its cost: only it is settled.
        let names: Vec<_> = ticket.expect("the shadow check's").reserved.concat();
        assert_eq!(
            names,
            [TicketItem("trial".into(), "u".into(), 1, None, false)]
        );
        let lone = Setup::from_json(
            &json!({ "url": "http://127.0.0.1:1", "token": "t",
                     "limits": [{ "name": "slots", "policy": "concurrency 1" }] })
            .to_string(),
        )
        .unwrap();
        let store = MemoryStore::new();
        let call = LimitCall::new(&lone, "\"u\"", "").unwrap();
        assert!(Ticket::new(&call, &decide(&store, &call.checks, 0), "a").is_some());
        let denied = decide(&store, &call.checks, 1);
        assert!(!denied.verdicts[0].allowed);
        assert_eq!(Ticket::new(&call, &denied, "b"), None);
    }

    #[test]
    fn costs_and_tickets_are_checked() {
        let setup = setup();
        assert_eq!(
            actual_costs(&setup, r#"{"tokens": 7}"#).unwrap(),
            [None, Some(7), None]
        );
        let cases = [
            ("-1", "cost"),
            ("1.5", "cost"),
            ("\"2\"", "cost"),
            ("9007199254740993", "cost"),
            (r#"{"nope": 1}"#, "cost[\"nope\"]"),
            (r#"{"slots": 1}"#, "cost[\"slots\"]"),
        ];
        for (cost, path) in cases {
            let e = actual_costs(&setup, cost).unwrap_err();
            assert_eq!(
                (e.code, e.path.as_str()),
                (ErrorCode::InvalidCost, path),
                "{cost}"
            );
        }
        for bad in [
            "",
            "{}",
            r#"{"id":"x","reserved":[[["other","u",1,null,false]]]}"#,
            r#"{"id":"","reserved":[]}"#,
        ] {
            let e = Ticket::from_json(&setup, bad).unwrap_err();
            assert_eq!(
                (e.code, e.path.as_str()),
                (ErrorCode::InvalidArgument, "result")
            );
        }
    }

    #[test]
    fn own_ids_count_under_their_instance() {
        let ids = OwnIds::seeded(0xabc);
        assert_eq!(ids.next(), "0000000000000abc-0");
        assert_eq!(ids.next(), "0000000000000abc-1");
    }
}
