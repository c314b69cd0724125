//! One request as the Worker sees it, rebuilt from a trace line: method, host, path, query and
//! headers — what rules match on and identifiers come from (the Worker's `RequestView`).
//!
//! A [`Request`] owns one text buffer and spans into it, and is reused from event to event, so
//! reading a request allocates nothing once the buffers have grown.

use std::ops::Range;
use std::sync::OnceLock;

use edgelimit_engine::identify::CLIENT_IP_HEADER;
use edgelimit_engine::reading::FieldValues;
use edgelimit_engine::RequestView;
use url::Url;

use edgelimit_engine::LogLine;

use crate::regions::Place;

type Span = Range<u32>;

/// What a line may say of where a request came from (a [`Place`]'s parts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaceField {
    /// A region named outright.
    Region,
    /// The Cloudflare colo.
    Colo,
    /// The client's country.
    Country,
    /// The client's continent.
    Continent,
}

/// A request read from a trace.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// When it reached the edge (UTC epoch ms): the trace's time, or for the Worker's own log
    /// lines the isolate's clock (`local_ms`).
    pub time_ms: u64,
    /// How long it was in flight (ms), when the line says (a CSV/NDJSON `duration_ms`, Logpush's
    /// `OriginResponseDurationMs`): its concurrency leases are released that long after it.
    pub duration_ms: Option<u32>,
    text: String,
    method: Span,
    host: Span,
    path: Span,
    query: Span,
    /// Header fields: names lower case.
    headers: Vec<(Span, Span)>,
    /// What the Worker logged for this request (`--format edgelimit` only).
    pub logged: Option<Box<LogLine>>,
    /// Its place as the line gives it, by [`PlaceField`].
    places: [Span; 4],
    /// The region deciding it (an index in the configuration's `global.regions`), set as it is
    /// read when the configuration has a `global` section; `None` otherwise.
    pub region: Option<u32>,
}

fn span(text: &str, from: usize) -> Span {
    from as u32..text.len() as u32
}

/// Pushes `bytes` as text: UTF-8 as it is, anything else replaced (logs are not always UTF-8).
fn push_lossy(text: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(s) => text.push_str(s),
        Err(_) => text.push_str(&String::from_utf8_lossy(bytes)),
    }
}

/// Bytes the URL parser leaves alone in a path or query, so a target made only of them needs
/// no parsing: unreserved, sub-delims, `:`, `@`, `/`, `?` and `%` (escapes are kept as sent).
fn plain_target_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&()*+,;=:@/?%".contains(&b)
}

/// The base a relative request target is resolved against (its host is never used).
fn base() -> &'static Url {
    static BASE: OnceLock<Url> = OnceLock::new();
    BASE.get_or_init(|| Url::parse("http://edgelimit.invalid/").expect("a valid base URL"))
}

impl Request {
    /// How many bytes of text it holds (with its time, what tells a prepared request from
    /// another cheaply).
    pub fn size(&self) -> usize {
        self.text.len()
    }

    /// Forgets the previous request, keeping the buffers.
    pub fn clear(&mut self) {
        self.time_ms = 0;
        self.duration_ms = None;
        self.text.clear();
        self.method = 0..0;
        self.host = 0..0;
        self.path = 0..0;
        self.query = 0..0;
        self.headers.clear();
        self.logged = None;
        self.places = Default::default();
        self.region = None;
    }

    /// Sets the method (upper-cased, as the Worker sees it).
    pub fn set_method(&mut self, method: &[u8]) {
        let from = self.text.len();
        push_lossy(&mut self.text, method.trim_ascii());
        self.text[from..].make_ascii_uppercase();
        self.method = span(&self.text, from);
    }

    /// Sets the host: lower-cased, without a port, as the Worker's URL gives it.
    pub fn set_host(&mut self, host: &[u8]) {
        let host = host.trim_ascii();
        // `[v6]:port` keeps its brackets, `name:port` loses the port, a bare v6 stays whole.
        let host = if host.first() == Some(&b'[') {
            memchr::memchr(b']', host).map_or(host, |end| &host[..=end])
        } else if memchr::memchr_iter(b':', host).count() == 1 {
            &host[..memchr::memchr(b':', host).unwrap_or(host.len())]
        } else {
            host
        };
        let from = self.text.len();
        push_lossy(&mut self.text, host);
        self.text[from..].make_ascii_lowercase();
        self.host = span(&self.text, from);
    }

    /// Sets path and query from a request target as sent (`/a/b?x=1`, or an absolute URL),
    /// normalised as the Worker's URL parser does it: dot segments resolved, unsafe bytes
    /// percent-encoded. A target holding only bytes the parser leaves alone skips the parser.
    /// An absolute URL's host becomes the request's host when none was set.
    pub fn set_target(&mut self, target: &[u8]) {
        let target = target.trim_ascii();
        let plain = target.first() == Some(&b'/')
            && target.iter().all(|&b| plain_target_byte(b))
            && memchr::memmem::find(target, b"/.").is_none()
            && !target.windows(3).any(|w| w.eq_ignore_ascii_case(b"%2e"));
        if plain {
            let (path, query) = match memchr::memchr(b'?', target) {
                Some(q) => (&target[..q], &target[q + 1..]),
                None => (target, &b""[..]),
            };
            let from = self.text.len();
            push_lossy(&mut self.text, path);
            self.path = span(&self.text, from);
            let from = self.text.len();
            push_lossy(&mut self.text, query);
            self.query = span(&self.text, from);
            return;
        }
        let text = String::from_utf8_lossy(target);
        let parsed = if text.starts_with('/') {
            base().join(&text)
        } else {
            Url::parse(&text).or_else(|_| base().join(&format!("/{text}")))
        };
        let (path, query, host) = match &parsed {
            Ok(url) => (
                url.path(),
                url.query().unwrap_or(""),
                url.host_str().filter(|_| !text.starts_with('/')),
            ),
            Err(_) => ("/", "", None),
        };
        let from = self.text.len();
        self.text.push_str(path);
        self.path = span(&self.text, from);
        let from = self.text.len();
        self.text.push_str(query);
        self.query = span(&self.text, from);
        if let Some(host) = host.filter(|_| self.host.is_empty()) {
            let host = host.to_string();
            self.set_host(host.as_bytes());
        }
    }

    /// Sets the path exactly as given (the Worker's own log lines hold it already parsed).
    pub fn set_path(&mut self, path: &str) {
        let from = self.text.len();
        self.text.push_str(path);
        self.path = span(&self.text, from);
    }

    /// Adds a header field (`name` is lower-cased). An empty value is not added: the Worker
    /// treats it as absent anyway.
    pub fn add_header(&mut self, name: &[u8], value: &[u8]) {
        let value = value.trim_ascii();
        if value.is_empty() || value == b"-" {
            return;
        }
        let from = self.text.len();
        push_lossy(&mut self.text, name.trim_ascii());
        self.text[from..].make_ascii_lowercase();
        let name = span(&self.text, from);
        let from = self.text.len();
        push_lossy(&mut self.text, value);
        self.headers.push((name, span(&self.text, from)));
    }

    /// Sets the client address (`CF-Connecting-IP`, what the `ip` source reads).
    pub fn set_client_ip(&mut self, ip: &[u8]) {
        self.add_header(CLIENT_IP_HEADER.as_bytes(), ip);
    }

    /// Adds a query parameter (`name=value`, encoded as a form would be).
    pub fn add_query(&mut self, name: &str, value: &str) {
        let from = self.query.start as usize;
        let mut query = self.text[from..self.query.end as usize].to_string();
        let mut serializer = url::form_urlencoded::Serializer::for_suffix(&mut query, 0);
        serializer.append_pair(name, value);
        serializer.finish();
        let at = self.text.len();
        self.text.push_str(&query);
        self.query = span(&self.text, at);
    }

    /// Sets a part of its place (blanks around trimmed; `-` is none, as for headers).
    pub fn set_place(&mut self, field: PlaceField, value: &[u8]) {
        let value = value.trim_ascii();
        if value == b"-" {
            return;
        }
        let from = self.text.len();
        push_lossy(&mut self.text, value);
        self.places[field as usize] = span(&self.text, from);
    }

    /// Its place as the line gave it (parts it did not give are empty).
    pub fn place(&self) -> Place<'_> {
        let [region, colo, country, continent] = &self.places;
        Place {
            region: self.get(region),
            colo: self.get(colo),
            country: self.get(country),
            continent: self.get(continent),
        }
    }

    /// Who sent it, for `--assign-regions` to hash: the client address, or for the Worker's
    /// own log lines (which carry none) the first identifier it logged.
    pub fn client(&self) -> Option<&[u8]> {
        if let Some(ip) = self.header_ref_bytes(CLIENT_IP_HEADER) {
            return Some(ip);
        }
        self.logged
            .as_ref()
            .and_then(|l| l.limits.first())
            .map(|l| l.identifier.as_bytes())
    }

    fn header_ref_bytes(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| self.get(n) == name)
            .map(|(_, v)| self.get(v).as_bytes())
    }

    fn get(&self, span: &Span) -> &str {
        &self.text[span.start as usize..span.end as usize]
    }

    /// The header fields, names lower case.
    pub fn headers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.headers.iter().map(|(n, v)| (self.get(n), self.get(v)))
    }

    /// The raw query string (without `?`).
    pub fn query_string(&self) -> &str {
        self.get(&self.query)
    }
}

impl RequestView for Request {
    fn method(&self) -> &str {
        self.get(&self.method)
    }
    fn host(&self) -> &str {
        self.get(&self.host)
    }
    fn path(&self) -> &str {
        self.get(&self.path)
    }
    fn query(&self, name: &str) -> Option<String> {
        // The Worker reads `url.query_pairs()`: the same decoder.
        url::form_urlencoded::parse(self.query_string().as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }
    fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(n, _)| self.get(n) == name)
            .map(|(_, v)| self.get(v).to_string())
    }
    fn header_ref(&self, name: &str) -> Option<std::borrow::Cow<'_, str>> {
        self.headers
            .iter()
            .find(|(n, _)| self.get(n) == name)
            .map(|(_, v)| std::borrow::Cow::Borrowed(self.get(v)))
    }
    /// As the Worker reads them: its runtime joins a header's lines with `, `, so a line holding
    /// a comma is read as several, as two lines are.
    fn header_values(&self, name: &str) -> FieldValues<'_> {
        match FieldValues::among(self.headers(), name) {
            FieldValues::One(value) => FieldValues::joined(name, Some(value)),
            values => values,
        }
    }
    fn query_values(&self, name: &str) -> FieldValues<'_> {
        let mut values = url::form_urlencoded::parse(self.query_string().as_bytes())
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v);
        let Some(first) = values.next() else {
            return FieldValues::Absent;
        };
        match values.last() {
            None => FieldValues::One(first),
            Some(last) => FieldValues::Repeated { first, last },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(t: &str) -> (String, String) {
        let mut r = Request::default();
        r.set_target(t.as_bytes());
        (r.path().to_string(), r.query_string().to_string())
    }

    #[test]
    fn targets_are_normalised_as_the_worker_url_parser_does() {
        assert_eq!(target("/a/b?x=1&y=2"), ("/a/b".into(), "x=1&y=2".into()));
        assert_eq!(target("/a/./b/../c"), ("/a/c".into(), "".into()));
        assert_eq!(target("/a/%2e%2E/c"), ("/c".into(), "".into()));
        assert_eq!(
            target("/a b/ü?q=a b"),
            ("/a%20b/%C3%BC".into(), "q=a%20b".into())
        );
        assert_eq!(target("/x#frag"), ("/x".into(), "".into()));
        assert_eq!(
            target("/users/%E2%9C%93/items"),
            ("/users/%E2%9C%93/items".into(), "".into())
        );
        let mut r = Request::default();
        r.set_target(b"http://API.Example.com:8080/v1?k=1");
        assert_eq!((r.host(), r.path()), ("api.example.com", "/v1"));
    }

    #[test]
    fn headers_query_and_host_read_as_the_worker_reads_them() {
        let mut r = Request::default();
        r.set_method(b"get");
        r.set_host(b"Api.Example.com:443");
        r.set_target(b"/items?key=a%2Bb&plus=a+b&empty=");
        r.add_header(b"X-User", b"  alice ");
        r.add_header(b"Referer", b"-");
        r.set_client_ip(b"203.0.113.7");
        assert_eq!((r.method(), r.host()), ("GET", "api.example.com"));
        assert_eq!(r.query("key").as_deref(), Some("a+b"));
        assert_eq!(r.query("plus").as_deref(), Some("a b"));
        assert_eq!(r.query("none"), None);
        assert_eq!(r.header("x-user").as_deref(), Some("alice"));
        assert_eq!(r.header("referer"), None, "`-` is an absent field in logs");
        assert_eq!(r.header("cf-connecting-ip").as_deref(), Some("203.0.113.7"));
        let mut v6 = Request::default();
        v6.set_host(b"[2001:db8::1]:8443");
        assert_eq!(v6.host(), "[2001:db8::1]");
        r.clear();
        assert_eq!((r.method(), r.path(), r.header("x-user")), ("", "", None));
    }
}
