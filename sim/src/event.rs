//! Events, the unit every reader and generator produces, and the interner that turns client
//! names into dense ids so replay can keep its states in plain vectors.

use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

/// One request: when (UTC epoch ms), who (a dense client id), and how much quota it costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Event {
    /// UTC epoch milliseconds.
    pub time_ms: u64,
    /// The client's dense id (see [`Interner`]).
    pub client: u32,
    /// The request's cost (1 for a log line).
    pub cost: i64,
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
