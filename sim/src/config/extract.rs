//! A trace's request as the Worker's request path takes it. The replay extracts each request's
//! identifiers ahead of its step — each of the configuration's distinct sources once, an API
//! key's hash remembered for the keys a trace repeats — and matches its rules then, so the step
//! finds them ready (`Replayed`); for the Worker's own log lines, each limit's identifier is
//! the one it logged.

use std::collections::{HashMap, VecDeque};

use edgelimit::Identifier;
use edgelimit_engine::plan::MatchedRules;
use edgelimit_engine::reading::{FieldValues, Reading};
use edgelimit_engine::{
    Config, IdentifierSource, Incoming, LogLine, Missing, RequestView, RuleLimit,
};
use rustc_hash::FxBuildHasher;
use smallvec::SmallVec;

use super::identifiers;
use crate::readers::Request;

/// A limit's identifier for one request: for the Worker's own log lines, the identifier it
/// logged for the limit of that name (then the request's own parts, which hold the path);
/// otherwise the limit's source, as the Worker extracts it.
fn identify<R: RequestView + ?Sized>(
    logged: Option<&LogLine>,
    applied: &RuleLimit,
    request: &R,
) -> Option<Identifier> {
    if let Some(logged) = logged {
        if logged.limits.iter().any(|l| *l.name == *applied.limit.name) {
            return logged.identifier(&applied.limit.name);
        }
    }
    applied.source.extract(request)
}

/// The identifiers one request offers, by source: limits keyed alike (`ip` for several) share
/// one extraction (an `api-key:` source hashes the key) and one `Identifier`.
#[derive(Debug, Default)]
pub(super) struct Extracted {
    /// The configuration's distinct sources.
    sources: Vec<IdentifierSource>,
    /// Each configured limit (by address) with its source's place in `sources`: found by a
    /// pointer's comparison, not by comparing sources.
    limits: Vec<(usize, usize)>,
    /// This request's value per source, once extracted.
    values: Vec<Option<Option<Identifier>>>,
    /// The rules this request matches (by index), when it was prepared: not matched again.
    rules: Option<SmallVec<[u32; 4]>>,
    /// The values of the requests prepared ahead (`EdgeReplay::prepare`), oldest first.
    prepared: VecDeque<Prepared>,
    /// Emptied value buffers, kept to be filled again.
    spare: Vec<Vec<Option<Option<Identifier>>>>,
    /// Per source that hashes its values (`api-key:`), the identifiers made of its latest
    /// values: a trace repeats its keys, and a SHA-256 costs more than the rest of a request's
    /// replay. Empty for the other sources.
    hashed: Vec<HashedValues>,
}

/// The identifiers one hashing source made of its values, up to [`HASHED_VALUES`] of them (then
/// forgotten all at once: a cache, bounded).
type HashedValues = HashMap<Box<str>, Identifier, FxBuildHasher>;

/// How many values a hashing source remembers the identifiers of (a few MiB each).
const HASHED_VALUES: usize = 1 << 17;

/// A request's identifiers, extracted ahead of its step.
#[derive(Debug)]
struct Prepared {
    /// Which request: its time and size (a step whose request differs extracts for itself).
    request: (u64, usize),
    values: Vec<Option<Option<Identifier>>>,
    /// The rules it matches, by index in the configuration.
    rules: SmallVec<[u32; 4]>,
    /// The identifiers' hashes (`identifiers::hash`), to fetch what they will read.
    hashes: SmallVec<[u64; 4]>,
}

/// The key of the bucket a limit with `missing = "shared"` counts requests without an
/// identifier in (see [`Extracted::state_keys`]).
pub(super) const SHARED: u64 = u64::MAX;

/// Where a configured limit lives: it identifies the limit while the configuration is held.
fn address(applied: &RuleLimit) -> usize {
    std::ptr::from_ref(applied) as usize
}

impl Extracted {
    pub(super) fn new(config: &Config) -> Extracted {
        let mut sources: Vec<IdentifierSource> = Vec::new();
        let mut limits = Vec::new();
        for applied in config.rules.iter().flat_map(|r| &r.limits) {
            let slot = match sources.iter().position(|s| *s == applied.source) {
                Some(slot) => slot,
                None => {
                    sources.push(applied.source.clone());
                    sources.len() - 1
                }
            };
            limits.push((address(applied), slot));
        }
        Extracted {
            values: vec![None; sources.len()],
            hashed: sources.iter().map(|_| HashedValues::default()).collect(),
            sources,
            limits,
            ..Extracted::default()
        }
    }

    /// The identifier the source in `slot` gives `request`: `IdentifierSource::extract`, with
    /// what a hashing source made of a value it met lately taken as it was.
    fn extract<R: RequestView + ?Sized>(&mut self, slot: usize, request: &R) -> Option<Identifier> {
        let source = &self.sources[slot];
        if !source.hashes() {
            return source.extract(request);
        }
        let value = source.value(request)?;
        let hashed = &mut self.hashed[slot];
        if let Some(identifier) = hashed.get(&*value) {
            return Some(identifier.clone());
        }
        if hashed.len() >= HASHED_VALUES {
            hashed.clear();
        }
        let identifier = source.identifier_of(&value);
        hashed.insert(value.into(), identifier.clone());
        Some(identifier)
    }

    /// Where the value of `applied`'s source sits in a request's values.
    fn slot(&self, applied: &RuleLimit) -> Option<usize> {
        let at = address(applied);
        match self.limits.iter().find(|(limit, _)| *limit == at) {
            Some(&(_, slot)) => Some(slot),
            // Not a limit of the configuration this was built from (none in practice).
            None => self.sources.iter().position(|s| *s == applied.source),
        }
    }

    /// Keeps a request's emptied values to be filled again.
    fn recycle(&mut self, mut values: Vec<Option<Option<Identifier>>>) {
        values.clear();
        self.spare.push(values);
    }

    /// An empty value per source.
    fn fresh_values(&mut self) -> Vec<Option<Option<Identifier>>> {
        let mut values = self.spare.pop().unwrap_or_default();
        values.resize(self.sources.len(), None);
        values
    }

    /// Extracts, for `request`, the sources of the limits of the rules it matches, to be used
    /// by its step (when it is the next one stepped); returns the hashes of the identifiers.
    pub(super) fn prepare(&mut self, config: &Config, request: &Request) -> &[u64] {
        let mut values = self.fresh_values();
        let mut rules = SmallVec::new();
        let read = config.reading(request);
        for place in config.matched_places(&read) {
            let rule = &config.rules[place];
            rules.push(place as u32);
            for applied in &rule.limits {
                if let Some(slot) = self.slot(applied) {
                    if values[slot].is_none() {
                        values[slot] = Some(self.extract(slot, &read));
                    }
                }
            }
        }
        let hashes = values
            .iter()
            .flatten()
            .flatten()
            .map(|identifier| identifiers::hash(identifier.as_bytes()))
            .collect();
        self.prepared.push_back(Prepared {
            request: (request.time_ms, request.size()),
            values,
            rules,
            hashes,
        });
        &self.prepared.back().expect("just pushed").hashes
    }

    /// Adds to `keys` the hash of every identifier `request`'s limits decide it by — each
    /// limit of each rule it matches, extracted as its step extracts it — and [`SHARED`] for
    /// a limit counting requests without an identifier in one shared bucket. Requests with no
    /// key in common share no state (hashes equal by chance only join more of them). Returns
    /// whether it matches a rule.
    pub(super) fn state_keys(
        &mut self,
        config: &Config,
        request: &Request,
        keys: &mut Vec<u64>,
    ) -> bool {
        let mut values = self.fresh_values();
        let mut matched = false;
        let read = config.reading(request);
        for place in config.matched_places(&read) {
            let rule = &config.rules[place];
            matched = true;
            for applied in &rule.limits {
                let Some(slot) = self.slot(applied) else {
                    continue;
                };
                if values[slot].is_none() {
                    values[slot] = Some(self.extract(slot, &read));
                }
                match &values[slot] {
                    Some(Some(identifier)) => keys.push(identifiers::hash(identifier.as_bytes())),
                    _ if applied.missing == Missing::Shared => keys.push(SHARED),
                    _ if applied.missing == Missing::Address => {
                        keys.push(match config.address_fallback(&read) {
                            Some(address) => identifiers::hash(address.as_bytes()),
                            None => SHARED,
                        })
                    }
                    _ => {}
                }
            }
        }
        self.recycle(values);
        matched
    }

    /// The identifiers' hashes of the request prepared `back` requests before the latest one.
    pub(super) fn prepared_hashes(&self, back: usize) -> Option<&[u64]> {
        let at = self.prepared.len().checked_sub(1 + back)?;
        Some(&self.prepared.get(at)?.hashes)
    }

    /// Forgets the last request's values and takes the next one's: as prepared, or, for a
    /// request not prepared (or not in the order prepared: what was prepared is dropped),
    /// extracted now. The Worker's own lines name each limit's identifier: nothing to extract.
    pub(super) fn next_request(&mut self, config: &Config, request: &Request) {
        let prepared = matches!(
            self.prepared.front(),
            Some(p) if p.request == (request.time_ms, request.size())
        );
        if !prepared {
            while let Some(p) = self.prepared.pop_front() {
                self.recycle(p.values);
            }
            if request.logged.is_none() {
                self.prepare(config, request);
            }
        }
        let done = match self.prepared.pop_front() {
            Some(next) => {
                self.rules = Some(next.rules);
                std::mem::replace(&mut self.values, next.values)
            }
            None => {
                self.rules = None;
                let fresh = self.fresh_values();
                std::mem::replace(&mut self.values, fresh)
            }
        };
        self.recycle(done);
    }
}

/// A trace's request as the Worker's request path takes it: its identifiers as the replay
/// extracted them ahead (each source once), or as the Worker logged them, and its rules as
/// matched ahead.
pub(super) struct Replayed<'a> {
    pub(super) request: &'a Request,
    pub(super) logged: Option<&'a LogLine>,
    pub(super) extracted: &'a Extracted,
}

impl RequestView for Replayed<'_> {
    fn method(&self) -> &str {
        self.request.method()
    }
    fn host(&self) -> &str {
        self.request.host()
    }
    fn path(&self) -> &str {
        self.request.path()
    }
    fn query(&self, name: &str) -> Option<String> {
        self.request.query(name)
    }
    fn header(&self, name: &str) -> Option<String> {
        self.request.header(name)
    }
    fn header_ref(&self, name: &str) -> Option<std::borrow::Cow<'_, str>> {
        self.request.header_ref(name)
    }
    fn header_values(&self, name: &str) -> FieldValues<'_> {
        self.request.header_values(name)
    }
    fn query_values(&self, name: &str) -> FieldValues<'_> {
        self.request.query_values(name)
    }
    fn country(&self) -> Option<String> {
        self.request.country()
    }
}

impl Incoming for Replayed<'_> {
    fn identifier(&self, applied: &RuleLimit, read: &Reading<'_, Self>) -> Option<Identifier> {
        let extracted = self.extracted;
        match (self.logged, extracted.slot(applied)) {
            // An identifier extracted ahead is the request's; one found absent is read again
            // here, so that a field the request repeats is met by this reading (and refused).
            (None, Some(slot)) => match &extracted.values[slot] {
                Some(Some(value)) => Some(value.clone()),
                _ => applied.source.extract(read),
            },
            _ => identify(self.logged, applied, read),
        }
    }

    fn matching<'c>(&self, config: &'c Config, read: &Reading<'_, Self>) -> MatchedRules<'c> {
        match &self.extracted.rules {
            Some(rules) => rules.iter().map(|&i| &config.rules[i as usize]).collect(),
            None => config.matching(read),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::mixed_requests;

    /// A hashing source's identifiers, remembered per value, are the Worker's own extraction,
    /// and each distinct key is hashed once; the other sources are extracted as they are.
    #[test]
    fn hashed_keys_are_remembered_as_the_worker_makes_them() {
        let config = edgelimit_engine::config::file::parse(
            r#"
[[rules]]
name = "api"
limits = [
  { name = "per-key", policy = "fixed 5/1s", identifier = "api-key:header:authorization" },
  { name = "per-user", policy = "fixed 5/1s", identifier = "header:x-user", missing = "allow" },
]
"#,
            "test",
        )
        .unwrap();
        let mut extracted = Extracted::new(&config);
        let requests = mixed_requests(500);
        for request in &requests {
            for slot in 0..2 {
                let source = extracted.sources[slot].clone();
                assert_eq!(
                    extracted.extract(slot, request),
                    source.extract(request),
                    "{source:?}"
                );
            }
        }
        let keys: std::collections::HashSet<_> = requests
            .iter()
            .filter_map(|r| r.header_ref("authorization"))
            .collect();
        assert_eq!(extracted.hashed[0].len(), keys.len());
        assert!(extracted.hashed[1].is_empty());
    }
}
