//! `--store`: where decisions are made. `memory` (the default) runs the library's steps in
//! process; `redis://…` and `upstash+http://…` will send the same checks, on the trace's virtual
//! clock, to a real store — once `RespStore` and `RestStore` land in the library.

use std::fmt;
use std::str::FromStr;

use edgelimit::Policy;

use crate::error::SimError;
use crate::event::Event;
use crate::replay::Replay;

/// The store named by `--store`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StoreChoice {
    /// The library's steps in process.
    #[default]
    Memory,
    /// A Redis server over RESP (`redis://host:port`).
    Redis(String),
    /// An Upstash REST endpoint (`upstash+http://host:port`, token in `UPSTASH_REDIS_REST_TOKEN`).
    Upstash(String),
}

impl FromStr for StoreChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "memory" {
            Ok(StoreChoice::Memory)
        } else if s.starts_with("redis://") || s.starts_with("rediss://") {
            Ok(StoreChoice::Redis(s.to_string()))
        } else if let Some(rest) = s.strip_prefix("upstash+") {
            Ok(StoreChoice::Upstash(rest.to_string()))
        } else {
            Err(format!(
                "unknown store `{s}` (expected memory, redis://…, or upstash+http(s)://…)"
            ))
        }
    }
}

impl fmt::Display for StoreChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreChoice::Memory => f.write_str("memory"),
            StoreChoice::Redis(url) => f.write_str(url),
            StoreChoice::Upstash(url) => write!(f, "upstash+{url}"),
        }
    }
}

impl StoreChoice {
    /// Whether decisions come from outside the process.
    pub fn is_external(&self) -> bool {
        !matches!(self, StoreChoice::Memory)
    }

    /// Connects, or `None` for the in-process replay.
    pub fn connect(
        &self,
        _policies: &[Policy],
    ) -> Result<Option<Box<dyn ExternalStore>>, SimError> {
        match self {
            StoreChoice::Memory => Ok(None),
            StoreChoice::Redis(_) => Err(SimError::Usage(
                "--store redis://: not yet — edgelimit::store::RespStore is not in this build of \
                 the library; replay with --store memory (the same steps) until it lands"
                    .into(),
            )),
            StoreChoice::Upstash(_) => Err(SimError::Usage(
                "--store upstash+http://: not yet — edgelimit::store::RestStore is not in this \
                 build of the library; replay with --store memory (the same steps) until it lands"
                    .into(),
            )),
        }
    }
}

/// A real store under replay: events are batched into checks and their decisions recorded.
pub trait ExternalStore: fmt::Debug {
    /// Queues one event, deciding a batch when full.
    fn push(&mut self, ev: Event, replay: &mut Replay) -> Result<(), SimError>;
    /// Decides whatever is queued.
    fn flush(&mut self, replay: &mut Replay) -> Result<(), SimError>;
}
