//! Rules: which requests they match (by host, method and path) and the limits they apply.
//! [`crate::config`] builds them from `EDGELIMIT_CONFIG`; [`crate::plan`] applies them.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use edgelimit::control::list::Gate;
use edgelimit::Limit;

use crate::identify::{IdentifierSource, RequestView};
use crate::lists::StaticList;

/// What to do with a request when a limit's identifier is absent (or empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Missing {
    /// Refuse the request with 400 and a problem body naming the missing source.
    Deny,
    /// Skip this limit for the request.
    Allow,
    /// Count the request in one bucket shared by every request without an identifier.
    #[default]
    Shared,
}

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
            "deny" => Ok(Missing::Deny),
            "allow" => Ok(Missing::Allow),
            "shared" => Ok(Missing::Shared),
            other => Err(format!("`{other}` is not one of deny, allow, shared")),
        }
    }
}

/// A host to match: exact (`api.example.com`) or every subdomain (`*.example.com`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// This host only.
    Exact(String),
    /// Any host ending in `.<suffix>` (not the bare suffix).
    Subdomains(String),
}

impl HostPattern {
    /// Parses a host pattern (lower-cased; no scheme, port or path).
    pub fn parse(text: &str) -> Result<HostPattern, String> {
        let host = text.trim().to_ascii_lowercase();
        let (wildcard, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest.to_string()),
            None => (false, host.clone()),
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
        Ok(if wildcard {
            HostPattern::Subdomains(name)
        } else {
            HostPattern::Exact(name)
        })
    }

    /// Whether `host` (lower case, no port) matches.
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

/// How a rule matches paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathMatch {
    /// Every path.
    Any,
    /// Paths starting with this text.
    Prefix(String),
    /// Paths whose segments match: `/users/*/posts`, `/v1/**`.
    Pattern(Vec<Segment>),
}

impl PathMatch {
    /// A prefix, which must start with `/`.
    pub fn prefix(text: &str) -> Result<PathMatch, String> {
        if !text.starts_with('/') {
            return Err(format!("`{text}` must start with `/`"));
        }
        Ok(PathMatch::Prefix(text.to_string()))
    }

    /// A segment pattern, which must start with `/`; `*` is one segment, a final `**` the rest.
    pub fn pattern(text: &str) -> Result<PathMatch, String> {
        let Some(body) = text.strip_prefix('/') else {
            return Err(format!("`{text}` must start with `/`"));
        };
        let parts: Vec<&str> = body.split('/').filter(|s| !s.is_empty()).collect();
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

    /// Whether `path` matches.
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

impl Rule {
    /// Whether this rule applies to `request`.
    pub fn matches<R: RequestView + ?Sized>(&self, request: &R) -> bool {
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
