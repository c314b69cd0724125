//! Rules: which requests they match (by host, method and path) and the limits they apply.
//! [`crate::config`] builds them from `EDGELIMIT_CONFIG`; [`crate::plan`] applies them.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use edgelimit::control::list::Gate;
use edgelimit::Limit;

use crate::identify::{IdentifierSource, RequestView};
use crate::lists::StaticList;
use crate::normalize;
use crate::reading::FieldValues;

/// What to do with a request when a limit's identifier is absent (or empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Missing {
    /// `ip`: count the request by its client address (the `ip` source, grouped alike), in a
    /// bucket of the limit's no identifier can name ([`ADDRESS_FALLBACK`]) — the default: a
    /// client that leaves the field out is still limited, alone. Without an address either, the
    /// request joins the limit's shared bucket.
    #[default]
    Address,
    /// Refuse the request with 400 and a problem body naming the missing source.
    Deny,
    /// Skip this limit for the request.
    Allow,
    /// Count the request in one bucket shared by every request without an identifier: one
    /// client leaving the field out can use up, and so deny, every other's share of it.
    Shared,
}

/// The first byte of an identifier made of a client address for a request without the limit's
/// own identifier ([`Missing::Address`]). Identifiers taken from a request are text (UTF-8),
/// which never holds this byte, so no value a client sends can name such a bucket.
pub const ADDRESS_FALLBACK: u8 = 0xFE;

/// One limit as a rule applies it.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleLimit {
    /// The limit (name, policy, fail mode). Limits with one name share state across rules.
    pub limit: Arc<Limit>,
    /// Where the identifier comes from.
    pub source: IdentifierSource,
    /// The cost of one request (the estimate reserved, when `settle` is set).
    pub cost: i64,
    /// What to do without an identifier.
    pub missing: Missing,
    /// Where the real cost is read after the response, when it is known only then.
    pub settle: Option<Settle>,
    /// Whether checks carry the request id for this limit, so a retry is charged once.
    pub idempotent: bool,
    /// Where the limit holds: across the regions (`global`, the default when the configuration
    /// has a `global` section), or in each region alone.
    pub scope: Scope,
    /// What exceeding the limit does (`exceed`): deny, admit and tell the origin, or wait.
    pub exceed: Exceed,
    /// The share of identifiers the limit is enforced for (`enforce`); the others are decided
    /// in shadow. `None`: every identifier.
    pub enforce: Option<Enforce>,
    /// The response statuses charged (`count_status`): the cost is reserved when the request
    /// comes and refunded by the settlement when the response's status is outside the set.
    /// `None`: every response is charged.
    pub count_status: Option<StatusSet>,
}

/// What exceeding a limit does (the key `exceed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Exceed {
    /// `deny`: refuse the request (429), the default.
    #[default]
    Deny,
    /// `soft`: admit it, decided like a shadow limit (nothing charged on it when it denies),
    /// and tell the origin in the request header [`crate::ruling::EXCEEDED_HEADER`].
    Soft,
    /// `delay <duration>`: when the limit would admit the request within `max_ms`, its place
    /// is reserved then and the host forwards it after the wait; beyond, deny.
    Delay {
        /// The longest wait, ms (the limit's `max_delay_ms`).
        max_ms: u64,
    },
}

/// The longest wait `exceed = "delay …"` accepts: a waiting request holds a connection (and on
/// the Worker an invocation) open, so the wait is kept short.
pub const MAX_DELAY_MS: u64 = 30_000;

impl FromStr for Exceed {
    type Err = String;

    fn from_str(text: &str) -> Result<Exceed, String> {
        let text = text.trim();
        match text {
            "deny" => return Ok(Exceed::Deny),
            "soft" => return Ok(Exceed::Soft),
            _ => {}
        }
        let Some(duration) = text.strip_prefix("delay") else {
            return Err(format!(
                "`{text}` is not `deny`, `soft` or `delay <duration>` (e.g. `delay 500ms`)"
            ));
        };
        let duration = duration.trim();
        if duration.is_empty() {
            return Err(format!(
                "`{text}` names no longest wait: write `delay <duration>`, e.g. `delay 500ms`"
            ));
        }
        let max_ms =
            edgelimit::policy::parse_window(duration).map_err(|e| format!("`{text}`: {e}"))?;
        if max_ms == 0 || max_ms > MAX_DELAY_MS {
            return Err(format!(
                "`{text}`: the longest wait must be more than 0 and at most 30s"
            ));
        }
        Ok(Exceed::Delay { max_ms })
    }
}

impl fmt::Display for Exceed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exceed::Deny => f.write_str("deny"),
            Exceed::Soft => f.write_str("soft"),
            Exceed::Delay { max_ms } => write!(f, "delay {max_ms}ms"),
        }
    }
}

/// Staged enforcement (`enforce = "10%"`): the share of identifiers a limit is enforced for,
/// chosen by a stable hash of the limit's name and the identifier ([`enforce_point`]), the same
/// on every host and in `sim`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enforce {
    /// The share, in millionths (10% is 100,000).
    pub per_million: u32,
}

impl Enforce {
    /// Whether the limit `name` is enforced for `identifier`.
    pub fn enforces(&self, name: &str, identifier: &[u8]) -> bool {
        enforce_point(name, identifier) < u64::from(self.per_million)
    }
}

impl FromStr for Enforce {
    type Err = String;

    /// Parses a percentage, `0 < p ≤ 100`, with up to four decimals: `10%`, `0.5%`.
    fn from_str(text: &str) -> Result<Enforce, String> {
        let text = text.trim();
        let bad = || {
            format!("`{text}` is not a percentage above 0 and at most 100, e.g. `10%` or `0.5%`")
        };
        let number = text.strip_suffix('%').ok_or_else(bad)?.trim();
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty()
            || fraction.len() > 4
            || !whole.bytes().all(|b| b.is_ascii_digit())
            || !fraction.bytes().all(|b| b.is_ascii_digit())
            || whole.len() > 3
        {
            return Err(bad());
        }
        let whole: u32 = whole.parse().map_err(|_| bad())?;
        let fraction: u32 = format!("{fraction:0<4}").parse().map_err(|_| bad())?;
        let per_million = whole * 10_000 + fraction;
        if per_million == 0 || per_million > 1_000_000 {
            return Err(bad());
        }
        Ok(Enforce { per_million })
    }
}

impl fmt::Display for Enforce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (whole, fraction) = (self.per_million / 10_000, self.per_million % 10_000);
        if fraction == 0 {
            write!(f, "{whole}%")
        } else {
            let digits = format!("{fraction:04}");
            write!(f, "{whole}.{}%", digits.trim_end_matches('0'))
        }
    }
}

/// Where `identifier` falls, in millionths (`0..1_000_000`), for the staged enforcement of the
/// limit `name`: FNV-1a (64-bit) over the name's bytes, one zero byte and the identifier's
/// bytes, mixed by MurmurHash3's 64-bit finaliser, modulo one million. Stable by definition —
/// written out here, not a library's hasher that may change — so every host and `sim` enforce
/// the same identifiers; a unit test pins values computed independently.
pub fn enforce_point(name: &str, identifier: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    for &byte in name.as_bytes().iter().chain(&[0u8]).chain(identifier) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(PRIME);
    }
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^= hash >> 33;
    hash % 1_000_000
}

/// The response statuses a limit charges (`count_status`): codes (`401`), classes (`4xx`) and
/// ranges (`200-299`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusSet {
    /// Inclusive ranges.
    ranges: Vec<(u16, u16)>,
}

impl StatusSet {
    /// Parses entries, each `401`, `4xx` or `200-299`; an entry may itself be a comma-separated
    /// list. The error names the entry.
    pub fn parse<'a>(entries: impl IntoIterator<Item = &'a str>) -> Result<StatusSet, String> {
        let mut ranges = Vec::new();
        for entry in entries.into_iter().flat_map(|e| e.split(',')) {
            let entry = entry.trim();
            let bad = || {
                format!(
                    "`{entry}` is not a status (`401`), a class (`4xx`) or a range (`200-299`)                      of statuses 100–599"
                )
            };
            let code = |text: &str| -> Result<u16, String> {
                let text = text.trim();
                match text.parse::<u16>() {
                    Ok(code) if text.len() == 3 && (100..=599).contains(&code) => Ok(code),
                    _ => Err(bad()),
                }
            };
            let range = if let Some(class) = entry
                .strip_suffix("xx")
                .or_else(|| entry.strip_suffix("XX"))
            {
                match class.parse::<u16>() {
                    Ok(c) if class.len() == 1 && (1..=5).contains(&c) => (c * 100, c * 100 + 99),
                    _ => return Err(bad()),
                }
            } else if let Some((low, high)) = entry.split_once('-') {
                let (low, high) = (code(low)?, code(high)?);
                if low > high {
                    return Err(format!("`{entry}`: the range's start is above its end"));
                }
                (low, high)
            } else {
                let c = code(entry)?;
                (c, c)
            };
            ranges.push(range);
        }
        if ranges.is_empty() {
            return Err("names no status: give e.g. `401`, `4xx` or `200-299`".to_string());
        }
        Ok(StatusSet { ranges })
    }

    /// Whether `status` is in the set.
    pub fn contains(&self, status: u16) -> bool {
        self.ranges
            .iter()
            .any(|&(low, high)| (low..=high).contains(&status))
    }
}

/// The pseudo-field a host's settlement reader answers with the response's status (a name no
/// header field can have): what `count_status` reads.
pub const STATUS_FIELD: &str = ":status";

impl RuleLimit {
    /// Whether a request with `identifier` is decided in shadow for this limit rather than
    /// enforced (a `soft` limit, or an identifier its staged enforcement leaves out).
    pub fn unenforced(&self, identifier: &[u8]) -> Option<Unenforced> {
        unenforced(&self.limit.name, self.exceed, self.enforce, identifier)
    }
}

/// Whether the limit `name`, exceeded as `exceed` and enforced for the share `enforce`, is
/// decided in shadow for `identifier` rather than enforced: the split every host makes, the npm
/// package's limits (which belong to no rule) included.
pub fn unenforced(
    name: &str,
    exceed: Exceed,
    enforce: Option<Enforce>,
    identifier: &[u8],
) -> Option<Unenforced> {
    if exceed == Exceed::Soft {
        return Some(Unenforced::Soft);
    }
    match enforce {
        Some(share) if !share.enforces(name, identifier) => Some(Unenforced::Staged),
        _ => None,
    }
}

/// Why a limit of an enforced rule is decided in shadow for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unenforced {
    /// The limit is `exceed = "soft"`: its denial admits the request and tells the origin.
    Soft,
    /// The limit's staged enforcement (`enforce`) leaves this identifier out.
    Staged,
}

impl Unenforced {
    /// The name in logs and metrics: `soft` or `staged`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Unenforced::Soft => "soft",
            Unenforced::Staged => "staged",
        }
    }
}

/// Where a limit holds (docs/design.md §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Across every region: decided in each by its static share and its leases of the home's
    /// pool, never over the limit together.
    Global,
    /// In each region alone (and in a deployment with no regions, the one store).
    Region,
}

/// A cost known only after the response: `cost = { reserve = 1000, from = "…" }`. The estimate is
/// reserved before forwarding; the real cost is committed after the response, off the request
/// path (docs/design.md §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settle {
    /// Where the real cost comes from.
    pub from: CostSource,
    /// The unit the quota counts, reported as `qu` in `RateLimit-Policy`.
    pub unit: String,
}

/// Where a response tells its real cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CostSource {
    /// A response header holding a whole number (`response-header:X-Tokens-Used`).
    ResponseHeader(String),
    /// The response body's length, from its `Content-Length` (`response-bytes`).
    ResponseBytes,
    /// `custom:<name>`: what a native service's code makes of the response (edgelimit-tower
    /// asks the closure registered under `name`: e.g. 1 for a 401, 0 otherwise, so only failed
    /// logins count). The Worker refuses it.
    Custom(String),
}

impl CostSource {
    /// Parses `response-header:<name>`, `response-bytes` or `custom:<name>`.
    pub fn parse(text: &str) -> Result<CostSource, String> {
        match text.trim() {
            "response-bytes" => Ok(CostSource::ResponseBytes),
            t if t.starts_with("custom:") => match IdentifierSource::parse(t)? {
                IdentifierSource::Custom(name) => Ok(CostSource::Custom(name)),
                _ => unreachable!("a `custom:` source parses as one or not at all"),
            },
            t => match t.strip_prefix("response-header:") {
                Some(name)
                    if !name.is_empty()
                        && name
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
                {
                    Ok(CostSource::ResponseHeader(name.to_ascii_lowercase()))
                }
                _ => Err(format!(
                    "`{t}` is not `response-header:<name>`, `response-bytes` or `custom:<name>`"
                )),
            },
        }
    }

    /// The default unit: `content-bytes` for the body's length, `tokens` for a header,
    /// `requests` for a custom cost (mostly a count: which responses are charged).
    pub fn default_unit(&self) -> &'static str {
        match self {
            CostSource::ResponseBytes => "content-bytes",
            CostSource::ResponseHeader(_) => "tokens",
            CostSource::Custom(_) => "requests",
        }
    }

    /// The real cost a response states: `header` gives the response's header fields by
    /// (lower-case) name, and a custom cost by its spec (`custom:<name>`, which no field name
    /// can be: it holds a colon). `None` when it states none (the estimate then stands).
    pub fn read(&self, header: impl Fn(&str) -> Option<String>) -> Option<u64> {
        let value = match self {
            CostSource::ResponseHeader(name) => header(name),
            CostSource::ResponseBytes => header("content-length"),
            CostSource::Custom(name) => header(&format!("custom:{name}")),
        };
        value?.trim().parse().ok()
    }
}

/// A rule: which requests it matches and the limits it applies.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// The rule's name, for logs and errors.
    pub name: String,
    /// Hosts it matches; empty matches any.
    pub hosts: Vec<HostPattern>,
    /// Methods it matches (upper case); empty matches any.
    pub methods: Vec<String>,
    /// Paths it matches.
    pub path: PathMatch,
    /// Decide and report, but never block.
    pub shadow: bool,
    /// The rule of CORS preflights (`preflight_limit`, [`PREFLIGHT_RULE`]): it matches exactly
    /// the preflights, and they match no other rule.
    pub preflight: bool,
    /// The limits applied, all or nothing.
    pub limits: Vec<RuleLimit>,
    /// Deny entries of this rule, matched in the isolate: a match refuses the request with 403
    /// (only reported, for a shadow rule). The dynamic list `deny:<name>` is consulted too.
    pub deny: StaticList,
    /// Allow entries of this rule, matched in the isolate: a match exempts the request from this
    /// rule's limits. The dynamic list `allow:<name>` is consulted too.
    pub allow: StaticList,
    /// The dynamic lists this rule's checks consult ([`crate::lists::rule_gate`] of its name),
    /// named once here rather than per request.
    pub gate: Gate,
    /// This rule's own dynamic deny list, `deny:<name>` ([`crate::lists::rule_deny`]).
    pub deny_list: String,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Missing::Address => "ip",
            Missing::Deny => "deny",
            Missing::Allow => "allow",
            Missing::Shared => "shared",
        })
    }
}

impl FromStr for Missing {
    type Err = String;

    fn from_str(text: &str) -> Result<Missing, String> {
        match text.trim() {
            "ip" => Ok(Missing::Address),
            "deny" => Ok(Missing::Deny),
            "allow" => Ok(Missing::Allow),
            "shared" => Ok(Missing::Shared),
            other => Err(format!("`{other}` is not one of ip, deny, allow, shared")),
        }
    }
}

/// A host to match: exact (`api.example.com`) or every subdomain (`*.example.com`), held as
/// [`normalize::host`] reads a request's host (lower case, no trailing dot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// This host only.
    Exact(String),
    /// Any host ending in `.<suffix>` (not the bare suffix).
    Subdomains(String),
}

impl HostPattern {
    /// Parses a host pattern: letters, digits, `-` and `.`, optionally after `*.`; no scheme,
    /// port or path. Read as a request's host is: lower-cased, a trailing dot dropped
    /// (`Shop.Example.com.` is `shop.example.com`); an empty label is an error.
    pub fn parse(text: &str) -> Result<HostPattern, String> {
        let trimmed = text.trim();
        let (wildcard, name) = match trimmed.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, trimmed),
        };
        let valid = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        if !valid {
            return Err(format!(
                "`{text}` is not a host name (e.g. `api.example.com` or `*.example.com`)"
            ));
        }
        let name = normalize::host(name)
            .map_err(|problem| format!("`{text}`: {problem}"))?
            .into_owned();
        Ok(if wildcard {
            HostPattern::Subdomains(name)
        } else {
            HostPattern::Exact(name)
        })
    }

    /// Whether `host` matches. `host` is a request's host as [`normalize::host`] reads it
    /// (lower case, no port, no trailing dot): the raw `Host` would let `API.example.com.` pass.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            HostPattern::Exact(h) => host == h,
            HostPattern::Subdomains(suffix) => host
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
        }
    }
}

/// One segment of a path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// This exact segment.
    Literal(String),
    /// `*`: any one segment.
    Any,
    /// `**` (last only): any number of remaining segments, including none.
    Rest,
}

/// How a rule matches paths. Its text is held as [`normalize::path`] reads a request's path, so
/// `/a%70i/` is `/api/` and `/docs/read me/` is `/docs/read%20me/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathMatch {
    /// Every path.
    Any,
    /// Paths starting with this text.
    Prefix(String),
    /// Paths whose segments match: `/users/*/posts`, `/v1/**`.
    Pattern(Vec<Segment>),
}

/// A rule's path read as a request's is, the error naming what is wrong with `text`.
fn configured(text: &str) -> Result<String, String> {
    normalize::configured_path(text)
        .map(|path| path.into_owned())
        .map_err(|problem| format!("`{text}`: {problem}"))
}

impl PathMatch {
    /// A prefix, which must start with `/`, read as a request's path is; a `..` segment, a bad
    /// escape, or what a request's path would be refused for is an error.
    pub fn prefix(text: &str) -> Result<PathMatch, String> {
        Ok(PathMatch::Prefix(configured(text)?))
    }

    /// A segment pattern, which must start with `/`; `*` is one segment, a final `**` the rest.
    /// Read as a request's path is, as [`PathMatch::prefix`].
    pub fn pattern(text: &str) -> Result<PathMatch, String> {
        let path = configured(text)?;
        let parts: Vec<&str> = path[1..].split('/').filter(|s| !s.is_empty()).collect();
        let mut segments = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            segments.push(match *part {
                "*" => Segment::Any,
                "**" if i + 1 == parts.len() => Segment::Rest,
                "**" => return Err(format!("`{text}`: `**` may only end a pattern")),
                literal if literal.contains('*') => {
                    return Err(format!(
                        "`{text}`: `*` must be a whole segment (`/a/*/b`), not part of `{literal}`"
                    ))
                }
                literal => Segment::Literal(literal.to_string()),
            });
        }
        Ok(PathMatch::Pattern(segments))
    }

    /// Whether `path` matches. `path` is a request's path as [`normalize::path`] reads it: the
    /// path as sent would let `//api/` or `/%61pi/` pass a rule for `/api/`.
    pub fn matches(&self, path: &str) -> bool {
        match self {
            PathMatch::Any => true,
            PathMatch::Prefix(prefix) => path.starts_with(prefix.as_str()),
            PathMatch::Pattern(segments) => {
                let mut parts = path.split('/').filter(|s| !s.is_empty());
                for segment in segments {
                    match segment {
                        Segment::Rest => return true,
                        Segment::Any => {
                            if parts.next().is_none() {
                                return false;
                            }
                        }
                        Segment::Literal(literal) => {
                            if parts.next() != Some(literal.as_str()) {
                                return false;
                            }
                        }
                    }
                }
                parts.next().is_none()
            }
        }
    }
}

/// The name of the rule (and its limit) that `preflight_limit` gives CORS preflights.
pub const PREFLIGHT_RULE: &str = "cors-preflight";

/// Whether `request` is a CORS preflight, as the Fetch standard sends one: `OPTIONS` with
/// `Access-Control-Request-Method`. Any other `OPTIONS` is an ordinary request.
pub fn is_preflight<R: RequestView + ?Sized>(request: &R) -> bool {
    request.method() == "OPTIONS"
        && request.header_values("access-control-request-method") != FieldValues::Absent
}

impl Rule {
    /// Whether this rule applies to `request` (read as the request path reads it,
    /// [`crate::Config::reading`]). Which rules a request matches together is
    /// [`crate::Config::matching`]'s: a preflight matches only the preflight rule, when there is
    /// one.
    pub fn matches<R: RequestView + ?Sized>(&self, request: &R) -> bool {
        if self.preflight {
            return is_preflight(request);
        }
        (self.hosts.is_empty() || self.hosts.iter().any(|h| h.matches(request.host())))
            && (self.methods.is_empty() || self.methods.iter().any(|m| m == request.method()))
            && self.path.matches(request.path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_match_exactly_or_by_subdomain() {
        let exact = HostPattern::parse("API.example.com").unwrap();
        assert!(exact.matches("api.example.com"));
        assert!(!exact.matches("x.api.example.com"));
        let sub = HostPattern::parse("*.example.com").unwrap();
        assert!(sub.matches("a.example.com") && sub.matches("a.b.example.com"));
        assert!(!sub.matches("example.com") && !sub.matches("badexample.com"));
        assert!(HostPattern::parse("https://x").is_err());
    }

    #[test]
    fn path_patterns_match_whole_segments() {
        let p = PathMatch::pattern("/users/*/posts").unwrap();
        assert!(p.matches("/users/42/posts") && p.matches("/users/42/posts/"));
        assert!(!p.matches("/users/42") && !p.matches("/users/42/posts/7"));
        let rest = PathMatch::pattern("/v1/**").unwrap();
        assert!(rest.matches("/v1") && rest.matches("/v1/a/b/c"));
        assert!(!rest.matches("/v2/a"));
        assert!(PathMatch::pattern("/a/**/b").is_err());
        assert!(PathMatch::pattern("/a/x*").is_err());
        assert!(PathMatch::prefix("api").is_err());
        assert!(PathMatch::prefix("/api/").unwrap().matches("/api/x"));
    }

    #[test]
    fn a_rules_hosts_are_read_as_a_requests() {
        assert_eq!(
            HostPattern::parse("Shop.Example.com.").unwrap(),
            HostPattern::Exact("shop.example.com".into())
        );
        assert_eq!(
            HostPattern::parse("*.example.com.").unwrap(),
            HostPattern::Subdomains("example.com".into())
        );
        let error = HostPattern::parse("shop..example.com").unwrap_err();
        assert!(error.contains("`shop..example.com`") && error.contains("empty label"));
        assert!(HostPattern::parse(".").is_err() && HostPattern::parse("*.").is_err());
        assert!(HostPattern::parse("shop.example.com:443").is_err());
    }

    #[test]
    fn a_rules_paths_are_read_as_a_requests() {
        assert_eq!(
            PathMatch::prefix("/a%70i/").unwrap(),
            PathMatch::Prefix("/api/".into())
        );
        assert_eq!(
            PathMatch::prefix("//docs/read me/./").unwrap(),
            PathMatch::Prefix("/docs/read%20me/".into())
        );
        assert_eq!(
            PathMatch::pattern("/v1/%2A/jobs%3acancel").unwrap(),
            PathMatch::Pattern(vec![
                Segment::Literal("v1".into()),
                Segment::Any,
                Segment::Literal("jobs:cancel".into()),
            ])
        );
        for (text, problem) in [
            ("/a/../b", "`..`"),
            ("/..", "`..`"),
            ("/a%2", "two hexadecimal digits"),
            ("/a%2Fb", "encoded `/`"),
            ("/a;b", "`;`"),
            ("/search?q=", "query"),
            ("api/", "start with `/`"),
        ] {
            for error in [
                PathMatch::prefix(text).unwrap_err(),
                PathMatch::pattern(text).unwrap_err(),
            ] {
                assert!(
                    error.contains(&format!("`{text}`")) && error.contains(problem),
                    "{text}: {error}"
                );
            }
        }
        // A rule and a request spelt differently meet in one reading.
        let rule = PathMatch::prefix("/caf%c3%a9/").unwrap();
        for request in ["/café/menu", "/caf%C3%A9/menu", "//caf%c3%a9/./menu"] {
            assert!(
                rule.matches(&normalize::path(request).unwrap()),
                "{request}"
            );
        }
    }

    /// Values computed independently of this code, by the same hash written in Python:
    ///
    /// ```text
    /// def point(name, ident):
    ///     h = 0xcbf29ce484222325
    ///     for b in name.encode() + b"\0" + ident.encode():
    ///         h ^= b; h = (h * 0x100000001b3) % 2**64
    ///     h ^= h >> 33; h = (h * 0xff51afd7ed558ccd) % 2**64
    ///     h ^= h >> 33; h = (h * 0xc4ceb9fe1a85ec53) % 2**64
    ///     h ^= h >> 33
    ///     return h % 1000000
    /// ```
    ///
    /// A change to the hash would change who every deployed staged limit enforces: it fails
    /// here first.
    #[test]
    fn the_staged_enforcement_hash_is_pinned() {
        assert_eq!(enforce_point("per-key", b"key-1"), 603_982);
        assert_eq!(enforce_point("per-key", b"203.0.113.7"), 333_336);
        assert_eq!(enforce_point("per-ip", b""), 415_069);
        assert_eq!(enforce_point("api-daily", b"customer-42"), 186_626);
        let ten: Enforce = "10%".parse().unwrap();
        // 10% of key-0 … key-9999, counted by the Python above: 1,017.
        let enforced = (0..10_000)
            .filter(|i| ten.enforces("per-key", format!("key-{i}").as_bytes()))
            .count();
        assert_eq!(enforced, 1_017);
    }

    #[test]
    fn shares_parse_as_percentages_and_print_back() {
        for (text, per_million) in [
            ("10%", 100_000),
            ("0.5%", 5_000),
            ("100%", 1_000_000),
            ("0.0001%", 1),
            (" 12.25% ", 122_500),
        ] {
            let share: Enforce = text.parse().unwrap();
            assert_eq!(share.per_million, per_million, "{text}");
            assert_eq!(share.to_string().parse::<Enforce>().unwrap(), share);
        }
        for bad in ["0%", "101%", "10", "-1%", "1e2%", "%", ".5%", "0.00001%"] {
            assert!(bad.parse::<Enforce>().is_err(), "{bad}");
        }
        let all: Enforce = "100%".parse().unwrap();
        assert!((0..1000).all(|i| all.enforces("x", format!("{i}").as_bytes())));
    }

    #[test]
    fn custom_costs_are_read_by_their_spec_never_as_a_header() {
        let custom = CostSource::parse("custom:failed-login").unwrap();
        assert_eq!(custom, CostSource::Custom("failed-login".into()));
        assert_eq!(custom.default_unit(), "requests");
        let response = |name: &str| match name {
            "custom:failed-login" => Some("1".to_string()),
            "failed-login" => Some("7".to_string()),
            _ => None,
        };
        assert_eq!(custom.read(response), Some(1));
        assert_eq!(
            CostSource::parse("response-header:failed-login")
                .unwrap()
                .read(response),
            Some(7)
        );
        assert!(CostSource::parse("custom:")
            .unwrap_err()
            .contains("needs a name"));
        assert!(CostSource::parse("cookie:x")
            .unwrap_err()
            .contains("custom:<name>"));
    }
}
