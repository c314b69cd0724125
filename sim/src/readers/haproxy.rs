//! HAProxy HTTP log (`option httplog`):
//! `Feb  6 12:14:14 localhost haproxy[14389]: 10.0.1.2:33317 [06/Feb/2009:12:14:14.655] http-in
//! static/srv1 10/0/30/69/109 200 2750 - - ---- 1/1/1/1/0 0/0 {1wt.eu} {} "GET /index.html HTTP/1.1"`.
//!
//! The accept date carries no zone: HAProxy writes the host's local time. It is read as UTC; run
//! HAProxy hosts in UTC, or shift the trace, if they were not.

use std::borrow::Cow;

use super::format::{Key, LineProblem, LineResult, Parsed, RequestOptions};
use super::request::Request;
use super::time::{lossy, parse_clf_time};
use crate::error::SimError;
use edgelimit_engine::RequestView;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HaKey {
    Ip,
    Host,
    Frontend,
    Backend,
}

/// Parses HAProxy HTTP log lines.
#[derive(Debug, Clone)]
pub struct HaproxyParser {
    key: HaKey,
}

impl HaproxyParser {
    /// A parser keyed by `ip` (client address without port), `host` (the first captured request
    /// header, conventionally Host), `frontend` or `backend`.
    pub fn new(key: &Key) -> Result<HaproxyParser, SimError> {
        let key = match key {
            Key::Ip => HaKey::Ip,
            Key::Host => HaKey::Host,
            Key::Field(f) if f == "frontend" => HaKey::Frontend,
            Key::Field(f) if f == "backend" => HaKey::Backend,
            other => {
                return Err(SimError::Usage(format!(
                    "--key {other}: a HAProxy log has no such field (use ip, host, frontend or backend)"
                )))
            }
        };
        Ok(HaproxyParser { key })
    }

    /// Parses one line.
    pub fn parse<'a>(&self, line: &'a [u8]) -> LineResult<'a> {
        let Some(fields) = fields(line)? else {
            return Ok(None);
        };
        let client: &[u8] = match self.key {
            HaKey::Ip => fields.ip,
            HaKey::Frontend => fields.frontend,
            HaKey::Backend => fields
                .backend
                .split(|&c| c == b'/')
                .next()
                .unwrap_or(fields.backend),
            HaKey::Host => {
                let capture = fields.captured_request_headers()?;
                capture.split(|&c| c == b'|').next().unwrap_or(capture)
            }
        };
        if client.is_empty() {
            return Err(LineProblem::new("client", "empty identifier"));
        }
        Ok(Some(Parsed {
            time_ms: fields.time_ms,
            client: Cow::Borrowed(client),
            cost: 1,
            duration_ms: None,
        }))
    }

    /// Reads one line as the request the Worker would have seen (`--config`): the method and
    /// target of the quoted request line, the client address (port stripped) as
    /// `CF-Connecting-IP`, and the captured request headers under the names given in
    /// [`RequestOptions::captured_headers`] (`host` when none are given). `Ok(false)` for a blank
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
        let request = fields.request_line()?;
        let mut parts = request.splitn(3, |&c| c == b' ');
        let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
            return Err(LineProblem::new(
                "http_request",
                format!("`{}` is not a method and a target", lossy(request)),
            ));
        };
        out.time_ms = fields.time_ms;
        out.set_method(method);
        if let Ok(capture) = fields.captured_request_headers() {
            let default = [String::from("host")];
            let names = if options.captured_headers.is_empty() {
                &default[..]
            } else {
                &options.captured_headers[..]
            };
            for (name, value) in names.iter().zip(capture.split(|&c| c == b'|')) {
                if name == "host" {
                    out.set_host(value);
                }
                out.add_header(name.as_bytes(), value);
            }
        }
        // An absolute target names its host when no capture did.
        out.set_target(target);
        if out.host().is_empty() {
            out.set_host(options.host.as_bytes());
        }
        out.set_client_ip(fields.ip);
        Ok(true)
    }
}

/// What one HAProxy line holds.
struct Fields<'a> {
    line: &'a [u8],
    ip: &'a [u8],
    time_ms: u64,
    frontend: &'a [u8],
    backend: &'a [u8],
    /// Where the accept date closes: captures and the request line come after.
    close: usize,
}

impl<'a> Fields<'a> {
    /// The first `{…}` block after the date: the captured request headers, `|`-separated.
    fn captured_request_headers(&self) -> Result<&'a [u8], LineProblem> {
        let line = self.line;
        let open = memchr::memchr(b'{', &line[self.close..])
            .map(|i| self.close + i + 1)
            .ok_or_else(|| {
                LineProblem::new("captured_request_headers", "no `{…}` header capture")
            })?;
        let end = memchr::memchr(b'}', &line[open..])
            .map(|i| open + i)
            .ok_or_else(|| LineProblem::new("captured_request_headers", "never closed"))?;
        Ok(&line[open..end])
    }

    /// The quoted request line that ends the log line, without its quotes.
    fn request_line(&self) -> Result<&'a [u8], LineProblem> {
        let tail = &self.line[self.close..];
        let open = memchr::memchr(b'"', tail)
            .ok_or_else(|| LineProblem::new("http_request", "no quoted request line"))?;
        let body = &tail[open + 1..];
        let end = memchr::memrchr(b'"', body).unwrap_or(body.len());
        Ok(&body[..end])
    }
}

/// Splits a line into its fields, checking each; `None` for a blank line.
fn fields(line: &[u8]) -> Result<Option<Fields<'_>>, LineProblem> {
    if line.trim_ascii().is_empty() {
        return Ok(None);
    }
    // The accept date is the first ` [dd/` after the syslog header.
    let open = memchr::memmem::find_iter(line, b" [")
        .find(|&i| line.get(i + 4) == Some(&b'/'))
        .ok_or_else(|| LineProblem::new("accept_date", "no `[dd/Mon/yyyy:…]` accept date"))?;
    let before = &line[..open];
    let addr = before.rsplit(|&c| c == b' ').next().unwrap_or_default();
    let ip = match addr.iter().rposition(|&c| c == b':') {
        Some(colon) => &addr[..colon],
        None => addr,
    };
    if ip.is_empty() {
        return Err(LineProblem::new(
            "client_ip",
            "no client address before the date",
        ));
    }
    let close = memchr::memchr(b']', &line[open..])
        .map(|i| open + i)
        .ok_or_else(|| LineProblem::new("accept_date", "truncated line: no `]`"))?;
    let time_ms =
        parse_clf_time(&line[open + 2..close]).map_err(|p| LineProblem::new("accept_date", p))?;
    let mut fields = line[close + 1..]
        .split(|&c| c == b' ')
        .filter(|f| !f.is_empty());
    let frontend = fields.next();
    let backend = fields.next();
    let _timers = fields.next();
    let status = fields.next().unwrap_or_default();
    let (Some(frontend), Some(backend)) = (frontend, backend) else {
        return Err(LineProblem::new(
            "frontend",
            "truncated line: no frontend/backend",
        ));
    };
    if status.len() != 3 || !status.iter().all(|c| c.is_ascii_digit() || *c == b'-') {
        return Err(LineProblem::new(
            "status_code",
            format!("truncated line: `{}` is not an HTTP status", lossy(status)),
        ));
    }
    Ok(Some(Fields {
        line,
        ip,
        time_ms,
        frontend,
        backend,
        close,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The example from HAProxy's configuration manual, section 8.2.3.
    const LINE: &[u8] = br#"Feb  6 12:14:14 localhost haproxy[14389]: 10.0.1.2:33317 [06/Feb/2009:12:14:14.655] http-in static/srv1 10/0/30/69/109 200 2750 - - ---- 1/1/1/1/0 0/0 {1wt.eu} {} "GET /index.html HTTP/1.1""#;

    #[test]
    fn reads_the_manual_example() {
        let p = HaproxyParser::new(&Key::Ip).unwrap();
        let e = p.parse(LINE).unwrap().unwrap();
        assert_eq!(&*e.client, b"10.0.1.2");
        assert_eq!(e.time_ms, 1_233_922_454_655);
        let host = HaproxyParser::new(&Key::Host).unwrap();
        assert_eq!(&*host.parse(LINE).unwrap().unwrap().client, b"1wt.eu");
        let be = HaproxyParser::new(&Key::Field("backend".into())).unwrap();
        assert_eq!(&*be.parse(LINE).unwrap().unwrap().client, b"static");
    }

    #[test]
    fn truncated_lines_are_problems() {
        let p = HaproxyParser::new(&Key::Ip).unwrap();
        assert_eq!(p.parse(&LINE[..70]).unwrap_err().field, "accept_date");
        assert_eq!(p.parse(&LINE[..90]).unwrap_err().field, "frontend");
        assert_eq!(p.parse(&LINE[..115]).unwrap_err().field, "status_code");
    }
}
