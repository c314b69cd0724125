//! [`AddressGrouping`]: the identifier a client address is limited by.
//!
//! An IPv6 client holds at least a `/64` (RFC 6177; providers hand out `/64` to `/48`), so a
//! limit per IPv6 address does not limit it: it can send each request from a new address.
//! Addresses are therefore grouped by their network, as express-rate-limit and
//! @fastify/rate-limit do: an IPv4 address is its own identifier, an IPv6 address is limited as
//! its `/64` (or the configured prefix), and an IPv4-mapped IPv6 address as the IPv4 address.

use std::net::IpAddr;

use super::error::AddressError;
use super::prefix::{unmapped, IpPrefix};
use super::text::AddressText;

/// How addresses are grouped into identifiers: IPv4 as itself, IPv6 by its first
/// `ipv6_prefix` bits (64 by default; 128 groups nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AddressGrouping {
    ipv6_prefix: u8,
}

impl Default for AddressGrouping {
    fn default() -> Self {
        AddressGrouping {
            ipv6_prefix: AddressGrouping::DEFAULT_IPV6_PREFIX,
        }
    }
}

impl AddressGrouping {
    /// The IPv6 prefix an address is grouped by unless configured: the `/64` every IPv6 client
    /// holds at least.
    pub const DEFAULT_IPV6_PREFIX: u8 = 64;

    /// Groups IPv6 addresses by their first `ipv6_prefix` bits, 1 to 128 (128: each address
    /// alone). Any other value is an error naming it.
    pub fn new(ipv6_prefix: u8) -> Result<AddressGrouping, AddressError> {
        if (1..=128).contains(&ipv6_prefix) {
            Ok(AddressGrouping { ipv6_prefix })
        } else {
            Err(AddressError::Ipv6Prefix(ipv6_prefix))
        }
    }

    /// The IPv6 prefix length addresses are grouped by.
    pub fn ipv6_prefix(&self) -> u8 {
        self.ipv6_prefix
    }

    /// The network `ip` is limited as: an IPv4 address (also when IPv4-mapped) alone, an IPv6
    /// address's `/ipv6_prefix`.
    pub fn group(&self, ip: IpAddr) -> IpPrefix {
        match unmapped(ip) {
            IpAddr::V6(v6) => IpPrefix::of_v6(v6, self.ipv6_prefix),
            v4 => IpPrefix::address(v4),
        }
    }

    /// The identifier `ip` is limited by: the canonical text of [`Self::group`]
    /// (`203.0.113.7`, `2001:db8:1:2::/64`), in a fixed buffer — no allocation. The same text
    /// a deny-list entry for that network has.
    pub fn identifier(&self, ip: IpAddr) -> AddressText {
        self.group(ip).text()
    }

    /// [`Self::identifier`] of an address given as text (`CF-Connecting-IP`'s value, surrounding
    /// whitespace ignored), or an error naming the text if it is not an address.
    pub fn identifier_of(&self, text: &str) -> Result<AddressText, AddressError> {
        let text = text.trim();
        let ip: IpAddr = text
            .parse()
            .map_err(|_| AddressError::NotAnAddress(text.to_string()))?;
        Ok(self.identifier(ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(grouping: AddressGrouping, text: &str) -> String {
        grouping.identifier_of(text).unwrap().to_string()
    }

    #[test]
    fn ipv6_is_grouped_by_its_prefix_and_ipv4_is_itself() {
        let by64 = AddressGrouping::default();
        assert_eq!(by64.ipv6_prefix(), 64);
        assert_eq!(id(by64, "203.0.113.7"), "203.0.113.7");
        assert_eq!(id(by64, "2001:db8:1:2:3:4:5:6"), "2001:db8:1:2::/64");
        assert_eq!(id(by64, "2001:db8:1:2::"), "2001:db8:1:2::/64");
        assert_eq!(id(by64, "2001:db8:1:3::1"), "2001:db8:1:3::/64");
        assert_eq!(id(by64, " ::ffff:203.0.113.7\t"), "203.0.113.7");
        assert_eq!(id(by64, "::1"), "::/64");
        let by48 = AddressGrouping::new(48).unwrap();
        assert_eq!(id(by48, "2001:db8:1:2:3:4:5:6"), "2001:db8:1::/48");
        let alone = AddressGrouping::new(128).unwrap();
        assert_eq!(id(alone, "2001:db8:1:2:3:4:5:6"), "2001:db8:1:2:3:4:5:6");
        let by1 = AddressGrouping::new(1).unwrap();
        assert_eq!(id(by1, "ffff::1"), "8000::/1");
    }

    #[test]
    fn bad_settings_and_addresses_name_the_value() {
        for bad in [0, 129, 255] {
            let err = AddressGrouping::new(bad).unwrap_err().to_string();
            assert_eq!(
                err,
                format!("ipv6_prefix {bad} is not a prefix length from 1 to 128")
            );
        }
        let err = AddressGrouping::default()
            .identifier_of("2001:db8::1/64")
            .unwrap_err()
            .to_string();
        assert_eq!(err, "`2001:db8::1/64` is not an IPv4 or IPv6 address");
    }
}
