//! From a check to script invocations, and from their replies to a verdict.

pub use super::call::Invocation;
use super::reply::{parse, parse_gated, parse_taken, Reply};
use super::source::Script;
use crate::algorithm::capacity_lease::MAX_LEASE_END_MS;
use crate::algorithm::{Charge, LeaseSpending};
pub(super) use crate::control::assignment::algorithm_code;
use crate::control::list::{Gate, Listed};
use crate::global::take::{Take, Taken};
use crate::policy::Algorithm;
use crate::store::key::{
    block_key_len, control_key_len, hash_slot, lease_key_len, list_key_len, push_block_key,
    push_control_key, push_lease_key, push_list_key, push_request_key, push_state_key,
    request_key_len, state_key_len,
};
use crate::store::{Check, CheckItem, StoreError, TimeSource, Verdict};

/// Times at or past this (2^52 ms, some 142,000 years after 1970) are refused: the scripts add up
/// to `burst × window ≤ 2^50` and two windows to a time, and must stay below 2^53, where Lua's
/// doubles stop being exact.
pub const MAX_SCRIPT_TIME_MS: u64 = 1 << 52;

/// Costs are sent clamped to ±2^52. Every capacity is at most 2^50, so a larger cost is denied
/// for good (or refunds everything) exactly as the clamped one: the clamp changes no decision.
pub const MAX_SCRIPT_COST: i64 = 1 << 52;

/// Where the keys live, which decides whether a multi-limit check can run as one script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// One Redis (or a REST front to one): a script may touch any keys.
    SingleNode,
    /// Redis Cluster: a script may touch keys of one slot only.
    Cluster,
}

/// How one [`Check`] runs: its invocations, in order, and how to read their replies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckPlan {
    invocations: Vec<Invocation>,
    items: usize,
    atomic: bool,
    time: TimeSource,
    // A gated check's gates, to name the lists its reply points at (empty when ungated).
    gates: Vec<Gate>,
}

impl CheckPlan {
    /// Plans `check` under `namespace`. One item runs its algorithm's script; several run the
    /// multi-limit script, all or nothing — unless, on a Cluster, their keys span slots: then each
    /// item runs alone and the verdict is not atomic. An empty check needs no call.
    ///
    /// Fails with [`StoreError::InvalidInput`] for a time at or past [`MAX_SCRIPT_TIME_MS`], and
    /// for a concurrency item spending or crediting a capacity lease (no store decides one).
    ///
    /// The plan decides with each limit's own policy; [`CheckPlan::controlled`] honours
    /// assignments.
    pub fn new(
        check: &Check,
        namespace: &str,
        time: TimeSource,
        topology: Topology,
    ) -> Result<CheckPlan, StoreError> {
        CheckPlan::plan(check, namespace, time, topology, false)
    }

    /// [`CheckPlan::new`], each item also reading its identifier's assignment (tier or
    /// override, [`crate::control`]) in the same script and deciding with the effective policy:
    /// one more key and the `ctl` option (the limit's tier table) per item. Every bundled Redis
    /// store plans this way.
    pub fn controlled(
        check: &Check,
        namespace: &str,
        time: TimeSource,
        topology: Topology,
    ) -> Result<CheckPlan, StoreError> {
        CheckPlan::plan(check, namespace, time, topology, true)
    }

    fn plan(
        check: &Check,
        namespace: &str,
        time: TimeSource,
        topology: Topology,
        control: bool,
    ) -> Result<CheckPlan, StoreError> {
        let now = match time {
            TimeSource::At(ms) if ms >= MAX_SCRIPT_TIME_MS => {
                return Err(StoreError::InvalidInput(format!(
                    "time {ms} ms is past 2^52 ms, beyond what the Redis scripts compute exactly"
                )))
            }
            TimeSource::At(ms) => Some(ms),
            // An empty time tells the script to read Redis TIME.
            TimeSource::Server => None,
        };
        check.refuse_bad_items()?;
        let items = check.items();
        if check.is_gated() {
            if topology == Topology::Cluster {
                // The lists live in slots of their own: a Cluster reads them first and plans
                // what is left (`Check::ungated`), see docs/design.md §"Deny and allow lists".
                return Err(StoreError::InvalidInput(
                    "a gated check cannot run as one script on a Cluster: read its lists first"
                        .to_string(),
                ));
            }
            // Each list once, in the order the gates first name it.
            let mut lists: Vec<&str> = Vec::new();
            for name in check.gates().iter().flat_map(Gate::lists) {
                if !lists.contains(&name) {
                    lists.push(name);
                }
            }
            let call = Gated {
                check,
                lists: &lists,
                head: Head {
                    namespace,
                    now,
                    control,
                },
            };
            return Ok(CheckPlan {
                invocations: vec![call.invocation()],
                items: items.len(),
                atomic: true,
                time,
                gates: check.gates().to_vec(),
            });
        }
        let head = Head {
            namespace,
            now,
            control,
        };
        let atomic =
            items.len() <= 1 || topology == Topology::SingleNode || share_a_slot(items, namespace);
        let invocations = if items.len() == 1 || !atomic {
            items
                .iter()
                .map(|item| Single { item, head }.invocation())
                .collect()
        } else if items.is_empty() {
            Vec::new()
        } else {
            vec![Multi { items, head }.invocation()]
        };
        Ok(CheckPlan {
            invocations,
            items: items.len(),
            atomic,
            time,
            gates: Vec::new(),
        })
    }

    /// The calls to make, in order (each independent of the others' replies).
    pub fn invocations(&self) -> &[Invocation] {
        &self.invocations
    }

    /// Whether the check runs as one script (all or nothing).
    pub fn is_atomic(&self) -> bool {
        self.atomic
    }

    /// Reads the replies, one per invocation in order, into the check's verdict. An error reply
    /// becomes the error its code stands for ([`StoreError::from_error_reply`]); a malformed one
    /// [`StoreError::Protocol`].
    pub fn verdict(&self, replies: &[Reply]) -> Result<Verdict, StoreError> {
        if replies.len() != self.invocations.len() {
            return Err(StoreError::Protocol(format!(
                "expected {} script replies, got {}",
                self.invocations.len(),
                replies.len()
            )));
        }
        if !self.gates.is_empty() {
            let (parsed, found) = parse_gated(&replies[0], self.items, self.gates.len())?;
            let listed = self
                .gates
                .iter()
                .zip(found)
                .map(|(gate, found)| listed(gate, found))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Verdict {
                allowed: parsed.allowed,
                decisions: parsed.decisions,
                atomic: true,
                decided_at_ms: parsed.decided_at_ms,
                listed,
            });
        }
        if self.invocations.len() == 1 && self.atomic {
            let parsed = parse(&replies[0], self.items)?;
            return Ok(Verdict {
                allowed: parsed.allowed,
                decisions: parsed.decisions,
                atomic: true,
                decided_at_ms: parsed.decided_at_ms,
                listed: Vec::new(),
            });
        }
        let mut decisions = Vec::with_capacity(self.items);
        // Split across slots, each script read its own clock: the verdict takes the latest.
        let mut decided_at_ms = self.time.at_ms().unwrap_or(0);
        for reply in replies {
            let parsed = parse(reply, 1)?;
            decided_at_ms = decided_at_ms.max(parsed.decided_at_ms);
            decisions.extend(parsed.decisions);
        }
        Ok(Verdict {
            allowed: decisions.iter().all(|d| d.allowed),
            decisions,
            atomic: self.atomic,
            decided_at_ms,
            listed: Vec::new(),
        })
    }
}

/// The one call of the take script for `takes` ([`crate::global::take`]) under `namespace`,
/// each take reading its identifier's assignment as [`CheckPlan::controlled`]'s items do. Its
/// keys may span slots: one node only. Reply: [`read_taken`].
pub fn take_invocation(
    takes: &[Take],
    namespace: &str,
    time: TimeSource,
) -> Result<Invocation, StoreError> {
    let now = match time {
        TimeSource::At(ms) if ms >= MAX_SCRIPT_TIME_MS => {
            return Err(StoreError::InvalidInput(format!(
                "time {ms} ms is past 2^52 ms, beyond what the Redis scripts compute exactly"
            )))
        }
        TimeSource::At(ms) => Some(ms),
        TimeSource::Server => None,
    };
    for take in takes {
        take.refuse_bad()?;
    }
    let head = Head {
        namespace,
        now,
        control: true,
    };
    Ok(Takes { takes, head }.invocation())
}

/// Reads the take script's reply for `takes` takes.
pub fn read_taken(reply: &Reply, takes: usize) -> Result<Vec<Taken>, StoreError> {
    parse_taken(reply, takes)
}

/// Takes, each on its own, by the take script: every take's keys, then the time and per take
/// its need and its item behind its algorithm's code (see take.lua).
struct Takes<'a> {
    takes: &'a [Take],
    head: Head<'a>,
}

impl Call for Takes<'_> {
    fn script(&self) -> &'static Script {
        Script::take()
    }

    fn write<S: Sink>(&self, sink: &mut S) {
        for take in self.takes {
            self.head.keys(sink, &take.item);
        }
        self.head.now(sink);
        for take in self.takes {
            sink.int(take.need.min(MAX_SCRIPT_COST as u64));
            sink.int(algorithm_code(take.item.limit.policy.algorithm()));
            push_item(sink, &take.item, true, self.head.control, None);
        }
    }
}

/// Whether the items' keys all lie in one Cluster slot (every key of an item shares its hash tag,
/// so the state keys decide), each state key written into one scratch buffer in turn.
fn share_a_slot(items: &[CheckItem], namespace: &str) -> bool {
    let mut key = String::new();
    let mut first = None;
    items.iter().all(|item| {
        key.clear();
        let limit = &item.limit;
        push_state_key(
            &mut key,
            namespace,
            &limit.name,
            limit.policy.algorithm(),
            &item.identifier,
        );
        let slot = hash_slot(&key);
        *first.get_or_insert(slot) == slot
    })
}

/// Where a call's keys and arguments go: to a [`Tally`] first, which counts them so that the
/// [`Invocation`] they are then written into reserves its room once (no reallocation as it fills).
trait Sink {
    /// A key of `len` bytes, which `write` appends to the buffer.
    fn key(&mut self, len: usize, write: impl FnOnce(&mut String));
    /// An integer argument.
    fn int(&mut self, n: impl itoa::Integer);
    /// A text argument.
    fn text(&mut self, text: &str);
}

/// How many parts a call has and how many bytes they take.
#[derive(Default)]
struct Tally {
    parts: usize,
    bytes: usize,
}

impl Sink for Tally {
    fn key(&mut self, len: usize, _: impl FnOnce(&mut String)) {
        self.parts += 1;
        self.bytes += len;
    }

    fn int(&mut self, n: impl itoa::Integer) {
        self.parts += 1;
        self.bytes += itoa::Buffer::new().format(n).len();
    }

    fn text(&mut self, text: &str) {
        self.parts += 1;
        self.bytes += text.len();
    }
}

impl Sink for Invocation {
    fn key(&mut self, len: usize, write: impl FnOnce(&mut String)) {
        let before = self.text_len();
        self.write_key(write);
        debug_assert_eq!(
            self.text_len() - before,
            len,
            "a key's length is its tally's"
        );
    }

    fn int(&mut self, n: impl itoa::Integer) {
        self.push_int_arg(n);
    }

    fn text(&mut self, text: &str) {
        self.push_arg(text);
    }
}

/// A call a plan makes: its script, and its keys and arguments as written to a [`Sink`].
trait Call {
    fn script(&self) -> &'static Script;
    fn write<S: Sink>(&self, sink: &mut S);

    /// The call, its keys and arguments counted first and then written into a buffer of that
    /// size: two allocations, whatever their number.
    fn invocation(&self) -> Invocation {
        let mut tally = Tally::default();
        self.write(&mut tally);
        let mut invocation = Invocation::with_capacity(self.script(), tally.parts, tally.bytes);
        self.write(&mut invocation);
        let parts = invocation.keys().len() + invocation.args().len();
        debug_assert_eq!((parts, invocation.text_len()), (tally.parts, tally.bytes));
        invocation
    }
}

/// What every call of a check shares: where its keys live, its time, whether items read their
/// assignments.
#[derive(Clone, Copy)]
struct Head<'a> {
    namespace: &'a str,
    // `None` for Redis TIME.
    now: Option<u64>,
    control: bool,
}

impl Head<'_> {
    /// An item's keys: its state key, then one per keyed option (the lease key, the request
    /// key, the control key, the block key), in the order [`push_item`] lists the options.
    fn keys<S: Sink>(&self, sink: &mut S, item: &CheckItem) {
        let (namespace, name, id) = (self.namespace, &item.limit.name, &item.identifier);
        let algorithm = item.limit.policy.algorithm();
        sink.key(state_key_len(namespace, name, algorithm, id), |out| {
            push_state_key(out, namespace, name, algorithm, id)
        });
        if item.uses_lease() {
            sink.key(lease_key_len(namespace, name, id), |out| {
                push_lease_key(out, namespace, name, id)
            });
        }
        if let Some(rq) = &item.request_id {
            sink.key(request_key_len(namespace, name, id, rq), |out| {
                push_request_key(out, namespace, name, id, rq)
            });
        }
        if self.control {
            sink.key(control_key_len(namespace, name, id), |out| {
                push_control_key(out, namespace, name, id)
            });
        }
        if item.applies_block() {
            sink.key(block_key_len(namespace, name, id), |out| {
                push_block_key(out, namespace, name, id)
            });
        }
    }

    /// The first argument of every call: the time, or empty to read Redis TIME.
    fn now<S: Sink>(&self, sink: &mut S) {
        match self.now {
            Some(ms) => sink.int(ms),
            None => sink.text(""),
        }
    }
}

/// One item alone, by its algorithm's script.
struct Single<'a> {
    item: &'a CheckItem,
    head: Head<'a>,
}

impl Call for Single<'_> {
    fn script(&self) -> &'static Script {
        Script::single(self.item.limit.policy.algorithm())
    }

    fn write<S: Sink>(&self, sink: &mut S) {
        self.head.keys(sink, self.item);
        self.head.now(sink);
        push_item(sink, self.item, false, self.head.control, None);
    }
}

/// Several items, all or nothing, by the multi-limit script: every item's keys, then the time
/// and each item behind its algorithm's code.
struct Multi<'a> {
    items: &'a [CheckItem],
    head: Head<'a>,
}

impl Call for Multi<'_> {
    fn script(&self) -> &'static Script {
        Script::multi()
    }

    fn write<S: Sink>(&self, sink: &mut S) {
        for item in self.items {
            self.head.keys(sink, item);
        }
        self.head.now(sink);
        for item in self.items {
            sink.int(algorithm_code(item.limit.policy.algorithm()));
            push_item(sink, item, true, self.head.control, None);
        }
    }
}

/// The one multi-limit call of a gated check on one node (see multi.lua): the list keys first in
/// KEYS, each once; ARGV = now, `gates`, the number of list keys, the candidates, the gates (deny
/// then allow list indexes into KEYS), then the items, each behind its gate by a `gate <g>`
/// option (1-based; an index past the gates is no gate).
struct Gated<'a> {
    check: &'a Check,
    // Each list the gates name, once, in the order first named.
    lists: &'a [&'a str],
    head: Head<'a>,
}

impl Call for Gated<'_> {
    fn script(&self) -> &'static Script {
        Script::multi()
    }

    fn write<S: Sink>(&self, sink: &mut S) {
        let (check, namespace) = (self.check, self.head.namespace);
        for list in self.lists {
            sink.key(list_key_len(namespace, list), |out| {
                push_list_key(out, namespace, list)
            });
        }
        for item in check.items() {
            self.head.keys(sink, item);
        }
        self.head.now(sink);
        sink.text("gates");
        sink.int(self.lists.len());
        let candidates = check.probe().candidates();
        sink.int(candidates.len());
        for candidate in candidates {
            sink.text(candidate);
        }
        sink.int(check.gates().len());
        for gate in check.gates() {
            for names in [&gate.deny, &gate.allow] {
                sink.int(names.len());
                for name in names.iter() {
                    let index = self.lists.iter().position(|l| *l == name.as_str());
                    sink.int(index.expect("every list is among the lists") + 1);
                }
            }
        }
        for item in check.items() {
            sink.int(algorithm_code(item.limit.policy.algorithm()));
            let gate = item.gate.filter(|&g| g < check.gates().len());
            push_item(sink, item, true, self.head.control, gate);
        }
    }
}

/// What a gate found, from its reply values, naming the list.
fn listed(
    gate: &Gate,
    (kind, position, member): (u8, usize, String),
) -> Result<Listed, StoreError> {
    let name = |names: &[String]| {
        position
            .checked_sub(1)
            .and_then(|i| names.get(i))
            .cloned()
            .ok_or_else(|| {
                StoreError::Protocol(format!(
                    "limiter script reply: list position {position} is not in the gate {gate:?}"
                ))
            })
    };
    Ok(match kind {
        1 => Listed::Denied {
            list: name(&gate.deny)?,
            entry: member,
        },
        2 => Listed::Allowed {
            list: name(&gate.allow)?,
            entry: member,
        },
        _ => Listed::No,
    })
}

/// The cost as sent to a script: clamped to ±[`MAX_SCRIPT_COST`] (which changes no decision).
pub fn encode_cost(cost: i64) -> i64 {
    cost.clamp(-MAX_SCRIPT_COST, MAX_SCRIPT_COST)
}

/// The cost as the script takes it and the option that changes how it applies. A release names
/// a lease only for `concurrency`; for a rate algorithm it is the refund it means, and a release
/// of nothing is a look, so those need no option. A lease credit's end is sent as the rule reads
/// it (at most [`MAX_LEASE_END_MS`]), so it is a number Lua holds exactly.
fn charge_args(item: &CheckItem) -> (i64, Option<(&'static str, u64)>) {
    let concurrency = item.limit.policy.algorithm() == Algorithm::Concurrency;
    match item.charge {
        Charge::Request => (item.cost, None),
        Charge::LeaseCredit { until_ms } => {
            (item.cost, Some(("credit", until_ms.min(MAX_LEASE_END_MS))))
        }
        Charge::Settle if item.cost > 0 => (item.cost, Some(("settle", 1))),
        Charge::Settle => (item.cost, None),
        Charge::Release { .. } if item.cost <= 0 => (0, None),
        Charge::Release { lease_ms } if concurrency => (item.cost, Some(("lease", lease_ms))),
        Charge::Release { .. } => (-item.cost, None),
    }
}

/// Limit, window, capacity, cost — the head every script takes — then the number of options and
/// the options (`settle`, `lease` or `credit`, then `spend`, `rq`, `ctl`, `block`, `delay`, `gate`; see `read_item`
/// in prelude.lua and multi.lua). A single-limit call with no option stops after the cost, as it
/// always has.
fn push_item<S: Sink>(
    sink: &mut S,
    item: &CheckItem,
    multi: bool,
    control: bool,
    gate: Option<usize>,
) {
    let policy = &item.limit.policy;
    let (cost, option) = charge_args(item);
    sink.int(policy.limit());
    // A calendar period is sent as its code in the window's place (fixed_window.lua reads it).
    sink.int(policy.script_window());
    sink.int(policy.capacity());
    sink.int(encode_cost(cost));
    let remember = item.request_id.as_ref().map(|_| item.remember_ms());
    // A credit is its own option; otherwise an item sends `spend` when it reads its lease (a
    // settlement or release spending after its policy sends no lease key).
    let spend = match item.spend_lease {
        _ if matches!(item.charge, Charge::LeaseCredit { .. }) || !item.uses_lease() => None,
        LeaseSpending::Only => Some(2),
        _ => Some(1),
    };
    // Only an item a block applies to reads its block key: a limit without one, or a look, a
    // refund, a settlement, costs the script nothing more.
    let block = item.applies_block().then_some(item.limit.block_ms);
    // Only a delaying GCRA limit's items send their longest wait (every charge: none may
    // forgive the queue); a limit without one sends what it always has.
    let delay = Some(item.max_delay_ms()).filter(|&ms| ms > 0);
    let count = option.is_some() as usize
        + spend.is_some() as usize
        + remember.is_some() as usize
        + control as usize
        + block.is_some() as usize
        + delay.is_some() as usize
        + gate.is_some() as usize;
    if count == 0 && !multi {
        return;
    }
    sink.int(count);
    if let Some((name, value)) = option {
        sink.text(name);
        sink.int(value);
    }
    if let Some(mode) = spend {
        sink.text("spend");
        sink.int(mode);
    }
    if let Some(ms) = remember {
        sink.text("rq");
        sink.int(ms);
    }
    if control {
        sink.text("ctl");
        sink.text(item.limit.tiers.script_table());
    }
    if let Some(ms) = block {
        sink.text("block");
        sink.int(ms);
    }
    if let Some(ms) = delay {
        sink.text("delay");
        sink.int(ms);
    }
    if let Some(gate) = gate {
        sink.text("gate");
        sink.int(gate + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{CheckItem, Limit};
    use crate::Policy;

    fn limit(name: &str, spec: &str) -> Limit {
        Limit::new(name, spec.parse::<Policy>().unwrap())
    }

    #[test]
    fn only_a_request_on_a_blocking_limit_reads_a_block_key() {
        let blocking = limit("a", "gcra 10/1s burst 20").with_block_for(60_000);
        let plan = |check: &Check| {
            CheckPlan::new(check, "ns", TimeSource::At(5), Topology::Cluster).unwrap()
        };
        let request = plan(&Check::single(blocking.clone(), "x", 3));
        let inv = &request.invocations()[0];
        assert_eq!(
            inv.keys(),
            vec![
                "{el:ns:a:x}:gcra".to_string(),
                "{el:ns:a:x}:block".to_string()
            ]
        );
        assert_eq!(
            inv.args(),
            ["5", "10", "1000", "20", "3", "1", "block", "60000"]
        );
        // A look, a refund and a limit without a block send exactly what they always have.
        for check in [
            Check::single(blocking.clone(), "x", 0),
            Check::single(blocking, "x", -1),
            Check::single(limit("a", "gcra 10/1s burst 20"), "x", 3),
        ] {
            let plan = plan(&check);
            let inv = &plan.invocations()[0];
            assert_eq!(inv.keys(), vec!["{el:ns:a:x}:gcra".to_string()]);
            assert_eq!(inv.args().len(), 5, "{:?}", inv.args());
        }
    }

    #[test]
    fn only_the_items_of_a_delaying_gcra_limit_send_their_longest_wait() {
        let plan = |check: &Check| {
            CheckPlan::new(check, "ns", TimeSource::At(5), Topology::Cluster).unwrap()
        };
        let delaying = limit("a", "gcra 10/1s burst 20").with_max_delay(500);
        // Every charge, refunds and looks too: none may forgive the queue.
        for (cost, sent) in [(3, "3"), (0, "0"), (-1, "-1")] {
            let plan = plan(&Check::single(delaying.clone(), "x", cost));
            let inv = &plan.invocations()[0];
            assert_eq!(inv.keys(), vec!["{el:ns:a:x}:gcra".to_string()]);
            assert_eq!(
                inv.args(),
                ["5", "10", "1000", "20", sent, "1", "delay", "500"]
            );
        }
        let plain = plan(&Check::single(limit("a", "gcra 10/1s burst 20"), "x", 3));
        assert_eq!(plain.invocations()[0].args().len(), 5);
    }

    #[test]
    fn one_item_runs_its_algorithm_script() {
        let check = Check::single(limit("a", "gcra 10/1s burst 20"), "x", 3);
        let plan = CheckPlan::new(&check, "ns", TimeSource::At(5), Topology::Cluster).unwrap();
        let inv = &plan.invocations()[0];
        assert_eq!(inv.script.name(), "gcra");
        assert_eq!(inv.keys(), vec!["{el:ns:a:x}:gcra".to_string()]);
        assert_eq!(inv.args(), ["5", "10", "1000", "20", "3"]);
    }

    #[test]
    fn several_items_split_across_cluster_slots_only() {
        let check = Check::new().with(limit("a", "fixed 10/1s"), "x", 1).with(
            limit("b", "sliding-log 5/1m"),
            "x",
            -1,
        );
        let single =
            CheckPlan::new(&check, "ns", TimeSource::Server, Topology::SingleNode).unwrap();
        assert!(single.is_atomic());
        assert_eq!(single.invocations().len(), 1);
        assert_eq!(single.invocations()[0].script.name(), "multi");
        assert_eq!(
            single.invocations()[0].args(),
            ["", "1", "10", "1000", "10", "1", "0", "2", "5", "60000", "5", "-1", "0"]
        );
        let keys = single.invocations()[0].keys();
        let cluster = CheckPlan::new(&check, "ns", TimeSource::Server, Topology::Cluster).unwrap();
        let same_slot = hash_slot(&keys[0]) == hash_slot(&keys[1]);
        assert_eq!(cluster.is_atomic(), same_slot);
        assert_eq!(cluster.invocations().len(), if same_slot { 1 } else { 2 });
    }

    #[test]
    fn a_controlled_plan_reads_each_items_assignment_with_its_tier_table() {
        let tiered = limit("a", "gcra 10/1s burst 20")
            .with_tiers(vec![(
                "pro",
                "gcra 100/1s burst 200".parse::<Policy>().unwrap(),
            )])
            .unwrap();
        let check = Check::single(&tiered, "x", 1);
        let plan =
            CheckPlan::controlled(&check, "ns", TimeSource::At(5), Topology::Cluster).unwrap();
        let inv = &plan.invocations()[0];
        assert_eq!(inv.keys(), ["{el:ns:a:x}:gcra", "{el:ns:a:x}:ctl"]);
        assert_eq!(
            inv.args(),
            ["5", "10", "1000", "20", "1", "1", "ctl", "pro=100,1000,200"]
        );
        let two =
            check.with_item(CheckItem::new(limit("b", "fixed 5/1s"), "x", 1).with_request_id("r"));
        let plan =
            CheckPlan::controlled(&two, "ns", TimeSource::At(5), Topology::SingleNode).unwrap();
        let inv = &plan.invocations()[0];
        assert_eq!(
            inv.keys(),
            [
                "{el:ns:a:x}:gcra",
                "{el:ns:a:x}:ctl",
                "{el:ns:b:x}:fixed",
                "{el:ns:b:x}:rq:r",
                "{el:ns:b:x}:ctl"
            ]
        );
        assert_eq!(
            inv.args().iter().skip(9).collect::<Vec<_>>(),
            ["1", "5", "1000", "5", "1", "2", "rq", "1000", "ctl", ""]
        );
    }

    #[test]
    fn a_lease_item_sends_its_lease_key_and_option_before_the_others() {
        let global = limit("g", "gcra 10/1s burst 20");
        let spend = CheckItem::new(&global, "x", 3)
            .spending_lease()
            .with_request_id("r");
        let plan = CheckPlan::controlled(
            &Check::new().with_item(spend.clone()),
            "ns",
            TimeSource::At(5),
            Topology::Cluster,
        )
        .unwrap();
        let inv = &plan.invocations()[0];
        assert_eq!(
            inv.keys(),
            [
                "{el:ns:g:x}:gcra",
                "{el:ns:g:x}:lease",
                "{el:ns:g:x}:rq:r",
                "{el:ns:g:x}:ctl"
            ]
        );
        assert_eq!(
            inv.args(),
            ["5", "10", "1000", "20", "3", "3", "spend", "1", "rq", "1000", "ctl", ""]
        );
        // A credit is its charge: its end clamped to what a lease holds, its cost the amount.
        let credit =
            CheckItem::new(&global, "y", 7).charged(Charge::LeaseCredit { until_ms: u64::MAX });
        let plan = CheckPlan::new(
            &Check::new().with_item(credit),
            "ns",
            TimeSource::At(5),
            Topology::SingleNode,
        )
        .unwrap();
        let inv = &plan.invocations()[0];
        assert_eq!(inv.keys(), ["{el:ns:g:y}:gcra", "{el:ns:g:y}:lease"]);
        assert_eq!(
            inv.args(),
            [
                "5",
                "10",
                "1000",
                "20",
                "7",
                "1",
                "credit",
                "4503599627370495"
            ]
        );
        // Deciding by the lease alone is `spend 2`, for any charge.
        let alone = CheckItem::new(&global, "x", 1)
            .spending_lease_only()
            .charged(Charge::Settle);
        let plan = CheckPlan::new(
            &Check::new().with_item(alone),
            "ns",
            TimeSource::At(5),
            Topology::SingleNode,
        )
        .unwrap();
        assert_eq!(
            plan.invocations()[0].args(),
            ["5", "10", "1000", "20", "1", "2", "settle", "1", "spend", "2"]
        );
        // Only a request spends: a settlement marked spending sends no lease key.
        let settle = Check::new().with_item(spend.charged(Charge::Settle));
        let plan = CheckPlan::new(&settle, "ns", TimeSource::At(5), Topology::SingleNode).unwrap();
        assert!(!plan.invocations()[0].args().iter().any(|a| a == "spend"));
        assert_eq!(
            plan.invocations()[0].keys().len(),
            2,
            "state and request keys"
        );
    }

    #[test]
    fn a_concurrency_item_spending_or_crediting_a_lease_is_refused() {
        let inflight = limit("c", "concurrency 2 timeout 1s");
        for item in [
            CheckItem::new(&inflight, "x", 1).spending_lease(),
            CheckItem::new(&inflight, "x", 1).charged(Charge::LeaseCredit { until_ms: 9 }),
        ] {
            let check = Check::single(limit("a", "fixed 1/1s"), "x", 1).with_item(item);
            for topology in [Topology::SingleNode, Topology::Cluster] {
                let err = CheckPlan::new(&check, "ns", TimeSource::At(5), topology).unwrap_err();
                assert!(
                    matches!(&err, StoreError::InvalidInput(m) if m.contains("`c`")),
                    "{err:?}"
                );
            }
        }
    }

    #[test]
    fn a_gated_check_is_one_script_on_one_node_with_its_lists_first() {
        use crate::control::list::{Gate, ListProbe};
        let a = limit("a", "fixed 10/1s");
        let check = Check::new()
            .with_item(CheckItem::new(&a, "x", 1).gated(0))
            .with_item(CheckItem::new(limit("b", "gcra 5/1s"), "x", 1).gated(7))
            .gated(
                ListProbe::new().with("country", "cn"),
                vec![Gate::new(
                    vec!["deny".into(), "deny:r".into()],
                    vec!["deny".into()],
                )],
            );
        let plan = CheckPlan::new(&check, "ns", TimeSource::At(5), Topology::SingleNode).unwrap();
        assert_eq!(plan.invocations().len(), 1, "one script, one round trip");
        let inv = &plan.invocations()[0];
        assert_eq!(inv.script.name(), "multi");
        // Each list once, first; then the items' state keys.
        assert_eq!(
            inv.keys(),
            [
                "{el:ns:list:deny}",
                "{el:ns:list:deny%3Ar}",
                "{el:ns:a:x}:fixed",
                "{el:ns:b:x}:gcra"
            ]
        );
        assert_eq!(
            inv.args(),
            [
                "5",
                "gates",
                "2",
                "1",
                "country CN",
                "1",
                "2",
                "1",
                "2",
                "1",
                "1", // gates
                "1",
                "10",
                "1000",
                "10",
                "1",
                "1",
                "gate",
                "1", // behind gate 1
                "5",
                "5",
                "1000",
                "5",
                "1",
                "0" // gate 7 does not exist: no gate
            ]
        );
        // A Cluster reads the lists first (RespStore); a plan for it would be wrong.
        assert!(CheckPlan::new(&check, "ns", TimeSource::At(5), Topology::Cluster).is_err());
    }

    #[test]
    fn times_lua_cannot_hold_are_refused_and_costs_clamped() {
        let check = Check::single(limit("a", "fixed 10/1s"), "x", i64::MIN);
        let err = CheckPlan::new(
            &check,
            "ns",
            TimeSource::At(MAX_SCRIPT_TIME_MS),
            Topology::SingleNode,
        )
        .unwrap_err();
        assert!(matches!(err, StoreError::InvalidInput(_)));
        let plan = CheckPlan::new(
            &check,
            "ns",
            TimeSource::At(MAX_SCRIPT_TIME_MS - 1),
            Topology::SingleNode,
        )
        .unwrap();
        assert_eq!(
            &plan.invocations()[0].args()[4],
            (-(1i64 << 52)).to_string()
        );
    }

    /// A check of up to four items on these limits, by identifiers of any bytes (long ones
    /// hashed), any charge, cost and request id, gated or not.
    fn any_check() -> impl proptest::strategy::Strategy<Value = Check> {
        use crate::algorithm::Charge;
        use crate::control::list::{Gate, ListProbe};
        use proptest::prelude::*;
        const SPECS: [&str; 7] = [
            "fixed 10/1s",
            "sliding-log 5/1m",
            "sliding-counter 10000/day",
            "token-bucket 5/500ms",
            "gcra 10/1s burst 20",
            "concurrency 3 timeout 2m",
            "fixed 1125899906842/1s",
        ];
        let id = prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..8),
            "[a-z0-9.:{}%-]{0,12}".prop_map(String::into_bytes),
            proptest::collection::vec(any::<u8>(), 120..140),
        ];
        let charge = prop_oneof![
            Just(Charge::Request),
            Just(Charge::Settle),
            any::<u64>().prop_map(|lease_ms| Charge::Release { lease_ms }),
            any::<u64>().prop_map(|until_ms| Charge::LeaseCredit { until_ms }),
        ];
        let cost = prop_oneof![-3i64..5, any::<i64>()];
        let item = (
            0..SPECS.len(),
            prop_oneof![Just("a"), Just("per ip"), Just("b:{c}")],
            any::<bool>(),
            id.clone(),
            cost,
            charge,
            proptest::option::of(id),
            proptest::option::of(0usize..3),
            0u8..3,
        )
            .prop_map(|(spec, name, tiers, id, cost, charge, rq, gate, spend)| {
                let mut limit = Limit::new(name, SPECS[spec].parse::<Policy>().unwrap());
                if tiers {
                    // A tier keeps its limit's algorithm.
                    let pro = SPECS[spec].parse::<Policy>().unwrap();
                    limit = limit.with_tiers(vec![("pro", pro)]).unwrap();
                }
                // A concurrency limit holds no capacity lease: the plan refuses such items.
                let concurrency = limit.policy.algorithm() == Algorithm::Concurrency;
                let charge = match charge {
                    Charge::LeaseCredit { .. } if concurrency => Charge::Request,
                    charge => charge,
                };
                let mut item = CheckItem::new(&limit, id, cost).charged(charge);
                if !concurrency {
                    item = match spend {
                        1 => item.spending_lease(),
                        2 => item.spending_lease_only(),
                        _ => item,
                    };
                }
                if let Some(rq) = rq {
                    item = item.with_request_id(rq);
                }
                match gate {
                    Some(gate) => item.gated(gate),
                    None => item,
                }
            });
        let list = prop_oneof![Just("deny"), Just("deny:r"), Just("allow"), Just("x\"y")];
        let names = proptest::collection::vec(list.prop_map(String::from), 0..3);
        let gates = proptest::collection::vec((names.clone(), names), 0..3);
        let probe = proptest::collection::vec(
            prop_oneof![
                Just(("ip", "198.51.100.7")),
                Just(("ip", "2001:db8::1")),
                Just(("country", "cn")),
                Just(("header:x-user", "a \"b\" \\ é")),
            ],
            0..3,
        );
        (proptest::collection::vec(item, 0..5), gates, probe).prop_map(|(items, gates, probe)| {
            let check = items.into_iter().fold(Check::new(), Check::with_item);
            let gates: Vec<Gate> = gates
                .into_iter()
                .map(|(deny, allow)| Gate::new(deny, allow))
                .collect();
            if gates.is_empty() {
                return check;
            }
            let probe = probe
                .into_iter()
                .fold(ListProbe::new(), |p, (source, value)| p.with(source, value));
            check.gated(probe, gates)
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

        /// Whatever the check: on one node its items run as one call, all or nothing; on a
        /// Cluster no call is sent keys of two slots (a script may touch one slot only), and the
        /// plan is atomic exactly when it is one call. Each call's parts read back the same
        /// through `keys()`/`args()` as by index.
        #[test]
        fn plans_keep_each_call_on_one_slot(
            check in any_check(),
            at in 0..MAX_SCRIPT_TIME_MS,
            control: bool,
        ) {
            for topology in [Topology::SingleNode, Topology::Cluster] {
                let planned = CheckPlan::plan(&check, "ns", TimeSource::At(at), topology, control);
                // A Cluster reads a gated check's lists first (their keys have a slot of their
                // own), so the store never plans such a check whole there.
                let gated_on_cluster = topology == Topology::Cluster && !check.gates().is_empty();
                let plan = match planned {
                    Err(StoreError::InvalidInput(_)) if gated_on_cluster => continue,
                    planned => planned.expect("a time Lua can hold"),
                };
                for call in plan.invocations() {
                    let slots: std::collections::BTreeSet<u16> =
                        call.keys().iter().map(hash_slot).collect();
                    if topology == Topology::Cluster {
                        proptest::prop_assert!(slots.len() <= 1, "{slots:?}");
                    }
                    let keys: Vec<&str> = call.keys().iter().collect();
                    for (i, key) in keys.iter().enumerate() {
                        proptest::prop_assert_eq!(&call.keys()[i], *key);
                    }
                }
                if topology == Topology::SingleNode && !check.items().is_empty() {
                    proptest::prop_assert_eq!(plan.invocations().len(), 1);
                    proptest::prop_assert!(plan.is_atomic());
                }
                if topology == Topology::Cluster {
                    proptest::prop_assert_eq!(plan.is_atomic(), plan.invocations().len() <= 1);
                }
            }
        }
    }

    #[test]
    fn replies_are_read_back_and_checked() {
        let check = Check::single(limit("a", "fixed 10/1s"), "x", 100);
        let plan = CheckPlan::new(&check, "ns", TimeSource::At(5), Topology::SingleNode).unwrap();
        let ints = |v: &[i64]| Reply::Array(v.iter().map(|&i| Reply::Int(i)).collect());
        let verdict = plan
            .verdict(&[ints(&[0, 5, 0, 10, 10, 1000, -1, 2])])
            .unwrap();
        assert!(!verdict.allowed);
        assert_eq!(verdict.decided_at_ms, 5);
        assert!(verdict.decisions[0].is_permanent_denial());
        for bad in [
            ints(&[0, 5, 0, 10, 10, 1000, -1]),
            ints(&[2, 5, 0, 10, 10, 1000, -1, 2]),
            ints(&[0, 5, 0, 10, -3, 1000, 0, 1]),
            ints(&[0, 5, 0, 10, 10, 1000, 0, 9]),
            ints(&[0, -5, 0, 10, 10, 1000, -1, 2]),
            Reply::Nil,
        ] {
            assert!(matches!(plan.verdict(&[bad]), Err(StoreError::Protocol(_))));
        }
        assert!(matches!(
            plan.verdict(&[Reply::Error("ERR boom".into())]),
            Err(StoreError::Script(_))
        ));
        assert!(plan.verdict(&[]).is_err());
    }
}
