//! Events, the unit every reader and generator produces, and the interner that turns client
//! names into dense ids so replay can keep its states in plain vectors.

use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

/// One request: when (UTC epoch ms), who (a dense client id), how much quota it costs, and how
/// long it was in flight when the trace says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Event {
    /// UTC epoch milliseconds.
    pub time_ms: u64,
    /// The client's dense id (see [`Interner`]).
    pub client: u32,
    /// How long the request was in flight (ms; a CSV `duration_ms` column, Logpush's
    /// `OriginResponseDurationMs`), or [`NO_DURATION`] when the trace does not say. A `u32`
    /// beside `client` keeps an event in 24 bytes (the reorder buffer holds many); see
    /// [`Event::duration`].
    pub duration_ms: u32,
    /// The request's cost (1 for a log line).
    pub cost: i64,
}

/// [`Event::duration_ms`] of a request whose trace line carries no duration.
pub const NO_DURATION: u32 = u32::MAX;

/// The longest duration a trace may give a request: `u32::MAX − 1` ms, about 49.7 days (longer
/// than any lease timeout a concurrency limit may well have; the largest, 366 days, is allowed
/// by the library but no request runs that long).
pub const MAX_DURATION_MS: u64 = (u32::MAX - 1) as u64;

impl Event {
    /// An event with no duration.
    pub fn new(time_ms: u64, client: u32, cost: i64) -> Event {
        Event {
            time_ms,
            client,
            duration_ms: NO_DURATION,
            cost,
        }
    }

    /// How long the request was in flight, if the trace says.
    pub fn duration(&self) -> Option<u64> {
        (self.duration_ms != NO_DURATION).then_some(u64::from(self.duration_ms))
    }
}

/// Maps client names to dense ids `0, 1, 2, …` in order of first appearance.
///
/// Ids are assigned as lines are parsed, so two reads of the same trace give the same ids — the
/// report's second pass (the boundary charts) relies on that.
#[derive(Debug, Default)]
pub struct Interner {
    ids: HashMap<Box<[u8]>, u32, FxBuildHasher>,
    names: Vec<Box<[u8]>>,
}

impl Interner {
    /// An empty interner.
    pub fn new() -> Interner {
        Interner::default()
    }

    /// The id of `name`, assigning the next one if it is new; `None` once 2^32 ids are taken.
    pub fn intern(&mut self, name: &[u8]) -> Option<u32> {
        if let Some(&id) = self.ids.get(name) {
            return Some(id);
        }
        let id = u32::try_from(self.names.len()).ok()?;
        self.names.push(name.into());
        self.ids.insert(name.into(), id);
        Some(id)
    }

    /// The name of `id`, lossily decoded (logs are not always UTF-8).
    pub fn name(&self, id: u32) -> String {
        self.names
            .get(id as usize)
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .unwrap_or_else(|| format!("#{id}"))
    }

    /// How many distinct clients were seen.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether no client was seen.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}
