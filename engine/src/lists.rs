//! Deny and allow lists at the edge (docs/design.md §4, "Lists at the edge"): the entries written
//! in the configuration, matched in the isolate before any store call; the sources a request
//! offers the lists ([`ProbeSource`]); the isolate's cache of denials the dynamic lists (in Redis)
//! answered ([`DenyCache`]), so a blocked client's next requests cost no Redis command; and the
//! counters of list denials. Pure: the clock is an argument.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use edgelimit::control::list::{Candidates, Gate, ListEntry, ListProbe};
use smallvec::SmallVec;

use crate::identify::{IdentifierSource, RequestView};

/// The configuration-wide deny list's name (static entries: `deny`; dynamic: the `deny` list in
/// Redis).
pub const DENY: &str = "deny";
/// The configuration-wide allow list's name.
pub const ALLOW: &str = "allow";

/// The deny list of rule `rule`: `deny:<rule>`.
pub fn rule_deny(rule: &str) -> String {
    format!("{DENY}:{rule}")
}

/// The allow list of rule `rule`: `allow:<rule>`.
pub fn rule_allow(rule: &str) -> String {
    format!("{ALLOW}:{rule}")
}

/// The gate of rule `rule`'s checks: the configuration-wide lists, then the rule's own
/// (`deny`, `deny:<rule>`; `allow`, `allow:<rule>`). Built once per rule, with the rule.
pub fn rule_gate(rule: &str) -> Gate {
    Gate::new(
        vec![DENY.to_string(), rule_deny(rule)],
        vec![ALLOW.to_string(), rule_allow(rule)],
    )
}

/// The most denials the isolate remembers (the soonest to lapse is forgotten first).
pub const DENY_CACHE_CAPACITY: usize = 10_000;

/// A source a request offers the lists: the client's country, or anything a limit can be
/// identified by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeSource {
    /// `country`: `request.cf.country`.
    Country,
    /// `ip`, `header:<name>`, `query:<name>`, `path:<n>`, `api-key:<source>`.
    Request(IdentifierSource),
}

impl ProbeSource {
    /// Parses a list entry's source: `country`, or an identifier source other than `custom:`
    /// (no list entry can name one).
    pub fn parse(text: &str) -> Result<ProbeSource, String> {
        match text.trim() {
            "country" => Ok(ProbeSource::Country),
            other => match IdentifierSource::parse(other)? {
                source if source.custom_name().is_some() => Err(format!(
                    "`{other}`: lists cannot hold custom sources (list entries name a request's \
                     own parts: ip, country, header:, query:, path:, api-key:)"
                )),
                source => Ok(ProbeSource::Request(source)),
            },
        }
    }

    /// The source in canonical form, as list entries spell it.
    pub fn spec(&self) -> String {
        match self {
            ProbeSource::Country => "country".to_string(),
            ProbeSource::Request(source) => source.spec(),
        }
    }

    /// The value a list entry of this source would match in `request`.
    pub fn value<R: RequestView + ?Sized>(&self, request: &R) -> Option<String> {
        self.value_ref(request).map(Cow::into_owned)
    }

    /// [`ProbeSource::value`], borrowed from the request when it holds the value.
    fn value_ref<'r, R: RequestView + ?Sized>(&self, request: &'r R) -> Option<Cow<'r, str>> {
        match self {
            ProbeSource::Country => request
                .country()
                .map(|c| c.trim().to_ascii_uppercase())
                .filter(|c| !c.is_empty())
                .map(Cow::Owned),
            ProbeSource::Request(source) => source.list_value_ref(request),
        }
    }
}

/// The sources every probe carries, whatever the configuration: the client address and country.
pub fn base_sources() -> Vec<(String, ProbeSource)> {
    vec![
        (
            "ip".to_string(),
            ProbeSource::Request(IdentifierSource::ClientIp(Default::default())),
        ),
        ("country".to_string(), ProbeSource::Country),
    ]
}

/// What `request` offers the lists: one value per source in `sources` that it has.
pub fn probe<R: RequestView + ?Sized>(sources: &[(String, ProbeSource)], request: &R) -> ListProbe {
    let mut probe = ListProbe::new();
    for (spec, source) in sources {
        if let Some(value) = source.value_ref(request) {
            probe = probe.with(spec, &value);
        }
    }
    probe
}

/// The most clients whose probes a `ProbeCache` keeps: a few MB at most (an address's
/// candidates take one to two kB).
pub const PROBE_CACHE_CAPACITY: usize = 4096;

/// The probes of the clients an isolate served lately, their candidates built. What a request
/// offers the lists follows from its values alone, and its candidates (an address and each of
/// its prefixes, as text) are most of what a gated request formats: a client's next requests
/// take them from here rather than write them again. Forgotten all at once when full.
#[derive(Debug, Default)]
pub(crate) struct ProbeCache {
    probes: HashMap<Box<str>, ListProbe>,
    /// The key of the request at hand (each source's value, length-prefixed), kept to reuse its
    /// buffer.
    key: String,
}

impl ProbeCache {
    /// [`probe`] of `request`, from the cache when a request with the same values came lately.
    pub(crate) fn probe<R: RequestView + ?Sized>(
        &mut self,
        sources: &[(String, ProbeSource)],
        request: &R,
    ) -> ListProbe {
        let values: SmallVec<[Option<Cow<'_, str>>; 4]> = sources
            .iter()
            .map(|(_, source)| source.value_ref(request))
            .collect();
        self.key.clear();
        for value in &values {
            match value {
                // Length-prefixed (a length as one character, almost always): no two lists of
                // values share a key.
                Some(value) => {
                    match u32::try_from(value.len()).ok().and_then(char::from_u32) {
                        Some(len) => self.key.push(len),
                        None => {
                            let _ = write!(self.key, "\u{FFFF}{}:", value.len());
                        }
                    }
                    self.key.push_str(value);
                }
                None => self.key.push('-'),
            }
        }
        if let Some(probe) = self.probes.get(self.key.as_str()) {
            return probe.clone();
        }
        let mut probe = ListProbe::new();
        for ((spec, _), value) in sources.iter().zip(&values) {
            if let Some(value) = value {
                probe = probe.with(spec, value);
            }
        }
        // Built now, so that every clone of the kept probe shares them.
        probe.candidates();
        if self.probes.len() >= PROBE_CACHE_CAPACITY {
            self.probes.clear();
        }
        self.probes.insert(self.key.as_str().into(), probe.clone());
        probe
    }

    /// How many clients' probes are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.probes.len()
    }
}

/// Entries written in the configuration, matched in the isolate.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StaticList {
    entries: Vec<ListEntry>,
    // Sorted, for binary search: a configuration lists a handful of entries, and a hash set's
    // code would cost the Worker's wasm more than the search costs a request.
    members: Vec<String>,
}

impl StaticList {
    /// The list of `entries`.
    pub fn new(entries: Vec<ListEntry>) -> StaticList {
        let mut members: Vec<String> = entries.iter().map(ListEntry::member).collect();
        members.sort_unstable();
        members.dedup();
        StaticList { entries, members }
    }

    /// Its entries, as configured.
    pub fn entries(&self) -> &[ListEntry] {
        &self.entries
    }

    /// Whether it has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry (its member text) matching one of a request's `candidates`, if any.
    pub fn matching(&self, candidates: &Candidates) -> Option<&str> {
        if self.members.is_empty() {
            return None;
        }
        candidates.iter().find_map(|c| {
            let i = self.members.binary_search_by(|m| m.as_str().cmp(c)).ok()?;
            Some(self.members[i].as_str())
        })
    }
}

/// How a request came to be denied by a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Via {
    /// An entry in the configuration, matched in the isolate.
    Static,
    /// A dynamic entry this isolate learnt of from an earlier answer and still remembers.
    Cache,
    /// A dynamic entry, answered by the store in the check's round trip.
    Store,
}

impl Via {
    /// `static`, `cache` or `store`: the name in logs and metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            Via::Static => "static",
            Via::Cache => "cache",
            Via::Store => "store",
        }
    }
}

/// A request refused by a deny list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The list: `deny` or `deny:<rule>`.
    pub list: String,
    /// The matching entry, as stored (`ip 198.51.100.0/24`).
    pub entry: String,
    /// How the match was found.
    pub via: Via,
}

/// Denials the dynamic lists answered, remembered by this isolate for `list_cache_ms`: a blocked
/// client's next requests are refused before any store call. A removal from a list therefore
/// takes effect here within `list_cache_ms`.
///
/// Held as (entry, list, until) sorted by entry, at most [`DENY_CACHE_CAPACITY`]: a lookup is a
/// binary search per candidate, and the Worker's wasm carries no hash map instance for it.
#[derive(Debug)]
pub struct DenyCache {
    ttl_ms: u64,
    entries: Vec<(String, Arc<str>, u64)>,
    /// The soonest `until` held: nothing lapses before it, so most lookups purge nothing.
    soonest: u64,
}

impl DenyCache {
    /// A cache remembering each denial for `ttl_ms` (0: nothing is remembered).
    pub fn new(ttl_ms: u64) -> DenyCache {
        DenyCache {
            ttl_ms,
            entries: Vec::new(),
            soonest: u64::MAX,
        }
    }

    fn purge(&mut self, now_ms: u64) {
        if now_ms < self.soonest {
            return;
        }
        self.entries.retain(|(_, _, until)| *until > now_ms);
        self.soonest = self.entries.iter().map(|e| e.2).min().unwrap_or(u64::MAX);
    }

    /// Remembers that `entry` of list `list` denied a request at `now_ms`.
    pub fn remember(&mut self, list: &str, entry: &str, now_ms: u64) {
        if self.ttl_ms == 0 {
            return;
        }
        self.purge(now_ms);
        let until = now_ms.saturating_add(self.ttl_ms);
        let at = self
            .entries
            .partition_point(|(e, l, _)| (e.as_str(), &**l) < (entry, list));
        match self.entries.get_mut(at) {
            Some((e, l, u)) if e == entry && &**l == list => *u = until,
            _ => {
                if self.entries.len() >= DENY_CACHE_CAPACITY {
                    // Full: forget the denial that lapses soonest.
                    if let Some(i) = (0..self.entries.len()).min_by_key(|&i| self.entries[i].2) {
                        self.entries.remove(i);
                    }
                    return self.remember(list, entry, now_ms);
                }
                self.entries
                    .insert(at, (entry.to_string(), Arc::from(list), until));
            }
        }
        self.soonest = self.soonest.min(until);
    }

    /// Remembers `denial` at `now_ms` when the store's lists gave it: a static entry needs no
    /// memory, and a remembered answer is not remembered again (its time would never lapse).
    pub fn remember_denial(&mut self, denial: &Denial, now_ms: u64) {
        if denial.via == Via::Store {
            self.remember(&denial.list, &denial.entry, now_ms);
        }
    }

    /// A remembered denial by one of `lists` of a request offering `candidates`, at `now_ms`.
    pub fn lookup(
        &mut self,
        lists: &[&str],
        candidates: &Candidates,
        now_ms: u64,
    ) -> Option<Denial> {
        self.purge(now_ms);
        if self.entries.is_empty() {
            return None;
        }
        for candidate in candidates {
            let from = self
                .entries
                .partition_point(|(e, _, _)| e.as_str() < candidate);
            let found = self.entries[from..]
                .iter()
                .take_while(|(e, _, _)| e == candidate)
                .find(|(_, l, _)| lists.iter().any(|x| *x == &**l));
            if let Some((_, list, _)) = found {
                return Some(Denial {
                    list: list.to_string(),
                    entry: candidate.to_string(),
                    via: Via::Cache,
                });
            }
        }
        None
    }

    /// How many (entry, list) denials are remembered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Requests denied by a list, by list and [`Via`], for the `/metrics` page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListCounters {
    // A handful of lists: a vector, kept sorted for the page.
    denied: Vec<(String, Via, u64)>,
    shadow_denied: u64,
}

impl ListCounters {
    /// Counts a request refused by `denial`.
    pub fn denied(&mut self, denial: &Denial) {
        let key = (denial.list.as_str(), denial.via);
        match self
            .denied
            .binary_search_by(|(list, via, _)| (list.as_str(), *via).cmp(&key))
        {
            Ok(i) => self.denied[i].2 += 1,
            Err(i) => self.denied.insert(i, (denial.list.clone(), denial.via, 1)),
        }
    }

    /// Counts a request a shadow rule's deny list would have refused.
    pub fn shadow_denied(&mut self) {
        self.shadow_denied += 1;
    }

    /// Requests refused by lists so far.
    pub fn total(&self) -> u64 {
        self.denied.iter().map(|(_, _, n)| n).sum()
    }

    /// The counters as Prometheus text.
    pub fn to_prometheus(&self) -> String {
        let mut out = String::from(
            "# HELP edgelimit_list_denied_total Requests refused with 403 by a deny list, by list and how the match was found (static, cache, store).\n\
             # TYPE edgelimit_list_denied_total counter\n",
        );
        for (list, via, n) in &self.denied {
            let list = list.replace(['\\', '"', '\n'], "_");
            let _ = writeln!(
                out,
                "edgelimit_list_denied_total{{list=\"{list}\",via=\"{}\"}} {n}",
                via.as_str()
            );
        }
        out.push_str(
            "# HELP edgelimit_list_shadow_denied_total Requests a shadow rule's deny list would have refused.\n\
             # TYPE edgelimit_list_shadow_denied_total counter\n",
        );
        let _ = writeln!(
            out,
            "edgelimit_list_shadow_denied_total {}",
            self.shadow_denied
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identify::OwnedRequest;

    fn entry(text: &str) -> ListEntry {
        text.parse().unwrap()
    }

    #[test]
    fn static_lists_match_a_prefix_of_the_client_address() {
        let list = StaticList::new(vec![entry("ip 198.51.100.0/24"), entry("country CN")]);
        let request = |ip: &str| OwnedRequest::get("h", "/").with_header("cf-connecting-ip", ip);
        let candidates = |r: &OwnedRequest| probe(&base_sources(), r).candidates().clone();
        assert_eq!(
            list.matching(&candidates(&request("198.51.100.77"))),
            Some(entry("ip 198.51.100.0/24").member().as_str())
        );
        assert_eq!(list.matching(&candidates(&request("198.51.101.1"))), None);
        let from_cn = request("203.0.113.1").with_country("cn");
        assert_eq!(
            list.matching(&candidates(&from_cn)),
            Some(entry("country CN").member().as_str())
        );
        assert_eq!(StaticList::default().matching(&candidates(&from_cn)), None);
    }

    #[test]
    fn the_probe_cache_gives_what_probing_the_request_gives() {
        let sources = base_sources();
        let mut cache = ProbeCache::default();
        let from = |ip: &str| OwnedRequest::get("h", "/").with_header("cf-connecting-ip", ip);
        for ip in [
            "198.51.100.7",
            "2001:db8::1",
            "198.51.100.7",
            "198.51.100.70",
            "",
        ] {
            let request = from(ip);
            let cached = cache.probe(&sources, &request);
            let probed = probe(&sources, &request);
            assert_eq!(cached, probed, "{ip}");
            assert_eq!(cached.candidates(), probed.candidates(), "{ip}");
        }
        let from_cn = from("198.51.100.7").with_country("CN");
        assert_eq!(
            cache.probe(&sources, &from_cn),
            probe(&sources, &from_cn),
            "another country is another client"
        );
        // 198.51.100.7 twice, the others once each.
        assert_eq!(cache.len(), 5);
    }

    #[test]
    fn probe_sources_parse_and_read_their_values() {
        assert_eq!(ProbeSource::parse("country"), Ok(ProbeSource::Country));
        assert_eq!(
            ProbeSource::parse("api-key:header:Authorization")
                .unwrap()
                .spec(),
            "api-key:header:authorization"
        );
        assert!(ProbeSource::parse("cookie:x").is_err());
        assert!(ProbeSource::parse("custom:user")
            .unwrap_err()
            .contains("cannot hold custom sources"));
        let r = OwnedRequest::get("h", "/").with_country(" de ");
        assert_eq!(ProbeSource::Country.value(&r).as_deref(), Some("DE"));
        assert_eq!(
            ProbeSource::Country.value(&OwnedRequest::get("h", "/")),
            None
        );
        assert_eq!(entry("header:x-api-key abc").source(), "header:x-api-key");
    }

    #[test]
    fn the_deny_cache_answers_within_its_time_and_for_its_lists_only() {
        let mut cache = DenyCache::new(1_000);
        let member = entry("ip 198.51.100.0/24").member();
        let candidates: Candidates = ["ip 198.51.100.7", member.as_str()].into_iter().collect();
        let global = [DENY];
        assert_eq!(cache.lookup(&global, &candidates, 0), None);
        cache.remember(DENY, &member, 10);
        let hit = cache.lookup(&global, &candidates, 500).expect("remembered");
        assert_eq!(
            (hit.list.as_str(), hit.entry.as_str(), hit.via),
            (DENY, member.as_str(), Via::Cache)
        );
        // Another rule's list does not deny this request.
        assert_eq!(
            cache.lookup(&[rule_deny("api").as_str()], &candidates, 500),
            None
        );
        // Forgotten after the cache time: the store is asked again.
        assert_eq!(cache.lookup(&global, &candidates, 1_010), None);
        assert!(cache.is_empty());
        // A cache time of zero remembers nothing.
        let mut off = DenyCache::new(0);
        off.remember(DENY, &member, 10);
        assert_eq!(off.lookup(&global, &candidates, 11), None);
    }

    #[test]
    fn only_the_stores_denials_are_remembered() {
        let mut cache = DenyCache::new(1_000);
        let c: Candidates = ["ip 1.2.3.4"].into_iter().collect();
        let global = [DENY];
        let denial = |via| Denial {
            list: DENY.to_string(),
            entry: "ip 1.2.3.4".to_string(),
            via,
        };
        // A static entry needs no memory; a remembered answer renewed by its own use would
        // never lapse.
        cache.remember_denial(&denial(Via::Static), 0);
        cache.remember_denial(&denial(Via::Cache), 0);
        assert!(cache.lookup(&global, &c, 1).is_none());
        cache.remember_denial(&denial(Via::Store), 0);
        assert_eq!(
            cache.lookup(&global, &c, 1).map(|d| d.via),
            Some(Via::Cache)
        );
    }

    #[test]
    fn one_entry_remembered_for_two_lists_keeps_both() {
        let mut cache = DenyCache::new(1_000);
        cache.remember(DENY, "ip 1.2.3.4", 0);
        cache.remember(&rule_deny("api"), "ip 1.2.3.4", 600);
        let c: Candidates = ["ip 1.2.3.4"].into_iter().collect();
        assert!(cache.lookup(&[DENY], &c, 900).is_some());
        assert!(cache.lookup(&[DENY], &c, 1_100).is_none());
        assert!(cache
            .lookup(&[rule_deny("api").as_str()], &c, 1_100)
            .is_some());
        assert_eq!(cache.len(), 1, "the lapsed one is forgotten");
    }

    #[test]
    fn counters_print_by_list_and_way() {
        let mut c = ListCounters::default();
        let d = |via| Denial {
            list: DENY.to_string(),
            entry: "ip 1.2.3.4".to_string(),
            via,
        };
        c.denied(&d(Via::Static));
        c.denied(&d(Via::Cache));
        c.denied(&d(Via::Cache));
        c.shadow_denied();
        let text = c.to_prometheus();
        assert!(
            text.contains("edgelimit_list_denied_total{list=\"deny\",via=\"cache\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("edgelimit_list_denied_total{list=\"deny\",via=\"static\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("edgelimit_list_shadow_denied_total 1"),
            "{text}"
        );
        assert_eq!(c.total(), 3);
    }
}
