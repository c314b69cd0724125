//! A request's path and host as the origin behind the edge reads them (docs/configuration.md,
//! "How a request's path and host are read"). Rules match these readings and identifiers are
//! read from them; the configuration's own paths and hosts are read by the same functions, so a
//! rule and a request meet in one spelling whichever way a client spells its request.
//!
//! The path is read as nginx reads it before choosing a `location` — every `%XX` decoded, `//`
//! merged, `.` and `..` segments resolved — and written back in one canonical spelling: a byte
//! stays literal when its literal is unambiguous in a path, and is `%XX` (upper-case hex)
//! otherwise. What origins read differently from one another (an encoded `/`, a backslash, a
//! `;`) is refused rather than guessed. The host is read as nginx picks a `server`: lower case,
//! without port or trailing dot.
//!
//! Pure and written once; a reading allocates only when it changes something.

use std::borrow::Cow;

/// Why a path cannot be read: the request is refused (400) rather than matched against a reading
/// the origin may not share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum UnreadablePath {
    /// The path does not start with `/` (an empty path, `*`, a relative reference).
    #[error("the path does not start with `/`")]
    NotAbsolute,
    /// A `%` not followed by two hexadecimal digits, which nginx refuses.
    #[error("a `%` not followed by two hexadecimal digits")]
    BadEscape,
    /// A `..` segment above the root, which nginx refuses.
    #[error("a `..` segment climbs above the root")]
    AboveRoot,
    /// An encoded `/` (`%2F`): nginx reads it as a separator, other origins as a character of
    /// one segment, and some refuse it.
    #[error("an encoded `/` (`%2F`), which origins read differently")]
    EncodedSlash,
    /// A `\`, raw or encoded (`%5C`): nginx on Linux reads a character, IIS and some
    /// frameworks a `/`.
    #[error("a backslash (`\\` or `%5C`), which some origins read as `/`")]
    Backslash,
    /// A control character, raw or encoded (`%00`–`%1F`, `%7F`).
    #[error("a control character (raw, or encoded as `%00`–`%1F` or `%7F`)")]
    Control,
    /// A raw `;`: Java servers (Tomcat, Jetty, Spring) strip `;` path parameters before
    /// routing, nginx does not.
    #[error("a `;` (path parameters, which Java servers strip before routing)")]
    Semicolon,
    /// A raw `?` or `#`: the query and fragment are no part of a path (a host passes the path
    /// alone).
    #[error("a raw `?` or `#`: a path holds no query or fragment")]
    QueryOrFragment,
    /// A `..` segment in a rule's path, which names its path directly. Only the configuration's
    /// reading refuses it; a request's path has its `..` segments resolved.
    #[error("a `..` segment: a rule's path names its path directly")]
    ParentSegment,
}

/// Why a host cannot be read: the request is refused (400). nginx refuses `..`, a space, a
/// control character, `/` and an empty name too; the rest no client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum UnreadableHost {
    /// A space, a control character, `/`, `\`, or a bracket outside an IP literal.
    #[error("a space, control character, `/`, `\\` or bracket in the host")]
    Character,
    /// An empty label: `..`, a leading dot, or two trailing dots.
    #[error("an empty label in the host (`..` or a leading dot)")]
    EmptyLabel,
    /// A port that is not a number.
    #[error("the host's port is not a number")]
    Port,
    /// An IP literal without its closing `]`, with text after it other than a port, or with a
    /// character other than hexadecimal digits, `:` and `.` inside.
    #[error("the host's IP literal is not `[` hexadecimal digits, `:` and `.` `]`")]
    Literal,
    /// No name before the port (or only a dot).
    #[error("the host has no name")]
    Empty,
}

/// What a path's `..` segments do: resolved in a request's path, refused in a rule's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parents {
    Resolve,
    Refuse,
}

/// The path as the origin serves it, in the one spelling rules match: every `%XX` decoded
/// (hexadecimal digits in either case), runs of `/` merged into one, `.` and `..` segments
/// resolved (RFC 3986 §5.2.4, after the merge, as nginx does), then each byte written literally
/// when it is a visible ASCII character other than `%`, `?`, `#` and `;`, and as `%XX` with
/// upper-case digits otherwise (a space, a non-ASCII byte, and those four).
///
/// So `/%61pi//v1/./x/../y` reads `/api/v1/y`, `/a%3ab` reads `/a:b`, `/caf%c3%a9` and `/café`
/// read `/caf%C3%A9`, and `/100%25` stays as it is. Refused ([`UnreadablePath`]): a path not
/// starting with `/`, a bad escape, `..` above the root, an encoded `/`, a backslash, a control
/// character, a raw `;`, a raw `?` or `#`.
///
/// Borrows `raw` when it is already in that spelling (the reading is idempotent).
pub fn path(raw: &str) -> Result<Cow<'_, str>, UnreadablePath> {
    read_path(raw, Parents::Resolve)
}

/// A rule's path (`path_prefix`, `path`) read as [`path`] reads a request's, except that a `..`
/// segment anywhere is refused ([`UnreadablePath::ParentSegment`]): a rule names its path
/// directly.
pub(crate) fn configured_path(raw: &str) -> Result<Cow<'_, str>, UnreadablePath> {
    read_path(raw, Parents::Refuse)
}

/// The host as the origin routes by it: ASCII letters lower-cased, the port dropped (any port:
/// the origin picks its server by name alone), one trailing dot dropped. An IP literal in
/// brackets keeps its brackets (`[::1]:8080` reads `[::1]`). An empty host (a request without
/// one) reads empty. Refused ([`UnreadableHost`]): an empty label (`a..b`, a leading dot), a
/// space, control character, `/`, `\` or stray bracket, a malformed IP literal, no name, and a
/// port that is not a number.
///
/// Borrows `raw` when it changes nothing but drop the port and trailing dot.
pub fn host(raw: &str) -> Result<Cow<'_, str>, UnreadableHost> {
    let bytes = raw.as_bytes();
    let (name, port, upper) = match bytes.first() {
        None => return Ok(Cow::Borrowed(raw)),
        Some(b'[') => ip_literal(raw)?,
        Some(_) => host_name(raw)?,
    };
    if !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(UnreadableHost::Port);
    }
    Ok(if upper {
        Cow::Owned(name.to_ascii_lowercase())
    } else {
        Cow::Borrowed(name)
    })
}

/// A host name, its port (after the `:`, if any), and whether the name holds an upper-case
/// letter: in one pass, as a host is read on every request.
fn host_name(raw: &str) -> Result<(&str, &str, bool), UnreadableHost> {
    let bytes = raw.as_bytes();
    let (mut end, mut label_start) = (bytes.len(), 0);
    let (mut upper, mut empty_label) = (false, false);
    for (i, &byte) in bytes.iter().enumerate() {
        match byte {
            b':' => {
                end = i;
                break;
            }
            b'.' => {
                empty_label |= i == label_start;
                label_start = i + 1;
            }
            b'A'..=b'Z' => upper = true,
            0..=b' ' | 0x7f | b'/' | b'\\' | b'[' | b']' => return Err(UnreadableHost::Character),
            _ => {}
        }
    }
    let name = &raw[..end];
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() {
        return Err(UnreadableHost::Empty);
    }
    if empty_label {
        return Err(UnreadableHost::EmptyLabel);
    }
    Ok((name, raw.get(end + 1..).unwrap_or(""), upper))
}

/// An IP literal with its brackets, its port (after the `:`, if any), and whether it holds an
/// upper-case hex digit.
fn ip_literal(raw: &str) -> Result<(&str, &str, bool), UnreadableHost> {
    let close = raw.find(']').ok_or(UnreadableHost::Literal)?;
    let inside = &raw[1..close];
    if inside.is_empty()
        || !inside
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
    {
        return Err(UnreadableHost::Literal);
    }
    let port = match &raw[close + 1..] {
        "" => "",
        rest => rest.strip_prefix(':').ok_or(UnreadableHost::Literal)?,
    };
    let upper = inside.bytes().any(|b| b.is_ascii_uppercase());
    Ok((&raw[..=close], port, upper))
}

fn read_path(raw: &str, parents: Parents) -> Result<Cow<'_, str>, UnreadablePath> {
    let bytes = raw.as_bytes();
    if bytes.first() != Some(&b'/') {
        return Err(UnreadablePath::NotAbsolute);
    }
    if is_read(bytes) {
        return Ok(Cow::Borrowed(raw));
    }
    rewrite(bytes, parents).map(Cow::Owned)
}

/// How a byte of the path as sent is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// Itself.
    Literal,
    /// Itself, written as `%XX`.
    Escaped,
    /// The start of an escape.
    Percent,
}

/// How a byte of the path as sent is read, or why it makes the path unreadable.
fn sent(byte: u8) -> Result<Sent, UnreadablePath> {
    match byte {
        b'%' => Ok(Sent::Percent),
        b'?' | b'#' => Err(UnreadablePath::QueryOrFragment),
        b';' => Err(UnreadablePath::Semicolon),
        b'\\' => Err(UnreadablePath::Backslash),
        0..=0x1f | 0x7f => Err(UnreadablePath::Control),
        b' ' | 0x80..=0xff => Ok(Sent::Escaped),
        _ => Ok(Sent::Literal),
    }
}

/// How a byte decoded from `%XX` is written: literally, or as `%XX` again (upper-case), or why it
/// makes the path unreadable. `%`, `?`, `#` and `;` stay escaped, as their literals mean
/// something else in a path; `/` and `\` are refused.
fn decoded(byte: u8) -> Result<Sent, UnreadablePath> {
    match byte {
        b'/' => Err(UnreadablePath::EncodedSlash),
        b'%' | b'?' | b'#' | b';' => Ok(Sent::Escaped),
        _ => sent(byte),
    }
}

/// The byte `segment[at..at + 3]` encodes, when it is `%` and two hexadecimal digits.
fn escape(segment: &[u8], at: usize) -> Option<u8> {
    let digit = |i: usize| (*segment.get(at + i)? as char).to_digit(16);
    Some((digit(1)? * 16 + digit(2)?) as u8)
}

/// The bytes a read path holds literally, `/` aside: visible ASCII but `%`, `?`, `#`, `;` and
/// `\` (what [`sent`] reads as [`Sent::Literal`]), as a table for [`is_read`]'s one pass.
const LITERAL: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = b'!';
    while byte < 0x7f {
        table[byte as usize] = !matches!(byte, b'%' | b'?' | b'#' | b';' | b'\\' | b'/');
        byte += 1;
    }
    table
};

/// Whether a path (starting with `/`) is already in the spelling [`path`] writes: what lets a
/// path read unchanged without allocating, in one pass over its bytes.
fn is_read(bytes: &[u8]) -> bool {
    // The current segment starts at `start`.
    let (mut start, mut i) = (1, 1);
    while i < bytes.len() {
        let byte = bytes[i];
        if LITERAL[usize::from(byte)] {
            i += 1;
            continue;
        }
        match byte {
            b'/' => {
                if matches!(&bytes[start..i], b"" | b"." | b"..") {
                    return false;
                }
                i += 1;
                start = i;
            }
            b'%' => {
                let upper = |b: &u8| b.is_ascii_digit() || (b'A'..=b'F').contains(b);
                let canonical = bytes.get(i + 1..i + 3).is_some_and(|d| d.iter().all(upper))
                    && escape(bytes, i).map(decoded) == Some(Ok(Sent::Escaped));
                if !canonical {
                    return false;
                }
                i += 3;
            }
            _ => return false,
        }
    }
    !matches!(&bytes[start..], b"." | b"..")
}

/// The path read into its spelling: segment by segment, each decoded and re-escaped, empty and
/// `.` segments dropped, a `..` taking the segment before it away.
fn rewrite(bytes: &[u8], parents: Parents) -> Result<String, UnreadablePath> {
    let mut out = String::with_capacity(bytes.len() + 8);
    out.push('/');
    let mut segments = bytes[1..].split(|&b| b == b'/').peekable();
    while let Some(segment) = segments.next() {
        let start = out.len();
        append_segment(&mut out, segment)?;
        let last = segments.peek().is_none();
        match &out[start..] {
            "" => {}
            "." => out.truncate(start),
            ".." => {
                if parents == Parents::Refuse {
                    return Err(UnreadablePath::ParentSegment);
                }
                // `out` ends `/<previous>/..`, or is `/..` when there is no previous segment.
                if start == 1 {
                    return Err(UnreadablePath::AboveRoot);
                }
                let previous = out[..start - 1].rfind('/').map_or(0, |slash| slash + 1);
                out.truncate(previous);
            }
            _ if !last => out.push('/'),
            _ => {}
        }
    }
    Ok(out)
}

/// Appends one segment, decoded and re-escaped, to `out`.
fn append_segment(out: &mut String, segment: &[u8]) -> Result<(), UnreadablePath> {
    let mut i = 0;
    while i < segment.len() {
        let byte = segment[i];
        let (byte, how, width) = match sent(byte)? {
            Sent::Percent => {
                let byte = escape(segment, i).ok_or(UnreadablePath::BadEscape)?;
                (byte, decoded(byte)?, 3)
            }
            how => (byte, how, 1),
        };
        if how == Sent::Literal {
            out.push(char::from(byte));
        } else {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            out.push('%');
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
        i += width;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
