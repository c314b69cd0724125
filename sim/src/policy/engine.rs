//! The replay engine: every event through every policy's state and through the exact reference
//! logs, tallying as it goes. Memory is O(clients), never O(events), so traces larger than memory
//! stream through. Where the states live is `clients` (laid out by `layout`); stepping them is
//! `states`; the exact trailing windows are `ring`; the tallies `metrics`.

use edgelimit::{Algorithm, Decision, Policy};

use super::clients::{Client, Clients};
use super::layout::{Layout, REQUESTS_WORD};
use super::metrics::{finish, InFlightResult, Mistake, PeakInFlight, PolicyResult, Tally};
use super::states::{self, Verdict};
use crate::error::SimError;
use crate::event::{Event, Interner};
use crate::exact::inflight::InFlight;
use crate::readers::time::format_utc;

/// Events per batch of [`Replay::step_all`]'s read-ahead.
const READ_AHEAD_BATCH: usize = 8;

/// Where a policy is replayed: among the rate states (`layout.runs[k]`), or as a concurrency
/// limit (`flights[k]`).
#[derive(Debug, Clone, Copy)]
enum Part {
    Rate(usize),
    Flight(usize),
}

/// A concurrency policy under replay: its flights, its tallies, and its per-client errors.
#[derive(Debug)]
struct Flight {
    flights: InFlight,
    tally: Tally,
    /// `[false allows, false denies]` by client id.
    errors: Vec<[u32; 2]>,
    /// Whether it admitted the last event.
    last_allowed: bool,
}

impl Flight {
    /// Lands what ended by the event's time, then decides it with the library's step and holds
    /// it against the exact in-flight count.
    fn step(&mut self, ev: Event) {
        self.flights.land_until(ev.time_ms);
        let decision = self.flights.step(ev.client, ev.time_ms, ev.cost);
        let (exact, real) = self.flights.record(
            ev.client,
            ev.time_ms,
            ev.cost,
            ev.duration(),
            decision.allowed,
            Some(decision.reset_at_ms),
        );
        self.last_allowed = decision.allowed;
        let used = decision.limit.saturating_sub(decision.remaining);
        let mistake = self
            .tally
            .count(decision.allowed, used, exact, ev.cost, real);
        if decision.allowed {
            let peak = real + ev.cost.max(0) as u64;
            if peak > self.tally.max_in_window {
                self.tally.max_in_window = peak;
            }
        }
        if let Some(mistake) = mistake {
            let c = ev.client as usize;
            if self.errors.len() <= c {
                self.errors.resize(c + 1, [0; 2]);
            }
            self.errors[c][usize::from(mistake == Mistake::FalseDeny)] += 1;
        }
    }

    fn finish(&self, requests: &[u32], interner: &Interner) -> PolicyResult {
        let policy = self.flights.policy();
        let errors = (0..requests.len()).map(|c| self.errors.get(c).copied().unwrap_or([0; 2]));
        let mut result = finish(
            policy,
            policy,
            &self.tally,
            errors,
            requests,
            interner,
            self.flights.footprint(),
            self.flights.largest(),
        );
        result.reference = format!("exact in-flight ≤ {}", policy.limit());
        let (with, without) = self.flights.durations();
        result.in_flight = Some(InFlightResult {
            timeout_ms: policy.window_ms(),
            peak_in_flight: self.tally.max_in_window,
            requests_with_duration: with,
            requests_without_duration: without,
            top: self
                .flights
                .top(10)
                .into_iter()
                .map(|p| PeakInFlight {
                    client: interner.name(p.id),
                    peak: p.peak,
                    at_ms: p.at_ms,
                    at_utc: format_utc(p.at_ms),
                })
                .collect(),
        });
        result
    }
}

/// Replays events through a set of policies; see [`PolicyResult`] for what is measured.
#[derive(Debug)]
pub struct Replay {
    layout: Layout,
    clients: Clients,
    /// Each policy's place, in order.
    parts: Vec<Part>,
    /// The concurrency policies.
    flights: Vec<Flight>,
    /// One per rate policy, in order.
    tallies: Vec<Tally>,
    /// Scratch: this event's decision in every slot, and its admissions per group.
    decided: Vec<Verdict>,
    admitted: Vec<u32>,
    events: u64,
    /// The place in the trace of the event being stepped (`events` unless the events are a
    /// share of the trace: [`Replay::step_all_numbered`]).
    seq: u64,
    mismatches: u64,
}

impl Replay {
    /// A replay of `policies` (at least one).
    pub fn new(policies: &[Policy]) -> Result<Replay, SimError> {
        if policies.is_empty() {
            return Err(SimError::Usage("no policy to replay".into()));
        }
        let mut rate = Vec::new();
        let mut flights = Vec::new();
        let parts = policies
            .iter()
            .map(|p| {
                if p.algorithm() == Algorithm::Concurrency {
                    flights.push(Flight {
                        flights: InFlight::new(*p),
                        tally: Tally::new(),
                        errors: Vec::new(),
                        last_allowed: false,
                    });
                    Part::Flight(flights.len() - 1)
                } else {
                    rate.push(*p);
                    Part::Rate(rate.len() - 1)
                }
            })
            .collect();
        let layout = Layout::new(&rate)?;
        Ok(Replay {
            parts,
            flights,
            clients: Clients::new(&layout),
            tallies: layout.runs.iter().map(|_| Tally::new()).collect(),
            decided: Vec::with_capacity(layout.slots.len()),
            admitted: vec![0; layout.groups.len()],
            layout,
            events: 0,
            seq: 0,
            mismatches: 0,
        })
    }

    /// The policies, in order.
    pub fn policies(&self) -> Vec<Policy> {
        self.parts
            .iter()
            .map(|part| match *part {
                Part::Rate(k) => self.layout.runs[k].policy,
                Part::Flight(k) => *self.flights[k].flights.policy(),
            })
            .collect()
    }

    /// Whether some policy is a concurrency limit (which a real store cannot replay: it would
    /// need the releases sent too).
    pub fn has_concurrency(&self) -> bool {
        !self.flights.is_empty()
    }

    /// Replays one event through every policy with the library's steps (events must come in
    /// time order; see `readers::Reorder`).
    #[inline]
    pub fn step(&mut self, ev: Event) {
        self.seq = self.events;
        self.step_with(ev, None);
    }

    /// Replays a run of events in order, as [`Replay::step`] does one by one — but reads ahead
    /// first. On traces with many clients each step waits on memory, and without prefetch
    /// instructions (this crate has no `unsafe`) a load that misses holds up everything after it
    /// until it completes: one read-ahead load per event would still cost one full miss per
    /// event. So the loads go in batches: before the events of one batch are stepped, the lines
    /// of the clients of the next batch are loaded, and (those of this batch being in cache by
    /// then) the first lines of the heap buffers they point to — a few dozen independent
    /// misses that the CPU serves together, costing about one miss per batch.
    pub fn step_all(&mut self, events: &[Event]) {
        self.step_run(events, None);
    }

    /// [`Replay::step_all`] for a share of a trace's events (`policy::shards`): `seqs[i]` is
    /// the place of `events[i]` in the whole trace, which breaks ties between threads.
    pub(crate) fn step_all_numbered(&mut self, events: &[Event], seqs: &[u64]) {
        self.step_run(events, Some(seqs));
    }

    #[inline]
    fn step_run(&mut self, events: &[Event], seqs: Option<&[u64]>) {
        let mut at = 0;
        let mut batches = events.chunks(READ_AHEAD_BATCH).peekable();
        let mut seen = self
            .clients
            .touch_records(batches.peek().copied().unwrap_or_default());
        while let Some(batch) = batches.next() {
            seen ^= self
                .clients
                .touch_records(batches.peek().copied().unwrap_or_default());
            seen ^= self.clients.touch_buffers(batch);
            for &ev in batch {
                self.seq = seqs.map_or(self.events, |s| s[at]);
                at += 1;
                self.step_with(ev, None);
            }
        }
        std::hint::black_box(seen);
    }

    /// Records one event whose decisions came from elsewhere (a real store), one per rate
    /// policy in order. The library's steps still run alongside (they are the ground truth, and any
    /// decision that differs from them is counted in [`Replay::mismatches`], which is how a store
    /// is shown to agree with the steps).
    pub fn step_decided(&mut self, ev: Event, decisions: &[Decision]) {
        let external: Vec<Verdict> = decisions.iter().map(Verdict::of).collect();
        self.seq = self.events;
        self.step_with(ev, Some(&external));
    }

    /// Steps every state of the event's client, then tallies each policy's decision (the steps'
    /// own, or `external`) against its reference. The client's state is looked up once for both.
    #[inline]
    fn step_with(&mut self, ev: Event, external: Option<&[Verdict]>) {
        self.clients.admit(ev.client);
        self.events += 1;
        let mut client = self.clients.get(ev.client);
        client.words[REQUESTS_WORD] += 1;
        self.decided.clear();
        for (policy, slot) in &self.layout.slots {
            self.decided.push(states::step(
                *slot,
                policy,
                client.words,
                client.logs,
                ev.time_ms,
                ev.cost,
            ));
        }
        if let Some(external) = external {
            for (local, external) in self.decided.iter().zip(external) {
                if local.allowed != external.allowed || local.remaining != external.remaining {
                    self.mismatches += 1;
                }
            }
        }
        record(
            &self.layout,
            &mut self.tallies,
            &mut self.admitted,
            &self.decided,
            external,
            &mut client,
            ev,
            self.seq,
        );
        for flight in &mut self.flights {
            flight.step(ev);
        }
    }

    /// Whether each policy (in order) admitted the last event replayed by the library's steps
    /// (for tests that check decisions one by one; `false` before any event).
    pub fn last_admitted(&self) -> Vec<bool> {
        self.parts
            .iter()
            .map(|part| match *part {
                Part::Rate(k) => self.decided.get(k).is_some_and(|v| v.allowed),
                Part::Flight(k) => self.flights[k].last_allowed,
            })
            .collect()
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
        let clients = self.clients.len();
        let requests: Vec<u32> = (0..clients)
            .map(|c| self.clients.words(c)[REQUESTS_WORD] as u32)
            .collect();
        self.parts
            .iter()
            .map(|part| match *part {
                Part::Rate(k) => self.finish_rate(k, &requests, interner),
                Part::Flight(k) => self.flights[k].finish(&requests, interner),
            })
            .collect()
    }

    /// The results of rate-only replays that each took a share of a trace's clients — shard
    /// `k` of `n` those with `id % n == k`, numbered `id / n` — merged into what one replay of
    /// the whole trace reports, in policy order.
    pub(crate) fn finish_shards(shards: &[Replay], interner: &Interner) -> Vec<PolicyResult> {
        let n = shards.len();
        let global = |k: usize| move |local: u32| (local as usize * n + k) as u32;
        let clients = shards
            .iter()
            .map(|s| s.clients.len() * n)
            .max()
            .unwrap_or(0);
        // Client `c` of the trace: its shard and its place there, if that shard has room for it.
        let place = |c: usize| {
            let shard = &shards[c % n];
            (c / n < shard.clients.len()).then_some((shard, c / n))
        };
        let requests: Vec<u32> = (0..clients)
            .map(|c| place(c).map_or(0, |(s, l)| s.clients.words(l)[REQUESTS_WORD] as u32))
            .collect();
        let first = &shards[0];
        (0..first.layout.runs.len())
            .map(|k| {
                let mut tally = Tally::new();
                let (mut keys, mut bytes) = (0, 0);
                for (i, shard) in shards.iter().enumerate() {
                    tally.merge(&shard.tallies[k], global(i));
                    let slot = shard.layout.slots[k].1;
                    for c in 0..shard.clients.len() {
                        let (fresh, size) =
                            states::footprint(slot, shard.clients.words(c), shard.clients.logs(c));
                        if !fresh {
                            keys += 1;
                            bytes += size;
                        }
                    }
                }
                let run = &first.layout.runs[k];
                let slot = first.layout.slots[k].1;
                finish(
                    &run.policy,
                    &run.reference,
                    &tally,
                    (0..clients).map(|c| place(c).map_or([0; 2], |(s, l)| s.clients.errors(l)[k])),
                    &requests,
                    interner,
                    (keys, bytes),
                    states::largest(slot, tally.max_log_entries),
                )
            })
            .collect()
    }

    /// The result of rate policy `k`.
    fn finish_rate(&self, k: usize, requests: &[u32], interner: &Interner) -> PolicyResult {
        let clients = self.clients.len();
        let (run, tally) = (&self.layout.runs[k], &self.tallies[k]);
        let slot = self.layout.slots[k].1;
        let (mut keys, mut bytes) = (0, 0);
        for c in 0..clients {
            let (fresh, size) =
                states::footprint(slot, self.clients.words(c), self.clients.logs(c));
            if !fresh {
                keys += 1;
                bytes += size;
            }
        }
        finish(
            &run.policy,
            &run.reference,
            tally,
            (0..clients).map(|c| self.clients.errors(c)[k]),
            requests,
            interner,
            (keys, bytes),
            states::largest(slot, tally.max_log_entries),
        )
    }
}

/// Tallies the event: each policy's decision (`verdicts`, or `external`) against its reference
/// (`decided`, the steps' own), and against what it really admitted in the trailing reference
/// window.
// The hot path's pieces, borrowed apart from the replay so each is passed as it is used.
#[allow(clippy::too_many_arguments)]
#[inline]
fn record(
    layout: &Layout,
    tallies: &mut [Tally],
    admitted: &mut [u32],
    decided: &[Verdict],
    external: Option<&[Verdict]>,
    client: &mut Client<'_>,
    ev: Event,
    seq: u64,
) {
    let now = ev.time_ms;
    let Client {
        words,
        logs,
        rings,
        errors,
    } = client;
    let verdicts = external.unwrap_or(decided);
    // What left each reference window; then this event's admissions, one ring entry per window
    // for all the policies that admitted it.
    for ((ring, group), admitted) in rings.iter_mut().zip(&layout.groups).zip(&mut *admitted) {
        ring.advance(now, group.window_ms, &group.sum_words, words);
        *admitted = 0;
    }
    if ev.cost > 0 {
        for (run, verdict) in layout.runs.iter().zip(verdicts) {
            if verdict.allowed {
                admitted[run.group] |= run.bit;
            }
        }
        for (ring, &mask) in rings.iter_mut().zip(&*admitted) {
            if mask != 0 {
                ring.push(now, ev.cost as u64, mask);
            }
        }
    }
    let runs = layout.runs.iter().zip(verdicts).zip(tallies);
    for (((run, verdict), tally), errors) in runs.zip(errors.iter_mut()) {
        let reference_allowed = match run.reference_slot {
            Some(r) => decided[r].allowed,
            None => verdict.allowed,
        };
        if let Some(l) = run.log {
            tally.max_log_entries = tally.max_log_entries.max(logs[l].0.entries().len());
        }
        let real = words[run.sum_word];
        match tally.count(
            verdict.allowed,
            verdict.used,
            reference_allowed,
            ev.cost,
            real,
        ) {
            None => {}
            Some(Mistake::FalseAllow) => errors[0] += 1,
            Some(Mistake::FalseDeny) => errors[1] += 1,
        }
        if verdict.allowed && ev.cost > 0 {
            let sum = real + ev.cost as u64;
            words[run.sum_word] = sum;
            if sum > tally.max_in_window {
                tally.max_in_window = sum;
                let start = rings[run.group].oldest(run.bit).unwrap_or(now);
                tally.worst = Some((ev.client, start, now));
                tally.worst_seq = seq;
            }
        }
    }
}
