//! Trace formats, the identifier choice, and what a line parser returns.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use super::time::lossy;

/// A trace format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Apache/nginx combined or common log format.
    Clf,
    /// HAProxy HTTP log (`option httplog`), millisecond accept time.
    Haproxy,
    /// Cloudflare Logpush `http_requests` NDJSON.
    Logpush,
    /// `timestamp,client[,cost]` CSV, or NDJSON objects with those fields.
    Csv,
    /// The Worker's own decision log lines (`log_sample = 1.0`), bare or as `wrangler tail
    /// --format json` and Workers Logpush deliver them; replayed with `--config`.
    Edgelimit,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Clf => "clf",
            Format::Haproxy => "haproxy",
            Format::Logpush => "logpush",
            Format::Csv => "csv",
            Format::Edgelimit => "edgelimit",
        })
    }
}

impl Format {
    /// Guesses the format from the first non-empty line of a trace.
    pub fn sniff(line: &[u8]) -> Format {
        let line = line.trim_ascii();
        let has = |needle: &[u8]| memchr::memmem::find(line, needle).is_some();
        // A bare decision line, or one inside a tail event; `{` alone opens the pretty-printed
        // events `wrangler tail --format json` writes.
        if has(br#""edgelimit":"decision""#)
            || has(br#"\"edgelimit\":\"decision\""#)
            || line == b"{"
        {
            return Format::Edgelimit;
        }
        if line.starts_with(b"{") {
            if has(b"\"EdgeStartTimestamp\"") || has(b"\"ClientIP\"") {
                return Format::Logpush;
            }
            return Format::Csv;
        }
        if memchr::memmem::find(line, b"haproxy[").is_some() {
            return Format::Haproxy;
        }
        if let Some(open) = memchr::memchr(b'[', line) {
            // `[dd/Mon/yyyy:hh:mm:ss` then either `.mmm]` (HAProxy) or ` +zzzz]` (CLF).
            let date = &line[open + 1..];
            if date.len() > 21 && date[2] == b'/' && date[6] == b'/' {
                return if date[20] == b'.' {
                    Format::Haproxy
                } else {
                    Format::Clf
                };
            }
        }
        Format::Csv
    }
}

/// Which field identifies the client: `ip`, `host`, or any other field by name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Key {
    /// The client address field (some logs put a host name there).
    #[default]
    Ip,
    /// The requested host (`ClientRequestHost`, HAProxy's first captured header).
    Host,
    /// A field by name (a Logpush/NDJSON field, a CSV column, or `user`/`agent` in CLF).
    Field(String),
}

impl FromStr for Key {
    type Err = String;

    fn from_str(s: &str) -> Result<Key, String> {
        match s.trim() {
            "" => Err("--key needs a field name".into()),
            "ip" => Ok(Key::Ip),
            "host" => Ok(Key::Host),
            other => Ok(Key::Field(other.to_string())),
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Ip => f.write_str("ip"),
            Key::Host => f.write_str("host"),
            Key::Field(name) => f.write_str(name),
        }
    }
}

/// What a request-reading parser (`--config`) needs beyond the line.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestOptions {
    /// The host for lines that carry none (Apache/nginx, HAProxy without a captured Host).
    pub host: String,
    /// The names of the request headers HAProxy captured, in `capture request header` order
    /// (its log holds the values only). Default: `host`.
    pub captured_headers: Vec<String>,
}

/// One parsed line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed<'a> {
    /// UTC epoch ms.
    pub time_ms: u64,
    /// The identifier's bytes.
    pub client: Cow<'a, [u8]>,
    /// The request's cost.
    pub cost: i64,
    /// How long the request was in flight (ms), when the line says.
    pub duration_ms: Option<u32>,
}

/// What is wrong with a line: the field and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineProblem {
    /// The field (`timestamp`, `client`, `request`, …).
    pub field: &'static str,
    /// What is wrong, in words.
    pub problem: String,
}

impl LineProblem {
    pub(crate) fn new(field: &'static str, problem: impl Into<String>) -> LineProblem {
        LineProblem {
            field,
            problem: problem.into(),
        }
    }
}

/// The result of parsing one line: an event, nothing (a blank line or a header), or a problem.
pub type LineResult<'a> = Result<Option<Parsed<'a>>, LineProblem>;

/// The largest cost a trace may give one request: 2^50, the largest capacity any policy can have
/// (`edgelimit::policy::MAX_SCALED`). A larger cost could never be admitted, and up to it every
/// Redis Lua twin computes exactly, so `--store` replays agree with the steps.
pub const MAX_COST: u64 = edgelimit::policy::MAX_SCALED;

/// A request's cost, written as text (a CSV column): a whole number from 1 to [`MAX_COST`]. A
/// cost of 0 (a look) or below (a refund) is something the library does, but not a request.
pub(crate) fn parse_cost(text: &[u8]) -> Result<i64, LineProblem> {
    let digits = text.strip_prefix(b"-").unwrap_or(text);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(cost_problem(format!("`{}` is not an integer", lossy(text))));
    }
    if text[0] == b'-' && digits.iter().any(|&d| d != b'0') {
        return Err(cost_problem(format!(
            "`{}` is a refund, not a request: a cost is 1 to 2^50",
            lossy(text)
        )));
    }
    // Digits only, so the parse fails only when the number exceeds u64, which is too large too.
    let cost = std::str::from_utf8(digits)
        .ok()
        .and_then(|d| d.parse::<u64>().ok())
        .unwrap_or(u64::MAX);
    check_cost(cost, &lossy(text))
}

/// A request's cost given as a JSON number, under the rules of [`parse_cost`].
pub(crate) fn json_cost(n: &serde_json::Number) -> Result<i64, LineProblem> {
    if let Some(cost) = n.as_u64() {
        return check_cost(cost, &n.to_string());
    }
    if n.as_i64().is_some() || n.as_f64().is_some_and(|f| f < 0.0) {
        return Err(cost_problem(format!(
            "`{n}` is a refund, not a request: a cost is 1 to 2^50"
        )));
    }
    match n.as_f64() {
        Some(f) if f > MAX_COST as f64 => check_cost(u64::MAX, &n.to_string()),
        _ => Err(cost_problem(format!("`{n}` is not an integer"))),
    }
}

fn check_cost(cost: u64, text: &str) -> Result<i64, LineProblem> {
    match cost {
        0 => Err(cost_problem(
            "a cost of 0 is a look, not a request: a cost is 1 to 2^50",
        )),
        // MAX_COST < i64::MAX, so the cast is exact.
        c if c <= MAX_COST => Ok(c as i64),
        _ => Err(cost_problem(format!(
            "`{text}` exceeds 2^50, the largest capacity a policy can have"
        ))),
    }
}

/// A request's duration in ms written as text (a CSV `duration_ms` column): a whole number from 0
/// to [`MAX_DURATION_MS`](crate::event::MAX_DURATION_MS); `field` names the column in problems.
pub(crate) fn parse_duration(text: &[u8], field: &'static str) -> Result<u32, LineProblem> {
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        let problem = if text.first() == Some(&b'-') {
            "is negative: a duration is 0 or more milliseconds"
        } else {
            "is not a whole number of milliseconds"
        };
        return Err(LineProblem::new(
            field,
            format!("`{}` {problem}", lossy(text)),
        ));
    }
    // Digits only: the parse fails only beyond u64, which is too long too.
    let ms = std::str::from_utf8(text)
        .ok()
        .and_then(|d| d.parse::<u64>().ok())
        .unwrap_or(u64::MAX);
    check_duration(ms, &lossy(text), field)
}

/// A request's duration given as a JSON value (`null` is none), under the rules of
/// [`parse_duration`].
pub(crate) fn json_duration(
    value: &serde_json::Value,
    field: &'static str,
) -> Result<Option<u32>, LineProblem> {
    use serde_json::Value;
    match value {
        Value::Null => Ok(None),
        Value::Number(n) => match n.as_u64() {
            Some(ms) => check_duration(ms, &n.to_string(), field).map(Some),
            None if n.as_f64().is_some_and(|f| f < 0.0) => Err(LineProblem::new(
                field,
                format!("`{n}` is negative: a duration is 0 or more milliseconds"),
            )),
            None => Err(LineProblem::new(
                field,
                format!("`{n}` is not a whole number of milliseconds"),
            )),
        },
        Value::String(s) => parse_duration(s.trim().as_bytes(), field).map(Some),
        other => Err(LineProblem::new(
            field,
            format!("`{other}` is not a number of milliseconds"),
        )),
    }
}

fn check_duration(ms: u64, text: &str, field: &'static str) -> Result<u32, LineProblem> {
    if ms > crate::event::MAX_DURATION_MS {
        return Err(LineProblem::new(
            field,
            format!(
                "`{text}` ms exceeds {} ms (about 49.7 days), the longest duration a trace may give",
                crate::event::MAX_DURATION_MS
            ),
        ));
    }
    Ok(ms as u32)
}

fn cost_problem(problem: impl Into<String>) -> LineProblem {
    LineProblem::new("cost", problem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_each_format_from_a_real_line() {
        let cases: [(&[u8], Format); 8] = [
            (
                br#"83.149.9.216 - - [17/May/2015:10:05:03 +0000] "GET / HTTP/1.1" 200 203023 "-" "-""#,
                Format::Clf,
            ),
            (
                br#"Feb  6 12:14:14 localhost haproxy[14389]: 10.0.1.2:33317 [06/Feb/2009:12:14:14.655] http-in static/srv1 10/0/30/69/109 200 2750 - - ---- 1/1/1/1/0 0/0 {1wt.eu} {} "GET /index.html HTTP/1.1""#,
                Format::Haproxy,
            ),
            (
                br#"10.0.1.2:33317 [06/Feb/2009:12:14:14.655] http-in static/srv1 10/0/30/69/109 200 2750"#,
                Format::Haproxy,
            ),
            (
                br#"{"ClientIP":"198.51.100.7","EdgeStartTimestamp":1700000000123456789}"#,
                Format::Logpush,
            ),
            (br#"{"timestamp_ms":1,"client":"a"}"#, Format::Csv),
            (b"timestamp_ms,client,cost", Format::Csv),
            (
                br#"{"edgelimit":"decision","local_ms":1,"method":"GET"}"#,
                Format::Edgelimit,
            ),
            (b"{", Format::Edgelimit),
        ];
        for (line, format) in cases {
            assert_eq!(
                Format::sniff(line),
                format,
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }
}
