//! Property tests of client addresses (docs/design.md §8): the walk through trusted proxies
//! against a model, spoofing by prepending, and IPv6 grouping.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use edgelimit::{AddressGrouping, ClientAddress, IpPrefix, ProxyHeader, TrustedProxies};
use proptest::prelude::*;

/// The proxies' networks in every test: one IPv4, one IPv6.
fn proxies() -> TrustedProxies {
    "10.0.0.0/8, 2001:db8:ffff::/48".parse().unwrap()
}

/// One element of a chain as a proxy (or a client) wrote it.
#[derive(Debug, Clone)]
enum Hop {
    Trusted(IpAddr),
    Untrusted(IpAddr),
    /// A node no address can be read from.
    Unreadable(&'static str),
}

impl Hop {
    fn address(&self) -> Option<IpAddr> {
        match self {
            Hop::Trusted(ip) | Hop::Untrusted(ip) => Some(*ip),
            Hop::Unreadable(_) => None,
        }
    }

    /// As an `X-Forwarded-For` element: v6 bare, bracketed or with a port; v4 with or without.
    fn xff(&self, form: u8) -> String {
        match (self.address(), form % 3) {
            (None, _) => self.unreadable().to_string(),
            (Some(IpAddr::V6(v6)), 0) => v6.to_string(),
            (Some(IpAddr::V6(v6)), 1) => format!("[{v6}]"),
            (Some(IpAddr::V6(v6)), _) => format!("[{v6}]:4711"),
            (Some(IpAddr::V4(v4)), 2) => format!("{v4}:8080"),
            (Some(ip), _) => ip.to_string(),
        }
    }

    /// As a `Forwarded` element, with other parameters around the `for=` now and then.
    fn forwarded(&self, form: u8) -> String {
        let node = match (self.address(), form % 3) {
            (None, _) => return format!("for={}", self.unreadable()),
            (Some(IpAddr::V6(v6)), 0) => format!("\"[{v6}]\""),
            (Some(IpAddr::V6(v6)), _) => format!("\"[{v6}]:_port\""),
            (Some(IpAddr::V4(v4)), 2) => format!("\"{v4}:47011\""),
            (Some(ip), _) => ip.to_string(),
        };
        match form % 4 {
            0 => format!("for={node}"),
            1 => format!("For={node};proto=https"),
            2 => format!("by=\"a,b;c\";for={node}"),
            _ => format!("proto=http ; for={node};host=\"example.com\""),
        }
    }

    fn unreadable(&self) -> &'static str {
        match self {
            Hop::Unreadable(text) => text,
            _ => unreachable!(),
        }
    }
}

fn v4(trusted: bool) -> impl Strategy<Value = IpAddr> {
    any::<u32>().prop_map(move |bits| {
        let bits = if trusted {
            0x0a00_0000 | (bits & 0x00ff_ffff)
        } else if bits >> 24 == 10 {
            bits ^ 0x8000_0000
        } else {
            bits
        };
        IpAddr::V4(Ipv4Addr::from(bits))
    })
}

fn v6(trusted: bool) -> impl Strategy<Value = IpAddr> {
    let inside: u128 = 0x2001_0db8_ffff << 80;
    any::<u128>().prop_map(move |bits| {
        let mut bits = if trusted {
            inside | (bits & ((1 << 80) - 1))
        } else if bits >> 80 == inside >> 80 {
            bits ^ (1 << 127)
        } else {
            bits
        };
        // Never IPv4-mapped: that would be the v4 strategies' business.
        if Ipv6Addr::from(bits).to_ipv4_mapped().is_some() {
            bits ^= 1 << 127;
        }
        IpAddr::V6(Ipv6Addr::from(bits))
    })
}

fn address(trusted: bool) -> impl Strategy<Value = IpAddr> {
    prop_oneof![v4(trusted), v6(trusted)]
}

fn hop() -> impl Strategy<Value = Hop> {
    prop_oneof![
        3 => address(true).prop_map(Hop::Trusted),
        3 => address(false).prop_map(Hop::Untrusted),
        1 => prop::sample::select(vec!["unknown", "_hidden", "garbage", "192.0.2.1:x", "[::1"])
            .prop_map(Hop::Unreadable),
    ]
}

/// What the walk must answer, written as plainly as possible.
fn model(peer: IpAddr, hops: &[Hop]) -> IpAddr {
    let trusted = proxies();
    if !trusted.trusts(peer) {
        return peer;
    }
    let mut client = peer;
    for hop in hops.iter().rev() {
        match hop.address() {
            None => return client,
            Some(ip) => {
                client = ip;
                if !trusted.trusts(ip) {
                    return ip;
                }
            }
        }
    }
    client
}

/// `hops` written as `header` field lines: elements joined by commas, cut into lines at `cuts`.
fn lines(header: ProxyHeader, hops: &[Hop], forms: &[u8], cuts: &[bool]) -> Vec<String> {
    let mut lines = vec![String::new()];
    for (i, hop) in hops.iter().enumerate() {
        let form = forms[i % forms.len()];
        let text = match header {
            ProxyHeader::Forwarded => hop.forwarded(form),
            _ => hop.xff(form),
        };
        let line = lines.last_mut().unwrap();
        if !line.is_empty() {
            line.push_str(if form.is_multiple_of(2) { ", " } else { "," });
        }
        line.push_str(&text);
        if cuts[i % cuts.len()] {
            lines.push(String::new());
        }
    }
    lines
}

fn header() -> impl Strategy<Value = ProxyHeader> {
    prop::sample::select(vec![
        ProxyHeader::XForwardedFor,
        ProxyHeader::Forwarded,
        ProxyHeader::XRealIp,
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The walk answers what the model does, whichever header carries the chain, however the
    /// chain is cut into lines and whichever node forms are used.
    #[test]
    fn the_walk_answers_the_right_most_untrusted_hop(
        header in header(),
        peer in prop_oneof![address(true), address(false)],
        hops in prop::collection::vec(hop(), 0..8),
        forms in prop::collection::vec(any::<u8>(), 1..8),
        cuts in prop::collection::vec(prop::bool::weighted(0.3), 1..8),
    ) {
        let client = ClientAddress::behind(proxies(), header);
        let lines = lines(header, &hops, &forms, &cuts);
        prop_assert_eq!(client.resolve(peer, &lines), model(peer, &hops), "{:?}", lines);
    }

    /// A client controls only the left of the chain: whatever it sends before the hops the
    /// trusted proxies append — in the same line or in lines of its own, garbage, unbalanced
    /// quotes, spoofed addresses — the client found is the same.
    #[test]
    fn prepending_anything_never_changes_the_client(
        header in header(),
        peer in address(true),
        client_ip in address(false),
        proxies_seen in prop::collection::vec(address(true), 0..4),
        prefix in prop::collection::vec(
            prop_oneof![
                "[ -~]{0,24}",
                Just("for=\"".to_string()),
                Just("\"".to_string()),
                Just("\\".to_string()),
                address(false).prop_map(|ip| ip.to_string()),
                address(true).prop_map(|ip| ip.to_string()),
            ],
            1..4,
        ),
        same_line in any::<bool>(),
    ) {
        let mut hops = vec![Hop::Untrusted(client_ip)];
        hops.extend(proxies_seen.into_iter().map(Hop::Trusted));
        let honest = lines(header, &hops, &[0, 1, 2, 3], &[false]);
        let resolver = ClientAddress::behind(proxies(), header);
        prop_assert_eq!(resolver.resolve(peer, &honest), client_ip);
        let mut spoofed = honest.clone();
        if same_line {
            spoofed[0] = format!("{}, {}", prefix.join(","), spoofed[0]);
        } else {
            for (i, line) in prefix.into_iter().enumerate() {
                spoofed.insert(i, line);
            }
        }
        prop_assert_eq!(resolver.resolve(peer, &spoofed), client_ip, "{:?}", spoofed);
    }

    /// From an untrusted peer no header is read, whatever it says.
    #[test]
    fn an_untrusted_peer_is_the_client(
        header in header(),
        peer in address(false),
        hops in prop::collection::vec(hop(), 0..6),
    ) {
        let lines = lines(header, &hops, &[0], &[false]);
        let resolver = ClientAddress::behind(proxies(), header);
        prop_assert_eq!(resolver.resolve(peer, &lines), peer);
    }

    /// Every address of a network has one identifier, another network another, and the
    /// identifier read back as a network is the group again (grouping is idempotent).
    #[test]
    fn every_address_in_a_group_has_one_identifier(
        a in any::<u128>(),
        b in any::<u128>(),
        flip in 0u32..128,
        prefix in 1u8..=128,
    ) {
        let grouping = AddressGrouping::new(prefix).unwrap();
        let keep = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
        let a = Ipv6Addr::from(a);
        prop_assume!(a.to_ipv4_mapped().is_none());
        let mate = Ipv6Addr::from((u128::from(a) & keep) | (b & !keep));
        prop_assume!(mate.to_ipv4_mapped().is_none());
        let id = grouping.identifier(IpAddr::V6(a));
        prop_assert_eq!(grouping.identifier(IpAddr::V6(mate)), id);
        let group = grouping.group(IpAddr::V6(a));
        prop_assert_eq!(grouping.identifier(group.network()), id);
        prop_assert_eq!(id.parse::<IpPrefix>().unwrap(), group);
        prop_assert_eq!(group.prefix_len(), prefix);
        prop_assert!(group.contains(IpAddr::V6(mate)));
        if flip < u32::from(prefix) {
            let other = Ipv6Addr::from(u128::from(a) ^ (1 << (127 - flip)));
            prop_assume!(other.to_ipv4_mapped().is_none());
            prop_assert_ne!(grouping.identifier(IpAddr::V6(other)), id);
        }
        if prefix == 128 {
            prop_assert_eq!(&*id, a.to_string());
        }
    }

    /// An IPv4 address, or one mapped into IPv6, is its own identifier.
    #[test]
    fn ipv4_is_its_own_identifier(bits in any::<u32>(), prefix in 1u8..=128) {
        let grouping = AddressGrouping::new(prefix).unwrap();
        let v4 = Ipv4Addr::from(bits);
        let id = grouping.identifier(IpAddr::V4(v4));
        prop_assert_eq!(&*id, v4.to_string());
        prop_assert_eq!(grouping.identifier(IpAddr::V6(v4.to_ipv6_mapped())), id);
    }

    /// The canonical text is `Display`'s (RFC 5952), and every network reads back as itself.
    #[test]
    fn networks_print_as_display_and_read_back(
        groups in prop::array::uniform8(prop_oneof![2 => Just(0u16), 1 => any::<u16>()]),
        v4 in any::<u32>(),
        len6 in 0u8..=128,
        len4 in 0u8..=32,
    ) {
        let v6 = Ipv6Addr::from(groups);
        for (ip, len) in [(IpAddr::V6(v6), len6), (IpAddr::V4(Ipv4Addr::from(v4)), len4)] {
            let prefix = IpPrefix::new(ip, len).unwrap();
            let text = prefix.to_string();
            let whole = if prefix.network().is_ipv4() { 32 } else { 128 };
            let display = if prefix.prefix_len() == whole {
                prefix.network().to_string()
            } else {
                format!("{}/{}", prefix.network(), prefix.prefix_len())
            };
            prop_assert_eq!(&text, &display);
            prop_assert_eq!(text.parse::<IpPrefix>().unwrap(), prefix);
            prop_assert!(prefix.contains(ip));
        }
    }
}
