//! Deny and allow lists (docs/design.md §"Deny and allow lists"): what an entry is, what a
//! request offers the lists, and the gate rule every store applies.
//!
//! A list is a set of entries, each `<source> <value>` with an optional lapse time: `ip
//! 203.0.113.0/24`, `country CN`, `header:x-api-key abc123`, `api-key:header:authorization <sha256
//! hex>`. A store keeps a list as the entries' canonical member texts ([`ListEntry::member`]),
//! each with the epoch ms it lapses at. A request is matched by set membership, never by a scan:
//! [`ListProbe::candidates`] lists every member text an entry matching the request could have
//! (for an address, the address and each of its prefixes), and a list matches when one of them
//! is a live member.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use crate::decision::{Decision, Reason, RETRY_NEVER};
use crate::net::{AddressError, IpPrefix};
use crate::store::StoreError;

/// The lapse time of an entry that never lapses: 2^53 − 1, the largest integer a Redis sorted
/// set's double score (and Lua) holds exactly.
pub const NEVER_MS: u64 = (1 << 53) - 1;

/// The longest list name accepted (names are escaped into a Redis key).
const MAX_LIST_NAME: usize = 200;

/// The longest value an entry may carry: identifiers longer than this are hashed by the Worker
/// before they reach a store, so a longer entry could never match.
const MAX_VALUE: usize = 1024;

/// What part of a request an entry is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Source {
    /// `ip`: the client address (`CF-Connecting-IP`).
    Ip,
    /// `country`: the request's `cf.country` (ISO 3166-1 alpha-2, `T1` for Tor, `XX` unknown).
    Country,
    /// `header:<name>`, the name in lower case.
    Header(String),
    /// `query:<name>`.
    Query(String),
    /// `path:<n>`: the n-th path segment, from 1.
    Path(usize),
    /// `api-key:<source>`: another source's value as its SHA-256 in lower-case hex.
    ApiKey(Box<Source>),
}

const SOURCES: &str =
    "ip, country, header:<name>, query:<name>, path:<n>, api-key:<header|query|path source>";

impl Source {
    fn parse(text: &str) -> Result<Source, String> {
        let unknown = || format!("unknown list source `{text}` (expected one of {SOURCES})");
        match text {
            "ip" => return Ok(Source::Ip),
            "country" => return Ok(Source::Country),
            _ => {}
        }
        let (kind, rest) = text.split_once(':').ok_or_else(unknown)?;
        match kind {
            "header" => {
                let name = rest.to_ascii_lowercase();
                if crate::http::is_header_name(&name) {
                    Ok(Source::Header(name))
                } else {
                    Err(format!("`{rest}` in `{text}` is not a header name"))
                }
            }
            "query" if !rest.is_empty() && !rest.contains(char::is_whitespace) => {
                Ok(Source::Query(rest.to_string()))
            }
            "query" => Err(format!("`{text}` needs a query parameter name")),
            "path" => match rest.parse::<usize>() {
                Ok(n) if n >= 1 => Ok(Source::Path(n)),
                _ => Err(format!("`{text}` needs a path segment number from 1")),
            },
            "api-key" => match Source::parse(rest)? {
                inner @ (Source::Header(_) | Source::Query(_) | Source::Path(_)) => {
                    Ok(Source::ApiKey(Box::new(inner)))
                }
                _ => Err(format!(
                    "`{text}`: an API key comes from a header, a query parameter or a path segment"
                )),
            },
            _ => Err(unknown()),
        }
    }

    /// The canonical value of `value` for this source, or why it cannot be one.
    fn value(&self, value: &str) -> Result<String, String> {
        match self {
            Source::Ip => parse_prefix(value).map(|prefix| prefix.to_string()),
            Source::Country => country(value),
            Source::ApiKey(_) => {
                let hex = value.to_ascii_lowercase();
                if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    Ok(hex)
                } else {
                    Err(format!(
                        "`{value}` is not a SHA-256 in hex (64 hex digits): API keys are listed \
                         hashed, as the Worker keys them (`printf %s KEY | sha256sum`)"
                    ))
                }
            }
            Source::Header(_) | Source::Query(_) | Source::Path(_) => {
                if value.is_empty() {
                    Err("the value is empty".to_string())
                } else if value.len() > MAX_VALUE {
                    Err(format!("the value is longer than {MAX_VALUE} bytes"))
                } else if value.chars().any(char::is_control) {
                    Err("the value contains a control character".to_string())
                } else {
                    Ok(value.to_string())
                }
            }
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Ip => f.write_str("ip"),
            Source::Country => f.write_str("country"),
            Source::Header(name) => write!(f, "header:{name}"),
            Source::Query(name) => write!(f, "query:{name}"),
            Source::Path(n) => write!(f, "path:{n}"),
            Source::ApiKey(inner) => write!(f, "api-key:{inner}"),
        }
    }
}

/// A country code: two letters (any case; stored upper case), `T1` (Tor) or `XX` (unknown).
fn country(value: &str) -> Result<String, String> {
    let code = value.to_ascii_uppercase();
    let letters = code.len() == 2 && code.bytes().all(|b| b.is_ascii_uppercase());
    if letters || code == "T1" {
        Ok(code)
    } else {
        Err(format!(
            "`{value}` is not a country code (two letters as in ISO 3166-1, or T1)"
        ))
    }
}

/// Parses `addr` or `addr/len` with [`IpPrefix`], the one parser of networks. IPv6 prefixes
/// must be a multiple of 4 bits, so an address has 33 candidate prefixes, not 129.
fn parse_prefix(text: &str) -> Result<IpPrefix, String> {
    let prefix: IpPrefix = text.parse().map_err(|e: AddressError| e.to_string())?;
    let len = prefix.prefix_len();
    if prefix.network().is_ipv6() && !len.is_multiple_of(4) {
        return Err(format!(
            "`{text}`: IPv6 prefixes must be a multiple of 4 bits (/{len} is not)"
        ));
    }
    Ok(prefix)
}

/// The first address of `ip`'s `/len` network.
#[cfg(test)]
fn network(ip: IpAddr, len: u8) -> IpAddr {
    IpPrefix::new(ip, len).unwrap().network()
}

/// The canonical text of a prefix: the bare address for a whole address, else `network/len`.
#[cfg(test)]
fn prefix_text(ip: IpAddr, len: u8) -> String {
    IpPrefix::new(ip, len).unwrap().to_string()
}

/// The prefix lengths an address is listed under: every length for IPv4 (33), every multiple of
/// 4 for IPv6 (33), most specific first.
fn prefix_lengths(ip: IpAddr) -> impl Iterator<Item = u8> {
    let (bits, step) = if ip.is_ipv4() { (32u8, 1) } else { (128, 4) };
    (0..=bits / step).rev().map(move |i| i * step)
}

/// One entry of a list: a source and a value, e.g. `ip 203.0.113.0/24`. Parsed with
/// [`FromStr`]; every store keeps it as [`ListEntry::member`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListEntry {
    source: Source,
    value: String,
}

impl FromStr for ListEntry {
    type Err = String;

    /// Parses `<source> <value>`: `ip 203.0.113.7`, `ip 203.0.113.0/24`, `ip 2001:db8::/32`
    /// (IPv6 prefixes: multiples of 4 bits), `country CN`, `header:x-api-key abc123`, `query:key
    /// abc`, `path:2 alice`, `api-key:header:authorization <sha256 hex>`. The error names what
    /// is wrong.
    fn from_str(text: &str) -> Result<ListEntry, String> {
        let text = text.trim();
        let (source, value) = text
            .split_once(char::is_whitespace)
            .ok_or_else(|| format!("`{text}` is not `<source> <value>` (sources: {SOURCES})"))?;
        let source = Source::parse(source)?;
        let value = source
            .value(value.trim())
            .map_err(|e| format!("list entry `{text}`: {e}"))?;
        Ok(ListEntry { source, value })
    }
}

impl ListEntry {
    /// The canonical text a store keeps: `<source> <value>` with the header name in lower case,
    /// an address normalised (a prefix as its network address), a country in upper case, a hash
    /// in lower case. Two entries matching the same requests have the same member.
    pub fn member(&self) -> String {
        format!("{} {}", self.source, self.value)
    }

    /// The source, as text: `ip`, `country`, `header:x-api-key`, …
    pub fn source(&self) -> String {
        self.source.to_string()
    }

    /// The canonical value.
    pub fn value(&self) -> &str {
        &self.value
    }
}

impl fmt::Display for ListEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.source, self.value)
    }
}

/// The member texts a request could match, in order, packed in one string: an IPv4 address
/// alone offers 33, and a `String` each was most of what a gated request allocated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Candidates {
    text: String,
    ends: Vec<usize>,
}

/// The candidates of a request that offers nothing.
static NO_CANDIDATES: Candidates = Candidates {
    text: String::new(),
    ends: Vec::new(),
};

impl Candidates {
    /// How many there are.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The `i`-th, if there are that many.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.text[start..end])
    }

    /// Whether `text` is one of them.
    pub fn contains(&self, text: &str) -> bool {
        self.iter().any(|c| c == text)
    }

    /// Each, in order.
    pub fn iter(&self) -> CandidateIter<'_> {
        CandidateIter {
            text: &self.text,
            ends: self.ends.iter(),
            start: 0,
        }
    }

    /// Appends the text `write` writes, unless it repeats one of the first `among` candidates
    /// (what an earlier source offered: one source never offers a text twice).
    fn push_unless_among(&mut self, among: usize, write: impl FnOnce(&mut String)) {
        let start = self.text.len();
        write(&mut self.text);
        let repeat = self.iter().take(among).any(|c| c == &self.text[start..]);
        if repeat {
            self.text.truncate(start);
        } else {
            self.ends.push(self.text.len());
        }
    }
}

impl std::ops::Index<usize> for Candidates {
    type Output = str;

    fn index(&self, i: usize) -> &str {
        match self.get(i) {
            Some(candidate) => candidate,
            None => panic!("candidate {i} of {}", self.len()),
        }
    }
}

/// The candidates in order: [`Candidates::iter`].
#[derive(Debug, Clone)]
pub struct CandidateIter<'a> {
    text: &'a str,
    ends: std::slice::Iter<'a, usize>,
    start: usize,
}

impl<'a> Iterator for CandidateIter<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let end = *self.ends.next()?;
        let candidate = &self.text[self.start..end];
        self.start = end;
        Some(candidate)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.ends.size_hint()
    }
}

impl ExactSizeIterator for CandidateIter<'_> {}

impl<'a> IntoIterator for &'a Candidates {
    type Item = &'a str;
    type IntoIter = CandidateIter<'a>;

    fn into_iter(self) -> CandidateIter<'a> {
        self.iter()
    }
}

impl<S: AsRef<str>> FromIterator<S> for Candidates {
    /// Candidates given as they are (no repeat removed).
    fn from_iter<I: IntoIterator<Item = S>>(texts: I) -> Candidates {
        let mut out = Candidates::default();
        for text in texts {
            out.text.push_str(text.as_ref());
            out.ends.push(out.text.len());
        }
        out
    }
}

/// What a request offers lists: one value per source it has (`ip` → the client address,
/// `country` → `cf.country`, `header:x-api-key` → that header's value, …). A pair whose source
/// or value cannot be listed (an unknown source, an address that does not parse) offers nothing.
///
/// Its [`ListProbe::candidates`] are built once, on first use, and shared by every clone: the
/// Worker's plan matches its static lists with them, and each store gating a check reads them
/// again from the check's probe.
#[derive(Debug, Clone, Default)]
pub struct ListProbe {
    pairs: Vec<(String, String)>,
    candidates: OnceLock<Arc<Candidates>>,
}

impl PartialEq for ListProbe {
    /// Probes are equal when they offer the same pairs (the candidates follow from them).
    fn eq(&self, other: &Self) -> bool {
        self.pairs == other.pairs
    }
}

impl Eq for ListProbe {}

impl ListProbe {
    /// A probe offering nothing (it matches no list).
    pub const fn new() -> Self {
        ListProbe {
            pairs: Vec::new(),
            candidates: OnceLock::new(),
        }
    }

    /// The same probe offering `value` under `source` (as an entry would name it: `ip`,
    /// `country`, `header:x-api-key`, `api-key:header:authorization` with the hash as value).
    pub fn with(mut self, source: &str, value: &str) -> Self {
        self.pairs
            .push((source.trim().to_string(), value.trim().to_string()));
        // Candidates built before this pair are stale.
        self.candidates = OnceLock::new();
        self
    }

    /// The (source, value) pairs offered, in the order given: what the probe is made of (the
    /// candidates follow from them), e.g. to send it to a store elsewhere.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// Every member text an entry matching this request could have (an IPv4 address: its 33
    /// prefixes, most specific first; IPv6: /128 and every multiple of 4), deduplicated, in the
    /// order the pairs were given.
    pub fn candidates(&self) -> &Candidates {
        if self.pairs.is_empty() {
            return &NO_CANDIDATES;
        }
        self.candidates
            .get_or_init(|| Arc::new(self.build_candidates()))
    }

    fn build_candidates(&self) -> Candidates {
        use fmt::Write as _;
        let mut out = Candidates::default();
        // One pair never offers a text twice (an address's prefixes differ in length), so a
        // candidate is a repeat only of an earlier pair's: those are all it is compared with.
        for (source, value) in &self.pairs {
            let Ok(source) = Source::parse(source) else {
                continue;
            };
            let earlier = out.len();
            match source {
                Source::Ip => {
                    let Ok(address) = parse_prefix(value) else {
                        continue;
                    };
                    if !address.is_address() {
                        continue; // a request comes from an address, not a network
                    }
                    let ip = address.network();
                    out.ends.reserve(33);
                    out.text
                        .reserve(if ip.is_ipv4() { 33 * 22 } else { 33 * 48 });
                    for prefix in prefix_lengths(ip).filter_map(|len| IpPrefix::new(ip, len).ok()) {
                        out.push_unless_among(earlier, |text| {
                            text.push_str("ip ");
                            text.push_str(&prefix.text());
                        });
                    }
                }
                other => {
                    if let Ok(value) = other.value(value) {
                        out.push_unless_among(earlier, |text| {
                            let _ = write!(text, "{other} {value}");
                        });
                    }
                }
            }
        }
        out
    }

    /// Whether the probe offers no value at all.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

/// One gate: the lists that deny and the lists that allow a part of a check (docs/design.md
/// §"Deny and allow lists"). Lists are consulted in order; the first match names the list.
///
/// The names are shared: a configuration builds each rule's gate once, and every request's
/// check copies two pointers, not four strings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Gate {
    /// The lists whose match refuses the whole check.
    pub deny: Arc<[String]>,
    /// The lists whose match lets this gate's items through uncharged.
    pub allow: Arc<[String]>,
}

impl Gate {
    /// A gate of these deny and allow lists.
    pub fn new(deny: Vec<String>, allow: Vec<String>) -> Gate {
        Gate {
            deny: deny.into(),
            allow: allow.into(),
        }
    }

    /// Every list the gate consults, deny lists first.
    pub fn lists(&self) -> impl Iterator<Item = &str> {
        self.deny
            .iter()
            .chain(self.allow.iter())
            .map(String::as_str)
    }
}

/// What a gate found for a request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Listed {
    /// No list of the gate matched.
    No,
    /// A deny list matched: the check is refused.
    Denied {
        /// The list that matched (the gate's first deny list with a match).
        list: String,
        /// The matching member (e.g. `ip 198.51.100.0/24`).
        entry: String,
    },
    /// An allow list matched and no deny list did: the gate's items were not charged.
    Allowed {
        /// The list that matched.
        list: String,
        /// The matching member.
        entry: String,
    },
}

impl Listed {
    /// Whether a deny list matched.
    pub fn is_denied(&self) -> bool {
        matches!(self, Listed::Denied { .. })
    }

    /// Whether an allow list matched (and no deny list).
    pub fn is_allowed(&self) -> bool {
        matches!(self, Listed::Allowed { .. })
    }
}

/// The gate rule, written once for every store that decides gates in Rust: for each gate, its
/// deny lists in order, then its allow lists, each asked `first_live(list)` — the index into the
/// candidates of the first one that is a live member of that list — and the first answer wins.
/// Deny beats allow.
pub fn resolve(
    gates: &[Gate],
    candidates: &Candidates,
    mut first_live: impl FnMut(&str) -> Option<usize>,
) -> Vec<Listed> {
    gates
        .iter()
        .map(|gate| {
            for list in gate.deny.iter() {
                if let Some(i) = first_live(list) {
                    return Listed::Denied {
                        list: list.clone(),
                        entry: candidates[i].to_string(),
                    };
                }
            }
            for list in gate.allow.iter() {
                if let Some(i) = first_live(list) {
                    return Listed::Allowed {
                        list: list.clone(),
                        entry: candidates[i].to_string(),
                    };
                }
            }
            Listed::No
        })
        .collect()
}

/// Checks a list name: 1 to 200 bytes, no whitespace or control characters. By convention the
/// Worker's lists are `deny`, `allow`, `deny:<rule>` and `allow:<rule>`.
pub fn validate_list_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_LIST_NAME {
        return Err(format!(
            "list name `{name}` must be 1 to {MAX_LIST_NAME} bytes"
        ));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "list name `{name}` contains whitespace or a control character"
        ));
    }
    Ok(())
}

/// The stored lapse time of an entry added at `now_ms` to lapse at `until_ms` (`None`: never).
/// An entry lapsing at or before `now_ms` would never match: refused.
pub fn lapse_score(until_ms: Option<u64>, now_ms: u64) -> Result<u64, String> {
    match until_ms {
        None => Ok(NEVER_MS),
        Some(until) if until <= now_ms => Err(format!(
            "the entry would lapse at {until} ms, not after now ({now_ms} ms)"
        )),
        Some(until) => Ok(until.min(NEVER_MS)),
    }
}

/// What every store checks before [`crate::Control::list_add`] writes: the list's name, then the
/// stored lapse time of the entry ([`lapse_score`]), as the store's error.
pub fn checked_addition(list: &str, until_ms: Option<u64>, now_ms: u64) -> Result<u64, StoreError> {
    validate_list_name(list).map_err(StoreError::InvalidInput)?;
    lapse_score(until_ms, now_ms).map_err(StoreError::InvalidInput)
}

/// A stored lapse time as the API gives it: `None` for never.
pub fn until_of(score: u64) -> Option<u64> {
    (score < NEVER_MS).then_some(score)
}

/// The decision of an item in a check a deny list refused: denied, nothing charged, for as long
/// as the entry lives (the store cannot tell when that is, so `retry_after_ms` is never).
pub fn denylisted(capacity: u64, now_ms: u64) -> Decision {
    Decision {
        allowed: false,
        limit: capacity,
        remaining: 0,
        reset_at_ms: now_ms,
        retry_after_ms: RETRY_NEVER,
        reason: Reason::Denylisted,
    }
}

/// The decision of an item an allow list let through: admitted, nothing charged, the whole
/// capacity remaining.
pub fn allowlisted(capacity: u64, now_ms: u64) -> Decision {
    Decision {
        allowed: true,
        limit: capacity,
        remaining: capacity,
        reset_at_ms: now_ms,
        retry_after_ms: 0,
        reason: Reason::Allowlisted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(text: &str) -> String {
        text.parse::<ListEntry>().unwrap().member()
    }

    #[test]
    fn entries_parse_to_canonical_members() {
        assert_eq!(member("ip 203.0.113.7"), "ip 203.0.113.7");
        assert_eq!(member("ip 203.0.113.7/32"), "ip 203.0.113.7");
        assert_eq!(member("ip 203.0.113.77/24"), "ip 203.0.113.0/24");
        assert_eq!(member("ip 0.0.0.0/0"), "ip 0.0.0.0/0");
        assert_eq!(member("ip 2001:DB8::1/32"), "ip 2001:db8::/32");
        assert_eq!(member("ip ::ffff:198.51.100.7"), "ip 198.51.100.7");
        assert_eq!(member("ip ::ffff:198.51.100.0/120"), "ip 198.51.100.0/24");
        assert_eq!(member("country cn"), "country CN");
        assert_eq!(member("country t1"), "country T1");
        assert_eq!(
            member("header:X-Api-Key  abc 123"),
            "header:x-api-key abc 123"
        );
        assert_eq!(member("query:key abc"), "query:key abc");
        assert_eq!(member("path:2 alice"), "path:2 alice");
        let hash = "A".repeat(64);
        assert_eq!(
            member(&format!("api-key:header:Authorization {hash}")),
            format!("api-key:header:authorization {}", "a".repeat(64))
        );
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        for (bad, says) in [
            ("ip", "<source> <value>"),
            ("ip 300.1.1.1", "not an IPv4 or IPv6 address"),
            ("ip 10.0.0.0/33", "prefix length from 0 to 32"),
            ("ip 2001:db8::/30", "multiple of 4"),
            ("country CHN", "country code"),
            ("country 12", "country code"),
            ("cookie:x y", "unknown list source"),
            ("header: x", "not a header name"),
            ("path:0 x", "segment number"),
            ("api-key:header:x abc", "SHA-256"),
            ("api-key:ip abc", "an API key comes from"),
            ("header:x a\u{7}b", "control character"),
        ] {
            let err = bad.parse::<ListEntry>().unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn candidate_texts_are_the_prefixes_canonical_texts() {
        for text in [
            "0.0.0.0",
            "10.0.0.1",
            "192.168.100.255",
            "255.255.255.255",
            "2001:db8::1",
        ] {
            let ip: IpAddr = text.parse().unwrap();
            let whole = if ip.is_ipv4() { 32 } else { 128 };
            for len in prefix_lengths(ip) {
                let network = network(ip, len);
                // As `Display` writes the address.
                let canonical = if len == whole {
                    network.to_string()
                } else {
                    format!("{network}/{len}")
                };
                assert_eq!(prefix_text(network, len), canonical);
            }
        }
    }

    #[test]
    fn an_address_offers_its_33_prefixes_and_other_sources_their_value() {
        let v4 = ListProbe::new().with("ip", "203.0.113.7");
        let v4 = v4.candidates();
        assert_eq!(v4.len(), 33);
        assert_eq!(&v4[0], "ip 203.0.113.7");
        assert_eq!(&v4[8], "ip 203.0.113.0/24");
        assert_eq!(&v4[32], "ip 0.0.0.0/0");
        assert_eq!(v4.get(33), None);
        // Every prefix once, most specific first, each the canonical text of its network.
        let texts: Vec<&str> = v4.iter().collect();
        assert_eq!(texts.len(), 33);
        for (len, text) in (0..=32u8).rev().zip(&texts) {
            let network = network("203.0.113.7".parse().unwrap(), len);
            assert_eq!(*text, format!("ip {}", prefix_text(network, len)));
        }
        let v6 = ListProbe::new().with("ip", "2001:db8::1");
        let v6 = v6.candidates();
        assert_eq!(v6.len(), 33);
        assert_eq!(&v6[0], "ip 2001:db8::1");
        assert!(v6.contains("ip 2001:db8::/32"));
        let mixed = ListProbe::new()
            .with("country", "cn")
            .with("header:X-Key", "k")
            .with("ip", "not an address")
            .with("cookie", "x")
            .with("country", "CN");
        let texts = |probe: &ListProbe| {
            probe
                .candidates()
                .iter()
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(texts(&mixed), ["country CN", "header:x-key k"]);
        // Built once, shared by clones, rebuilt when a pair is added.
        let clone = mixed.clone();
        assert!(std::ptr::eq(clone.candidates(), mixed.candidates()));
        let more = clone.with("country", "FR");
        assert_eq!(texts(&more), ["country CN", "header:x-key k", "country FR"]);
    }

    #[test]
    fn deny_beats_allow_and_the_first_list_names_the_match() {
        let candidates: Candidates = ["ip 10.0.0.1", "ip 10.0.0.0/8"].into_iter().collect();
        let gates = vec![
            Gate::new(vec!["d1".into(), "d2".into()], vec!["a".into()]),
            Gate::new(vec![], vec!["a".into()]),
            Gate::new(vec!["d1".into()], vec![]),
        ];
        let listed = resolve(&gates, &candidates, |list| match list {
            "d2" => Some(1),
            "a" => Some(0),
            _ => None,
        });
        assert_eq!(
            listed,
            [
                Listed::Denied {
                    list: "d2".into(),
                    entry: "ip 10.0.0.0/8".into()
                },
                Listed::Allowed {
                    list: "a".into(),
                    entry: "ip 10.0.0.1".into()
                },
                Listed::No
            ]
        );
    }
}
