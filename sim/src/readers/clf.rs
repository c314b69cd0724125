//! Apache/nginx combined and common log format:
//! `host ident user [17/May/2015:10:05:03 +0000] "GET / HTTP/1.1" 200 203023 ["referer" "agent"]`.

use std::borrow::Cow;

use super::format::{Key, LineProblem, LineResult, Parsed, RequestOptions};
use super::request::Request;
use super::time::{lossy, parse_clf_time};
use crate::error::SimError;

/// Which CLF field identifies the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClfKey {
    Ip,
    User,
    Agent,
}

/// Parses combined/common log lines.
#[derive(Debug, Clone)]
pub struct ClfParser {
    key: ClfKey,
}

impl ClfParser {
    /// A parser keyed by `key`: `ip` (the host field), `user`, or `agent`.
    pub fn new(key: &Key) -> Result<ClfParser, SimError> {
        let key = match key {
            Key::Ip => ClfKey::Ip,
            Key::Field(f) if f == "user" => ClfKey::User,
            Key::Field(f) if f == "agent" => ClfKey::Agent,
            other => {
                return Err(SimError::Usage(format!(
                    "--key {other}: an Apache/nginx log has no such field (use ip, user or agent)"
                )))
            }
        };
        Ok(ClfParser { key })
    }

    /// Parses one line.
    pub fn parse<'a>(&self, line: &'a [u8]) -> LineResult<'a> {
        let Some(fields) = fields(line)? else {
            return Ok(None);
        };
        let client: &[u8] = match self.key {
            ClfKey::Ip => fields.host,
            ClfKey::User => fields.user,
            ClfKey::Agent => fields.agent(),
        };
        if client.is_empty() {
            return Err(LineProblem::new("host", "empty client field"));
        }
        Ok(Some(Parsed {
            time_ms: fields.time_ms,
            client: Cow::Borrowed(client),
            cost: 1,
            duration_ms: None,
        }))
    }

    /// Reads one line as the request the Worker would have seen (`--config`): the method and
    /// target of the request line, the client address as `CF-Connecting-IP`, `User-Agent`,
    /// `Referer`, and the authenticated user (`%u`) as `X-Remote-User`. `Ok(false)` for a blank
    /// line.
    pub fn parse_request(
        &self,
        line: &[u8],
        out: &mut Request,
        options: &RequestOptions,
    ) -> Result<bool, LineProblem> {
        let Some(fields) = fields(line)? else {
            return Ok(false);
        };
        let mut parts = fields.request.splitn(3, |&c| c == b' ');
        let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
            return Err(LineProblem::new(
                "request",
                format!(
                    "`{}` is not a method and a target (a request the server refused to read)",
                    lossy(fields.request)
                ),
            ));
        };
        out.time_ms = fields.time_ms;
        out.set_method(method);
        out.set_host(options.host.as_bytes());
        out.set_target(target);
        out.set_client_ip(fields.host);
        out.add_header(b"user-agent", fields.agent());
        out.add_header(
            b"referer",
            quoted_fields(fields.tail).next().unwrap_or(b"-"),
        );
        out.add_header(REMOTE_USER_HEADER.as_bytes(), fields.user);
        Ok(true)
    }
}

/// The header a CLF line's authenticated user (`%u`) is given as: the name reverse proxies pass
/// it under.
pub const REMOTE_USER_HEADER: &str = "x-remote-user";

/// What one CLF line holds.
struct Fields<'a> {
    host: &'a [u8],
    user: &'a [u8],
    time_ms: u64,
    /// The request line, without its quotes.
    request: &'a [u8],
    /// What follows the size: `"referer" "agent"` in the combined format.
    tail: &'a [u8],
}

impl<'a> Fields<'a> {
    fn agent(&self) -> &'a [u8] {
        quoted_fields(self.tail).nth(1).unwrap_or(b"-")
    }
}

/// Splits a line into its fields, checking each; `None` for a blank line.
fn fields(line: &[u8]) -> Result<Option<Fields<'_>>, LineProblem> {
    if line.trim_ascii().is_empty() {
        return Ok(None);
    }
    let space = memchr::memchr(b' ', line)
        .ok_or_else(|| LineProblem::new("host", "truncated line: no fields after the host"))?;
    let host = &line[..space];
    let open = memchr::memchr(b'[', &line[space..])
        .map(|i| space + i)
        .ok_or_else(|| LineProblem::new("timestamp", "no `[` opening the timestamp"))?;
    let user = line[space + 1..open]
        .trim_ascii()
        .split(|&c| c == b' ')
        .nth(1)
        .unwrap_or(b"-");
    let close = memchr::memchr(b']', &line[open..])
        .map(|i| open + i)
        .ok_or_else(|| LineProblem::new("timestamp", "truncated line: no `]` closing it"))?;
    let time_ms =
        parse_clf_time(&line[open + 1..close]).map_err(|p| LineProblem::new("timestamp", p))?;
    // The request, status and size must follow: a line cut short is reported, not half-read.
    let rest = &line[close + 1..];
    let rest = rest
        .strip_prefix(b" \"")
        .ok_or_else(|| LineProblem::new("request", "truncated line: no quoted request"))?;
    let end = find_closing_quote(rest)
        .ok_or_else(|| LineProblem::new("request", "truncated line: request never closed"))?;
    let mut after = rest[end + 1..].trim_ascii_start().splitn(3, |&c| c == b' ');
    let status = after.next().unwrap_or_default();
    if status.len() != 3 || !status.iter().all(u8::is_ascii_digit) {
        return Err(LineProblem::new(
            "status",
            format!("`{}` is not an HTTP status", lossy(status)),
        ));
    }
    let size = after.next().unwrap_or_default().trim_ascii_end();
    if size.is_empty() || !(size == b"-" || size.iter().all(u8::is_ascii_digit)) {
        return Err(LineProblem::new(
            "size",
            format!("truncated line: `{}` is not a response size", lossy(size)),
        ));
    }
    Ok(Some(Fields {
        host,
        user,
        time_ms,
        request: &rest[..end],
        tail: after.next().unwrap_or_default(),
    }))
}

/// The index of the `"` closing a quoted field, skipping `\"` escapes (Apache escapes quotes).
fn find_closing_quote(b: &[u8]) -> Option<usize> {
    let mut from = 0;
    loop {
        let i = from + memchr::memchr(b'"', &b[from..])?;
        if i > 0 && b[i - 1] == b'\\' {
            from = i + 1;
            continue;
        }
        return Some(i);
    }
}

/// The quoted fields of a combined log's tail: `"referer" "agent"`.
fn quoted_fields(mut b: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let start = memchr::memchr(b'"', b)? + 1;
        let end = start + find_closing_quote(&b[start..])?;
        let field = &b[start..end];
        b = &b[end + 1..];
        Some(field)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMBINED: &[u8] = br#"83.149.9.216 - - [17/May/2015:10:05:03 +0000] "GET /presentations/logstash-monitorama-2013/images/kibana-search.png HTTP/1.1" 200 203023 "http://semicomplete.com/presentations/logstash-monitorama-2013/" "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_9_1) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/32.0.1700.77 Safari/537.36""#;
    const COMMON: &[u8] =
        br#"127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326"#;

    #[test]
    fn reads_combined_and_common_lines() {
        let p = ClfParser::new(&Key::Ip).unwrap();
        let e = p.parse(COMBINED).unwrap().unwrap();
        assert_eq!(e.time_ms, 1_431_857_103_000);
        assert_eq!(&*e.client, b"83.149.9.216");
        let e = p.parse(COMMON).unwrap().unwrap();
        // 13:55:36 at -0700 is 20:55:36 UTC.
        assert_eq!(e.time_ms, 971_211_336_000);
        let user = ClfParser::new(&Key::Field("user".into())).unwrap();
        assert_eq!(&*user.parse(COMMON).unwrap().unwrap().client, b"frank");
        let agent = ClfParser::new(&Key::Field("agent".into())).unwrap();
        assert!(agent
            .parse(COMBINED)
            .unwrap()
            .unwrap()
            .client
            .starts_with(b"Mozilla/5.0"));
    }

    #[test]
    fn names_the_broken_field() {
        let p = ClfParser::new(&Key::Ip).unwrap();
        let cut = &COMBINED[..40];
        assert_eq!(p.parse(cut).unwrap_err().field, "timestamp");
        let cut = &COMBINED[..70];
        assert_eq!(p.parse(cut).unwrap_err().field, "request");
        let bad = br#"1.2.3.4 - - [17/May/2015:25:05:03 +0000] "GET / HTTP/1.1" 200 1"#;
        assert_eq!(p.parse(bad).unwrap_err().field, "timestamp");
        assert!(p.parse(b"   ").unwrap().is_none());
        assert!(ClfParser::new(&Key::Host).is_err());
    }
}
