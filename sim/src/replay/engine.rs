//! The replay engine: every event through every policy's state and through the exact reference
//! logs, tallying as it goes. Memory is O(clients), never O(events), so traces larger than memory
//! stream through.
//!
//! **Layout.** Everything kept per client — each policy's and each reference's `State`, each
//! policy's trailing-window tally — sits in one client-major vector: client `c`'s cells are
//! `cells[c·width .. (c+1)·width]`. One request touches one client's adjacent cache lines instead
//! of one line in each of a dozen vectors, which is what replay speed on traces with many clients
//! comes down to. The states are the library's own `State`, stepped by `State::apply` —
//! the code `MemoryStore` and the Worker run.

use std::mem::size_of;

use edgelimit::algorithm::{
    FixedWindowState, GcraState, SlidingCounterState, SlidingLogState, TokenBucketState,
};
use edgelimit::{Decision, Policy, State};

use super::metrics::{finish, ClientTally, PolicyResult, Tally};
use super::reference::reference;
use crate::error::SimError;
use crate::event::{Event, Interner};

/// One policy under replay.
#[derive(Debug)]
struct Run {
    policy: Policy,
    reference: Policy,
    /// The reference's slot among a client's states, or `None` when the policy *is* its own
    /// reference (the sliding log), whose decisions are then the ground truth itself.
    reference_slot: Option<usize>,
    tally: Tally,
}

/// Replays events through a set of policies; see [`PolicyResult`] for what is measured.
#[derive(Debug)]
pub struct Replay {
    runs: Vec<Run>,
    /// All policies, then the distinct references: the slots of a client's states.
    slots: Vec<Policy>,
    /// `clients × slots.len()` cells, client-major.
    cells: Vec<Cell>,
    requests: Vec<u32>,
    /// Scratch: this event's decision in every slot.
    decided: Vec<Decision>,
    events: u64,
    mismatches: u64,
}

impl Replay {
    /// A replay of `policies` (at least one).
    pub fn new(policies: &[Policy]) -> Result<Replay, SimError> {
        if policies.is_empty() {
            return Err(SimError::Usage("no policy to replay".into()));
        }
        let mut slots: Vec<Policy> = policies.to_vec();
        let mut runs = Vec::new();
        for policy in policies {
            let reference = reference(policy)?;
            // The ground truth reuses an identical slot when there is one — a listed
            // `sliding-log` policy is its own twin's reference — so no log is stepped twice.
            let reference_slot = if reference == *policy {
                None
            } else {
                Some(match slots.iter().position(|p| *p == reference) {
                    Some(k) => k,
                    None => {
                        slots.push(reference);
                        slots.len() - 1
                    }
                })
            };
            runs.push(Run {
                policy: *policy,
                reference,
                reference_slot,
                tally: Tally::new(),
            });
        }
        Ok(Replay {
            decided: Vec::with_capacity(slots.len()),
            runs,
            slots,
            cells: Vec::new(),
            requests: Vec::new(),
            events: 0,
            mismatches: 0,
        })
    }

    /// The policies, in order.
    pub fn policies(&self) -> Vec<Policy> {
        self.runs.iter().map(|r| r.policy).collect()
    }

    #[inline]
    fn admit_client(&mut self, client: u32) {
        let i = client as usize;
        if i >= self.requests.len() {
            // Grow geometrically so a trace with many clients does not resize on every new one.
            let len = (i + 1).max(self.requests.len() * 2).max(1024);
            self.requests.resize(len, 0);
            let fresh: Vec<State> = self
                .slots
                .iter()
                .map(|p| State::fresh(p.algorithm()))
                .collect();
            while self.cells.len() < len * self.slots.len() {
                self.cells.extend(fresh.iter().map(|state| Cell {
                    state: state.clone(),
                    tally: ClientTally::default(),
                }));
            }
        }
        self.requests[i] += 1;
        self.events += 1;
    }

    /// Steps every slot of the event's client, leaving the decisions in `decided`.
    #[inline]
    fn step_slots(&mut self, ev: Event) {
        let width = self.slots.len();
        let cells = &mut self.cells[ev.client as usize * width..][..width];
        self.decided.clear();
        for (cell, policy) in cells.iter_mut().zip(&self.slots) {
            self.decided
                .push(cell.state.apply(policy, ev.time_ms, ev.cost).decision);
        }
    }

    /// Replays one event through every policy with the library's steps (events must come in
    /// time order; see `readers::Reorder`).
    #[inline]
    pub fn step(&mut self, ev: Event) {
        self.admit_client(ev.client);
        self.step_slots(ev);
        self.record_all(ev, None);
    }

    /// Replays a run of events in order, as [`Replay::step`] does one by one — but first reads a
    /// little of the state of the client a few events ahead. Those loads do not depend on the
    /// current step, so the CPU overlaps their cache misses with it; on traces with many clients,
    /// where each step waits on memory, this is most of the speed.
    pub fn step_all(&mut self, events: &[Event]) {
        const AHEAD: usize = 6;
        let width = self.slots.len();
        for (i, &ev) in events.iter().enumerate() {
            if let Some(next) = events.get(i + AHEAD) {
                let c = next.client as usize;
                if c < self.requests.len() {
                    for cell in &self.cells[c * width..][..width] {
                        // A sliding log's oldest entry lives on the heap: the step reads it first.
                        if let State::SlidingLog(log) = &cell.state {
                            std::hint::black_box(log.entries().next());
                        }
                        std::hint::black_box(cell.tally.trailing.peek_oldest());
                    }
                }
            }
            self.step(ev);
        }
    }

    /// Records one event whose decisions came from elsewhere (a real store), one per policy in
    /// order. The library's steps still run alongside (they are the ground truth, and any
    /// decision that differs from them is counted in [`Replay::mismatches`], which is how a store
    /// is shown to agree with the steps).
    pub fn step_decided(&mut self, ev: Event, decisions: &[Decision]) {
        self.admit_client(ev.client);
        self.step_slots(ev);
        for (local, external) in self.decided.iter().zip(decisions) {
            if local.allowed != external.allowed || local.remaining != external.remaining {
                self.mismatches += 1;
            }
        }
        self.record_all(ev, Some(decisions));
    }

    #[inline]
    fn record_all(&mut self, ev: Event, external: Option<&[Decision]>) {
        let width = self.slots.len();
        let p = self.runs.len();
        let c = ev.client as usize;
        let cells = &mut self.cells[c * width..][..p];
        for (k, (run, cell)) in self.runs.iter_mut().zip(cells).enumerate() {
            let decision = external.map_or(&self.decided[k], |d| &d[k]);
            let reference_allowed = match run.reference_slot {
                Some(r) => self.decided[r].allowed,
                None => decision.allowed,
            };
            let entries = log_entries(&cell.state);
            record(
                run,
                &mut cell.tally,
                reference_allowed,
                ev,
                decision,
                entries,
            );
        }
    }

    /// Events replayed.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Decisions of an external store that differed from the library's steps.
    pub fn mismatches(&self) -> u64 {
        self.mismatches
    }

    /// The results, one per policy in order.
    pub fn finish(&self, interner: &Interner) -> Vec<PolicyResult> {
        let width = self.slots.len();
        let clients = self.requests.len();
        self.runs
            .iter()
            .enumerate()
            .map(|(k, run)| {
                let mut keys = 0;
                let mut bytes = 0;
                for c in 0..clients {
                    let state = &self.cells[c * width + k].state;
                    if *state != State::fresh(run.policy.algorithm()) {
                        keys += 1;
                        bytes += state_bytes(state, log_entries(state));
                    }
                }
                let per_client = (0..clients).map(|c| {
                    let t = &self.cells[c * width + k].tally;
                    [t.false_allows, t.false_denies]
                });
                let fresh = State::fresh(run.policy.algorithm());
                finish(
                    &run.policy,
                    &run.reference,
                    &run.tally,
                    per_client,
                    &self.requests,
                    interner,
                    (keys, bytes),
                    state_bytes(&fresh, run.tally.max_log_entries),
                )
            })
            .collect()
    }
}

/// One client's state in one slot, with the slot's tally (unused for reference-only slots): kept
/// together so a request reads one run of memory.
#[derive(Debug, Clone)]
struct Cell {
    state: State,
    tally: ClientTally,
}

/// Entries in a sliding log's state (0 for the other algorithms).
#[inline]
fn log_entries(state: &State) -> usize {
    match state {
        State::SlidingLog(s) => s.entries().len(),
        _ => 0,
    }
}

/// The bytes one key's state takes in memory (the algorithm's own struct, not the enum around
/// it), with `entries` log entries.
fn state_bytes(state: &State, entries: usize) -> usize {
    match state {
        State::FixedWindow(_) => size_of::<FixedWindowState>(),
        State::SlidingLog(_) => size_of::<SlidingLogState>() + entries * size_of::<(u64, u64)>(),
        State::SlidingCounter(_) => size_of::<SlidingCounterState>(),
        State::TokenBucket(_) => size_of::<TokenBucketState>(),
        State::Gcra(_) => size_of::<GcraState>(),
    }
}

#[inline]
fn record(
    run: &mut Run,
    mine: &mut ClientTally,
    reference_allowed: bool,
    ev: Event,
    decision: &Decision,
    log_entries: usize,
) {
    let allowed = decision.allowed;
    // The quota the policy saw as used before this request.
    let taken = if allowed { ev.cost.max(0) as u64 } else { 0 };
    let used_before = decision
        .limit
        .saturating_sub(decision.remaining)
        .saturating_sub(taken);
    run.tally.max_log_entries = run.tally.max_log_entries.max(log_entries);
    run.tally.record(
        mine,
        ev.client,
        ev.time_ms,
        ev.cost,
        allowed,
        used_before,
        reference_allowed,
        run.reference.window_ms(),
    );
}
