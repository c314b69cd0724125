//! The requests a suggestion is searched over, held twice: in trace order (for the verifying
//! replay through the policy engine) and grouped by client (for the searches, which replay one
//! client at a time). 40 bytes a request: a month of a busy site's logs is searched on a machine
//! with the memory for it, or one day at a time.

use crate::event::{Event, Interner};

/// One stream of requests (a `--key`, or one limit of a configuration) and its clients.
#[derive(Debug)]
pub struct Traffic {
    /// What the stream is (`--key ip`, `rule api, limit per-ip`).
    pub name: String,
    /// The requests in trace order.
    events: Vec<Event>,
    /// Each client's `(time_ms, cost)`s in order, client after client.
    grouped: Vec<(u64, i64)>,
    /// Where client `c`'s requests start in `grouped` (one more entry than clients).
    starts: Vec<usize>,
    /// The clients' names.
    interner: Interner,
}

impl Traffic {
    /// The stream of `events` (in trace order, clients numbered by `interner`).
    pub fn new(name: String, events: Vec<Event>, interner: Interner) -> Traffic {
        let clients = interner.len();
        let mut starts = vec![0usize; clients + 1];
        for ev in &events {
            starts[ev.client as usize + 1] += 1;
        }
        for c in 0..clients {
            starts[c + 1] += starts[c];
        }
        let mut next = starts.clone();
        let mut grouped = vec![(0u64, 0i64); events.len()];
        for ev in &events {
            let at = &mut next[ev.client as usize];
            grouped[*at] = (ev.time_ms, ev.cost);
            *at += 1;
        }
        Traffic {
            name,
            events,
            grouped,
            starts,
            interner,
        }
    }

    /// Distinct clients.
    pub fn clients(&self) -> usize {
        self.starts.len() - 1
    }

    /// Requests.
    pub fn requests(&self) -> u64 {
        self.events.len() as u64
    }

    /// Client `c`'s requests in order.
    pub fn client(&self, c: usize) -> &[(u64, i64)] {
        &self.grouped[self.starts[c]..self.starts[c + 1]]
    }

    /// The requests in trace order.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The clients' names.
    pub fn interner(&self) -> &Interner {
        &self.interner
    }
}
