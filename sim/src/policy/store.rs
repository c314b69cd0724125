//! `--store`: where decisions are made. `memory` (the default) runs the library's steps in
//! process; `redis://…` (or `redis+cluster://…`) sends the same checks, on the trace's virtual
//! clock, to a real Redis through the library's `RespStore` (its Lua twins), batched into
//! pipelines; `upstash+http://…` does the same over the Upstash REST protocol through the
//! library's `RestStore` (Upstash, or `edgelimit-gateway` in front of any Redis), with the token
//! given, or else from `UPSTASH_REDIS_REST_TOKEN`. The URL is read and the store built by the
//! library's [`StoreSpec`], as every host does.
//!
//! A store-backed replay writes keys under a fresh namespace (`sim-<pid>-<ms>`), so earlier runs'
//! state never leaks into this one; the keys expire on their own (their TTLs are durations).

use std::fmt;
use std::time::Duration;

use edgelimit::redact::redact;
use edgelimit::store::{StoreSpec, StoreSpecError};
use edgelimit::{Check, Limit, Policy, Store, TimeSource};

use super::engine::Replay;
use crate::error::SimError;
use crate::event::Event;

/// The store named by `--store`: the library's [`StoreSpec`], whose `Display` is how the
/// reports name it (a password redacted, a REST token left out). A REST token not given reads
/// `UPSTASH_REDIS_REST_TOKEN` when connecting (what `--store` does), so a caller in process (a
/// test) need not touch the environment.
pub type StoreChoice = StoreSpec;

/// How long connecting and each answer may take: a replay waits for every decision, and one
/// that times out ends the replay with an error, so the bound is generous.
const STORE_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether decisions come from outside the process.
pub(crate) fn is_external(store: &StoreChoice) -> bool {
    *store != StoreChoice::Memory
}

/// Connects to `store`, or `None` for the in-process replay.
pub(crate) fn connect(
    store: &StoreChoice,
    policies: &[Policy],
) -> Result<Option<Box<dyn ExternalStore>>, SimError> {
    if !is_external(store) {
        return Ok(None);
    }
    let failed = |e: StoreSpecError| match e {
        StoreSpecError::Unset { .. } => SimError::Usage(format!("--store {store}: {e}")),
        other => SimError::Store(redact(&other.to_string()).into_owned()),
    };
    let spec = store
        .clone()
        .with_token(|name| std::env::var(name).ok())
        .map_err(failed)?;
    let runtime = runtime()?;
    let connected: Box<dyn Store> = runtime
        .block_on(spec.connect(&fresh_namespace(), STORE_TIMEOUT))
        .map_err(failed)?;
    Ok(Some(Box::new(Batched::new(runtime, connected, policies))))
}

/// Events per round trip: large enough to hide latency, small enough to keep memory flat.
const BATCH: usize = 256;

/// Checks per store call: a REST gateway caps a pipeline's length (1,000 by default), and one
/// check is at least one command.
const MAX_CHECKS: usize = 500;

/// A single-threaded runtime to drive the library's async stores.
fn runtime() -> Result<tokio::runtime::Runtime, SimError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| SimError::Store(format!("cannot start a runtime: {e}")))
}

fn fresh_namespace() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("sim-{}-{ms}", std::process::id())
}

/// Any library [`Store`] driven in batches: one check per (event, policy), in trace order — a
/// store decides a batch's checks in order, so per-key order is kept.
struct Batched {
    runtime: tokio::runtime::Runtime,
    store: Box<dyn Store>,
    limits: Vec<Limit>,
    queue: Vec<Event>,
}

impl fmt::Debug for Batched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batched")
            .field("limits", &self.limits)
            .field("queued", &self.queue.len())
            .finish_non_exhaustive()
    }
}

impl Batched {
    fn new(
        runtime: tokio::runtime::Runtime,
        store: Box<dyn Store>,
        policies: &[Policy],
    ) -> Batched {
        Batched {
            runtime,
            store,
            // One name per position: two identical specs still get separate state, as in memory.
            limits: policies
                .iter()
                .enumerate()
                .map(|(i, p)| Limit::new(format!("p{i}"), *p))
                .collect(),
            queue: Vec::with_capacity(BATCH),
        }
    }
}

impl ExternalStore for Batched {
    fn push(&mut self, ev: Event, replay: &mut Replay) -> Result<(), SimError> {
        self.queue.push(ev);
        if self.queue.len() >= BATCH {
            self.flush(replay)?;
        }
        Ok(())
    }

    fn flush(&mut self, replay: &mut Replay) -> Result<(), SimError> {
        if self.queue.is_empty() {
            return Ok(());
        }
        // Every check of the batch runs at one virtual time per event, so each check carries its
        // own: batches are split where the time changes.
        let mut start = 0;
        while start < self.queue.len() {
            let t = self.queue[start].time_ms;
            let end = start
                + self.queue[start..]
                    .iter()
                    .take_while(|e| e.time_ms == t)
                    .count();
            let events = &self.queue[start..end];
            let checks: Vec<Check> = events
                .iter()
                .flat_map(|ev| {
                    self.limits
                        .iter()
                        .map(move |l| Check::single(l, format!("c{}", ev.client), ev.cost))
                })
                .collect();
            let mut verdicts = Vec::with_capacity(checks.len());
            for part in checks.chunks(MAX_CHECKS) {
                verdicts.extend(
                    self.runtime
                        .block_on(self.store.check(part, TimeSource::At(t)))
                        .map_err(|e| SimError::Store(redact(&e.to_string()).into_owned()))?,
                );
            }
            if verdicts.len() != checks.len() {
                return Err(SimError::Store(format!(
                    "asked {} checks, got {} verdicts",
                    checks.len(),
                    verdicts.len()
                )));
            }
            for (ev, group) in events.iter().zip(verdicts.chunks(self.limits.len())) {
                let decisions: Vec<_> = group.iter().map(|v| v.decisions[0]).collect();
                replay.step_decided(*ev, &decisions);
            }
            start = end;
        }
        self.queue.clear();
        Ok(())
    }
}

/// A real store under replay: events are batched into checks and their decisions recorded.
pub trait ExternalStore: fmt::Debug {
    /// Queues one event, deciding a batch when full.
    fn push(&mut self, ev: Event, replay: &mut Replay) -> Result<(), SimError>;
    /// Decides whatever is queued.
    fn flush(&mut self, replay: &mut Replay) -> Result<(), SimError>;
}
