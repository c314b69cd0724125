//! A request read and matched before it goes down the request path ([`ReadAhead`]): for a host
//! that must know first whether a request is limited at all (the tower layer passes what no
//! rule matches straight to its service, untouched). The reading and the match are the
//! engine's, done once: the request path takes them as found rather than reading the request
//! or matching its rules again.

use smallvec::SmallVec;

use crate::config::Config;
use crate::identify::{IdentifierSource, RequestView};
use crate::plan::MatchedRules;
use crate::reading::Reading;

/// A request as the engine read it ahead of the request path ([`ReadAhead::read`]): which
/// rules it matches, and its path and host where the reading differs from what was sent. Owned
/// (kept apart from the request's borrow), so that a host may move the request on and give
/// this back with it ([`crate::Incoming::read_ahead`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadAhead {
    /// Where in the configuration's rules the rules it matches are, in configuration order.
    places: SmallVec<[usize; 4]>,
    /// Its path and host as read where they differ from the request's, when both are
    /// readable; `None` when one is not (the request path reads it again to say why, and
    /// refuses it).
    changes: Option<(Option<String>, Option<String>)>,
}

impl ReadAhead {
    /// Whether `request` goes down the request path of `config`, and how it was read: `None`
    /// when it is not limited at all (no rule matches it, or `exempt` lets its path, as read,
    /// pass). A request whose path or host cannot be read is taken, with no rule, for the
    /// request path to refuse.
    pub fn read<R: RequestView + ?Sized>(
        config: &Config,
        request: &R,
        exempt: impl Fn(&str) -> bool,
    ) -> Option<ReadAhead> {
        let read = config.reading(request);
        if read.unreadable().is_some() {
            return Some(ReadAhead {
                places: SmallVec::new(),
                changes: None,
            });
        }
        if exempt(read.path()) {
            return None;
        }
        let places = config.matched_places(&read);
        (!places.is_empty()).then(|| ReadAhead {
            places,
            changes: Some(read.changes()),
        })
    }

    /// `request` (the one read) as read then, without reading it again.
    pub(crate) fn reading<'r, R: RequestView + ?Sized>(
        &'r self,
        config: &Config,
        request: &'r R,
    ) -> Reading<'r, R> {
        match &self.changes {
            Some((path, host)) => config.read_before(
                request,
                path.as_deref().unwrap_or(request.path()),
                host.as_deref().unwrap_or(request.host()),
            ),
            None => config.reading(request),
        }
    }

    /// The rules it matched.
    pub(crate) fn matching<'c>(&self, config: &'c Config) -> MatchedRules<'c> {
        self.places
            .iter()
            .filter_map(|&place| config.rules.get(place))
            .collect()
    }
}

impl Config {
    /// Whether every limited request needs its client address: some limit is keyed by it
    /// (hashed or not), or some list applies (the lists are offered it). A host that resolves
    /// the address lazily may then resolve it up front instead.
    pub fn reads_client_always(&self) -> bool {
        fn reads_client(source: &IdentifierSource) -> bool {
            match source {
                IdentifierSource::ClientIp(_) => true,
                IdentifierSource::ApiKey(inner) => reads_client(inner),
                _ => false,
            }
        }
        self.dynamic_lists
            || !self.deny.is_empty()
            || !self.allow.is_empty()
            || self.rules.iter().any(|rule| {
                !rule.deny.is_empty()
                    || !rule.allow.is_empty()
                    || rule.limits.iter().any(|l| reads_client(&l.source))
            })
    }
}
