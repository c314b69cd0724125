//! Finding the client behind proxies: [`TrustedProxies`] (the ranges whose forwarding headers
//! are believed), [`ProxyHeader`] (the one header they write) and [`ClientAddress`] (the walk).
//!
//! The rule (docs/design.md §8): the forwarding header is read only when the peer — the address
//! that connected — is a trusted proxy; then its hops are walked from the right, each trusted
//! one skipped, and the first untrusted hop is the client. A client can write anything at the
//! left of the chain (it sends the header the first proxy appends to), but not at the right,
//! where each trusted proxy appends the address it saw; so prepending never changes the answer.
//! A hop that names no readable address stops the walk at the last address read — the trusted
//! proxy that passed it on — since whatever wrote it cannot be vouched for. When every hop is
//! trusted, the left-most is the client.

use std::fmt;
use std::net::IpAddr;
use std::ops::ControlFlow;
use std::str::FromStr;

use super::error::AddressError;
use super::forwarded::{self, Hop};
use super::named::named;
use super::prefix::{unmapped, IpPrefix};

/// The networks of the proxies in front of a service, whose forwarding headers are believed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    ranges: Vec<IpPrefix>,
    // The same networks as masks, for a membership test without re-deriving them per request.
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

impl TrustedProxies {
    /// No proxy is trusted: every request's client is its peer.
    pub fn none() -> TrustedProxies {
        TrustedProxies::default()
    }

    /// These networks.
    pub fn new(ranges: impl IntoIterator<Item = IpPrefix>) -> TrustedProxies {
        let mut proxies = TrustedProxies::none();
        for range in ranges {
            proxies.add(range);
        }
        proxies
    }

    /// Parses a list of entries, each an address (`10.0.0.7`), a network (`10.0.0.0/8`,
    /// `2001:db8::/32`) or a named set: `loopback` (127.0.0.0/8, ::1), `private` (10.0.0.0/8,
    /// 172.16.0.0/12, 192.168.0.0/16, fc00::/7), `linklocal` (169.254.0.0/16, fe80::/10).
    /// Surrounding whitespace is ignored; an error names the entry and its position.
    pub fn parse<'a>(
        entries: impl IntoIterator<Item = &'a str>,
    ) -> Result<TrustedProxies, AddressError> {
        let mut proxies = TrustedProxies::none();
        for (index, entry) in entries.into_iter().enumerate() {
            let text = entry.trim();
            if let Some(ranges) = named(text) {
                for range in ranges {
                    proxies.add(range.parse().expect("the named ranges parse"));
                }
                continue;
            }
            let range = text
                .parse()
                .map_err(|e: AddressError| AddressError::TrustedProxy {
                    index,
                    entry: entry.to_string(),
                    reason: e.to_string(),
                })?;
            proxies.add(range);
        }
        Ok(proxies)
    }

    fn add(&mut self, range: IpPrefix) {
        let len = u32::from(range.prefix_len());
        match range.network() {
            IpAddr::V4(v4) => self
                .v4
                .push((u32::from(v4), u32::MAX.checked_shl(32 - len).unwrap_or(0))),
            IpAddr::V6(v6) => self.v6.push((
                u128::from(v6),
                u128::MAX.checked_shl(128 - len).unwrap_or(0),
            )),
        }
        self.ranges.push(range);
    }

    /// The trusted networks, as given (named sets expanded).
    pub fn ranges(&self) -> &[IpPrefix] {
        &self.ranges
    }

    /// Whether no proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Whether `ip` (an IPv4-mapped one as its IPv4 address) is in a trusted network.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        match unmapped(ip) {
            IpAddr::V4(v4) => {
                let bits = u32::from(v4);
                self.v4.iter().any(|&(net, mask)| bits & mask == net)
            }
            IpAddr::V6(v6) => {
                let bits = u128::from(v6);
                self.v6.iter().any(|&(net, mask)| bits & mask == net)
            }
        }
    }
}

impl FromStr for TrustedProxies {
    type Err = AddressError;

    /// [`TrustedProxies::parse`] of a comma- or whitespace-separated list:
    /// `"loopback, 10.0.0.0/8"`.
    fn from_str(text: &str) -> Result<TrustedProxies, AddressError> {
        TrustedProxies::parse(
            text.split(|c: char| c == ',' || c.is_whitespace())
                .filter(|entry| !entry.is_empty()),
        )
    }
}

/// The one header the trusted proxies write the chain to. One only: a client can send any
/// header, and a proxy passes on those it does not write, so believing a second header would
/// believe whatever the client put there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ProxyHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`, the de facto standard (nginx, HAProxy,
    /// Envoy, AWS and Google load balancers, Cloudflare): the default.
    #[default]
    XForwardedFor,
    /// `Forwarded: for=client, for="[2001:db8::1]:4711"` (RFC 7239); elements without an
    /// address (`for=unknown`, obfuscated `for=_name`, no `for=`) stop the walk.
    Forwarded,
    /// `X-Real-IP: client`, set by a single proxy (nginx's `proxy_set_header X-Real-IP
    /// $remote_addr`); read as `X-Forwarded-For` is, so several values are one chain.
    XRealIp,
}

impl ProxyHeader {
    /// The header's name in lower case, as HTTP/2 and most header maps hold it.
    pub fn name(&self) -> &'static str {
        match self {
            ProxyHeader::XForwardedFor => "x-forwarded-for",
            ProxyHeader::Forwarded => "forwarded",
            ProxyHeader::XRealIp => "x-real-ip",
        }
    }
}

impl FromStr for ProxyHeader {
    type Err = AddressError;

    /// The header's name in any case: `X-Forwarded-For`, `forwarded`, `x-real-ip`.
    fn from_str(text: &str) -> Result<ProxyHeader, AddressError> {
        [
            ProxyHeader::XForwardedFor,
            ProxyHeader::Forwarded,
            ProxyHeader::XRealIp,
        ]
        .into_iter()
        .find(|h| h.name().eq_ignore_ascii_case(text.trim()))
        .ok_or_else(|| AddressError::ProxyHeader(text.to_string()))
    }
}

impl fmt::Display for ProxyHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a service finds a request's client address: directly (the peer), or behind trusted
/// proxies from the header they write (module docs: the rule).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientAddress {
    proxies: TrustedProxies,
    header: ProxyHeader,
}

impl ClientAddress {
    /// No proxy in front: the client is the peer, and no header is read.
    pub fn direct() -> ClientAddress {
        ClientAddress::default()
    }

    /// Behind `proxies`, which write the chain to `header`.
    pub fn behind(proxies: TrustedProxies, header: ProxyHeader) -> ClientAddress {
        ClientAddress { proxies, header }
    }

    /// The trusted proxies.
    pub fn proxies(&self) -> &TrustedProxies {
        &self.proxies
    }

    /// The header to hand to [`Self::resolve`], or `None` when no proxy is trusted (no header is
    /// ever read).
    pub fn header(&self) -> Option<ProxyHeader> {
        (!self.proxies.is_empty()).then_some(self.header)
    }

    /// The client of a request from `peer` whose [`Self::header`] field lines are `lines`, in
    /// the order received (several lines are one list). Never fails: unreadable hops stop the
    /// walk at the last address read, and without a trusted peer the lines are not looked at.
    /// An IPv4-mapped answer is given as the IPv4 address.
    pub fn resolve<L>(&self, peer: IpAddr, lines: L) -> IpAddr
    where
        L: IntoIterator,
        L::Item: AsRef<[u8]>,
        L::IntoIter: DoubleEndedIterator,
    {
        let peer = unmapped(peer);
        if !self.proxies.trusts(peer) {
            return peer;
        }
        let mut walk = Walk {
            proxies: &self.proxies,
            client: peer,
        };
        for line in lines.into_iter().rev() {
            let line = line.as_ref();
            let flow = match self.header {
                ProxyHeader::XForwardedFor | ProxyHeader::XRealIp => {
                    forwarded::x_forwarded_for(line).try_for_each(|hop| walk.step(hop))
                }
                ProxyHeader::Forwarded => {
                    forwarded::forwarded(line).try_for_each(|hop| walk.step(hop))
                }
            };
            if let ControlFlow::Break(client) = flow {
                return client;
            }
        }
        walk.client
    }
}

/// The walk from the right: the last address read, and whether to go on.
struct Walk<'a> {
    proxies: &'a TrustedProxies,
    client: IpAddr,
}

impl Walk<'_> {
    fn step(&mut self, hop: Hop) -> ControlFlow<IpAddr> {
        let Some(ip) = hop else {
            return ControlFlow::Break(self.client);
        };
        self.client = unmapped(ip);
        if self.proxies.trusts(self.client) {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(self.client)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn behind(ranges: &str, header: ProxyHeader) -> ClientAddress {
        ClientAddress::behind(ranges.parse().unwrap(), header)
    }

    #[test]
    fn headers_from_an_untrusted_peer_are_ignored() {
        let client = behind("10.0.0.0/8", ProxyHeader::XForwardedFor);
        assert_eq!(
            client.resolve(ip("198.51.100.7"), ["192.0.2.1"]),
            ip("198.51.100.7")
        );
        let direct = ClientAddress::direct();
        assert_eq!(direct.header(), None);
        assert_eq!(
            direct.resolve(ip("10.0.0.1"), ["192.0.2.1"]),
            ip("10.0.0.1")
        );
        assert_eq!(client.header(), Some(ProxyHeader::XForwardedFor));
    }

    #[test]
    fn the_right_most_untrusted_hop_is_the_client_through_several_proxies() {
        let client = behind("10.0.0.0/8, 2001:db8:ffff::/48", ProxyHeader::XForwardedFor);
        let chain = ["203.0.113.9, 192.0.2.1, 10.0.0.2", "2001:db8:ffff::1"];
        assert_eq!(client.resolve(ip("10.0.0.1"), chain), ip("192.0.2.1"));
        // No header from a trusted peer: the peer is the client.
        assert_eq!(client.resolve(ip("10.0.0.1"), [""; 0]), ip("10.0.0.1"));
        assert_eq!(client.resolve(ip("10.0.0.1"), [" "]), ip("10.0.0.1"));
        // Every hop trusted: the left-most.
        assert_eq!(
            client.resolve(ip("10.0.0.1"), ["10.9.9.9, 10.0.0.2"]),
            ip("10.9.9.9")
        );
        // A mapped peer is its IPv4 address, and so is a mapped hop.
        assert_eq!(
            client.resolve(ip("::ffff:10.0.0.1"), ["::ffff:192.0.2.1"]),
            ip("192.0.2.1")
        );
    }

    #[test]
    fn an_unreadable_hop_stops_the_walk_at_the_proxy_that_passed_it_on() {
        let client = behind("10.0.0.0/8", ProxyHeader::XForwardedFor);
        for garbage in ["unknown", "_hidden", "not-an-ip", "192.0.2.1:x"] {
            let chain = [format!("192.0.2.1, {garbage}, 10.0.0.2")];
            assert_eq!(client.resolve(ip("10.0.0.1"), &chain), ip("10.0.0.2"));
        }
        assert_eq!(client.resolve(ip("10.0.0.1"), ["garbage"]), ip("10.0.0.1"));
        // Garbage left of the client is never reached.
        assert_eq!(
            client.resolve(ip("10.0.0.1"), ["garbage, 192.0.2.1, 10.0.0.2"]),
            ip("192.0.2.1")
        );
    }

    #[test]
    fn forwarded_chains_with_quoted_ipv6_and_ports() {
        let client = behind("2001:db8:ffff::/48, loopback", ProxyHeader::Forwarded);
        let lines = [
            r#"for=192.0.2.43, for="[2001:db8:cafe::17]:4711";proto=https"#,
            r#"for="[2001:db8:ffff::2]";by=_proxy"#,
        ];
        assert_eq!(client.resolve(ip("::1"), lines), ip("2001:db8:cafe::17"));
        let unknown = [r#"for=192.0.2.43, for=unknown, for="[2001:db8:ffff::2]""#];
        assert_eq!(client.resolve(ip("::1"), unknown), ip("2001:db8:ffff::2"));
        // A bare address is no `Forwarded` element (it has no `for=`): the walk stops there.
        assert_eq!(
            client.resolve(ip("127.0.0.1"), ["192.0.2.1"]),
            ip("127.0.0.1")
        );
    }

    #[test]
    fn x_real_ip_is_read_as_a_chain() {
        let client = behind("loopback", ProxyHeader::XRealIp);
        assert_eq!(
            client.resolve(ip("127.0.0.1"), ["192.0.2.1"]),
            ip("192.0.2.1")
        );
        assert_eq!(
            client.resolve(ip("127.0.0.1"), ["203.0.113.1", "192.0.2.1"]),
            ip("192.0.2.1")
        );
    }

    #[test]
    fn settings_parse_and_bad_ones_name_the_entry() {
        let proxies: TrustedProxies = "loopback private linklocal, 203.0.113.7".parse().unwrap();
        assert_eq!(proxies.ranges().len(), 2 + 4 + 2 + 1);
        for trusted in [
            "127.1.2.3",
            "::1",
            "172.31.0.1",
            "fd00::1",
            "fe80::1",
            "203.0.113.7",
        ] {
            assert!(proxies.trusts(ip(trusted)), "{trusted}");
        }
        for untrusted in ["172.32.0.1", "::2", "203.0.113.8", "2001:db8::1"] {
            assert!(!proxies.trusts(ip(untrusted)), "{untrusted}");
        }
        let err = TrustedProxies::parse(["10.0.0.0/8", " 10.0.0.0/40"])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "trusted proxy 1 (` 10.0.0.0/40`): `/40` is not a prefix length from 0 to 32"
            ),
            "{err}"
        );
        let err = "10.0.0.0/8, lo"
            .parse::<TrustedProxies>()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`lo`") && err.contains("loopback, private"),
            "{err}"
        );
        assert_eq!("X-Real-IP".parse(), Ok(ProxyHeader::XRealIp));
        assert_eq!(" Forwarded".parse(), Ok(ProxyHeader::Forwarded));
        assert_eq!(
            "x-client-ip".parse::<ProxyHeader>().unwrap_err().to_string(),
            "`x-client-ip` is not a proxy header (expected x-forwarded-for, forwarded or x-real-ip)"
        );
    }
}
