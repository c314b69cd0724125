//! The replay engine: every event through every policy's state and through the exact reference
//! logs, tallying as it goes. Memory is O(clients), never O(events), so traces larger than memory
//! stream through.
//!
//! **Layout.** On traces with many clients, replay speed comes down to how many cache lines one
//! request touches, and how many of those are found only through a pointer read from another
//! (each such miss waits for the one before). So what is kept per client sits in three
//! client-major vectors, each client's part aligned to cache lines:
//!
//! - `words`: every fixed-size state (fixed window, sliding counter, token bucket, GCRA — the
//!   library's own `Copy` structs, stored field by field), each policy's admitted cost in its
//!   trailing reference window, and the client's request count. Five policies take 2 lines.
//! - `logs`: the sliding-log states (the library's `SlidingLogState`, inline rather than boxed as
//!   in `State`, which saves one dependent miss per request).
//! - `rings`: one log of admissions per *reference window* rather than per policy: an entry is
//!   `(time, cost, which of the window's policies admitted it)`, so the exact trailing counts of
//!   all policies held against the same window come from one buffer instead of one each.
//!
//! Rarely written per-client error counts live in a vector of their own. Each state is stepped by
//! the library's per-algorithm `step` — the code `State::apply` (and so `MemoryStore` and the
//! Worker) runs, minus the enum dispatch on the state.

use std::collections::VecDeque;
use std::mem::size_of;

use edgelimit::algorithm::{
    fixed_window, gcra, sliding_counter, sliding_log, token_bucket, FixedWindowState, GcraState,
    SlidingCounterState, SlidingLogState, TokenBucketState,
};
use edgelimit::{Algorithm, Decision, Policy};

use super::metrics::{finish, PolicyResult, Tally};
use super::reference::reference;
use crate::error::SimError;
use crate::event::{Event, Interner};

/// Words per cache line.
const LINE_WORDS: usize = 8;

/// Events per batch of [`Replay::step_all`]'s read-ahead.
const READ_AHEAD_BATCH: usize = 8;

/// Where one slot's state lives: a word offset in the client's record, or (for a sliding log)
/// its index among the client's logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Fixed(usize),
    Counter(usize),
    Bucket(usize),
    Gcra(usize),
    Log(usize),
}

/// One policy under replay.
#[derive(Debug)]
struct Run {
    policy: Policy,
    reference: Policy,
    /// The reference's slot among a client's states, or `None` when the policy *is* its own
    /// reference (the sliding log), whose decisions are then the ground truth itself.
    reference_slot: Option<usize>,
    /// Its reference window's group, and its bit in that group's ring entries.
    group: usize,
    bit: u32,
    /// The word holding its admitted cost in the trailing reference window.
    sum_word: usize,
    tally: Tally,
}

/// Policies held against the same reference window (at most 32, one bit each), sharing a ring.
#[derive(Debug)]
struct Group {
    window_ms: u64,
    /// The sum word of each member, by bit.
    sum_words: Vec<usize>,
}

/// Replays events through a set of policies; see [`PolicyResult`] for what is measured.
#[derive(Debug)]
pub struct Replay {
    runs: Vec<Run>,
    /// All policies, then the distinct references: a client's states.
    slots: Vec<(Policy, Slot)>,
    groups: Vec<Group>,
    /// Lines per client in `words`.
    stride: usize,
    /// Sliding logs per client.
    logs_per_client: usize,
    /// Clients with room in the vectors below.
    clients: usize,
    words: Vec<Line>,
    logs: Vec<LogCell>,
    rings: Vec<Ring>,
    /// `[false allows, false denies]` per client and policy, client-major.
    errors: Vec<[u32; 2]>,
    /// Scratch: this event's decision in every slot, and its admissions per group.
    decided: Vec<Verdict>,
    admitted: Vec<u32>,
    events: u64,
    mismatches: u64,
}

/// One cache line of a client's record.
#[derive(Debug, Clone, Copy, Default)]
#[repr(align(64))]
struct Line([u64; LINE_WORDS]);

/// A sliding log, on a cache line of its own.
#[derive(Debug, Clone, Default)]
#[repr(align(64))]
struct LogCell(SlidingLogState);

/// The word of a client's request count in its record.
const REQUESTS_WORD: usize = 0;

/// A client's record in `words`.
struct Record<'a>(&'a mut [Line]);

impl Record<'_> {
    #[inline]
    fn get(&self, i: usize) -> u64 {
        self.0[i / LINE_WORDS].0[i % LINE_WORDS]
    }

    #[inline]
    fn set(&mut self, i: usize, v: u64) {
        self.0[i / LINE_WORDS].0[i % LINE_WORDS] = v;
    }
}

impl Replay {
    /// A replay of `policies` (at least one).
    pub fn new(policies: &[Policy]) -> Result<Replay, SimError> {
        if policies.is_empty() {
            return Err(SimError::Usage("no policy to replay".into()));
        }
        let mut slot_policies: Vec<Policy> = policies.to_vec();
        let mut references = Vec::new();
        for policy in policies {
            let reference = reference(policy)?;
            // The ground truth reuses an identical slot when there is one — a listed
            // `sliding-log` policy is its own twin's reference — so no log is stepped twice.
            let reference_slot = if reference == *policy {
                None
            } else {
                Some(match slot_policies.iter().position(|p| *p == reference) {
                    Some(k) => k,
                    None => {
                        slot_policies.push(reference);
                        slot_policies.len() - 1
                    }
                })
            };
            references.push((reference, reference_slot));
        }
        let mut next_word = REQUESTS_WORD + 1;
        let mut logs_per_client = 0;
        let mut take = |n: usize| {
            next_word += n;
            next_word - n
        };
        let mut slots = Vec::new();
        for policy in slot_policies {
            let slot = match policy.algorithm() {
                Algorithm::FixedWindow => Slot::Fixed(take(2)),
                Algorithm::SlidingCounter => Slot::Counter(take(3)),
                Algorithm::TokenBucket => Slot::Bucket(take(2)),
                Algorithm::Gcra => Slot::Gcra(take(3)),
                Algorithm::SlidingLog => {
                    logs_per_client += 1;
                    Slot::Log(logs_per_client - 1)
                }
                Algorithm::Concurrency => {
                    return Err(SimError::Usage(format!(
                        "`{policy}` is a concurrency limit: the rate replay has no durations \
                         to release its leases with"
                    )))
                }
            };
            slots.push((policy, slot));
        }
        let mut groups: Vec<Group> = Vec::new();
        let mut runs = Vec::new();
        for (policy, (reference, reference_slot)) in policies.iter().zip(references) {
            let sum_word = take(1);
            let window_ms = reference.window_ms();
            let group = match groups
                .iter()
                .position(|g| g.window_ms == window_ms && g.sum_words.len() < 32)
            {
                Some(g) => g,
                None => {
                    groups.push(Group {
                        window_ms,
                        sum_words: Vec::new(),
                    });
                    groups.len() - 1
                }
            };
            let bit = 1u32 << groups[group].sum_words.len();
            groups[group].sum_words.push(sum_word);
            runs.push(Run {
                policy: *policy,
                reference,
                reference_slot,
                group,
                bit,
                sum_word,
                tally: Tally::new(),
            });
        }
        Ok(Replay {
            decided: Vec::with_capacity(slots.len()),
            admitted: vec![0; groups.len()],
            stride: next_word.div_ceil(LINE_WORDS),
            logs_per_client,
            clients: 0,
            words: Vec::new(),
            logs: Vec::new(),
            rings: Vec::new(),
            errors: Vec::new(),
            runs,
            slots,
            groups,
            events: 0,
            mismatches: 0,
        })
    }

    /// The policies, in order.
    pub fn policies(&self) -> Vec<Policy> {
        self.runs.iter().map(|r| r.policy).collect()
    }

    #[inline]
    fn record(&mut self, client: usize) -> Record<'_> {
        Record(&mut self.words[client * self.stride..][..self.stride])
    }

    #[inline]
    fn admit_client(&mut self, client: u32) {
        let i = client as usize;
        if i >= self.clients {
            // Grow geometrically so a trace with many clients does not resize on every new one.
            // Every fresh state is all zeros (`Default`), as are the sums and counts.
            let len = (i + 1).max(self.clients * 2).max(1024);
            self.words.resize(len * self.stride, Line::default());
            self.logs
                .resize_with(len * self.logs_per_client, LogCell::default);
            self.rings
                .resize_with(len * self.groups.len(), Ring::default);
            self.errors.resize(len * self.runs.len(), [0; 2]);
            self.clients = len;
        }
        let mut record = self.record(i);
        record.set(REQUESTS_WORD, record.get(REQUESTS_WORD) + 1);
        self.events += 1;
    }

    /// Steps every slot of the event's client, leaving the decisions in `decided`.
    #[inline]
    fn step_slots(&mut self, ev: Event) {
        let c = ev.client as usize;
        let mut record = Record(&mut self.words[c * self.stride..][..self.stride]);
        let logs = &mut self.logs[c * self.logs_per_client..][..self.logs_per_client];
        self.decided.clear();
        for (policy, slot) in &self.slots {
            self.decided.push(step_slot(
                *slot,
                policy,
                &mut record,
                logs,
                ev.time_ms,
                ev.cost,
            ));
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

    /// Replays a run of events in order, as [`Replay::step`] does one by one — but reads ahead
    /// first. On traces with many clients each step waits on memory, and without prefetch
    /// instructions (this crate has no `unsafe`) a load that misses holds up everything after it
    /// until it completes: one read-ahead load per event would still cost one full miss per
    /// event. So the loads go in batches: before the events of one batch are stepped, the lines
    /// of the clients of the next batch are loaded, and (those of this batch being in cache by
    /// then) the first lines of the heap buffers they point to — a few dozen independent
    /// misses that the CPU serves together, costing about one miss per batch.
    pub fn step_all(&mut self, events: &[Event]) {
        let mut batches = events.chunks(READ_AHEAD_BATCH).peekable();
        let mut seen = self.touch_records(batches.peek().copied().unwrap_or_default());
        while let Some(batch) = batches.next() {
            seen ^= self.touch_records(batches.peek().copied().unwrap_or_default());
            seen ^= self.touch_buffers(batch);
            for &ev in batch {
                self.step(ev);
            }
        }
        std::hint::black_box(seen);
    }

    /// Loads one word of each line the steps of `events` read directly (folded into the result
    /// so the loads are kept, in as few instructions as possible: the more of them fit in the
    /// CPU's window, the more misses it serves at once).
    #[inline]
    fn touch_records(&self, events: &[Event]) -> u64 {
        let mut seen = 0;
        for ev in events {
            let c = ev.client as usize;
            if c >= self.clients {
                continue;
            }
            for line in &self.words[c * self.stride..][..self.stride] {
                seen ^= line.0[0];
            }
            for log in &self.logs[c * self.logs_per_client..][..self.logs_per_client] {
                seen ^= log.0.seen_ms();
            }
            for ring in &self.rings[c * self.groups.len()..][..self.groups.len()] {
                seen ^= ring.front_ms;
            }
        }
        seen
    }

    /// Loads the ends of the heap buffers of the clients of `events`: a sliding log's step reads
    /// its oldest entry first and appends at the newest; a ring is read at its front when an
    /// entry leaves.
    #[inline]
    fn touch_buffers(&self, events: &[Event]) -> u64 {
        let mut seen = 0;
        for ev in events {
            let c = ev.client as usize;
            if c >= self.clients {
                continue;
            }
            for log in &self.logs[c * self.logs_per_client..][..self.logs_per_client] {
                seen ^= log.0.entries().next().map_or(0, |(t, _)| t);
                seen ^= log.0.newest_ms().unwrap_or(0);
            }
            for ring in &self.rings[c * self.groups.len()..][..self.groups.len()] {
                seen ^= ring.entries.front().map_or(0, |e| e.time_ms);
            }
        }
        seen
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
        let external: Vec<Verdict> = decisions.iter().map(Verdict::of).collect();
        self.record_all(ev, Some(&external));
    }

    #[inline]
    fn record_all(&mut self, ev: Event, external: Option<&[Verdict]>) {
        let c = ev.client as usize;
        let now = ev.time_ms;
        let groups = self.groups.len();
        let mut record = Record(&mut self.words[c * self.stride..][..self.stride]);
        let rings = &mut self.rings[c * groups..][..groups];
        // What left each reference window; then this event's admissions, one ring entry per
        // window for all the policies that admitted it.
        for ((ring, group), admitted) in rings.iter_mut().zip(&self.groups).zip(&mut self.admitted)
        {
            ring.advance(now, group, &mut record);
            *admitted = 0;
        }
        let decision_of = |k: usize| external.map_or(&self.decided[k], |d| &d[k]);
        if ev.cost > 0 {
            for (k, run) in self.runs.iter().enumerate() {
                if decision_of(k).allowed {
                    self.admitted[run.group] |= run.bit;
                }
            }
            for (ring, &mask) in rings.iter_mut().zip(&self.admitted) {
                if mask != 0 {
                    ring.push(now, ev.cost as u64, mask);
                }
            }
        }
        let logs = &self.logs[c * self.logs_per_client..][..self.logs_per_client];
        let errors = &mut self.errors[c * self.runs.len()..][..self.runs.len()];
        for (k, (run, errors)) in self.runs.iter_mut().zip(errors).enumerate() {
            let decision = external.map_or(&self.decided[k], |d| &d[k]);
            let reference_allowed = match run.reference_slot {
                Some(r) => self.decided[r].allowed,
                None => decision.allowed,
            };
            if let Slot::Log(l) = self.slots[k].1 {
                let entries = logs[l].0.entries().len();
                run.tally.max_log_entries = run.tally.max_log_entries.max(entries);
            }
            let allowed = decision.allowed;
            // The quota the policy saw as used before this request.
            let taken = if allowed { ev.cost.max(0) as u64 } else { 0 };
            let used_before = decision.used.saturating_sub(taken);
            // What the policy really admitted in the trailing reference window.
            let real = record.get(run.sum_word);
            let tally = &mut run.tally;
            tally.abs_rate_error += u128::from(real.abs_diff(used_before));
            tally.real_rate += u128::from(real);
            if allowed {
                tally.admitted += 1;
                if ev.cost > 0 {
                    let sum = real + ev.cost as u64;
                    record.set(run.sum_word, sum);
                    if sum > tally.max_in_window {
                        tally.max_in_window = sum;
                        let start = rings[run.group].oldest(run.bit).unwrap_or(now);
                        tally.worst = Some((ev.client, start, now));
                    }
                }
                if !reference_allowed {
                    tally.false_allows += 1;
                    errors[0] += 1;
                }
            } else {
                tally.denied += 1;
                if reference_allowed {
                    tally.false_denies += 1;
                    errors[1] += 1;
                }
            }
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
        let clients = self.clients;
        let record = |c: usize| &self.words[c * self.stride..][..self.stride];
        let word = |c: usize, i: usize| record(c)[i / LINE_WORDS].0[i % LINE_WORDS];
        let requests: Vec<u32> = (0..clients)
            .map(|c| word(c, REQUESTS_WORD) as u32)
            .collect();
        let p = self.runs.len();
        self.runs
            .iter()
            .enumerate()
            .map(|(k, run)| {
                let slot = self.slots[k].1;
                let mut keys = 0;
                let mut bytes = 0;
                for c in 0..clients {
                    let (fresh, size) = match slot {
                        Slot::Fixed(o) => (
                            fixed_state(|i| word(c, i), o) == FixedWindowState::default(),
                            size_of::<FixedWindowState>(),
                        ),
                        Slot::Counter(o) => (
                            counter_state(|i| word(c, i), o) == SlidingCounterState::default(),
                            size_of::<SlidingCounterState>(),
                        ),
                        Slot::Bucket(o) => (
                            bucket_state(|i| word(c, i), o) == TokenBucketState::default(),
                            size_of::<TokenBucketState>(),
                        ),
                        Slot::Gcra(o) => (
                            gcra_state(|i| word(c, i), o) == GcraState::default(),
                            size_of::<GcraState>(),
                        ),
                        Slot::Log(l) => {
                            let log = &self.logs[c * self.logs_per_client + l].0;
                            (
                                *log == SlidingLogState::default(),
                                log_bytes(log.entries().len()),
                            )
                        }
                    };
                    if !fresh {
                        keys += 1;
                        bytes += size;
                    }
                }
                let per_client = (0..clients).map(|c| self.errors[c * p + k]);
                let key_bytes_max = match slot {
                    Slot::Log(_) => log_bytes(run.tally.max_log_entries),
                    Slot::Fixed(_) => size_of::<FixedWindowState>(),
                    Slot::Counter(_) => size_of::<SlidingCounterState>(),
                    Slot::Bucket(_) => size_of::<TokenBucketState>(),
                    Slot::Gcra(_) => size_of::<GcraState>(),
                };
                finish(
                    &run.policy,
                    &run.reference,
                    &run.tally,
                    per_client,
                    &requests,
                    interner,
                    (keys, bytes),
                    key_bytes_max,
                )
            })
            .collect()
    }
}

/// The bytes one sliding log's state takes in memory with `entries` entries (the algorithm's
/// own struct, not the `State` enum around it).
fn log_bytes(entries: usize) -> usize {
    size_of::<SlidingLogState>() + entries * size_of::<(u64, u64)>()
}

fn fixed_state(w: impl Fn(usize) -> u64, o: usize) -> FixedWindowState {
    FixedWindowState {
        seen_ms: w(o),
        count: w(o + 1),
    }
}

fn counter_state(w: impl Fn(usize) -> u64, o: usize) -> SlidingCounterState {
    SlidingCounterState {
        seen_ms: w(o),
        previous: w(o + 1),
        current: w(o + 2),
    }
}

fn bucket_state(w: impl Fn(usize) -> u64, o: usize) -> TokenBucketState {
    TokenBucketState {
        seen_ms: w(o),
        deficit: w(o + 1),
    }
}

fn gcra_state(w: impl Fn(usize) -> u64, o: usize) -> GcraState {
    GcraState {
        tat_ms: w(o),
        tat_rem: w(o + 1),
        seen_ms: w(o + 2),
    }
}

/// Steps one slot's state with its algorithm's own library step.
#[inline]
fn step_slot(
    slot: Slot,
    policy: &Policy,
    record: &mut Record<'_>,
    logs: &mut [LogCell],
    now_ms: u64,
    cost: i64,
) -> Verdict {
    match slot {
        Slot::Fixed(o) => {
            let mut s = fixed_state(|i| record.get(i), o);
            let decision = Verdict::of(&fixed_window::step(policy, &mut s, now_ms, cost).decision);
            record.set(o, s.seen_ms);
            record.set(o + 1, s.count);
            decision
        }
        Slot::Counter(o) => {
            let mut s = counter_state(|i| record.get(i), o);
            let decision =
                Verdict::of(&sliding_counter::step(policy, &mut s, now_ms, cost).decision);
            record.set(o, s.seen_ms);
            record.set(o + 1, s.previous);
            record.set(o + 2, s.current);
            decision
        }
        Slot::Bucket(o) => {
            let mut s = bucket_state(|i| record.get(i), o);
            let decision = Verdict::of(&token_bucket::step(policy, &mut s, now_ms, cost).decision);
            record.set(o, s.seen_ms);
            record.set(o + 1, s.deficit);
            decision
        }
        Slot::Gcra(o) => {
            let mut s = gcra_state(|i| record.get(i), o);
            let decision = Verdict::of(&gcra::step(policy, &mut s, now_ms, cost).decision);
            record.set(o, s.tat_ms);
            record.set(o + 1, s.tat_rem);
            record.set(o + 2, s.seen_ms);
            decision
        }
        Slot::Log(l) => {
            Verdict::of(&sliding_log::step(policy, &mut logs[l].0, now_ms, cost).decision)
        }
    }
}

/// What replay reads of a decision. Copying the whole `Decision` a step returns (48 bytes,
/// written field by field) with wide loads defeats store-to-load forwarding and stalls every
/// step; scalar loads do not (hence `used` rather than `limit` beside `remaining`, which the
/// compiler would load together).
#[derive(Debug, Clone, Copy)]
struct Verdict {
    allowed: bool,
    remaining: u64,
    /// `limit − remaining`: the quota the policy counts as used after the decision.
    used: u64,
}

impl Verdict {
    #[inline]
    fn of(decision: &Decision) -> Verdict {
        Verdict {
            allowed: decision.allowed,
            remaining: decision.remaining,
            used: decision.limit.saturating_sub(decision.remaining),
        }
    }
}

/// One admission in a reference window: when, what it cost, and which of the window's policies
/// admitted it (one bit each).
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    time_ms: u64,
    /// Larger costs take several entries.
    cost: u32,
    mask: u32,
}

/// One client's admissions within one reference window, for all the policies held against it:
/// exact counts over *every* window (two pointers: push at the back, drop from the front), so
/// `max_admitted_in_window` is exact, not only over aligned windows.
///
/// The oldest time is kept inline: most requests leave nothing to drop, and answering that from
/// the inline copy avoids touching the heap buffer. The newest entry is kept inline too, and
/// reaches the buffer only when a later one starts, so admissions in the same millisecond by the
/// same policies merge without reading the buffer, and an append is a store, not a load.
#[derive(Debug, Clone)]
#[repr(align(64))]
struct Ring {
    /// Entries older than `open`, oldest first.
    entries: VecDeque<Entry>,
    /// The newest entry (`mask` 0: none).
    open: Entry,
    /// The oldest entry's time, `u64::MAX` when there is none.
    front_ms: u64,
}

impl Default for Ring {
    fn default() -> Self {
        Ring {
            entries: VecDeque::new(),
            open: Entry::default(),
            front_ms: u64::MAX,
        }
    }
}

impl Ring {
    /// Drops what left the window `(now − window, now]`, taking its cost off the sums of the
    /// policies that had admitted it.
    #[inline]
    fn advance(&mut self, now_ms: u64, group: &Group, record: &mut Record<'_>) {
        let window_ms = group.window_ms;
        if now_ms < window_ms || self.front_ms > now_ms - window_ms {
            return;
        }
        let cutoff = now_ms - window_ms;
        if self.open.mask == 0 || self.open.time_ms <= cutoff {
            // Even the newest entry has left (times do not decrease): every policy's count is
            // back to zero, and the buffer need not be read.
            for &word in &group.sum_words {
                record.set(word, 0);
            }
            self.entries.clear();
            self.open = Entry::default();
            self.front_ms = u64::MAX;
            return;
        }
        let mut leave = |e: &Entry| {
            let mut mask = e.mask;
            while mask != 0 {
                let word = group.sum_words[mask.trailing_zeros() as usize];
                record.set(word, record.get(word) - u64::from(e.cost));
                mask &= mask - 1;
            }
        };
        while let Some(e) = self.entries.front() {
            if e.time_ms > cutoff {
                break;
            }
            leave(e);
            self.entries.pop_front();
        }
        // `open` is still in the window (see above).
        self.front_ms = self
            .entries
            .front()
            .map_or(self.open.time_ms, |e| e.time_ms);
    }

    /// Records an admission of `cost` at `now_ms` by the policies in `mask` (times must not
    /// decrease).
    #[inline]
    fn push(&mut self, now_ms: u64, mut cost: u64, mask: u32) {
        if self.open.mask == mask && self.open.time_ms == now_ms {
            let add = cost.min(u64::from(u32::MAX - self.open.cost));
            self.open.cost += add as u32;
            cost -= add;
        }
        while cost > 0 {
            let part = cost.min(u64::from(u32::MAX));
            if self.open.mask != 0 {
                self.entries.push_back(self.open);
            }
            self.open = Entry {
                time_ms: now_ms,
                cost: part as u32,
                mask,
            };
            cost -= part;
        }
        self.front_ms = self.front_ms.min(now_ms);
    }

    /// The oldest admission still in the window by the policy with `bit`.
    fn oldest(&self, bit: u32) -> Option<u64> {
        self.entries
            .iter()
            .chain(std::iter::once(&self.open))
            .find(|e| e.mask & bit != 0)
            .map(|e| e.time_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group of two policies (bits 1 and 2) whose sums live in words 1 and 2.
    fn group(window_ms: u64) -> Group {
        Group {
            window_ms,
            sum_words: vec![1, 2],
        }
    }

    fn sums(lines: &[Line]) -> (u64, u64) {
        (lines[0].0[1], lines[0].0[2])
    }

    /// Advances, then admits `cost` by `mask` as `record_all` does.
    fn admit(ring: &mut Ring, g: &Group, lines: &mut [Line], now: u64, cost: u64, mask: u32) {
        ring.advance(now, g, &mut Record(lines));
        ring.push(now, cost, mask);
        let mut record = Record(lines);
        for (bit, &word) in g.sum_words.iter().enumerate() {
            if mask & (1 << bit) != 0 {
                record.set(word, record.get(word) + cost);
            }
        }
    }

    #[test]
    fn a_request_exactly_one_window_old_no_longer_counts() {
        let g = group(1000);
        let mut lines = [Line::default()];
        let mut ring = Ring::default();
        admit(&mut ring, &g, &mut lines, 1000, 1, 0b11);
        ring.advance(1999, &g, &mut Record(&mut lines));
        assert_eq!(sums(&lines), (1, 1));
        ring.advance(2000, &g, &mut Record(&mut lines));
        assert_eq!(sums(&lines), (0, 0));
        assert_eq!(ring.oldest(1), None);
        // Before the first whole window nothing can have left.
        let mut early = Ring::default();
        let mut lines = [Line::default()];
        admit(&mut early, &g, &mut lines, 5, 2, 0b01);
        early.advance(10, &g, &mut Record(&mut lines));
        assert_eq!(sums(&lines), (2, 0));
    }

    #[test]
    fn entries_leave_one_by_one_and_only_from_the_policies_that_admitted_them() {
        let g = group(100);
        let mut lines = [Line::default()];
        let mut ring = Ring::default();
        admit(&mut ring, &g, &mut lines, 1000, 1, 0b01);
        admit(&mut ring, &g, &mut lines, 1000, 2, 0b01); // merges with the open entry
        admit(&mut ring, &g, &mut lines, 1000, 4, 0b10); // same time, other policy
        admit(&mut ring, &g, &mut lines, 1050, 8, 0b11);
        admit(&mut ring, &g, &mut lines, 1060, 16, 0b10);
        assert_eq!(sums(&lines), (11, 28));
        assert_eq!(
            (ring.oldest(0b01), ring.oldest(0b10)),
            (Some(1000), Some(1000))
        );
        ring.advance(1100, &g, &mut Record(&mut lines));
        assert_eq!(sums(&lines), (8, 24));
        assert_eq!(
            (ring.oldest(0b01), ring.oldest(0b10)),
            (Some(1050), Some(1050))
        );
        ring.advance(1150, &g, &mut Record(&mut lines));
        assert_eq!(sums(&lines), (0, 16));
        assert_eq!((ring.oldest(0b01), ring.oldest(0b10)), (None, Some(1060)));
        assert_eq!(ring.front_ms, 1060);
        // Everything has left: the ring empties without reading its buffer.
        admit(&mut ring, &g, &mut lines, 5000, 1, 0b01);
        assert_eq!(sums(&lines), (1, 0));
        assert!(ring.entries.is_empty());
        assert_eq!(ring.front_ms, 5000);
    }

    #[test]
    fn costs_beyond_an_entry_take_several_and_leave_together() {
        let g = group(100);
        let mut lines = [Line::default()];
        let mut ring = Ring::default();
        let big = (1u64 << 33) + 5;
        admit(
            &mut ring,
            &g,
            &mut lines,
            1000,
            u64::from(u32::MAX) - 1,
            0b01,
        );
        admit(&mut ring, &g, &mut lines, 1000, big, 0b01);
        admit(&mut ring, &g, &mut lines, 1001, big, 0b11);
        assert_eq!(sums(&lines), (u64::from(u32::MAX) - 1 + 2 * big, big));
        assert_eq!(ring.oldest(0b10), Some(1001));
        ring.advance(1100, &g, &mut Record(&mut lines));
        assert_eq!(sums(&lines), (big, big));
        ring.advance(1101, &g, &mut Record(&mut lines));
        assert_eq!(sums(&lines), (0, 0));
    }
}
