//! Whether the isolate's denial cache would ever have been full: the one piece of a
//! configuration replay's state that spans identifiers when the cache holds as many denials as
//! it can (it then drops the soonest to expire, whoever they belong to). Short of that, each
//! denial is answered from the cache by its own (limit, identifier) alone, so replay threads
//! holding distinct identifiers decide as one isolate would.
//!
//! A denial is kept at most the cache's time (`denial_cache_ms`) from when it was made, so the
//! denials held at any moment were all made in the cache's time before it (or, where the
//! trace's clock steps back, up to that step after it): counting the denials the cache keeps per
//! span of the cache's time, in every thread, bounds what one isolate would have held. A denial
//! of a (limit, identifier) the cache already holds replaces its entry, so each span counts the
//! distinct (limit, identifier) pairs denied in it; a pair is denied on one thread only (its
//! requests are all there), so the threads' counts add up.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use edgelimit::Identifier;

/// A denial's key: its limit's name (by address: two equal names counted apart, which only
/// counts more) and its identifier.
type Key = (usize, Identifier);

/// Spans of the cache's time kept whole behind the latest one: the pairs of older ones are
/// dropped and a denial there counted as new (which only counts more).
const KEPT_SPANS: u64 = 4;

/// Denials the cache keeps, counted per span of the cache's time.
#[derive(Debug, Clone, Default)]
pub(super) struct DenialSpans {
    span_ms: u64,
    /// Per span: the distinct pairs denied in it.
    counts: HashMap<u64, u64>,
    /// The pairs of the latest spans.
    pairs: HashMap<u64, HashSet<Key>>,
    latest: u64,
}

impl DenialSpans {
    /// Counts for a cache keeping a denial `span_ms` at most (more than 0).
    pub(super) fn new(span_ms: u64) -> DenialSpans {
        DenialSpans {
            span_ms: span_ms.max(1),
            ..DenialSpans::default()
        }
    }

    /// A denial of `identifier` under the limit `name` kept at `now_ms`.
    pub(super) fn add(&mut self, now_ms: u64, name: &Arc<str>, identifier: &Identifier) {
        let span = now_ms / self.span_ms;
        if span > self.latest {
            self.latest = span;
            let oldest = span.saturating_sub(KEPT_SPANS);
            self.pairs.retain(|s, _| *s >= oldest);
        }
        let new = match self.pairs.get_mut(&span) {
            Some(pairs) => {
                pairs.insert((Arc::as_ptr(name).cast::<u8>() as usize, identifier.clone()))
            }
            None if span + KEPT_SPANS < self.latest => true,
            None => {
                let key = (Arc::as_ptr(name).cast::<u8>() as usize, identifier.clone());
                self.pairs.insert(span, HashSet::from([key]));
                true
            }
        };
        if new {
            *self.counts.entry(span).or_default() += 1;
        }
    }

    /// Adds another thread's counts.
    pub(super) fn merge(&mut self, other: &DenialSpans) {
        // Every thread's cache keeps denials as long: an empty count takes the others' span.
        self.span_ms = self.span_ms.max(other.span_ms);
        for (span, n) in &other.counts {
            *self.counts.entry(*span).or_default() += n;
        }
    }

    /// Whether a cache of `capacity` denials could have been full at a denial made by one
    /// isolate seeing every counted denial, the trace's clock stepping back at most
    /// `step_back_ms`: when any run of consecutive spans covering the cache's time and that
    /// step holds more than `capacity` denials.
    pub(super) fn could_fill(&self, capacity: usize, step_back_ms: u64) -> bool {
        // A denial at `t` meets those made in (t − span, t + step back]: within this many
        // consecutive spans.
        let width = 2 + step_back_ms.div_ceil(self.span_ms.max(1));
        let mut spans: Vec<u64> = self.counts.keys().copied().collect();
        spans.sort_unstable();
        spans.iter().any(|&first| {
            let held: u64 = (first..first.saturating_add(width))
                .filter_map(|s| self.counts.get(&s))
                .sum();
            held >= capacity as u64
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_is_full_only_with_as_many_denials_within_its_time() {
        let name: Arc<str> = Arc::from("per-ip");
        let id = |n: u64| Identifier::from(format!("192.0.2.{n}").as_str());
        let mut spans = DenialSpans::new(1_000);
        for t in 0..9 {
            spans.add(10_000 + t * 100, &name, &id(t));
            // Denied again: the cache holds it once.
            spans.add(10_050 + t * 100, &name, &id(t));
        }
        assert!(!spans.could_fill(10, 0));
        let mut other = DenialSpans::new(1_000);
        other.add(11_500, &name, &id(100));
        spans.merge(&other);
        assert!(spans.could_fill(10, 0), "ten denials within two spans");
        // Far apart, they never meet.
        let mut apart = DenialSpans::new(1_000);
        for t in 0..20 {
            apart.add(t * 5_000, &name, &id(t));
        }
        assert!(!apart.could_fill(2, 0));
        assert!(
            apart.could_fill(2, 5_000),
            "a clock stepping back brings them together"
        );
    }
}
