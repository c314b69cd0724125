//! An `http` request as the request path reads it ([`RequestView`], [`Incoming`]): its method,
//! host, path, query and headers as sent; the client address resolved from the peer behind the
//! trusted proxies (never a header the client could write); the service's custom identifiers.

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::OnceLock;

use edgelimit::net::{AddressText, ClientAddress, IpPrefix};
use edgelimit_engine::read_ahead::ReadAhead;
use edgelimit_engine::reading::FieldValues;
use edgelimit_engine::{Incoming, RequestView};
use http::header::{HeaderName, HOST};
use http::request::Parts;

use crate::custom::Customs;
use crate::peer::Peer;

/// How the layer reads what the request path asks of a request.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reading {
    /// Who the client is behind which proxies.
    pub(crate) client: ClientAddress,
    /// Where the peer is recorded.
    pub(crate) peer: Peer,
    /// The service's own identifiers (and costs).
    pub(crate) customs: Customs,
    /// The configuration's request id header, parsed once for the layer rather than on every
    /// request (`None` until the layer is built).
    pub(crate) request_id: Option<HeaderName>,
    /// Whether every limited request needs its client address
    /// ([`edgelimit_engine::Config::reads_client_always`]): then it is resolved up front, without the lazy cell's
    /// synchronisation on first use (found when the layer is built).
    pub(crate) client_always: bool,
}

impl Reading {
    /// The client of `request`: its peer, or behind trusted proxies the right-most address
    /// they did not write; `None` when the server recorded no peer.
    pub(crate) fn client_of(&self, request: &Parts) -> Option<IpAddr> {
        let peer = (self.peer.0)(request)?;
        Some(match self.client.header() {
            None => self.client.resolve(peer, std::iter::empty::<&[u8]>()),
            Some(header) => self.client.resolve(
                peer,
                request
                    .headers
                    .get_all(header.name())
                    .iter()
                    .map(|v| v.as_bytes()),
            ),
        })
    }
}

/// One request as the pipeline sees it.
#[derive(Debug)]
pub(crate) struct HttpRequest<'a> {
    parts: &'a Parts,
    reading: &'a Reading,
    /// The host as sent, read when the request is: the request path always reads it (as nginx
    /// picks a server), and a cell filled on first use would cost more than finding it.
    host: &'a str,
    /// The client's address as text when the request path always reads it, resolved once the
    /// rules are known to match ([`HttpRequest::with_matched`]).
    client_known: Option<Option<AddressText>>,
    /// Otherwise the client's address as text, found on first use: a request no `ip` limit or
    /// list looks at never resolves it.
    client: OnceLock<Option<AddressText>>,
    /// How the engine read it in the layer, when it did: the request path takes that reading
    /// and those rules rather than reading and matching again.
    ahead: Option<ReadAhead>,
}

impl<'a> HttpRequest<'a> {
    /// `parts` read as `reading` says.
    pub(crate) fn new(parts: &'a Parts, reading: &'a Reading) -> HttpRequest<'a> {
        HttpRequest {
            host: host_of(parts),
            parts,
            reading,
            client_known: None,
            client: OnceLock::new(),
            ahead: None,
        }
    }

    /// The same request, as the engine read it in the layer ([`ReadAhead::read`]): the request path does
    /// not read it or match its rules again. Its client address is resolved now when the
    /// request path always reads it ([`Reading::client_always`]).
    pub(crate) fn with_read_ahead(mut self, ahead: ReadAhead) -> HttpRequest<'a> {
        self.ahead = Some(ahead);
        if self.reading.client_always {
            self.client_known = Some(self.resolve_client());
        }
        self
    }

    fn resolve_client(&self) -> Option<AddressText> {
        let ip = self.reading.client_of(self.parts)?;
        Some(IpPrefix::address(ip).text())
    }

    fn client_address(&self) -> Option<&AddressText> {
        match &self.client_known {
            Some(known) => known.as_ref(),
            None => self.client.get_or_init(|| self.resolve_client()).as_ref(),
        }
    }
}

/// The request's host as it names it: `Host` (HTTP/1.1), else the URI's authority (HTTP/2's
/// `:authority`); empty when it has neither. Its case and port are left to the request path's
/// reading ([`edgelimit_engine::Config::reading`]), which reads them once. A `Host` that is not visible ASCII is
/// read as one the reading refuses, never as no host (which would match no rule naming one).
fn host_of(parts: &Parts) -> &str {
    match parts.headers.get(HOST) {
        Some(value) => value.to_str().unwrap_or(NOT_TEXT),
        None => parts.uri.authority().map_or("", |a| a.as_str()),
    }
}

/// What a `Host` that is not text reads as: a host [`edgelimit_engine::normalize::host`]
/// refuses (a space is never in one).
const NOT_TEXT: &str = " ";

impl RequestView for HttpRequest<'_> {
    fn method(&self) -> &str {
        self.parts.method.as_str()
    }

    fn host(&self) -> &str {
        self.host
    }

    fn path(&self) -> &str {
        self.parts.uri.path()
    }

    fn query(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(self.parts.uri.query()?.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }

    fn query_values(&self, name: &str) -> FieldValues<'_> {
        let Some(query) = self.parts.uri.query() else {
            return FieldValues::Absent;
        };
        let mut values = form_urlencoded::parse(query.as_bytes())
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

    /// Each field line of the header on its own, as hyper received them.
    fn header_values(&self, name: &str) -> FieldValues<'_> {
        let mut values = match &self.reading.request_id {
            Some(known) if known.as_str() == name => self.parts.headers.get_all(known).iter(),
            _ => self.parts.headers.get_all(name).iter(),
        };
        let Some(first) = values.next() else {
            return FieldValues::Absent;
        };
        match values.next_back() {
            None => FieldValues::One(text(first.as_bytes())),
            Some(last) => FieldValues::Repeated {
                first: text(first.as_bytes()),
                last: text(last.as_bytes()),
            },
        }
    }

    fn header(&self, name: &str) -> Option<String> {
        self.header_ref(name).map(Cow::into_owned)
    }

    /// A header's value; several field lines of one name are one value joined by `, `, as the
    /// Worker's runtime (the Fetch API's `Headers.get`) gives them.
    fn header_ref(&self, name: &str) -> Option<Cow<'_, str>> {
        let mut values = match &self.reading.request_id {
            Some(known) if known.as_str() == name => self.parts.headers.get_all(known).iter(),
            _ => self.parts.headers.get_all(name).iter(),
        };
        let first = text(values.next()?.as_bytes());
        let Some(second) = values.next() else {
            return Some(first);
        };
        let mut joined = first.into_owned();
        for value in std::iter::once(second).chain(values) {
            joined.push_str(", ");
            joined.push_str(&text(value.as_bytes()));
        }
        Some(Cow::Owned(joined))
    }

    fn client_ip(&self) -> Option<Cow<'_, str>> {
        self.client_address()
            .map(|text| Cow::Borrowed(text.as_str()))
    }

    fn custom(&self, name: &str) -> Option<Cow<'_, str>> {
        self.reading
            .customs
            .identifier(name, self.parts)
            .map(Cow::Owned)
    }
}

/// Identifiers are read from the request, as the Worker reads them; its path, host and rules
/// as the engine read them ahead ([`ReadAhead::read`], in the layer).
impl Incoming for HttpRequest<'_> {
    fn read_ahead(&self) -> Option<&ReadAhead> {
        self.ahead.as_ref()
    }
}

/// A header value as text: UTF-8 as it came, anything else with its invalid bytes replaced.
fn text(bytes: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use edgelimit::net::{ProxyHeader, TrustedProxies};

    use super::*;
    use crate::peer::PeerAddr;
    use edgelimit_engine::Config;

    fn parts(uri: &str, headers: &[(&str, &str)], peer: Option<&str>) -> Parts {
        let mut builder = http::Request::builder().uri(uri);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let mut parts = builder.body(()).unwrap().into_parts().0;
        if let Some(peer) = peer {
            parts.extensions.insert(PeerAddr(peer.parse().unwrap()));
        }
        parts
    }

    fn config() -> Config {
        Config::from_json(
            r#"{"rules": [{"name": "api", "limits": [{"name": "ip", "policy": "fixed 5/1m", "identifier": "ip"}]}]}"#,
        )
        .expect("a configuration")
    }

    /// The host as the request path reads it.
    fn read_host(request: &HttpRequest<'_>) -> String {
        config().reading(request).host().to_string()
    }

    #[test]
    fn the_request_reads_as_the_worker_reads_one() {
        let reading = Reading::default();
        let p = parts(
            "http://Example.COM:8080/api/items?k=a%20b&k=second&plus=x+y",
            &[("x-key", "one"), ("x-key", "two"), ("x-user", "alice")],
            None,
        );
        let request = HttpRequest::new(&p, &reading);
        assert_eq!(request.method(), "GET");
        assert_eq!(read_host(&request), "example.com");
        assert_eq!(request.path(), "/api/items");
        assert_eq!(request.query("k").as_deref(), Some("a b"));
        assert_eq!(request.query("plus").as_deref(), Some("x y"));
        assert_eq!(request.query("none"), None);
        assert_eq!(request.header("x-key").as_deref(), Some("one, two"));
        assert!(matches!(
            request.header_ref("x-user"),
            Some(Cow::Borrowed("alice"))
        ));
        assert_eq!(request.client_ip(), None, "no peer recorded: no address");
        // The Host header is the host, when there is one; an IPv6 literal keeps its brackets.
        let p = parts("/x", &[("host", "API.example.com:443")], None);
        assert_eq!(
            read_host(&HttpRequest::new(&p, &reading)),
            "api.example.com"
        );
        let p = parts("/x", &[("host", "[2001:DB8::1]:8080")], None);
        assert_eq!(read_host(&HttpRequest::new(&p, &reading)), "[2001:db8::1]");
        // A Host that is not text is unreadable, not absent: absent, it would match no rule
        // that names a host.
        let mut p = parts("http://api.example.com/x", &[], None);
        p.headers.insert(
            HOST,
            http::HeaderValue::from_bytes(b"api.example.com\xff").unwrap(),
        );
        let request = HttpRequest::new(&p, &reading);
        assert!(config().reading(&request).unreadable().is_some());
    }

    #[test]
    fn the_client_is_the_peer_unless_a_trusted_proxy_says_otherwise() {
        let spoofed = [
            ("x-forwarded-for", "203.0.113.9"),
            ("cf-connecting-ip", "203.0.113.10"),
            ("x-real-ip", "203.0.113.11"),
        ];
        // Direct: no header is believed, CF-Connecting-IP included.
        let direct = Reading::default();
        let p = parts("/", &spoofed, Some("198.51.100.7:5000"));
        assert_eq!(
            HttpRequest::new(&p, &direct).client_ip().as_deref(),
            Some("198.51.100.7")
        );
        // Behind a trusted proxy: the right-most hop it did not write.
        let behind = Reading {
            client: ClientAddress::behind(
                TrustedProxies::parse(["10.0.0.0/8"]).unwrap(),
                ProxyHeader::XForwardedFor,
            ),
            ..Reading::default()
        };
        let p = parts(
            "/",
            &[("x-forwarded-for", "1.2.3.4, 203.0.113.9, 10.0.0.2")],
            Some("10.0.0.1:5000"),
        );
        assert_eq!(
            HttpRequest::new(&p, &behind).client_ip().as_deref(),
            Some("203.0.113.9")
        );
        // The same header from an untrusted peer is not read.
        let p = parts(
            "/",
            &[("x-forwarded-for", "203.0.113.9")],
            Some("198.51.100.7:5000"),
        );
        assert_eq!(
            HttpRequest::new(&p, &behind).client_ip().as_deref(),
            Some("198.51.100.7")
        );
        // A service recording its peer elsewhere reads it with its own closure.
        let elsewhere = Reading {
            peer: Peer(Arc::new(|_: &Parts| Some("2001:db8::5".parse().unwrap()))),
            ..Reading::default()
        };
        let p = parts("/", &[], None);
        assert_eq!(
            HttpRequest::new(&p, &elsewhere).client_ip().as_deref(),
            Some("2001:db8::5")
        );
    }
}
