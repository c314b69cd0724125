//! Where a limit's identifier comes from, and taking it out of a request.
//!
//! `ip` is the client's address — at the edge `CF-Connecting-IP`, which Cloudflare sets and
//! clients cannot (a client-supplied `X-Forwarded-For` is never read, since anyone could rotate it
//! to dodge their limit) — with IPv6 addresses grouped by their `/ipv6_prefix` network
//! (docs/design.md §8).
//!
//! `custom:<name>` is a value a native service's own code supplies ([`RequestView::custom`]:
//! edgelimit-tower asks a closure registered under that name). The Worker has none, and refuses
//! a configuration naming one ([`crate::Config::refuse_custom_sources`]).

use std::borrow::Cow;

use sha2::{Digest, Sha256};

use edgelimit::net::AddressGrouping;
use edgelimit::store::key::sha256_hex;
use edgelimit::Identifier;

use crate::reading::FieldValues;

/// Raw identifiers longer than this are replaced by their SHA-256, so a huge header costs the
/// isolate's denial cache and Redis a fixed, small key.
pub const MAX_RAW_IDENTIFIER: usize = 256;

/// The longest value a deny or allow list entry may hold (as the library's `ListEntry` allows):
/// a longer value is never offered to the lists.
pub const MAX_LIST_VALUE: usize = 1024;

/// The header Cloudflare puts the client's address in.
pub const CLIENT_IP_HEADER: &str = "cf-connecting-ip";

/// What a request offers the limiter: the parts rules match on and identifiers come from.
pub trait RequestView {
    /// The method, upper case.
    fn method(&self) -> &str;
    /// The host as the request names it (HTTP/1.1's `Host`, else the URL's authority), with or
    /// without its port, in any case: rules and identifiers read it as the origin routes by it
    /// ([`crate::normalize::host`], through [`crate::Config::reading`]).
    fn host(&self) -> &str;
    /// The path, as sent (percent-encoded), starting with `/`, without the query: rules and
    /// identifiers read it as the origin will ([`crate::normalize::path`], through
    /// [`crate::Config::reading`]).
    fn path(&self) -> &str;
    /// The first value of a query parameter, decoded.
    fn query(&self, name: &str) -> Option<String>;
    /// Every value of a query parameter, decoded: what identifiers are read from, so that a
    /// parameter sent twice is read as the configuration says ([`crate::reading::Duplicates`]).
    fn query_values(&self, name: &str) -> FieldValues<'_>;
    /// A header's value (`name` is lower case).
    fn header(&self, name: &str) -> Option<String>;
    /// Every line of a header (`name` is lower case): what identifiers are read from, so that a
    /// header sent twice is read as the configuration says ([`crate::reading::Duplicates`]). A
    /// host whose runtime joins repeated lines (the Fetch API) gives
    /// [`FieldValues::joined`] of the joined value.
    fn header_values(&self, name: &str) -> FieldValues<'_>;
    /// A header's value, borrowed when the request holds it as text (`name` is lower case):
    /// identifiers are read through this, so a value is not copied before it is keyed. The
    /// default copies it out with [`RequestView::header`].
    fn header_ref(&self, name: &str) -> Option<Cow<'_, str>> {
        self.header(name).map(Cow::Owned)
    }
    /// The client's address as text: by default `CF-Connecting-IP`, which Cloudflare sets; a
    /// front end that knows its client otherwise (a peer behind trusted proxies) says so here.
    fn client_ip(&self) -> Option<Cow<'_, str>> {
        self.header_ref(CLIENT_IP_HEADER)
    }
    /// The client's country as Cloudflare saw it (`request.cf.country`, ISO 3166-1 alpha-2,
    /// upper case), for deny and allow lists. `None` when unknown (as outside Cloudflare).
    fn country(&self) -> Option<String> {
        None
    }
    /// The value of the custom source `custom:<name>`: what a native service's code supplies
    /// for this request (edgelimit-tower asks the closure registered under `name`). `None` by
    /// default: the Worker has no custom sources.
    fn custom(&self, _name: &str) -> Option<Cow<'_, str>> {
        None
    }
}

/// A request held as plain values: for tests, benchmarks and replays (the Worker reads its live
/// request through its own adapter instead, without copying the headers).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnedRequest {
    /// The method, upper case.
    pub method: String,
    /// The host, lower case, without port.
    pub host: String,
    /// The path, as sent, starting with `/`.
    pub path: String,
    /// Query parameters, decoded, in order.
    pub query: Vec<(String, String)>,
    /// Header fields; names lower case.
    pub headers: Vec<(String, String)>,
    /// The client's country (`cf.country`), upper case.
    pub country: Option<String>,
    /// Values of custom sources (`custom:<name>`), by name.
    pub custom: Vec<(String, String)>,
}

impl OwnedRequest {
    /// A request with this method, host and path, and nothing else.
    pub fn new(method: &str, host: &str, path: &str) -> OwnedRequest {
        OwnedRequest {
            method: method.to_ascii_uppercase(),
            host: host.to_ascii_lowercase(),
            path: path.to_string(),
            ..OwnedRequest::default()
        }
    }

    /// A `GET` of `path` on `host`.
    pub fn get(host: &str, path: &str) -> OwnedRequest {
        OwnedRequest::new("GET", host, path)
    }

    /// The same request with a header field added (the name is lower-cased).
    pub fn with_header(mut self, name: &str, value: &str) -> OwnedRequest {
        self.headers
            .push((name.to_ascii_lowercase(), value.to_string()));
        self
    }

    /// The same request with a query parameter added.
    pub fn with_query(mut self, name: &str, value: &str) -> OwnedRequest {
        self.query.push((name.to_string(), value.to_string()));
        self
    }

    /// The same request coming from `country` (as `cf.country` would say; upper-cased).
    pub fn with_country(mut self, country: &str) -> OwnedRequest {
        self.country = Some(country.to_ascii_uppercase());
        self
    }

    /// The same request offering `value` for the custom source `custom:<name>`.
    pub fn with_custom(mut self, name: &str, value: &str) -> OwnedRequest {
        self.custom.push((name.to_string(), value.to_string()));
        self
    }
}

impl RequestView for OwnedRequest {
    fn method(&self) -> &str {
        &self.method
    }
    fn host(&self) -> &str {
        &self.host
    }
    fn path(&self) -> &str {
        &self.path
    }
    fn query(&self, name: &str) -> Option<String> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
    fn query_values(&self, name: &str) -> FieldValues<'_> {
        FieldValues::among(
            self.query.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            name,
        )
    }
    fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
    fn header_values(&self, name: &str) -> FieldValues<'_> {
        FieldValues::among(
            self.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            name,
        )
    }
    fn header_ref(&self, name: &str) -> Option<Cow<'_, str>> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| Cow::Borrowed(v.as_str()))
    }
    fn country(&self) -> Option<String> {
        self.country.clone()
    }
    fn custom(&self, name: &str) -> Option<Cow<'_, str>> {
        self.custom
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| Cow::Borrowed(v.as_str()))
    }
}

/// A source of identifiers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentifierSource {
    /// `ip`: the client address ([`RequestView::client_ip`]), an IPv6 address grouped by its
    /// network ([`AddressGrouping`], the configuration's `ipv6_prefix`).
    ClientIp(AddressGrouping),
    /// `header:<name>`.
    Header(String),
    /// `query:<name>`.
    Query(String),
    /// `path:<n>`: the n-th path segment, from 1.
    PathSegment(usize),
    /// `api-key:<source>`: another source's value, hashed (SHA-256) before use, so keys never
    /// reach Redis or logs in the clear.
    ApiKey(Box<IdentifierSource>),
    /// `custom:<name>`: a value the service's own code supplies ([`RequestView::custom`]); a
    /// native service only (the Worker refuses it). Lists cannot hold it.
    Custom(String),
}

const SOURCES: &str = "ip, header:<name>, query:<name>, path:<n>, api-key:<source>, custom:<name>";

/// Whether `name` can name a custom source: 1–64 of `A-Z a-z 0-9 - _ .`, as every name in a
/// configuration.
fn is_custom_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl IdentifierSource {
    /// Parses a source: `ip`, `header:X-User`, `query:key`, `path:2`,
    /// `api-key:header:Authorization`, `custom:user`.
    pub fn parse(text: &str) -> Result<IdentifierSource, String> {
        let text = text.trim();
        let unknown = || format!("unknown source `{text}` (expected one of {SOURCES})");
        if text == "ip" {
            return Ok(IdentifierSource::ClientIp(AddressGrouping::default()));
        }
        let (kind, rest) = text.split_once(':').ok_or_else(unknown)?;
        match kind {
            "header" => {
                let name = rest.trim().to_ascii_lowercase();
                if !edgelimit::http::is_header_name(&name) {
                    return Err(format!("`{rest}` is not a header name"));
                }
                if name == "x-forwarded-for" || name == "x-real-ip" || name == "forwarded" {
                    return Err(format!(
                        "`{rest}` is set by the client and trivially spoofed: use `ip` (CF-Connecting-IP)"
                    ));
                }
                Ok(IdentifierSource::Header(name))
            }
            "query" if !rest.is_empty() => Ok(IdentifierSource::Query(rest.to_string())),
            "path" => match rest.parse::<usize>() {
                Ok(n) if n >= 1 => Ok(IdentifierSource::PathSegment(n)),
                _ => Err(format!("`path:{rest}` needs a segment number from 1")),
            },
            "api-key" => match IdentifierSource::parse(rest)? {
                IdentifierSource::ApiKey(_) => Err(format!("`{text}` hashes twice")),
                inner => Ok(IdentifierSource::ApiKey(Box::new(inner))),
            },
            "custom" if is_custom_name(rest) => Ok(IdentifierSource::Custom(rest.to_string())),
            "custom" => Err(format!(
                "`custom:{rest}` needs a name of 1–64 of A-Z a-z 0-9 - _ ."
            )),
            _ => Err(unknown()),
        }
    }

    /// The identifier this source gives for `request`; `None` when absent or empty. It is
    /// [`IdentifierSource::identifier_of`] the request's [`IdentifierSource::value`].
    pub fn extract<R: RequestView + ?Sized>(&self, request: &R) -> Option<Identifier> {
        self.value(request).map(|value| self.identifier_of(&value))
    }

    /// The identifier made of a value of this source: for `api-key:` its SHA-256 in hex, else
    /// the value itself (a long one hashed, see [`MAX_RAW_IDENTIFIER`]). A caller meeting the
    /// same values again and again (a replay) may keep what it made of each, and
    /// [`IdentifierSource::hashes`] says when that saves a hash.
    pub fn identifier_of(&self, value: &str) -> Identifier {
        match self {
            IdentifierSource::ApiKey(_) => Identifier::from(&sha256_hex(value.as_bytes())[..]),
            // An IPv4 address is its own identifier, as written; an IPv6 one (or an
            // IPv4-mapped one) is its group's. A value that is no address is kept as it is.
            IdentifierSource::ClientIp(grouping) if value.contains(':') => {
                match grouping.identifier_of(value) {
                    Ok(group) => Identifier::from(group.as_str()),
                    Err(_) => bounded(value.as_bytes()),
                }
            }
            _ => bounded(value.as_bytes()),
        }
    }

    /// Groups client addresses by `grouping` (the configuration's `ipv6_prefix`) if this source
    /// reads one; other sources are unchanged.
    pub fn set_grouping(&mut self, grouping: AddressGrouping) {
        if let IdentifierSource::ClientIp(held) = self {
            *held = grouping;
        }
    }

    /// Whether [`IdentifierSource::identifier_of`] hashes every value (`api-key:`).
    pub fn hashes(&self) -> bool {
        matches!(self, IdentifierSource::ApiKey(_))
    }

    /// The name of the custom source this source reads (`custom:<name>`, also hashed as
    /// `api-key:custom:<name>`), if it reads one.
    pub fn custom_name(&self) -> Option<&str> {
        match self {
            IdentifierSource::Custom(name) => Some(name),
            IdentifierSource::ApiKey(inner) => inner.custom_name(),
            _ => None,
        }
    }

    /// The value deny and allow lists match this source by: the raw value (trimmed), or for
    /// `api-key:` its lower-case hex SHA-256 — what `api-key:<source> <hash>` entries hold, so a
    /// key never sits in a list in the clear. `None` when absent, empty, or longer than
    /// [`MAX_RAW_IDENTIFIER`] bytes (no list entry is that long).
    pub fn list_value<R: RequestView + ?Sized>(&self, request: &R) -> Option<String> {
        self.list_value_ref(request).map(Cow::into_owned)
    }

    /// [`IdentifierSource::list_value`], borrowed from the request when it holds the value.
    pub(crate) fn list_value_ref<'r, R: RequestView + ?Sized>(
        &self,
        request: &'r R,
    ) -> Option<Cow<'r, str>> {
        let raw = self.value(request)?;
        match self {
            IdentifierSource::ApiKey(_) => {
                let digest = sha256_hex(raw.as_bytes());
                Some(Cow::Owned(String::from_utf8_lossy(&digest).into_owned()))
            }
            _ => (raw.len() <= MAX_LIST_VALUE).then_some(raw),
        }
    }

    /// The value the request holds for this source (for `api-key:`, the key itself), trimmed;
    /// `None` when absent or empty. Borrowed from the request when it holds it (a header, a path
    /// segment), so most identifiers are copied once, into the [`Identifier`].
    pub fn value<'r, R: RequestView + ?Sized>(&self, request: &'r R) -> Option<Cow<'r, str>> {
        let value = match self {
            IdentifierSource::ClientIp(_) => request.client_ip(),
            IdentifierSource::Header(name) => request.header_ref(name),
            IdentifierSource::Query(name) => request.query(name).map(Cow::Owned),
            IdentifierSource::PathSegment(n) => request
                .path()
                .split('/')
                .filter(|s| !s.is_empty())
                .nth(n - 1)
                .map(Cow::Borrowed),
            // Already trimmed, and `None` when empty.
            IdentifierSource::ApiKey(inner) => return inner.value(request),
            IdentifierSource::Custom(name) => request.custom(name),
        }?;
        // Trimmed once (a value is read on every request). Most values need no trimming: kept
        // as they are rather than copied.
        let value = match value {
            Cow::Borrowed(value) => Cow::Borrowed(value.trim()),
            Cow::Owned(value) => {
                let trimmed = value.trim();
                if trimmed.len() == value.len() {
                    Cow::Owned(value)
                } else {
                    Cow::Owned(trimmed.to_string())
                }
            }
        };
        (!value.is_empty()).then_some(value)
    }

    /// The source as configured, in canonical form (`ip`, `header:x-user`, `query:key`,
    /// `path:2`, `api-key:header:authorization`, `custom:user`): the source part of a list
    /// entry (but for `custom:`, which lists cannot hold).
    pub fn spec(&self) -> String {
        match self {
            IdentifierSource::ClientIp(_) => "ip".to_string(),
            IdentifierSource::Header(name) => format!("header:{name}"),
            IdentifierSource::Query(name) => format!("query:{name}"),
            IdentifierSource::PathSegment(n) => format!("path:{n}"),
            IdentifierSource::ApiKey(inner) => format!("api-key:{}", inner.spec()),
            IdentifierSource::Custom(name) => format!("custom:{name}"),
        }
    }

    /// A short description for messages: `header X-User`.
    pub fn describe(&self) -> String {
        match self {
            IdentifierSource::ClientIp(_) => "the client address (CF-Connecting-IP)".to_string(),
            IdentifierSource::Header(name) => format!("header `{name}`"),
            IdentifierSource::Query(name) => format!("query parameter `{name}`"),
            IdentifierSource::PathSegment(n) => format!("path segment {n}"),
            IdentifierSource::ApiKey(inner) => format!("an API key in {}", inner.describe()),
            IdentifierSource::Custom(name) => format!("the custom identifier `{name}`"),
        }
    }
}

/// Long identifiers become `0xFF` + their SHA-256. `0xFF` never occurs in UTF-8 text, so a
/// hashed identifier cannot collide with a raw one.
fn bounded(raw: &[u8]) -> Identifier {
    if raw.len() <= MAX_RAW_IDENTIFIER {
        return Identifier::from(raw);
    }
    let mut out = [0u8; 33];
    out[0] = 0xFF;
    out[1..].copy_from_slice(&Sha256::digest(raw));
    Identifier::from(&out[..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_and_refuse_spoofable_headers() {
        assert_eq!(
            IdentifierSource::parse("ip"),
            Ok(IdentifierSource::ClientIp(AddressGrouping::default()))
        );
        assert_eq!(
            IdentifierSource::parse("header:X-User"),
            Ok(IdentifierSource::Header("x-user".into()))
        );
        assert_eq!(
            IdentifierSource::parse("path:2"),
            Ok(IdentifierSource::PathSegment(2))
        );
        assert!(IdentifierSource::parse("path:0").is_err());
        assert!(IdentifierSource::parse("header:X-Forwarded-For")
            .unwrap_err()
            .contains("spoofed"));
        assert!(IdentifierSource::parse("cookie:x")
            .unwrap_err()
            .contains("expected one of"));
        assert!(IdentifierSource::parse("api-key:api-key:query:k").is_err());
    }

    #[test]
    fn identifiers_come_from_their_source_only() {
        let req = OwnedRequest::get("a.example", "/users/42/posts")
            .with_header("CF-Connecting-IP", "203.0.113.7")
            .with_header("X-Forwarded-For", "1.2.3.4")
            .with_header("X-User", "  alice ");
        let id = |s: &str| IdentifierSource::parse(s).unwrap().extract(&req);
        assert_eq!(id("ip"), Some(Identifier::from("203.0.113.7")));
        assert_eq!(id("header:x-user"), Some(Identifier::from("alice")));
        assert_eq!(id("path:2"), Some(Identifier::from("42")));
        assert_eq!(id("path:4"), None);
        assert_eq!(id("query:key"), None);
        let hashed = id("api-key:header:x-user").unwrap();
        assert_eq!(hashed.as_bytes().len(), 64);
        // SHA-256 of `alice` in lower-case hex (as `sha256sum` prints it).
        assert_eq!(
            hashed,
            Identifier::from("2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f93af71db186d6e90")
        );
        assert!(!String::from_utf8_lossy(hashed.as_bytes()).contains("alice"));
    }

    #[test]
    fn ipv6_clients_are_limited_by_their_network_and_ipv4_clients_by_their_address() {
        let from = |ip: &str| OwnedRequest::get("h", "/").with_header("cf-connecting-ip", ip);
        let ip = IdentifierSource::parse("ip").unwrap();
        let id = |source: &IdentifierSource, addr: &str| source.extract(&from(addr)).unwrap();
        // One /64, two addresses: one identifier, the network's text.
        assert_eq!(
            id(&ip, "2001:db8:1:2::7"),
            Identifier::from("2001:db8:1:2::/64")
        );
        assert_eq!(id(&ip, "2001:db8:1:2:ffff::1"), id(&ip, "2001:db8:1:2::7"));
        assert_ne!(id(&ip, "2001:db8:1:3::7"), id(&ip, "2001:db8:1:2::7"));
        // IPv4 as it is; an IPv4-mapped IPv6 address is the IPv4 client.
        assert_eq!(id(&ip, "203.0.113.7"), Identifier::from("203.0.113.7"));
        assert_eq!(
            id(&ip, "::ffff:203.0.113.7"),
            Identifier::from("203.0.113.7")
        );
        // Another prefix, as configured.
        let mut per_48 = ip.clone();
        per_48.set_grouping(AddressGrouping::new(48).unwrap());
        assert_eq!(
            id(&per_48, "2001:db8:1:2::7"),
            id(&per_48, "2001:db8:1:ffff::7")
        );
        let mut each = ip.clone();
        each.set_grouping(AddressGrouping::new(128).unwrap());
        assert_eq!(id(&each, "2001:db8::7"), Identifier::from("2001:db8::7"));
        // Lists still see the address itself.
        assert_eq!(
            ip.list_value(&from("2001:db8::7")),
            Some("2001:db8::7".to_string())
        );
        // What is no address is kept as it came.
        assert_eq!(
            id(&ip, "not:an:address"),
            Identifier::from("not:an:address")
        );
    }

    #[test]
    fn custom_sources_are_what_the_service_supplies_and_nothing_else() {
        let custom = IdentifierSource::parse("custom:user").unwrap();
        assert_eq!(custom, IdentifierSource::Custom("user".into()));
        assert_eq!(custom.spec(), "custom:user");
        assert_eq!(custom.custom_name(), Some("user"));
        // A header of the same name is not the custom value.
        let req = OwnedRequest::get("h", "/")
            .with_header("user", "mallory")
            .with_custom("user", " alice ");
        assert_eq!(custom.extract(&req), Some(Identifier::from("alice")));
        assert_eq!(
            custom.extract(&OwnedRequest::get("h", "/").with_header("user", "mallory")),
            None,
            "a request offers no custom value unless its front end supplies one"
        );
        let hashed = IdentifierSource::parse("api-key:custom:user").unwrap();
        assert_eq!(hashed.custom_name(), Some("user"));
        assert_eq!(
            hashed.extract(&req),
            IdentifierSource::parse("api-key:header:x")
                .unwrap()
                .extract(&OwnedRequest::get("h", "/").with_header("x", "alice"))
        );
        assert_eq!(
            IdentifierSource::parse("header:x").unwrap().custom_name(),
            None
        );
        for bad in ["custom:", "custom:a b", "custom:a:b"] {
            assert!(
                IdentifierSource::parse(bad)
                    .unwrap_err()
                    .contains("needs a name"),
                "{bad}"
            );
        }
    }

    #[test]
    fn api_keys_become_the_lowercase_hex_sha256_stored_keys_depend_on() {
        // FIPS 180-2's test vector for "abc": a different spelling would orphan every counter.
        let req = OwnedRequest::get("h", "/").with_header("x-key", "abc");
        let id = IdentifierSource::parse("api-key:header:x-key")
            .unwrap()
            .extract(&req);
        assert_eq!(
            id,
            Some(Identifier::from(
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
            ))
        );
    }

    #[test]
    fn huge_identifiers_are_hashed_and_cannot_collide_with_raw_ones() {
        let huge = "x".repeat(64 * 1024);
        let req = OwnedRequest::get("h", "/").with_header("x-user", &huge);
        let id = IdentifierSource::Header("x-user".into())
            .extract(&req)
            .unwrap();
        assert_eq!(id.as_bytes().len(), 33);
        assert_eq!(id.as_bytes()[0], 0xFF);
        let other = OwnedRequest::get("h", "/").with_header("x-user", &"x".repeat(64 * 1024 - 1));
        assert_ne!(
            Some(id),
            IdentifierSource::Header("x-user".into()).extract(&other)
        );
        let empty = OwnedRequest::get("h", "/").with_header("x-user", "   ");
        assert_eq!(
            IdentifierSource::Header("x-user".into()).extract(&empty),
            None
        );
        // A decoded query value is trimmed as a header's is, and a blank one is none.
        let queried = OwnedRequest::get("h", "/")
            .with_query("k", " bob ")
            .with_query("blank", "  ");
        let query = |name: &str| IdentifierSource::Query(name.into()).extract(&queried);
        assert_eq!(query("k"), Some(Identifier::from("bob")));
        assert_eq!(query("blank"), None);
        // Nor is a blank key hashed into one.
        assert_eq!(
            IdentifierSource::parse("api-key:header:x-user")
                .unwrap()
                .extract(&empty),
            None
        );
    }

    #[test]
    fn sources_print_back_as_parsed_and_give_list_values() {
        for spec in [
            "ip",
            "header:x-user",
            "query:key",
            "path:2",
            "api-key:header:authorization",
            "custom:user",
            "api-key:custom:user",
        ] {
            assert_eq!(IdentifierSource::parse(spec).unwrap().spec(), spec);
        }
        assert_eq!(
            IdentifierSource::parse("header:X-User").unwrap().spec(),
            "header:x-user"
        );
        let req = OwnedRequest::get("h", "/")
            .with_header("x-key", "abc")
            .with_header("x-long", &"y".repeat(MAX_LIST_VALUE + 1))
            .with_country("nz");
        let value = |s: &str| IdentifierSource::parse(s).unwrap().list_value(&req);
        assert_eq!(value("header:x-key"), Some("abc".to_string()));
        // The hash `api-key:` entries hold, as `sha256sum` prints it.
        assert_eq!(
            value("api-key:header:x-key").as_deref(),
            Some("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        );
        assert_eq!(value("header:x-long"), None, "no list entry is that long");
        assert_eq!(value("header:x-none"), None);
        assert_eq!(req.country().as_deref(), Some("NZ"));
        assert_eq!(OwnedRequest::get("h", "/").country(), None);
    }
}
