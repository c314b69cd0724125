//! [`AddressText`]: the canonical text of an address or a network, held inline.
//!
//! The text is the one RFC 5952 and `Display` give (`2001:db8::1`, `::ffff:192.0.2.1`), so it
//! equals what `Ipv6Addr`'s `Display` writes — a property test holds the two together — but it is
//! written straight into a fixed buffer: the Worker builds one per request, and the formatting
//! machinery costs more than the rest of the grouping.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Deref;

/// The longest text: eight full IPv6 groups and a `/127` (39 + 4 bytes).
const CAPACITY: usize = 43;

/// The canonical text of an address (`203.0.113.7`, `2001:db8::1`) or a network
/// (`2001:db8:1:2::/64`), in a fixed buffer: no allocation. Reads as a `&str`.
#[derive(Clone, Copy)]
pub struct AddressText {
    bytes: [u8; CAPACITY],
    len: u8,
}

impl AddressText {
    /// The text of `network/len`: the bare address when `len` covers the whole address, else
    /// `network/len`. `network` is written as given (the caller masks it).
    pub(crate) fn of_prefix(network: IpAddr, len: u8) -> AddressText {
        let mut text = AddressText::empty();
        match network {
            IpAddr::V4(v4) => {
                text.push_v4(v4);
                if len < 32 {
                    text.push_len(len);
                }
            }
            IpAddr::V6(v6) => {
                text.push_v6(v6);
                if len < 128 {
                    text.push_len(len);
                }
            }
        }
        text
    }

    fn empty() -> AddressText {
        AddressText {
            bytes: [0; CAPACITY],
            len: 0,
        }
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)])
            .expect("only ASCII is ever written")
    }

    fn push(&mut self, byte: u8) {
        // Cannot overflow: CAPACITY is the longest text any address and length make.
        self.bytes[usize::from(self.len)] = byte;
        self.len += 1;
    }

    fn push_str(&mut self, s: &str) {
        for &b in s.as_bytes() {
            self.push(b);
        }
    }

    fn push_len(&mut self, len: u8) {
        self.push(b'/');
        self.push_decimal(len);
    }

    fn push_decimal(&mut self, n: u8) {
        if n >= 100 {
            self.push(b'0' + n / 100);
        }
        if n >= 10 {
            self.push(b'0' + n / 10 % 10);
        }
        self.push(b'0' + n % 10);
    }

    fn push_v4(&mut self, v4: Ipv4Addr) {
        for (i, octet) in v4.octets().into_iter().enumerate() {
            if i > 0 {
                self.push(b'.');
            }
            self.push_decimal(octet);
        }
    }

    /// RFC 5952: lower-case hex without leading zeros, the longest run of two or more zero
    /// groups (the first of equals) as `::`; an IPv4-mapped address as `::ffff:a.b.c.d`.
    fn push_v6(&mut self, v6: Ipv6Addr) {
        if let Some(v4) = v6.to_ipv4_mapped() {
            self.push_str("::ffff:");
            self.push_v4(v4);
            return;
        }
        let groups = v6.segments();
        let (mut run_at, mut run_len) = (0, 0);
        let mut at = 0;
        while at < groups.len() {
            let len = groups[at..].iter().take_while(|&&g| g == 0).count();
            if len > run_len {
                (run_at, run_len) = (at, len);
            }
            at += len.max(1);
        }
        if run_len >= 2 {
            self.push_groups(&groups[..run_at]);
            self.push_str("::");
            self.push_groups(&groups[run_at + run_len..]);
        } else {
            self.push_groups(&groups);
        }
    }

    fn push_groups(&mut self, groups: &[u16]) {
        for (i, &group) in groups.iter().enumerate() {
            if i > 0 {
                self.push(b':');
            }
            let digits = (16 - group.leading_zeros()).div_ceil(4).max(1);
            for d in (0..digits).rev() {
                self.push(b"0123456789abcdef"[usize::from((group >> (4 * d)) & 0xf)]);
            }
        }
    }
}

impl Deref for AddressText {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for AddressText {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<[u8]> for AddressText {
    fn as_ref(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl PartialEq for AddressText {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for AddressText {}

impl PartialEq<str> for AddressText {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for AddressText {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Hash for AddressText {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Display for AddressText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for AddressText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_read_as_display_writes_them() {
        for text in [
            "::",
            "::1",
            "1::",
            "2001:db8::1",
            "2001:db8:0:1:0:0:0:1",
            "2001:0:0:1:0:0:0:1",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "::ffff:192.0.2.1",
            "::192.0.2.1",
            "fe80::1:0:0:0",
            "1:0:2:0:3:0:4:0",
        ] {
            let ip: IpAddr = text.parse().unwrap();
            let whole = if ip.is_ipv4() { 32 } else { 128 };
            assert_eq!(AddressText::of_prefix(ip, whole), *ip.to_string());
        }
        for text in ["0.0.0.0", "255.255.255.255", "10.0.0.1", "192.168.100.9"] {
            let ip: IpAddr = text.parse().unwrap();
            assert_eq!(AddressText::of_prefix(ip, 32), text);
        }
    }

    #[test]
    fn networks_carry_their_length_and_the_longest_fits() {
        let v6: IpAddr = "2001:db8:1:2::".parse().unwrap();
        assert_eq!(AddressText::of_prefix(v6, 64), "2001:db8:1:2::/64");
        let v4: IpAddr = "10.0.0.0".parse().unwrap();
        assert_eq!(AddressText::of_prefix(v4, 8), "10.0.0.0/8");
        assert_eq!(AddressText::of_prefix(v4, 0), "10.0.0.0/0");
        let longest: IpAddr = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe".parse().unwrap();
        let text = AddressText::of_prefix(longest, 127);
        assert_eq!(text.len(), CAPACITY);
        assert_eq!(text, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127");
    }
}
