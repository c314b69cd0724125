//! What travels between the Worker and its Durable Objects, and between `edgelimit-admin` and the
//! Worker's admin route: one [`WireCall`] (a batch of checks, or one control operation) and its
//! [`WireAnswer`], as JSON. The library's types are rebuilt exactly on the other side: a limit by its
//! name, policy and tiers (each sent once per call), an identifier by its bytes.
//!
//! - [`calls`]: any client of the wire (the Worker's Durable Object stub, edgelimit-admin's
//!   admin-route client) as a `Store` and a `Control`.
//! - [`serve`]: the store's side — one call answered by any controlled store.
//! - `control`: each [`edgelimit::control::ControlOp`] as a [`WireCall`] and back
//!   ([`WireCall::of`], [`WireCall::operation`]), and its answer ([`WireAnswer::of`],
//!   [`WireAnswer::control_answer`]).

pub mod calls;
mod control;
pub mod serve;

use std::sync::Arc;

use base64::Engine as _;
use edgelimit::algorithm::{Charge, LeaseSpending};
use edgelimit::control::list::{Gate, ListEntry, ListProbe, Listed};
use edgelimit::control::{Assignment, AssignmentKind, Tiers};
use edgelimit::{
    Check, CheckItem, Decision, Identifier, Limit, Policy, StoreError, TimeSource, Verdict,
};
use serde::{Deserialize, Serialize};

/// One request to a store behind the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireCall {
    /// Decide `checks` (their limits listed once in `limits`) at `at_ms`, or on the store's
    /// clock when `None` (`TimeSource::Server`).
    Check {
        /// The limits the checks name, by index.
        limits: Vec<WireLimit>,
        /// The checks.
        checks: Vec<WireCheck>,
        /// The caller's instant, if it gives one.
        at_ms: Option<u64>,
    },
    /// `ControlOp::Peek`. The control variants below are the operations' JSON shape, converted
    /// in one place (the wire's `control` module).
    Peek {
        /// The limit.
        limit: WireLimit,
        /// Whose standing.
        identifier: WireBytes,
        /// The caller's instant, if it gives one.
        at_ms: Option<u64>,
    },
    /// `ControlOp::Reset`.
    Reset {
        /// The limit.
        limit: WireLimit,
        /// Whose state.
        identifier: WireBytes,
    },
    /// `ControlOp::Assign`: `assignment` in its stored text (`Assignment::encode`), none to
    /// clear both kinds.
    Assign {
        /// The limit.
        limit: WireLimit,
        /// Whose assignment.
        identifier: WireBytes,
        /// The assignment, encoded with its lapse time.
        assignment: Option<String>,
        /// When it lapses (epoch ms), if ever.
        until_ms: Option<u64>,
    },
    /// `ControlOp::ClearAssignment` of one kind (`t` or `o`).
    ClearAssignment {
        /// The limit.
        limit: WireLimit,
        /// Whose assignment.
        identifier: WireBytes,
        /// `t` (the tier) or `o` (the override).
        kind: String,
    },
    /// `ControlOp::Assignments`.
    Assignments {
        /// The limit.
        limit: WireLimit,
        /// Whose assignments.
        identifier: WireBytes,
    },
    /// `ControlOp::ListAdd`.
    ListAdd {
        /// The list.
        list: String,
        /// The entry, as written (`ip 203.0.113.0/24`).
        entry: String,
        /// When it lapses (epoch ms), if ever.
        until_ms: Option<u64>,
        /// The caller's now.
        now_ms: u64,
    },
    /// `ControlOp::ListRemove`.
    ListRemove {
        /// The list.
        list: String,
        /// The entry.
        entry: String,
    },
    /// `ControlOp::ListEntries`.
    ListEntries {
        /// The list.
        list: String,
        /// The caller's now.
        now_ms: u64,
    },
}

/// The answer to one [`WireCall`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireAnswer {
    /// One verdict per check.
    Verdicts {
        /// The verdicts, in order.
        verdicts: Vec<WireVerdict>,
    },
    /// A peek's verdict.
    Verdict {
        /// The verdict.
        verdict: WireVerdict,
    },
    /// Whether something existed (a reset, a removal).
    Existed {
        /// Whether it did.
        existed: bool,
    },
    /// Done (an assignment, an addition).
    Done,
    /// Assignments in their stored text, each with its lapse time.
    Assignments {
        /// (encoded assignment, until).
        assignments: Vec<(String, Option<u64>)>,
    },
    /// A list's live entries.
    Entries {
        /// (member, until).
        entries: Vec<(String, Option<u64>)>,
    },
    /// The call failed.
    Failed {
        /// Why.
        message: String,
        /// Whether the caller's input was at fault (else the store).
        invalid_input: bool,
    },
}

/// Bytes on the wire, as standard base64 (an identifier may hold any bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WireBytes(String);

impl WireBytes {
    /// The wire form of `bytes`.
    pub fn of(bytes: &[u8]) -> WireBytes {
        WireBytes(base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    /// The identifier these bytes are.
    pub fn identifier(&self) -> Result<Identifier, StoreError> {
        base64::engine::general_purpose::STANDARD
            .decode(&self.0)
            .map(Identifier::from)
            .map_err(|e| invalid(format!("an identifier is not base64: {e}")))
    }
}

/// A limit as the store needs it: its name, policy, tiers, block duration and longest delay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireLimit {
    /// The name.
    pub name: String,
    /// The policy spec (`gcra 10/1s burst 20`).
    pub policy: String,
    /// The tiers: (name, policy spec).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<(String, String)>,
    /// [`Limit::block_ms`]; absent for 0, so a message of a limit without a block reads as
    /// before.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub block_ms: u64,
    /// [`Limit::max_delay_ms`]; absent for 0, as `block_ms`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_delay_ms: u64,
}

fn is_zero(ms: &u64) -> bool {
    *ms == 0
}

impl WireLimit {
    /// The wire form of `limit`.
    pub fn of(limit: &Limit) -> WireLimit {
        WireLimit {
            name: limit.name.to_string(),
            policy: limit.policy.to_string(),
            tiers: limit
                .tiers
                .iter()
                .map(|(name, policy)| (name.to_string(), policy.to_string()))
                .collect(),
            block_ms: limit.block_ms,
            max_delay_ms: limit.max_delay_ms,
        }
    }

    /// The limit again (failing open: a store never applies a fail mode).
    pub fn limit(&self) -> Result<Limit, StoreError> {
        let policy = parse_policy(&self.policy)?;
        let tiers = self
            .tiers
            .iter()
            .map(|(name, spec)| Ok((name.as_str(), parse_policy(spec)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        let tiers = Tiers::new(policy.algorithm(), tiers)
            .map_err(|e| invalid(format!("limit `{}`: {e}", self.name)))?;
        let mut limit = Limit::new(self.name.as_str(), policy)
            .with_block_for(self.block_ms)
            .with_max_delay(self.max_delay_ms);
        limit.tiers = tiers;
        Ok(limit)
    }
}

/// How an item's cost applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireCharge {
    /// `Charge::Request`.
    Request,
    /// `Charge::Settle`.
    Settle,
    /// `Charge::Release`.
    Release {
        /// The leases' end.
        lease_ms: u64,
    },
    /// `Charge::LeaseCredit`.
    LeaseCredit {
        /// The credited units' end.
        until_ms: u64,
    },
}

/// One item of a check; `limit` indexes the call's limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireItem {
    /// Which of the call's limits.
    pub limit: usize,
    /// Whose quota.
    pub identifier: WireBytes,
    /// The cost.
    pub cost: i64,
    /// How it applies.
    #[serde(default = "request", skip_serializing_if = "is_request")]
    pub charge: WireCharge,
    /// The request id, if the item carries one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<WireBytes>,
    /// The gate the item sits behind, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<usize>,
    /// How the item spends its capacity lease (`CheckItem::spend_lease`): absent for never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend_lease: Option<WireLeaseSpending>,
}

/// `LeaseSpending` on the wire, absent for `Never`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WireLeaseSpending {
    /// A request the policy denies may be admitted from the lease.
    AfterPolicy,
    /// The lease alone decides.
    Only,
}

impl WireLeaseSpending {
    fn of(spending: LeaseSpending) -> Option<WireLeaseSpending> {
        match spending {
            LeaseSpending::Never => None,
            LeaseSpending::AfterPolicy => Some(WireLeaseSpending::AfterPolicy),
            LeaseSpending::Only => Some(WireLeaseSpending::Only),
        }
    }

    fn spending(wire: Option<WireLeaseSpending>) -> LeaseSpending {
        match wire {
            None => LeaseSpending::Never,
            Some(WireLeaseSpending::AfterPolicy) => LeaseSpending::AfterPolicy,
            Some(WireLeaseSpending::Only) => LeaseSpending::Only,
        }
    }
}

fn request() -> WireCharge {
    WireCharge::Request
}

fn is_request(charge: &WireCharge) -> bool {
    *charge == WireCharge::Request
}

/// One check: its items, and for a gated check its gates and what the request offers the lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireCheck {
    /// The items.
    pub items: Vec<WireItem>,
    /// The gates: (deny lists, allow lists).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<(Vec<String>, Vec<String>)>,
    /// The probe's (source, value) pairs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probe: Vec<(String, String)>,
}

/// What a gate found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireListed {
    /// `Listed::No`.
    No,
    /// `Listed::Denied`.
    Denied {
        /// The list.
        list: String,
        /// The member.
        entry: String,
    },
    /// `Listed::Allowed`.
    Allowed {
        /// The list.
        list: String,
        /// The member.
        entry: String,
    },
}

/// A verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireVerdict {
    /// `Verdict::allowed`.
    pub allowed: bool,
    /// `Verdict::decisions`.
    pub decisions: Vec<Decision>,
    /// `Verdict::atomic`.
    pub atomic: bool,
    /// `Verdict::decided_at_ms`.
    pub decided_at_ms: u64,
    /// `Verdict::listed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listed: Vec<WireListed>,
}

impl WireVerdict {
    /// The wire form of `verdict`.
    pub fn of(verdict: &Verdict) -> WireVerdict {
        WireVerdict {
            allowed: verdict.allowed,
            decisions: verdict.decisions.clone(),
            atomic: verdict.atomic,
            decided_at_ms: verdict.decided_at_ms,
            listed: verdict
                .listed
                .iter()
                .map(|listed| match listed {
                    Listed::No => WireListed::No,
                    Listed::Denied { list, entry } => WireListed::Denied {
                        list: list.clone(),
                        entry: entry.clone(),
                    },
                    Listed::Allowed { list, entry } => WireListed::Allowed {
                        list: list.clone(),
                        entry: entry.clone(),
                    },
                })
                .collect(),
        }
    }

    /// The verdict again.
    pub fn verdict(self) -> Verdict {
        Verdict {
            allowed: self.allowed,
            decisions: self.decisions,
            atomic: self.atomic,
            decided_at_ms: self.decided_at_ms,
            listed: self
                .listed
                .into_iter()
                .map(|listed| match listed {
                    WireListed::No => Listed::No,
                    WireListed::Denied { list, entry } => Listed::Denied { list, entry },
                    WireListed::Allowed { list, entry } => Listed::Allowed { list, entry },
                })
                .collect(),
        }
    }
}

/// The call deciding `checks` at `time`: each distinct limit sent once.
pub fn check_call(checks: &[Check], time: TimeSource) -> WireCall {
    let mut limits: Vec<&Arc<Limit>> = Vec::new();
    for item in checks.iter().flat_map(|c| c.items()) {
        if !limits
            .iter()
            .any(|l| Arc::ptr_eq(l, &item.limit) || ***l == *item.limit)
        {
            limits.push(&item.limit);
        }
    }
    let index = |limit: &Arc<Limit>| -> usize {
        limits
            .iter()
            .position(|l| Arc::ptr_eq(l, limit) || ***l == **limit)
            .expect("every item's limit is listed")
    };
    let mut wire_checks = Vec::with_capacity(checks.len());
    for check in checks {
        let items = check
            .items()
            .iter()
            .map(|item| WireItem {
                limit: index(&item.limit),
                identifier: WireBytes::of(item.identifier.as_bytes()),
                cost: item.cost,
                charge: match item.charge {
                    Charge::Request => WireCharge::Request,
                    Charge::Settle => WireCharge::Settle,
                    Charge::Release { lease_ms } => WireCharge::Release { lease_ms },
                    Charge::LeaseCredit { until_ms } => WireCharge::LeaseCredit { until_ms },
                },
                request_id: item
                    .request_id
                    .as_ref()
                    .map(|id| WireBytes::of(id.as_bytes())),
                gate: item.gate,
                spend_lease: WireLeaseSpending::of(item.spend_lease),
            })
            .collect();
        wire_checks.push(WireCheck {
            items,
            gates: check
                .gates()
                .iter()
                .map(|g| (g.deny.to_vec(), g.allow.to_vec()))
                .collect(),
            probe: check.probe().pairs().to_vec(),
        });
    }
    WireCall::Check {
        limits: limits.into_iter().map(|l| WireLimit::of(l)).collect(),
        checks: wire_checks,
        at_ms: time.at_ms(),
    }
}

/// The checks and time of a [`WireCall::Check`], rebuilt.
pub fn checks_of(
    limits: &[WireLimit],
    checks: &[WireCheck],
    at_ms: Option<u64>,
) -> Result<(Vec<Check>, TimeSource), StoreError> {
    let limits = limits
        .iter()
        .map(|l| l.limit().map(Arc::new))
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = Vec::with_capacity(checks.len());
    for wire in checks {
        let mut check = Check::new();
        for item in &wire.items {
            let limit = limits.get(item.limit).ok_or_else(|| {
                invalid(format!(
                    "an item names limit {}, of {}",
                    item.limit,
                    limits.len()
                ))
            })?;
            let mut built = CheckItem::new(limit.clone(), item.identifier.identifier()?, item.cost)
                .charged(match item.charge {
                    WireCharge::Request => Charge::Request,
                    WireCharge::Settle => Charge::Settle,
                    WireCharge::Release { lease_ms } => Charge::Release { lease_ms },
                    WireCharge::LeaseCredit { until_ms } => Charge::LeaseCredit { until_ms },
                });
            if let Some(id) = &item.request_id {
                built = built.with_request_id(id.identifier()?);
            }
            built.gate = item.gate;
            built.spend_lease = WireLeaseSpending::spending(item.spend_lease);
            check.add_item(built);
        }
        if !wire.gates.is_empty() {
            let probe = wire
                .probe
                .iter()
                .fold(ListProbe::new(), |probe, (source, value)| {
                    probe.with(source, value)
                });
            let gates = wire
                .gates
                .iter()
                .map(|(deny, allow)| Gate::new(deny.clone(), allow.clone()))
                .collect();
            check = check.gated(probe, gates);
        }
        out.push(check);
    }
    let time = match at_ms {
        Some(ms) => TimeSource::At(ms),
        None => TimeSource::Server,
    };
    Ok((out, time))
}

/// An assignment from its wire text, with its lapse time.
pub fn assignment_of(text: &str) -> Result<(Assignment, Option<u64>), StoreError> {
    Assignment::decode(text).map_err(|e| invalid(format!("assignment `{text}`: {e}")))
}

/// An assignment kind from its letter (`t`, `o`).
pub fn kind_of(letter: &str) -> Result<AssignmentKind, StoreError> {
    match letter {
        "t" => Ok(AssignmentKind::Tier),
        "o" => Ok(AssignmentKind::Override),
        other => Err(invalid(format!(
            "assignment kind `{other}` is not `t` or `o`"
        ))),
    }
}

/// A list entry from its text.
pub fn entry_of(text: &str) -> Result<ListEntry, StoreError> {
    text.parse::<ListEntry>()
        .map_err(|e| invalid(format!("entry `{text}`: {e}")))
}

/// The answer carrying `error`.
pub fn failed(error: &StoreError) -> WireAnswer {
    WireAnswer::Failed {
        message: error.to_string(),
        invalid_input: matches!(error, StoreError::InvalidInput(_)),
    }
}

/// The error a [`WireAnswer::Failed`] carries, for the caller: the store answered, and refused
/// the call — a call it cannot take ([`StoreError::InvalidInput`], class `refused_request`), or
/// its own failure ([`StoreError::Script`], `refused_script`); either way a misconfiguration
/// (docs/design.md §3, "Store failures"), never an outage. A Durable Object answers `Failed`
/// for a call it cannot read alone (its `MemoryStore` fails no other way); an object that cannot
/// answer at all fails its caller's fetch instead, which the caller counts as `unreachable`.
pub fn error_of(message: String, invalid_input: bool) -> StoreError {
    if invalid_input {
        StoreError::InvalidInput(message)
    } else {
        StoreError::Script(message)
    }
}

fn parse_policy(spec: &str) -> Result<Policy, StoreError> {
    spec.parse::<Policy>()
        .map_err(|e| invalid(format!("policy `{spec}`: {e}")))
}

fn invalid(message: String) -> StoreError {
    StoreError::InvalidInput(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgelimit::MemoryStore;

    fn round_trip(checks: &[Check], time: TimeSource) -> (Vec<Check>, TimeSource) {
        let text = serde_json::to_string(&check_call(checks, time)).unwrap();
        match serde_json::from_str::<WireCall>(&text).unwrap() {
            WireCall::Check {
                limits,
                checks,
                at_ms,
            } => checks_of(&limits, &checks, at_ms).unwrap(),
            other => panic!("not a check: {other:?}"),
        }
    }

    /// Checks of every kind come back equal, and decide alike on both sides.
    #[test]
    fn checks_cross_the_wire_unchanged() {
        let gcra = Limit::new("per-ip", "gcra 10/1s burst 20".parse().unwrap());
        let tiered = Limit::new("per-user", "fixed 5/1m".parse().unwrap())
            .with_tiers([("pro", "fixed 50/1m".parse().unwrap())])
            .unwrap();
        let lease = Limit::new("inflight", "concurrency 2 timeout 30s".parse().unwrap());
        let checks = vec![
            Check::new()
                .with(&gcra, "203.0.113.7", 1)
                .with(&tiered, "alice", 2),
            Check::new()
                .with_item(CheckItem::new(&tiered, "bob", 3).with_request_id("ray-1"))
                .with_item(
                    CheckItem::new(&lease, &b"\xff\x00raw"[..], 1)
                        .charged(Charge::Release { lease_ms: 99 }),
                )
                .with_item(CheckItem::new(&gcra, "carol", -1).charged(Charge::Settle)),
            Check::new()
                .with_item(CheckItem::new(&gcra, "dave", 1).gated(0))
                .gated(
                    ListProbe::new()
                        .with("ip", "203.0.113.7")
                        .with("country", "SE"),
                    vec![Gate::new(vec!["deny".into()], vec!["allow".into()])],
                ),
            // A global limit's lease credited, then spent where the share falls short.
            Check::new().with_item(
                CheckItem::new(&gcra, "erin", 50).charged(Charge::LeaseCredit { until_ms: 9_000 }),
            ),
            Check::new().with_item(CheckItem::new(&gcra, "erin", 22).spending_lease()),
            Check::new(),
        ];
        for time in [TimeSource::At(1_700_000_000_000), TimeSource::Server] {
            let (back, back_time) = round_trip(&checks, time);
            assert_eq!(back, checks);
            assert_eq!(back_time, time);
        }
        let store = MemoryStore::new();
        let (back, _) = round_trip(&checks, TimeSource::At(0));
        let here = store.direct().check(&checks, 5);
        let there = MemoryStore::new().direct().check(&back, 5);
        assert_eq!(here, there);
        assert_eq!(here[4].decisions[0].reason, edgelimit::Reason::Leased);
        assert_eq!(here[4].decisions[0].remaining, 28);
        // Verdicts too.
        for verdict in &here {
            let text = serde_json::to_string(&WireVerdict::of(verdict)).unwrap();
            let back: WireVerdict = serde_json::from_str(&text).unwrap();
            assert_eq!(&back.verdict(), verdict);
        }
    }

    /// A limit's block and delay cross the wire, and a limit without them is written as before
    /// (so a message from an older sender, which has neither field, reads the same).
    #[test]
    fn blocks_and_delays_cross_the_wire_and_are_absent_when_zero() {
        let plain = Limit::new("per-ip", "gcra 10/1s burst 20".parse().unwrap());
        let text = serde_json::to_string(&WireLimit::of(&plain)).unwrap();
        assert!(
            !text.contains("block_ms") && !text.contains("max_delay_ms"),
            "{text}"
        );
        let old: WireLimit =
            serde_json::from_str(r#"{"name":"per-ip","policy":"gcra 10/1s burst 20"}"#).unwrap();
        assert_eq!(old.limit().unwrap(), plain);
        let blocking = plain.clone().with_block_for(60_000).with_max_delay(500);
        let text = serde_json::to_string(&WireLimit::of(&blocking)).unwrap();
        assert!(text.contains(r#""block_ms":60000"#), "{text}");
        assert!(text.contains(r#""max_delay_ms":500"#), "{text}");
        let back: WireLimit = serde_json::from_str(&text).unwrap();
        assert_eq!(back.limit().unwrap(), blocking);
        // A block decides alike on both sides of the wire.
        let blocking = plain.with_block_for(60_000);
        let checks: Vec<Check> = (0..22)
            .map(|_| Check::single(&blocking, "203.0.113.7", 1))
            .collect();
        let (back, _) = round_trip(&checks, TimeSource::At(0));
        let here = MemoryStore::new().direct().check(&checks, 5);
        let there = MemoryStore::new().direct().check(&back, 5);
        assert_eq!(here, there);
        assert_eq!(here[20].decisions[0].reason, edgelimit::Reason::OverLimit);
        assert_eq!(here[21].decisions[0].reason, edgelimit::Reason::Blocked);
        assert_eq!(here[21].decisions[0].retry_after_ms, 60_000);
    }

    #[test]
    fn bad_calls_name_what_is_wrong() {
        let bad_policy = vec![WireLimit {
            name: "l".into(),
            policy: "gcra 0/1s".into(),
            tiers: vec![],
            block_ms: 0,
            max_delay_ms: 0,
        }];
        let e = checks_of(&bad_policy, &[], None).unwrap_err();
        assert!(e.to_string().contains("gcra 0/1s"), "{e}");
        let item = WireItem {
            limit: 3,
            identifier: WireBytes::of(b"x"),
            cost: 1,
            charge: WireCharge::Request,
            request_id: None,
            gate: None,
            spend_lease: None,
        };
        let check = WireCheck {
            items: vec![item],
            gates: vec![],
            probe: vec![],
        };
        let e = checks_of(&[], &[check], None).unwrap_err();
        assert!(e.to_string().contains("limit 3"), "{e}");
        let e = WireBytes("!!".into()).identifier().unwrap_err();
        assert!(e.to_string().contains("base64"), "{e}");
        assert!(kind_of("x").is_err() && entry_of("nonsense").is_err());
    }

    #[test]
    fn a_failed_answer_is_a_refusal_of_its_class_never_an_outage() {
        use edgelimit::FailureClass;
        let refused = |error: StoreError| match failed(&error) {
            WireAnswer::Failed {
                message,
                invalid_input,
            } => error_of(message, invalid_input).class(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            refused(StoreError::InvalidInput("not a call".into())),
            FailureClass::RefusedRequest
        );
        assert_eq!(
            refused(StoreError::Script("ERR boom".into())),
            FailureClass::RefusedScript
        );
        assert!(refused(StoreError::Protocol("garbled".into())).is_misconfiguration());
    }
}
