//! The replay engine: every event through every policy's lane and through the exact reference
//! logs, tallying as it goes. Memory is O(clients), never O(events), so traces larger than memory
//! stream through.

use edgelimit::{Decision, Policy};

use super::lane::Lane;
use super::metrics::{finish, PolicyResult, Tally};
use super::reference::reference;
use crate::error::SimError;
use crate::event::{Event, Interner};

/// One policy under replay.
#[derive(Debug)]
struct Run {
    policy: Policy,
    reference: Policy,
    /// Index into `Replay::refs`, or `None` when the policy *is* its own reference (the sliding
    /// log), whose decisions are then the ground truth itself.
    reference_lane: Option<usize>,
    lane: Lane,
    tally: Tally,
}

/// Replays events through a set of policies; see the module docs of [`super`] for the metrics.
#[derive(Debug)]
pub struct Replay {
    runs: Vec<Run>,
    refs: Vec<(Policy, Lane)>,
    ref_allowed: Vec<bool>,
    requests: Vec<u32>,
    events: u64,
    mismatches: u64,
}

impl Replay {
    /// A replay of `policies` (at least one).
    pub fn new(policies: &[Policy]) -> Result<Replay, SimError> {
        if policies.is_empty() {
            return Err(SimError::Usage("no policy to replay".into()));
        }
        let mut refs: Vec<(Policy, Lane)> = Vec::new();
        let mut runs = Vec::new();
        for policy in policies {
            let reference = reference(policy)?;
            let reference_lane = if reference == *policy {
                None
            } else {
                Some(match refs.iter().position(|(p, _)| *p == reference) {
                    Some(i) => i,
                    None => {
                        refs.push((reference, Lane::new(reference.algorithm())));
                        refs.len() - 1
                    }
                })
            };
            runs.push(Run {
                policy: *policy,
                reference,
                reference_lane,
                lane: Lane::new(policy.algorithm()),
                tally: Tally::new(),
            });
        }
        Ok(Replay {
            ref_allowed: vec![false; refs.len()],
            runs,
            refs,
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
            for run in &mut self.runs {
                run.lane.grow(len);
                run.tally.grow(len);
            }
            for (_, lane) in &mut self.refs {
                lane.grow(len);
            }
        }
        self.requests[i] += 1;
        self.events += 1;
    }

    #[inline]
    fn step_references(&mut self, ev: Event) {
        for ((policy, lane), allowed) in self.refs.iter_mut().zip(&mut self.ref_allowed) {
            *allowed = lane
                .step(policy, ev.client, ev.time_ms, ev.cost)
                .decision
                .allowed;
        }
    }

    /// Replays one event through every policy with the library's steps (events must come in
    /// time order; see `readers::Reorder`).
    #[inline]
    pub fn step(&mut self, ev: Event) {
        self.admit_client(ev.client);
        self.step_references(ev);
        for run in &mut self.runs {
            let outcome = run.lane.step(&run.policy, ev.client, ev.time_ms, ev.cost);
            record(run, &self.ref_allowed, ev, &outcome.decision);
        }
    }

    /// Records one event whose decisions came from elsewhere (a real store), one per policy in
    /// order. The library's steps still run alongside: any decision that differs from them is
    /// counted in [`Replay::mismatches`], which is how a store is shown to agree with the steps.
    pub fn step_decided(&mut self, ev: Event, decisions: &[Decision]) {
        self.admit_client(ev.client);
        self.step_references(ev);
        for (run, decision) in self.runs.iter_mut().zip(decisions) {
            let local = run.lane.step(&run.policy, ev.client, ev.time_ms, ev.cost);
            if local.decision.allowed != decision.allowed
                || local.decision.remaining != decision.remaining
            {
                self.mismatches += 1;
            }
            record(run, &self.ref_allowed, ev, decision);
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
        self.runs
            .iter()
            .map(|run| {
                finish(
                    &run.policy,
                    &run.reference,
                    &run.tally,
                    &self.requests,
                    interner,
                    run.lane.footprint(),
                    run.lane.key_bytes(run.tally.max_log_entries),
                )
            })
            .collect()
    }
}

#[inline]
fn record(run: &mut Run, ref_allowed: &[bool], ev: Event, decision: &Decision) {
    let allowed = decision.allowed;
    let reference_allowed = match run.reference_lane {
        Some(i) => ref_allowed[i],
        None => allowed,
    };
    // The quota the policy saw as used before this request.
    let capacity = decision.limit;
    let taken = if allowed { ev.cost.max(0) as u64 } else { 0 };
    let used_before = capacity
        .saturating_sub(decision.remaining)
        .saturating_sub(taken);
    if allowed && matches!(run.lane, Lane::Log(_)) {
        let entries = run.lane.log_entries(ev.client);
        run.tally.max_log_entries = run.tally.max_log_entries.max(entries);
    }
    run.tally.record(
        ev.client,
        ev.time_ms,
        ev.cost,
        allowed,
        used_before,
        reference_allowed,
        run.reference.window_ms(),
    );
}
