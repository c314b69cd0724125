//! [`IpPrefix`]: an IP network written `addr/len`. The one parser of addresses and networks:
//! trusted-proxy ranges, IPv6 grouping and the deny lists' `ip` entries all read them here.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use super::error::AddressError;
use super::text::AddressText;

/// An IP network: its first address and its prefix length (`203.0.113.0/24`, `2001:db8::/32`);
/// an address alone is its own `/32` or `/128`.
///
/// IPv4-mapped IPv6 (`::ffff:a.b.c.d`) is the IPv4 address it maps, and a mapped prefix of 96
/// bits or more the IPv4 prefix 96 bits shorter: a dual-stack socket reports IPv4 clients that
/// way, and they must meet the same ranges, lists and limits as over IPv4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpPrefix {
    network: IpAddr,
    len: u8,
}

impl IpPrefix {
    /// The `/len` network holding `ip` (its host bits cleared), or an error if `len` exceeds the
    /// address's bits.
    pub fn new(ip: IpAddr, len: u8) -> Result<IpPrefix, AddressError> {
        let max = bits(ip);
        if len > max {
            return Err(AddressError::PrefixLength {
                len: len.to_string(),
                max,
            });
        }
        let (ip, len) = match (ip, unmapped(ip)) {
            (IpAddr::V6(_), IpAddr::V4(v4)) if len >= 96 => (IpAddr::V4(v4), len - 96),
            _ => (ip, len),
        };
        Ok(IpPrefix {
            network: masked(ip, len),
            len,
        })
    }

    /// The address alone: its own `/32` or `/128` (an IPv4-mapped one as the IPv4 address).
    pub fn address(ip: IpAddr) -> IpPrefix {
        let ip = unmapped(ip);
        IpPrefix {
            network: ip,
            len: bits(ip),
        }
    }

    /// The `/len` network of an IPv6 address that is not IPv4-mapped (`len` at most 128).
    pub(crate) fn of_v6(v6: Ipv6Addr, len: u8) -> IpPrefix {
        let len = len.min(128);
        IpPrefix {
            network: IpAddr::V6(masked_v6(v6, len)),
            len,
        }
    }

    /// The network's first address.
    pub fn network(&self) -> IpAddr {
        self.network
    }

    /// The prefix length: how many leading bits every address of the network shares.
    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// Whether the network is a single address.
    pub fn is_address(&self) -> bool {
        self.len == bits(self.network)
    }

    /// Whether `ip` (an IPv4-mapped one as its IPv4 address) is in the network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = unmapped(ip);
        ip.is_ipv4() == self.network.is_ipv4() && masked(ip, self.len) == self.network
    }

    /// The canonical text: the bare address for a single address, else `network/len`, the
    /// address as RFC 5952 (and `Display`) writes it: `203.0.113.0/24`, `2001:db8::/32`.
    pub fn text(&self) -> AddressText {
        AddressText::of_prefix(self.network, self.len)
    }
}

impl FromStr for IpPrefix {
    type Err = AddressError;

    /// Parses `addr` or `addr/len` (no spaces): `203.0.113.7`, `203.0.113.0/24`,
    /// `2001:db8::/32`, `::ffff:198.51.100.0/120` (the IPv4 `198.51.100.0/24`). Host bits past
    /// the length are cleared (`10.1.2.3/8` is `10.0.0.0/8`).
    fn from_str(text: &str) -> Result<IpPrefix, AddressError> {
        let (addr, len) = match text.split_once('/') {
            Some((addr, len)) => (addr, Some(len)),
            None => (text, None),
        };
        let ip: IpAddr = addr
            .parse()
            .map_err(|_| AddressError::NotAnAddress(addr.to_string()))?;
        let max = bits(ip);
        let len = match len {
            None => max,
            Some(len) => match len.parse::<u8>() {
                Ok(n) if n <= max && !len.starts_with('+') => n,
                _ => {
                    return Err(AddressError::PrefixLength {
                        len: len.to_string(),
                        max,
                    })
                }
            },
        };
        IpPrefix::new(ip, len)
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

/// An address seen through IPv4-mapped IPv6 is the IPv4 address.
pub(crate) fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The address's bits: 32 or 128.
fn bits(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

/// `ip` with every bit past the first `len` cleared.
pub(crate) fn masked(ip: IpAddr, len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
        }
        IpAddr::V6(v6) => IpAddr::V6(masked_v6(v6, len)),
    }
}

/// `v6` with every bit past the first `len` cleared.
pub(crate) fn masked_v6(v6: Ipv6Addr, len: u8) -> Ipv6Addr {
    let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
    Ipv6Addr::from(u128::from(v6) & mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(text: &str) -> IpPrefix {
        text.parse().unwrap()
    }

    #[test]
    fn networks_parse_to_their_first_address_and_canonical_text() {
        for (text, canonical) in [
            ("203.0.113.7", "203.0.113.7"),
            ("203.0.113.7/32", "203.0.113.7"),
            ("203.0.113.77/24", "203.0.113.0/24"),
            ("0.0.0.0/0", "0.0.0.0/0"),
            ("2001:DB8::1/32", "2001:db8::/32"),
            ("2001:db8:1:2:3:4:5:6/64", "2001:db8:1:2::/64"),
            ("::ffff:198.51.100.7", "198.51.100.7"),
            ("::ffff:198.51.100.0/120", "198.51.100.0/24"),
            ("::ffff:198.51.100.0/64", "::/64"),
            ("::/0", "::/0"),
        ] {
            assert_eq!(prefix(text).to_string(), canonical, "{text}");
        }
    }

    #[test]
    fn bad_networks_name_what_is_wrong() {
        for (bad, says) in [
            ("300.1.1.1", "`300.1.1.1` is not an IPv4 or IPv6 address"),
            ("", "`` is not an IPv4 or IPv6 address"),
            ("10.0.0.1 ", "is not an IPv4 or IPv6 address"),
            ("[2001:db8::1]", "is not an IPv4 or IPv6 address"),
            ("10.0.0.0/33", "`/33` is not a prefix length from 0 to 32"),
            ("10.0.0.0/", "`/` is not a prefix length from 0 to 32"),
            ("10.0.0.0/+8", "`/+8` is not a prefix length"),
            (
                "2001:db8::/129",
                "`/129` is not a prefix length from 0 to 128",
            ),
            ("2001:db8::/x", "`/x` is not a prefix length"),
        ] {
            let err = bad.parse::<IpPrefix>().unwrap_err().to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn a_network_contains_its_addresses_and_mapped_ones() {
        let v4 = prefix("10.0.0.0/8");
        assert!(v4.contains("10.255.0.1".parse().unwrap()));
        assert!(v4.contains("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!v4.contains("11.0.0.0".parse().unwrap()));
        assert!(
            !v4.contains("::a00:1".parse().unwrap()),
            "IPv4-compatible is IPv6"
        );
        let v6 = prefix("2001:db8::/32");
        assert!(v6.contains("2001:db8:ffff::1".parse().unwrap()));
        assert!(!v6.contains("2001:db9::".parse().unwrap()));
        assert!(!v6.contains("10.0.0.1".parse().unwrap()));
        let everything = prefix("0.0.0.0/0");
        assert!(everything.contains("255.1.2.3".parse().unwrap()));
        assert!(!everything.contains("::1".parse().unwrap()));
        assert!(prefix("::/0").contains("::1".parse().unwrap()));
        assert!(prefix("192.0.2.1").is_address());
        assert!(!prefix("192.0.2.0/24").is_address());
    }
}
