//! `--store`: where decisions are made. `memory` (the default) runs the library's steps in
//! process; `redis://…` sends the same checks, on the trace's virtual clock, to a real Redis
//! through the library's `RespStore` (its Lua twins), batched into pipelines; `upstash+http://…`
//! does the same over the Upstash REST protocol through the library's `RestStore` (Upstash, or
//! `edgelimit-gateway` in front of any Redis), with the token given, or else from
//! `UPSTASH_REDIS_REST_TOKEN`.
//!
//! A store-backed replay writes keys under a fresh namespace (`sim-<pid>-<ms>`), so earlier runs'
//! state never leaks into this one; the keys expire on their own (their TTLs are durations).

use std::fmt;
use std::str::FromStr;

use edgelimit::redact::redact;
use edgelimit::store::{RespStore, REST_TOKEN_VAR};
use edgelimit::RestStore;
use edgelimit::{Check, Limit, Policy, Store, TimeSource};

use super::engine::Replay;
use crate::error::SimError;
use crate::event::Event;

/// The store named by `--store`.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum StoreChoice {
    /// The library's steps in process.
    #[default]
    Memory,
    /// A Redis server over RESP (`redis://host:port`).
    Redis(String),
    /// An Upstash REST endpoint (`upstash+http://host:port`).
    Upstash {
        /// The endpoint, without the `upstash+` prefix.
        url: String,
        /// The REST token; `None` reads `UPSTASH_REDIS_REST_TOKEN` when connecting (what
        /// `--store` does), so a caller in process (a test) need not touch the environment.
        token: Option<String>,
    },
}

impl FromStr for StoreChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "memory" {
            Ok(StoreChoice::Memory)
        } else if s.starts_with("redis://") || s.starts_with("rediss://") {
            Ok(StoreChoice::Redis(s.to_string()))
        } else if let Some(rest) = s.strip_prefix("upstash+") {
            Ok(StoreChoice::Upstash {
                url: rest.to_string(),
                token: None,
            })
        } else {
            Err(format!(
                "unknown store `{}` (expected memory, redis://…, or upstash+http(s)://…)",
                redact(s)
            ))
        }
    }
}

/// As `Display`: no secret in debug output and logs.
impl fmt::Debug for StoreChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The store as the reports name it: a URL's password (and any token in it) redacted, the
/// REST token left out.
impl fmt::Display for StoreChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreChoice::Memory => f.write_str("memory"),
            StoreChoice::Redis(url) => f.write_str(&redact(url)),
            StoreChoice::Upstash { url, .. } => write!(f, "upstash+{}", redact(url)),
        }
    }
}

impl StoreChoice {
    /// Whether decisions come from outside the process.
    pub fn is_external(&self) -> bool {
        !matches!(self, StoreChoice::Memory)
    }

    /// Connects, or `None` for the in-process replay.
    pub fn connect(&self, policies: &[Policy]) -> Result<Option<Box<dyn ExternalStore>>, SimError> {
        match self {
            StoreChoice::Memory => Ok(None),
            StoreChoice::Redis(url) => {
                let runtime = runtime()?;
                let store = runtime
                    .block_on(RespStore::connect(url))
                    .map_err(|e| SimError::Store(redact(&format!("{url}: {e}")).into_owned()))?
                    .with_namespace(fresh_namespace());
                Ok(Some(Box::new(Batched::new(
                    runtime,
                    Box::new(store),
                    policies,
                ))))
            }
            StoreChoice::Upstash { url, token } => {
                let token = match token {
                    Some(token) => token.clone(),
                    None => std::env::var(REST_TOKEN_VAR).map_err(|_| {
                        SimError::Usage(format!(
                            "--store upstash+{}: set {REST_TOKEN_VAR} to the REST token",
                            redact(url)
                        ))
                    })?,
                };
                let runtime = runtime()?;
                let store = RestStore::new(url, &token)
                    .map_err(|e| SimError::Store(redact(&format!("{url}: {e}")).into_owned()))?
                    .with_namespace(fresh_namespace());
                Ok(Some(Box::new(Batched::new(
                    runtime,
                    Box::new(store),
                    policies,
                ))))
            }
        }
    }
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
