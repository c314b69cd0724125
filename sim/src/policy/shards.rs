//! A memory replay spread over threads, split by client: every policy's decision for a client
//! depends on that client's requests alone, so thread `k` of `n` replays the clients whose id
//! is `k` modulo `n` (renumbered `id / n`, so each thread's states stay dense), and the
//! tallies are merged into exactly what one thread reports (`Replay::finish_shards`): sums,
//! maxima, and of equal maxima the one earliest in the trace. The thread reading the trace
//! (decompressing, parsing, reordering) hands it over in blocks and goes on reading.
//!
//! Concurrency policies are replayed whole on one more thread: their in-flight tables and peak
//! lists are kept by a time-ordered landing queue whose report is not split by client here.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use edgelimit::{Algorithm, Policy};

use super::engine::Replay;
use super::metrics::PolicyResult;
use crate::error::SimError;
use crate::event::{Event, Interner};

/// Events handed to the threads at a time.
const BLOCK: usize = 1 << 14;

/// Blocks queued per thread before the reader waits.
const QUEUE: usize = 4;

/// Events replayed per [`Replay::step_all`] call within a block.
const CHUNK: usize = 1024;

/// A block of the trace and the place of its first event in it.
type Block = Arc<(u64, Vec<Event>)>;

/// A replay thread: its replay when done, and the CPU seconds it spent.
type Worker = JoinHandle<(Replay, Option<f64>)>;

/// A replay whose clients are split over threads.
#[derive(Debug)]
pub struct ShardedReplay {
    /// The policies in report order.
    policies: Vec<Policy>,
    senders: Vec<SyncSender<Block>>,
    shards: Vec<Worker>,
    /// The concurrency policies' whole replay, when there are any.
    flights: Option<(SyncSender<Block>, Worker)>,
    block: Vec<Event>,
    seq: u64,
}

/// `work` and the CPU seconds this thread spent on it, where `/proc` has them.
fn timed(work: impl FnOnce() -> Replay) -> (Replay, Option<f64>) {
    let before = thread_cpu_seconds();
    let replay = work();
    (replay, thread_cpu_seconds().zip(before).map(|(b, a)| b - a))
}

/// CPU seconds this thread has run (`/proc/thread-self/schedstat`, in ns), where `/proc` has it.
pub(crate) fn thread_cpu_seconds() -> Option<f64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse::<u64>()
        .ok()
        .map(|ns| ns as f64 / 1e9)
}

/// Replays shard `k` of `n` of every block until the reader is done.
fn shard(mut replay: Replay, k: usize, n: usize, blocks: Receiver<Block>) -> Replay {
    let (mut events, mut seqs) = (Vec::with_capacity(BLOCK), Vec::with_capacity(BLOCK));
    for block in blocks {
        let (base, all) = &*block;
        events.clear();
        seqs.clear();
        for (i, ev) in all.iter().enumerate() {
            if ev.client as usize % n == k {
                events.push(Event {
                    client: (ev.client as usize / n) as u32,
                    ..*ev
                });
                seqs.push(base + i as u64);
            }
        }
        for (chunk, numbers) in events.chunks(CHUNK).zip(seqs.chunks(CHUNK)) {
            replay.step_all_numbered(chunk, numbers);
        }
    }
    replay
}

/// Replays every event of every block (the concurrency policies).
fn whole(mut replay: Replay, blocks: Receiver<Block>) -> Replay {
    for block in blocks {
        for chunk in block.1.chunks(CHUNK) {
            replay.step_all(chunk);
        }
    }
    replay
}

impl ShardedReplay {
    /// A replay of `policies` over `threads` threads (at least 2 to be worth it; the rate
    /// policies are split over all of them).
    pub fn new(policies: &[Policy], threads: usize) -> Result<ShardedReplay, SimError> {
        // Fails as one replay fails (no policy, a bad layout) before any thread starts.
        Replay::new(policies)?;
        let (flight, rate): (Vec<Policy>, Vec<Policy>) = policies
            .iter()
            .partition(|p| p.algorithm() == Algorithm::Concurrency);
        let n = if rate.is_empty() { 0 } else { threads.max(1) };
        let mut senders = Vec::with_capacity(n);
        let mut shards = Vec::with_capacity(n);
        for k in 0..n {
            let (tx, rx) = sync_channel(QUEUE);
            let replay = Replay::new(&rate)?;
            senders.push(tx);
            shards.push(std::thread::spawn(move || {
                timed(|| shard(replay, k, n, rx))
            }));
        }
        let flights = if flight.is_empty() {
            None
        } else {
            let (tx, rx) = sync_channel(QUEUE);
            let replay = Replay::new(&flight)?;
            Some((tx, std::thread::spawn(move || timed(|| whole(replay, rx)))))
        };
        Ok(ShardedReplay {
            policies: policies.to_vec(),
            senders,
            shards,
            flights,
            block: Vec::with_capacity(BLOCK),
            seq: 0,
        })
    }

    /// Replays one event (in time order), handed over with its block.
    #[inline]
    pub fn push(&mut self, ev: Event) {
        self.block.push(ev);
        if self.block.len() == BLOCK {
            self.send();
        }
    }

    fn send(&mut self) {
        let events = std::mem::replace(&mut self.block, Vec::with_capacity(BLOCK));
        let len = events.len() as u64;
        let block: Block = Arc::new((self.seq, events));
        self.seq += len;
        // A thread gone (it panicked) is reported when it is joined.
        for tx in &self.senders {
            let _ = tx.send(block.clone());
        }
        if let Some((tx, _)) = &self.flights {
            let _ = tx.send(block);
        }
    }

    /// Waits for every thread and returns the results, one per policy in order, as one
    /// [`Replay::finish`] would.
    pub fn finish(self, interner: &Interner) -> Vec<PolicyResult> {
        self.finish_timed(interner).0
    }

    /// [`ShardedReplay::finish`], with the CPU seconds each replay thread spent (where `/proc`
    /// has them): on a machine with a core free for each, the busiest of them (or the reading
    /// thread) sets the wall time.
    pub fn finish_timed(mut self, interner: &Interner) -> (Vec<PolicyResult>, Vec<Option<f64>>) {
        if !self.block.is_empty() {
            self.send();
        }
        let ShardedReplay {
            policies,
            senders,
            shards,
            flights,
            ..
        } = self;
        drop(senders);
        let (shards, mut cpu): (Vec<Replay>, Vec<Option<f64>>) = shards
            .into_iter()
            .map(|h| h.join().expect("a replay thread panicked"))
            .unzip();
        let flights = flights.map(|(tx, h)| {
            drop(tx);
            let (replay, seconds) = h.join().expect("the concurrency replay thread panicked");
            cpu.push(seconds);
            replay
        });
        let mut rate = if shards.is_empty() {
            Vec::new()
        } else {
            Replay::finish_shards(&shards, interner)
        }
        .into_iter();
        let mut flight = flights
            .map(|f| f.finish(interner))
            .unwrap_or_default()
            .into_iter();
        let results = policies
            .iter()
            .map(|p| {
                let next = if p.algorithm() == Algorithm::Concurrency {
                    flight.next()
                } else {
                    rate.next()
                };
                next.expect("one result per policy")
            })
            .collect();
        (results, cpu)
    }
}
