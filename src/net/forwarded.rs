//! Reading a forwarding chain from the header a proxy writes: `X-Forwarded-For` (and
//! `X-Real-IP`, read the same way) and `Forwarded` (RFC 7239), one hop per list element.
//!
//! A hop is the address a proxy saw, or `None` when the element names none that can be read:
//! garbage, `unknown`, an obfuscated identifier (`_hidden`), a `Forwarded` element without
//! exactly one `for=`. Empty elements are no hop (RFC 9110 §5.6.1: recipients ignore them).
//! Accepted forms of a node, in either header: `192.0.2.43`, `192.0.2.43:47011`, `2001:db8::1`,
//! `[2001:db8::1]`, `[2001:db8::1]:4711` (a port may be obfuscated, `_port`); in `Forwarded`
//! also quoted, as RFC 7239 requires for the forms with `:` or `[`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use smallvec::SmallVec;

/// A hop of the chain: the address a proxy recorded, if it can be read.
pub(crate) type Hop = Option<IpAddr>;

/// The hops of one `X-Forwarded-For` field line, right-most first.
pub(crate) fn x_forwarded_for(line: &[u8]) -> impl Iterator<Item = Hop> + '_ {
    line.rsplit(|&b| b == b',')
        .map(trim)
        .filter(|element| !element.is_empty())
        .map(node)
}

/// The hops of one `Forwarded` field line, right-most first.
///
/// Elements are split from the right: the proxies' elements are at the right and well formed,
/// and whatever a client wrote at the left (an unterminated quote, say) must not swallow them.
pub(crate) fn forwarded(line: &[u8]) -> impl Iterator<Item = Hop> + '_ {
    rsplit_unquoted(line, b',')
        .map(trim)
        .filter(|element| !element.is_empty())
        .map(forwarded_for)
}

/// The node of an element's one `for=` parameter (names are case-insensitive).
fn forwarded_for(element: &[u8]) -> Hop {
    let mut found = None;
    for pair in split_unquoted(element, b';') {
        let pair = trim(pair);
        if pair.is_empty() {
            continue;
        }
        let eq = pair.iter().position(|&b| b == b'=')?;
        if trim(&pair[..eq]).eq_ignore_ascii_case(b"for") {
            if found.is_some() {
                return None; // two `for=` in one element: which proxy wrote which?
            }
            found = Some(trim(&pair[eq + 1..]));
        }
    }
    let value = found?;
    match value.strip_prefix(b"\"") {
        Some(quoted) => node(&unquoted(quoted.strip_suffix(b"\"")?)?),
        None => node(value),
    }
}

/// A quoted string's content with its `\` escapes resolved; `None` if a quote is left in it.
fn unquoted(content: &[u8]) -> Option<SmallVec<[u8; 64]>> {
    let mut out = SmallVec::new();
    let mut bytes = content.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => out.push(*bytes.next()?),
            b'"' => return None,
            _ => out.push(b),
        }
    }
    Some(out)
}

/// The address a node names, if it is an address: `unknown`, obfuscated names and anything
/// else are `None`.
fn node(text: &[u8]) -> Hop {
    let text = std::str::from_utf8(trim(text)).ok()?;
    if let Some(rest) = text.strip_prefix('[') {
        let (addr, after) = rest.split_once(']')?;
        let v6: Ipv6Addr = addr.parse().ok()?;
        return (after.is_empty() || after.strip_prefix(':').is_some_and(is_port))
            .then_some(IpAddr::V6(v6));
    }
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    let (addr, port) = text.rsplit_once(':')?;
    let v4: Ipv4Addr = addr.parse().ok()?;
    is_port(port).then_some(IpAddr::V4(v4))
}

/// A port: 1 to 5 digits, or RFC 7239's obfuscated `_` + letters, digits, `.`, `_`, `-`.
fn is_port(text: &str) -> bool {
    match text.strip_prefix('_') {
        Some(name) => {
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        }
        None => (1..=5).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_digit()),
    }
}

/// `bytes` without leading and trailing spaces and tabs (HTTP's optional whitespace).
fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(start, |i| i + 1);
    &bytes[start..end]
}

/// The pieces of `bytes` between separators that are not inside a quoted string (a `\` inside
/// quotes escapes the next byte), left to right. An unterminated quote runs to the end.
fn split_unquoted(bytes: &[u8], separator: u8) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(bytes);
    std::iter::from_fn(move || {
        let text = rest?;
        let (mut quoted, mut escaped) = (false, false);
        for (i, &b) in text.iter().enumerate() {
            if escaped {
                escaped = false;
            } else if quoted && b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                quoted = !quoted;
            } else if !quoted && b == separator {
                rest = Some(&text[i + 1..]);
                return Some(&text[..i]);
            }
        }
        rest = None;
        Some(text)
    })
}

/// [`split_unquoted`]'s pieces, right to left, read from the right: a quote escaped by an odd
/// run of `\` before it is part of the string. An unterminated quote runs to the start.
fn rsplit_unquoted(bytes: &[u8], separator: u8) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(bytes);
    std::iter::from_fn(move || {
        let text = rest?;
        let mut quoted = false;
        for i in (0..text.len()).rev() {
            let b = text[i];
            if b == b'"' {
                let backslashes = text[..i].iter().rev().take_while(|&&b| b == b'\\').count();
                if backslashes % 2 == 0 {
                    quoted = !quoted;
                }
            } else if !quoted && b == separator {
                rest = Some(&text[..i]);
                return Some(&text[i + 1..]);
            }
        }
        rest = None;
        Some(text)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xff(line: &str) -> Vec<Hop> {
        x_forwarded_for(line.as_bytes()).collect()
    }

    /// Left to right, as written.
    fn fwd(line: &str) -> Vec<Hop> {
        let mut hops: Vec<Hop> = forwarded(line.as_bytes()).collect();
        hops.reverse();
        hops
    }

    fn ip(text: &str) -> Hop {
        Some(text.parse().unwrap())
    }

    #[test]
    fn x_forwarded_for_reads_addresses_with_ports_and_brackets_right_first() {
        assert_eq!(
            xff(" 192.0.2.1 ,198.51.100.7:8080,\t2001:db8::1, [2001:db8::2]:4711,[2001:db8::3]"),
            [
                ip("2001:db8::3"),
                ip("2001:db8::2"),
                ip("2001:db8::1"),
                ip("198.51.100.7"),
                ip("192.0.2.1"),
            ]
        );
        assert_eq!(xff(""), []);
        assert_eq!(xff(" , ,"), [], "empty elements are no hop");
        assert_eq!(
            xff("192.0.2.1,,198.51.100.7"),
            [ip("198.51.100.7"), ip("192.0.2.1")]
        );
    }

    #[test]
    fn unreadable_nodes_are_hops_without_an_address() {
        for bad in [
            "unknown",
            "_hidden",
            "garbage",
            "192.0.2.1:",
            "192.0.2.1:123456",
            "192.0.2.1:port",
            "01.2.3.4",
            "2001:db8::1:80:",
            "[192.0.2.1]",
            "[2001:db8::1",
            "[2001:db8::1]x",
            "fe80::1%eth0",
            "192.0.2.1 198.51.100.7",
        ] {
            assert_eq!(xff(bad), [None], "{bad}");
        }
        assert_eq!(xff("\u{ff}192.0.2.1"), [None]);
        assert_eq!(
            x_forwarded_for(b"\xff\xfe, 192.0.2.1").collect::<Vec<_>>(),
            [ip("192.0.2.1"), None]
        );
    }

    #[test]
    fn forwarded_reads_each_elements_one_for() {
        assert_eq!(
            fwd(r#"for=192.0.2.60;proto=http;by=203.0.113.43, For="[2001:db8:cafe::17]:4711""#),
            [ip("192.0.2.60"), ip("2001:db8:cafe::17")]
        );
        assert_eq!(
            fwd(r#"for="192.0.2.43:47011", for="[2001:db8::1]", for=unknown, for="_gazonk""#),
            [ip("192.0.2.43"), ip("2001:db8::1"), None, None]
        );
        // A comma or semicolon inside quotes separates nothing.
        assert_eq!(
            fwd(r#"by="a,b;c";for=198.51.100.7 , for=192.0.2.1"#),
            [ip("198.51.100.7"), ip("192.0.2.1")]
        );
        // Escapes are resolved inside quotes.
        assert_eq!(fwd(r#"for="\192.0.2.1""#), [ip("192.0.2.1")]);
        assert_eq!(fwd(" for = 192.0.2.1 ; proto=https"), [ip("192.0.2.1")]);
    }

    #[test]
    fn malformed_forwarded_elements_are_hops_without_an_address() {
        for bad in [
            "proto=https",
            "for=192.0.2.1;for=198.51.100.7",
            "for",
            "for=",
            r#"for="192.0.2.1"#,
            r#"for="192.0.2.1"x"#,
            r#"for="192.0.2."1""#,
            "for=192.0.2.1;garbage",
        ] {
            assert_eq!(fwd(bad), [None], "{bad}");
        }
        assert_eq!(fwd(" , ,"), []);
        // An unterminated quote at the left swallows nothing at its right.
        assert_eq!(
            fwd(r#"for="[2001:db8::1]:4711, for=192.0.2.1"#),
            [None, ip("192.0.2.1")]
        );
        assert_eq!(
            fwd(r#"for="a\\", for=192.0.2.1, for="b\"c", for=198.51.100.7"#),
            [None, ip("192.0.2.1"), None, ip("198.51.100.7")]
        );
    }
}
