//! Every client's state, in client-major vectors indexed by dense client id.
//!
//! On traces with many clients, replay speed comes down to how many cache lines one request
//! touches, and how many of those are found only through a pointer read from another (each such
//! miss waits for the one before). So a client's record — the request count, the fixed-size
//! states in their word form, and each policy's admitted cost in its trailing reference window —
//! is one run of words starting on a cache line; its sliding logs (inline, not boxed as in
//! `State`) and its rings each have lines of their own. Rarely written error counts live apart.

use super::layout::Layout;
use super::ring::Ring;
use super::states::LogCell;
use crate::event::Event;

/// Words per cache line.
const LINE_WORDS: usize = 8;

/// One client's state, borrowed.
#[derive(Debug)]
pub(super) struct Client<'a> {
    pub(super) words: &'a mut [u64],
    pub(super) logs: &'a mut [LogCell],
    pub(super) rings: &'a mut [Ring],
    /// `[false allows, false denies]` per policy.
    pub(super) errors: &'a mut [[u32; 2]],
}

/// The clients' states.
#[derive(Debug)]
pub(super) struct Clients {
    /// Words per client, a whole number of cache lines.
    stride: usize,
    logs_per: usize,
    rings_per: usize,
    errors_per: usize,
    /// Clients with room in the vectors below.
    capacity: usize,
    /// The records, client `c`'s at `base + c·stride`: `base` skips to the first cache line
    /// boundary of the allocation.
    words: Vec<u64>,
    base: usize,
    logs: Vec<LogCell>,
    rings: Vec<Ring>,
    errors: Vec<[u32; 2]>,
}

impl Clients {
    /// No clients yet, with room for the states `layout` describes.
    pub(super) fn new(layout: &Layout) -> Clients {
        Clients {
            stride: layout.words.div_ceil(LINE_WORDS) * LINE_WORDS,
            logs_per: layout.logs,
            rings_per: layout.groups.len(),
            errors_per: layout.runs.len(),
            capacity: 0,
            words: Vec::new(),
            base: 0,
            logs: Vec::new(),
            rings: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// Clients with room (every client below has a state, fresh or not).
    pub(super) fn len(&self) -> usize {
        self.capacity
    }

    /// Makes room for client `c`. Every fresh state is all zeros (`Default`), as are the sums and
    /// counts.
    #[inline]
    pub(super) fn admit(&mut self, c: u32) {
        let c = c as usize;
        if c >= self.capacity {
            self.grow(c);
        }
    }

    /// Grows geometrically, so a trace with many clients does not resize on every new one.
    #[cold]
    fn grow(&mut self, c: usize) {
        let len = (c + 1).max(self.capacity * 2).max(1024);
        let mut words = vec![0u64; len * self.stride + LINE_WORDS - 1];
        let base = line_offset(&words);
        let old = &self.words[self.base..][..self.capacity * self.stride];
        words[base..][..old.len()].copy_from_slice(old);
        (self.words, self.base) = (words, base);
        self.logs.resize_with(len * self.logs_per, LogCell::default);
        self.rings.resize_with(len * self.rings_per, Ring::default);
        self.errors.resize(len * self.errors_per, [0; 2]);
        self.capacity = len;
    }

    /// Client `c`'s state (admitted before).
    #[inline]
    pub(super) fn get(&mut self, c: u32) -> Client<'_> {
        let c = c as usize;
        Client {
            words: &mut self.words[self.base + c * self.stride..][..self.stride],
            logs: &mut self.logs[c * self.logs_per..][..self.logs_per],
            rings: &mut self.rings[c * self.rings_per..][..self.rings_per],
            errors: &mut self.errors[c * self.errors_per..][..self.errors_per],
        }
    }

    /// Client `c`'s record.
    pub(super) fn words(&self, c: usize) -> &[u64] {
        &self.words[self.base + c * self.stride..][..self.stride]
    }

    /// Client `c`'s sliding logs.
    pub(super) fn logs(&self, c: usize) -> &[LogCell] {
        &self.logs[c * self.logs_per..][..self.logs_per]
    }

    /// Client `c`'s error counts, one `[false allows, false denies]` per policy.
    pub(super) fn errors(&self, c: usize) -> &[[u32; 2]] {
        &self.errors[c * self.errors_per..][..self.errors_per]
    }

    /// Loads one word of each line the steps of `events` read directly (folded into the result
    /// so the loads are kept, in as few instructions as possible: the more of them fit in the
    /// CPU's window, the more misses it serves at once).
    #[inline]
    pub(super) fn touch_records(&self, events: &[Event]) -> u64 {
        let mut seen = 0;
        for ev in events {
            let c = ev.client as usize;
            if c >= self.capacity {
                continue;
            }
            for line in self.words(c).chunks(LINE_WORDS) {
                seen ^= line[0];
            }
            for log in self.logs(c) {
                seen ^= log.0.seen_ms();
            }
            for ring in &self.rings[c * self.rings_per..][..self.rings_per] {
                seen ^= ring.front_ms();
            }
        }
        seen
    }

    /// Loads the ends of the heap buffers of the clients of `events`: a sliding log's step reads
    /// its oldest entry first and appends at the newest; a ring is read at its front when an
    /// entry leaves.
    #[inline]
    pub(super) fn touch_buffers(&self, events: &[Event]) -> u64 {
        let mut seen = 0;
        for ev in events {
            let c = ev.client as usize;
            if c >= self.capacity {
                continue;
            }
            for log in self.logs(c) {
                seen ^= log.0.entries().next().map_or(0, |(t, _)| t);
                seen ^= log.0.newest_ms().unwrap_or(0);
            }
            for ring in &self.rings[c * self.rings_per..][..self.rings_per] {
                seen ^= ring.touch();
            }
        }
        seen
    }
}

/// How many words from the start of `words` the first cache line boundary is.
fn line_offset(words: &[u64]) -> usize {
    let misaligned = words.as_ptr() as usize % (LINE_WORDS * 8);
    (LINE_WORDS * 8 - misaligned) % (LINE_WORDS * 8) / 8
}
