//! What a store is asked: checks made of (limit, identifier, cost) items, and what it answers.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use super::error::StoreError;
use crate::algorithm::{Charge, LeaseSpending};
use crate::control::list::{Gate, ListProbe, Listed};
use crate::control::{Assignment, Tiers};
use crate::decision::Decision;
use crate::policy::{Algorithm, Policy, MAX_WINDOW_MS};

/// Who an identifier is: bytes, since a header or a path segment need not be UTF-8. Stores encode
/// it (see [`super::key`]) so that no identifier can forge another's key.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identifier(Arc<[u8]>);

impl Identifier {
    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Identifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Identifier({:?})", String::from_utf8_lossy(&self.0))
    }
}

impl From<&str> for Identifier {
    fn from(s: &str) -> Self {
        Identifier(Arc::from(s.as_bytes()))
    }
}

impl From<String> for Identifier {
    fn from(s: String) -> Self {
        Identifier(Arc::from(s.into_bytes()))
    }
}

impl From<&[u8]> for Identifier {
    fn from(b: &[u8]) -> Self {
        Identifier(Arc::from(b))
    }
}

impl From<Vec<u8>> for Identifier {
    fn from(b: Vec<u8>) -> Self {
        Identifier(Arc::from(b))
    }
}

/// What to do with a limit when its store cannot answer (down, timed out, misconfigured).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FailMode {
    /// Admit the request (availability first). The default, as in most API gateways.
    #[default]
    Open,
    /// Deny the request (protection first).
    Closed,
    /// Decide with an in-process limiter at `per_mille`/1000 of the policy's limit and burst
    /// (at least 1), until the store answers again.
    Fallback {
        /// The share of the limit each process may admit on its own, in thousandths.
        per_mille: u16,
    },
}

impl FromStr for FailMode {
    type Err = String;

    /// Parses `open`, `closed` or `fallback N%` (0 < N ≤ 100, to a tenth of a percent).
    fn from_str(text: &str) -> Result<FailMode, String> {
        let text = text.trim();
        match text {
            "open" => return Ok(FailMode::Open),
            "closed" => return Ok(FailMode::Closed),
            _ => {}
        }
        let share = text
            .strip_prefix("fallback")
            .map(str::trim)
            .and_then(|s| s.strip_suffix('%'))
            .and_then(|s| s.trim().parse::<f64>().ok());
        match share {
            Some(percent) if percent > 0.0 && percent <= 100.0 => Ok(FailMode::Fallback {
                per_mille: ((percent * 10.0).round() as u16).max(1),
            }),
            _ => Err(format!(
                "`{text}` is not one of `open`, `closed`, `fallback N%` (0 < N ≤ 100)"
            )),
        }
    }
}

impl fmt::Display for FailMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailMode::Open => f.write_str("open"),
            FailMode::Closed => f.write_str("closed"),
            FailMode::Fallback { per_mille } if per_mille % 10 == 0 => {
                write!(f, "fallback {}%", per_mille / 10)
            }
            FailMode::Fallback { per_mille } => {
                write!(f, "fallback {}.{}%", per_mille / 10, per_mille % 10)
            }
        }
    }
}

/// A named policy with its failure mode: what a rule applies. The name identifies the limit's
/// state (two limits with one name share state) and appears in response headers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Limit {
    /// The name, e.g. `per-ip` or `api-daily`.
    pub name: Arc<str>,
    /// The policy.
    pub policy: Policy,
    /// What to do when the store cannot answer: down, slow, or over its quota (the outage
    /// classes of [`super::FailureClass`]).
    pub fail_mode: FailMode,
    /// What to do when the store refuses the limiter — credentials, permissions, a script or
    /// an answer we cannot read ([`super::FailureClass::is_misconfiguration`]): a deployment
    /// that is broken rather than down. [`FailMode::Closed`] unless set
    /// ([`Limit::with_fail_misconfigured`]; docs/design.md §3, "Store failures").
    pub fail_misconfigured: FailMode,
    /// Named alternative policies of the same algorithm an identifier may be assigned
    /// (docs/design.md §2, "Policy changes"); `policy` is the default. Empty unless built by
    /// [`Limit::with_tiers`].
    pub tiers: Tiers,
    /// How long (ms) an identifier the limit's own step denies stays refused on it: the block
    /// starts at that denial, requests refused during it charge nothing and do not extend it,
    /// and their decisions are [`crate::Reason::Blocked`] with `retry_after_ms` counting to its end.
    /// Kept beside the limit's state in every store (docs/design.md §2, "Blocks"). 0: no block.
    pub block_ms: u64,
    /// The longest wait (ms) a request the limit denies may take instead of the denial, for a
    /// GCRA limit only (stores refuse it on any other): when the plain rule would admit it
    /// `w ≤ max_delay_ms` from now, its place is reserved at that moment (the theoretical
    /// arrival time moves on) and it is admitted as [`crate::Reason::Delayed`] with
    /// `retry_after_ms = w`, the host forwarding it after the wait (docs/design.md §2,
    /// "Delays"). 0: deny at once.
    pub max_delay_ms: u64,
}

impl Limit {
    /// A limit that fails open when its store is down, and closed when the store refuses it.
    pub fn new(name: impl Into<Arc<str>>, policy: Policy) -> Limit {
        Limit {
            name: name.into(),
            policy,
            fail_mode: FailMode::Open,
            fail_misconfigured: FailMode::Closed,
            tiers: Tiers::default(),
            block_ms: 0,
            max_delay_ms: 0,
        }
    }

    /// The same limit blocking an identifier it denies for `block_ms` (see [`Limit::block_ms`]).
    pub fn with_block_for(mut self, block_ms: u64) -> Limit {
        self.block_ms = block_ms;
        self
    }

    /// The longest wait its GCRA step may delay a request by: `max_delay_ms` for a GCRA limit,
    /// 0 for any other (no store decides those: see [`Limit::max_delay_ms`]).
    pub fn delay_ms(&self) -> u64 {
        if self.policy.algorithm() == Algorithm::Gcra {
            self.max_delay_ms
        } else {
            0
        }
    }

    /// The same limit delaying, up to `max_delay_ms`, a request it would deny (see
    /// [`Limit::max_delay_ms`]).
    pub fn with_max_delay(mut self, max_delay_ms: u64) -> Limit {
        self.max_delay_ms = max_delay_ms;
        self
    }

    /// The same limit with named tiers (replacing any it had). Every tier's policy must have the
    /// limit's algorithm, and names are 1–64 of `A-Za-z0-9-_.`, each once; the error names the
    /// offending tier.
    pub fn with_tiers<N: Into<Arc<str>>>(
        mut self,
        tiers: impl IntoIterator<Item = (N, Policy)>,
    ) -> Result<Limit, String> {
        self.tiers = Tiers::new(self.policy.algorithm(), tiers)
            .map_err(|e| format!("limit `{}`: {e}", self.name))?;
        Ok(self)
    }

    /// The policy deciding for an identifier holding `assigned` (its assignments, each with when
    /// it lapses) at `now_ms`; see [`crate::control::effective_policy`].
    pub fn effective_policy<'a>(
        &'a self,
        assigned: &'a [(Assignment, Option<u64>)],
        now_ms: u64,
    ) -> &'a Policy {
        crate::control::effective_policy(self, assigned, now_ms)
    }

    /// The policy that decided `decision`, as far as the decision tells (its `limit` is the
    /// deciding policy's capacity), to advertise to the client and to fall back on: the limit's
    /// own policy, else its first tier of that capacity, else (an override) the limit's policy
    /// with that capacity — its window for the windows, its rate for the buckets.
    pub fn advertised_policy(&self, decision: &Decision) -> Policy {
        if let Some(policy) = self.configured_policy(decision) {
            return *policy;
        }
        let own = self.policy;
        let algorithm = own.algorithm();
        let rescaled = if algorithm.takes_burst() {
            Policy::new(
                algorithm,
                own.limit(),
                own.window_ms(),
                Some(decision.limit),
            )
        } else {
            own.with_limit(decision.limit, None)
        };
        rescaled.unwrap_or(own)
    }

    /// Whether `decision` was made with the limit's own policy, as far as it tells: at its
    /// capacity, or reporting none (a tier or an override of the same capacity is the same
    /// limit to a client).
    pub fn decided_with_own_policy(&self, decision: &Decision) -> bool {
        decision.limit == self.policy.capacity() || decision.limit == 0
    }

    /// The configured policy [`Limit::advertised_policy`] answers for `decision`, borrowed: the
    /// limit's own, else its first tier of the decision's capacity; `None` for an override's
    /// capacity.
    pub fn configured_policy(&self, decision: &Decision) -> Option<&Policy> {
        if self.decided_with_own_policy(decision) {
            return Some(&self.policy);
        }
        self.tiers
            .iter()
            .find(|(_, p)| p.capacity() == decision.limit)
            .map(|(_, tier)| tier)
    }

    /// The same limit with another failure mode for a store that cannot answer.
    pub fn with_fail_mode(mut self, fail_mode: FailMode) -> Limit {
        self.fail_mode = fail_mode;
        self
    }

    /// The same limit with another failure mode for a store that refuses it (see
    /// [`Limit::fail_misconfigured`]).
    pub fn with_fail_misconfigured(mut self, fail_misconfigured: FailMode) -> Limit {
        self.fail_misconfigured = fail_misconfigured;
        self
    }

    /// The failure mode for a store failure of `class`.
    pub fn fail_mode_for(&self, class: super::FailureClass) -> FailMode {
        if class.is_misconfiguration() {
            self.fail_misconfigured
        } else {
            self.fail_mode
        }
    }
}

/// A limit shared rather than copied: a configuration holds each of its limits once, and every
/// check item built from it points there (a request's items are built and dropped per request,
/// so copying a whole limit into each was most of their cost).
impl From<&Limit> for Arc<Limit> {
    fn from(limit: &Limit) -> Arc<Limit> {
        Arc::new(limit.clone())
    }
}

/// One limit applied to one identifier at one cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckItem {
    /// Which limit: the configuration's own, shared (see `From<&Limit> for Arc<Limit>`).
    pub limit: Arc<Limit>,
    /// Whose quota.
    pub identifier: Identifier,
    /// How much to take (negative: refund, zero: peek).
    pub cost: i64,
    /// How the cost applies: a request (the default), a settlement after the response, or the
    /// release of concurrency leases.
    pub charge: Charge,
    /// A request id making the item idempotent: once a check carrying it is admitted, a repeat
    /// with the same id within the limit's window (its timeout for `concurrency`) answers the
    /// first decision and charges nothing (docs/design.md §3).
    pub request_id: Option<Identifier>,
    /// The gate (an index into [`Check::gates`]) whose lists apply to this item: an allow match
    /// there lets it through uncharged. `None` (or an index past the gates): only a deny match
    /// of any gate concerns it. See docs/design.md §"Deny and allow lists".
    pub gate: Option<usize>,
    /// How the item uses its capacity lease (a global limit's item in a region: docs/design.md
    /// §9): never, when its policy (the region's static share) denies a request, or alone. Only
    /// a [`Charge::Request`] of positive cost ever spends; see [`CheckItem::spending_lease`] and
    /// [`CheckItem::spending_lease_only`].
    pub spend_lease: LeaseSpending,
}

impl CheckItem {
    /// A plain request: `cost` charged as [`Charge::Request`], with no request id. `limit` is
    /// an `Arc<Limit>` to share (a pointer copied), or a `&Limit` to copy once into one.
    pub fn new(
        limit: impl Into<Arc<Limit>>,
        identifier: impl Into<Identifier>,
        cost: i64,
    ) -> CheckItem {
        CheckItem {
            limit: limit.into(),
            identifier: identifier.into(),
            cost,
            charge: Charge::Request,
            request_id: None,
            gate: None,
            spend_lease: LeaseSpending::Never,
        }
    }

    /// The same item behind gate `gate` (an index into the check's gates, see [`Check::gated`]).
    pub fn gated(mut self, gate: usize) -> CheckItem {
        self.gate = Some(gate);
        self
    }

    /// The same item charged as `charge`.
    pub fn charged(mut self, charge: Charge) -> CheckItem {
        self.charge = charge;
        self
    }

    /// The same item spending its capacity lease (docs/design.md §9): decided by its policy's
    /// step as any item, and when that denies a request of positive cost, admitted iff its lease
    /// (`{el:<ns>:<limit>:<id>}:lease`, beside its state) is live and holds the cost — then the
    /// state is left as it was, the cost is taken from the lease, and the decision is
    /// [`crate::Reason::Leased`] with the lease's balance as `remaining`. A look, a refund, a
    /// settlement and a release never spend; a check another item denies spends nothing.
    /// Leases are credited with [`Charge::LeaseCredit`]. A rate algorithm only: every store
    /// refuses a concurrency item marked so ([`StoreError::InvalidInput`]).
    ///
    /// [`StoreError::InvalidInput`]: super::StoreError::InvalidInput
    pub fn spending_lease(mut self) -> CheckItem {
        self.spend_lease = LeaseSpending::AfterPolicy;
        self
    }

    /// The same item decided by its capacity lease alone ([`LeaseSpending::Only`]): a request of
    /// positive cost is admitted iff the lease is live and holds the cost, and is otherwise
    /// denied as over the limit; the item's state is neither read nor written, and any other
    /// charge only looks at the lease. What a region whose static share of a global limit
    /// rounds down to nothing decides with. A rate algorithm only, as for
    /// [`CheckItem::spending_lease`].
    pub fn spending_lease_only(mut self) -> CheckItem {
        self.spend_lease = LeaseSpending::Only;
        self
    }

    /// Whether the item reads or writes its capacity lease: a credit, a request spending after
    /// its policy, any item deciding by its lease alone.
    pub(crate) fn uses_lease(&self) -> bool {
        crate::algorithm::capacity_lease::uses_lease(self.charge, self.spend_lease)
    }

    /// Whether the item is refused while its identifier is blocked on its limit, and starts a
    /// block when its limit's own step denies it (docs/design.md §2, "Blocks"): a request
    /// ([`Charge::Request`]) of positive cost on a limit with a block duration. Looks, refunds,
    /// settlements, releases and lease credits are never blocked and never block.
    pub fn applies_block(&self) -> bool {
        self.limit.block_ms > 0 && self.charge == Charge::Request && self.cost > 0
    }

    /// The longest wait (ms) its step may delay the item by: the limit's `max_delay_ms` for a
    /// GCRA limit (docs/design.md §2, "Delays"), else 0. Every charge of such a limit is
    /// stepped with it, so that none forgives the queue.
    pub fn max_delay_ms(&self) -> u64 {
        self.limit.delay_ms()
    }

    /// The same item carrying `request_id`.
    pub fn with_request_id(mut self, request_id: impl Into<Identifier>) -> CheckItem {
        self.request_id = Some(request_id.into());
        self
    }

    /// How long a decision for this item is remembered under its request id: the limit's
    /// window (the lease timeout for `concurrency`), long enough for any retry of a lost answer.
    pub fn remember_ms(&self) -> u64 {
        self.limit.policy.window_ms()
    }
}

/// One request checked against one or several limits, all or nothing: when any item denies,
/// no item consumes quota.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Check {
    items: Vec<CheckItem>,
    // Deny and allow lists, decided in the same round trip (docs/design.md §"Deny and allow
    // lists"); `None` for an ungated check. Boxed: most checks have none, and a small check is
    // cheaper to build, move and drop on every request.
    gating: Option<Box<Gating>>,
}

/// A gated check's lists and what the request offers them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Gating {
    gates: Vec<Gate>,
    probe: ListProbe,
}

/// The probe of an ungated check: it offers nothing.
static NO_PROBE: ListProbe = ListProbe::new();

impl Check {
    /// An empty check (admitted by every store).
    pub fn new() -> Check {
        Check::default()
    }

    /// Empties the check (its items and lists) but keeps the room its items took, so filling
    /// it again allocates nothing (see `Plan::take_checks` in the engine).
    pub fn clear(&mut self) {
        self.items.clear();
        if self.gating.is_some() {
            self.gating = None;
        }
    }

    /// Makes room for `additional` more items.
    pub fn reserve(&mut self, additional: usize) {
        self.items.reserve(additional);
    }

    /// A check of a single limit.
    pub fn single(
        limit: impl Into<Arc<Limit>>,
        identifier: impl Into<Identifier>,
        cost: i64,
    ) -> Check {
        Check::new().with(limit, identifier, cost)
    }

    /// Adds an item. The same limit name with the same identifier is merged into one item whose
    /// cost is the sum, so one request never races itself.
    pub fn with(
        self,
        limit: impl Into<Arc<Limit>>,
        identifier: impl Into<Identifier>,
        cost: i64,
    ) -> Check {
        self.with_item(CheckItem::new(limit, identifier, cost))
    }

    /// Adds an item with its charge and request id. An item for a (limit name, identifier)
    /// already in the check is merged into it (costs summed; the first item's charge, request
    /// id and lease spending kept): one script must never decide one key twice.
    pub fn with_item(mut self, new: CheckItem) -> Check {
        self.add_item(new);
        self
    }

    /// Adds an item in place, merged as [`Check::with_item`] merges it: for a check built item
    /// by item, with no move of the check per item.
    pub fn add_item(&mut self, new: CheckItem) {
        match self
            .items
            .iter_mut()
            .find(|i| i.limit.name == new.limit.name && i.identifier == new.identifier)
        {
            Some(item) => item.cost = item.cost.saturating_add(new.cost),
            None => self.items.push(new),
        }
    }

    /// The same check with every item carrying `request_id` (see [`CheckItem::request_id`]):
    /// a retry of a check whose answer was lost charges nothing twice.
    pub fn with_request_id(mut self, request_id: impl Into<Identifier>) -> Check {
        let request_id = request_id.into();
        for item in &mut self.items {
            item.request_id = Some(request_id.clone());
        }
        self
    }

    /// Whether a repeat of this check is harmless: every item is remembered under a request id,
    /// or cannot charge (a look). A store may then retry it when an answer is lost.
    pub fn is_idempotent(&self) -> bool {
        self.items
            .iter()
            .all(|i| i.request_id.is_some() || (i.cost == 0 && i.charge == Charge::Request))
    }

    /// The items, in the order they were added.
    pub fn items(&self) -> &[CheckItem] {
        &self.items
    }

    /// Changes each item in place, keeping the check's gates and order: how a global store
    /// turns a check into what a region decides (docs/design.md §9).
    pub(crate) fn map_items(&mut self, change: impl FnMut(&mut CheckItem)) {
        self.items.iter_mut().for_each(change);
    }

    /// Replaces each item's policy by `policy(item)`: how a store applies the effective policies
    /// of its identifiers' assignments (docs/design.md §2, "Policy changes").
    pub(crate) fn map_policies(&mut self, mut policy: impl FnMut(&CheckItem) -> Policy) {
        for item in &mut self.items {
            let effective = policy(item);
            // Most identifiers hold no assignment: their limit stays shared, uncopied.
            if effective != item.limit.policy {
                Arc::make_mut(&mut item.limit).policy = effective;
            }
        }
    }

    /// The same check behind deny and allow lists: `probe` is what the request offers the lists,
    /// `gates` the lists consulted (items name theirs by [`CheckItem::gate`]). A deny match in any
    /// gate refuses the whole check, nothing charged (every decision [`crate::Reason::Denylisted`]);
    /// else an item whose gate has an allow match is not charged ([`crate::Reason::Allowlisted`])
    /// while the others are decided as usual. Deny beats allow.
    pub fn gated(mut self, probe: ListProbe, gates: Vec<Gate>) -> Check {
        let gating = Gating { gates, probe };
        // Nothing to consult and nothing offered is no gating: equal to the ungated check.
        self.gating = (gating != Gating::default()).then(|| Box::new(gating));
        self
    }

    /// The gates, in order (empty for an ungated check).
    pub fn gates(&self) -> &[Gate] {
        self.gating.as_ref().map_or(&[], |g| &g.gates)
    }

    /// What the request offers the lists.
    pub fn probe(&self) -> &ListProbe {
        self.gating.as_ref().map_or(&NO_PROBE, |g| &g.probe)
    }

    /// Whether any list is consulted.
    pub fn is_gated(&self) -> bool {
        !self.gates().is_empty()
    }

    /// Refuses a check no store decides: an item on a concurrency limit marked to spend a
    /// capacity lease or charged a lease credit — a concurrency limit's leases are returned, not
    /// spent, so it holds no capacity lease (docs/design.md §9). Every store answers such a
    /// check with this error, the Redis stores before sending anything.
    ///
    /// It also refuses what no store decides or cannot keep exact: a limit delaying requests
    /// (`max_delay_ms > 0`, docs/design.md §2, "Delays") of another algorithm than GCRA — a
    /// window's future quota has no state to reserve a place in — or longer than 366 days, and
    /// a block longer than a policy's longest window ([`MAX_WINDOW_MS`], 366 days).
    pub(crate) fn refuse_bad_items(&self) -> Result<(), StoreError> {
        let delaying = |i: &&CheckItem| i.limit.max_delay_ms > 0;
        if let Some(item) = self.items.iter().filter(delaying).find(|i| {
            i.limit.policy.algorithm() != Algorithm::Gcra || i.limit.max_delay_ms > MAX_WINDOW_MS
        }) {
            return Err(StoreError::InvalidInput(format!(
                "limit `{}` delays requests (max_delay_ms {}): only a gcra limit delays, for \
                 at most 366 days (docs/design.md §2, \"Delays\")",
                item.limit.name, item.limit.max_delay_ms
            )));
        }
        if let Some(item) = self.items.iter().find(|i| i.limit.block_ms > MAX_WINDOW_MS) {
            return Err(StoreError::InvalidInput(format!(
                "limit `{}` blocks for {} ms, longer than the longest allowed, 366 days",
                item.limit.name, item.limit.block_ms
            )));
        }
        let bad = self.items.iter().find(|item| {
            item.limit.policy.algorithm() == Algorithm::Concurrency && item.uses_lease()
        });
        match bad {
            Some(item) => Err(StoreError::InvalidInput(format!(
                "limit `{}` is a concurrency limit: it holds no capacity lease to spend or \
                 credit (docs/design.md §9)",
                item.limit.name
            ))),
            None => Ok(()),
        }
    }

    /// Keeps the items whose index `keep` accepts.
    pub(crate) fn retain_items(&mut self, mut keep: impl FnMut(usize) -> bool) {
        let mut i = 0;
        self.items.retain(|_| {
            i += 1;
            keep(i - 1)
        });
    }

    /// The same items without gates or probe (what is decided once the lists have answered).
    pub(crate) fn ungated(&self) -> Check {
        Check {
            items: self.items.clone(),
            gating: None,
        }
    }
}

/// Where "now" comes from for a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeSource {
    /// The caller's clock: this epoch-ms instant (the default; also how `sim` replays).
    At(u64),
    /// The store's clock (Redis `TIME` inside the script), for fleets whose clocks disagree.
    Server,
}

impl TimeSource {
    /// The caller's instant, if the caller gave one.
    pub const fn at_ms(self) -> Option<u64> {
        match self {
            TimeSource::At(ms) => Some(ms),
            TimeSource::Server => None,
        }
    }
}

/// A store's answer to one [`Check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the request is admitted by every limit.
    pub allowed: bool,
    /// One decision per item, in order. When the check is denied, the items that would have
    /// admitted it alone report their standing quota (a zero-cost look), since nothing was taken.
    pub decisions: Vec<Decision>,
    /// Whether all-or-nothing held. `false` only when the items' keys live on different nodes
    /// and were decided by separate round trips (a denial there may follow another's admission).
    pub atomic: bool,
    /// The time (epoch ms) the decisions were made at, on the clock that made them: the caller's
    /// for [`TimeSource::At`], the store's (Redis `TIME`) for [`TimeSource::Server`]. Reset and
    /// retry times are relative to it.
    pub decided_at_ms: u64,
    /// What each gate of the check found, in the check's gate order (empty for an ungated
    /// check).
    pub listed: Vec<Listed>,
}

impl Verdict {
    /// A verdict of nothing yet (admitted, no decisions), to be filled by [`Verdict::reuse`].
    pub fn empty() -> Verdict {
        Verdict {
            allowed: true,
            decisions: Vec::new(),
            atomic: true,
            decided_at_ms: 0,
            listed: Vec::new(),
        }
    }

    /// The verdict for place `at` of a buffer being refilled (see [`Store::check_into`]): the one
    /// there, emptied but keeping its allocations, or a new one pushed when the buffer is
    /// shorter. Fill the places in order from 0, then truncate the buffer to the count filled.
    ///
    /// [`Store::check_into`]: super::Store::check_into
    pub fn reuse(verdicts: &mut Vec<Verdict>, at: usize) -> &mut Verdict {
        if at < verdicts.len() {
            let verdict = &mut verdicts[at];
            verdict.decisions.clear();
            verdict.listed.clear();
            verdict
        } else {
            verdicts.push(Verdict::empty());
            verdicts.last_mut().expect("just pushed")
        }
    }

    /// The deny match that refused the check, if any: (list, entry).
    pub fn denied_by(&self) -> Option<(&str, &str)> {
        self.listed.iter().find_map(|l| match l {
            Listed::Denied { list, entry } => Some((list.as_str(), entry.as_str())),
            _ => None,
        })
    }

    /// The decision that denied the check, if any: the denial with the longest wait.
    pub fn denial(&self) -> Option<&Decision> {
        self.decisions
            .iter()
            .filter(|d| !d.allowed)
            .max_by_key(|d| d.retry_after_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_override_of_a_bucket_is_advertised_at_the_limits_rate() {
        let limit = Limit::new("l", "gcra 10/1s burst 20".parse().unwrap());
        let decision = |limit| Decision {
            allowed: true,
            limit,
            remaining: 1,
            reset_at_ms: 0,
            retry_after_ms: 0,
            reason: crate::decision::Reason::Admitted,
        };
        assert_eq!(limit.advertised_policy(&decision(20)), limit.policy);
        assert_eq!(
            limit.advertised_policy(&decision(50)).to_string(),
            "gcra 10/1s burst 50"
        );
        // A tier of that capacity is advertised as configured, window and all.
        let tiered = limit
            .clone()
            .with_tiers([("pro", "gcra 60/1m burst 50".parse().unwrap())])
            .unwrap();
        assert_eq!(
            tiered.advertised_policy(&decision(50)).to_string(),
            "gcra 60/1m burst 50"
        );
        assert_eq!(tiered.configured_policy(&decision(40)), None);
        // A calendar limit's window is its calendar period.
        let monthly = Limit::new("m", "fixed 10/month anchor 5".parse().unwrap());
        assert_eq!(
            monthly.advertised_policy(&decision(50)).to_string(),
            "fixed 50/month anchor 5"
        );
    }

    #[test]
    fn an_effective_policy_never_changes_the_shared_limit() {
        let own: Policy = "fixed 10/1s".parse().unwrap();
        let tier: Policy = "fixed 99/1s".parse().unwrap();
        let shared = Arc::new(Limit::new("a", own));
        let mut check = Check::single(shared.clone(), "x", 1).with(shared.clone(), "y", 1);
        check.map_policies(|item| {
            if item.identifier == "x".into() {
                tier
            } else {
                own
            }
        });
        assert_eq!(check.items()[0].limit.policy, tier);
        // The configuration's limit, which every other request's check points at, is untouched,
        // and an item keeping the limit's own policy still points at it.
        assert_eq!(shared.policy, own);
        assert!(!Arc::ptr_eq(&check.items()[0].limit, &shared));
        assert!(Arc::ptr_eq(&check.items()[1].limit, &shared));
    }

    #[test]
    fn gating_keeps_its_lists_and_probe_and_nothing_gated_is_ungated() {
        let limit = Limit::new("a", "fixed 10/1s".parse().unwrap());
        let plain = Check::single(&limit, "x", 1);
        assert!(!plain.is_gated() && plain.gates().is_empty());
        assert!(plain.probe().candidates().is_empty());
        // Nothing to consult and nothing offered: the same check as never gated.
        assert_eq!(plain.clone().gated(ListProbe::new(), Vec::new()), plain);

        let gate = Gate::new(vec!["deny".into()], vec!["allow".into()]);
        let probe = ListProbe::new().with("ip", "203.0.113.7");
        let gated = plain.clone().gated(probe.clone(), vec![gate.clone()]);
        assert!(gated.is_gated());
        assert_eq!(gated.gates(), std::slice::from_ref(&gate));
        assert_eq!(gated.probe(), &probe);
        assert_ne!(gated, plain);
        // What the lists leave to decide: the same items, no lists.
        assert_eq!(gated.ungated(), plain);
        // A probe without gates is kept (it is what the request offers), but consults nothing.
        let offered = plain.clone().gated(probe.clone(), Vec::new());
        assert!(!offered.is_gated());
        assert_eq!(offered.probe(), &probe);
    }

    #[test]
    fn fail_modes_parse_and_print_back() {
        assert_eq!("closed".parse(), Ok(FailMode::Closed));
        assert_eq!(" open ".parse(), Ok(FailMode::Open));
        assert_eq!(
            "fallback 10%".parse(),
            Ok(FailMode::Fallback { per_mille: 100 })
        );
        assert_eq!(
            "fallback 0.5 %".parse(),
            Ok(FailMode::Fallback { per_mille: 5 })
        );
        for bad in ["fallback 0%", "fallback 150%", "sometimes", "fallback", ""] {
            assert!(bad.parse::<FailMode>().is_err(), "{bad}");
        }
        for mode in [
            "open",
            "closed",
            "fallback 10%",
            "fallback 0.5%",
            "fallback 100%",
        ] {
            assert_eq!(mode.parse::<FailMode>().unwrap().to_string(), mode);
        }
    }
}
