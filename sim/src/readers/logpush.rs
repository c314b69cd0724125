//! Cloudflare Logpush `http_requests` NDJSON: one JSON object per line with `ClientIP`,
//! `EdgeStartTimestamp` (unixnano integer, Unix seconds, or an RFC 3339 string, as the job's
//! `timestamp_format` chose), `ClientRequestHost`, `ClientRequestURI`, `ClientRequestMethod`, ….

use std::borrow::Cow;

use serde_json::{Map, Value};

use edgelimit_engine::identify::CLIENT_IP_HEADER;

use super::format::{json_duration, Key, LineProblem, LineResult, Parsed, RequestOptions};
use super::request::{PlaceField, Request};
use super::time::{checked_ms, parse_rfc3339, unix_integer_to_ms, unix_number_to_ms};

/// Parses Logpush lines.
#[derive(Debug, Clone)]
pub struct LogpushParser {
    field: String,
}

impl LogpushParser {
    /// A parser keyed by `ip` (`ClientIP`), `host` (`ClientRequestHost`) or any field by name.
    pub fn new(key: &Key) -> LogpushParser {
        let field = match key {
            Key::Ip => "ClientIP".to_string(),
            Key::Host => "ClientRequestHost".to_string(),
            Key::Field(f) => f.clone(),
        };
        LogpushParser { field }
    }

    /// Parses one line.
    pub fn parse<'a>(&self, line: &'a [u8]) -> LineResult<'a> {
        if line.trim_ascii().is_empty() {
            return Ok(None);
        }
        let obj: Map<String, Value> = serde_json::from_slice(line)
            .map_err(|e| LineProblem::new("json", format!("not a JSON object: {e}")))?;
        let time_ms = match obj.get("EdgeStartTimestamp") {
            None => {
                return Err(LineProblem::new(
                    "EdgeStartTimestamp",
                    "missing (add it to the Logpush job's fields)",
                ))
            }
            Some(v) => {
                json_time(v, false).map_err(|p| LineProblem::new("EdgeStartTimestamp", p))?
            }
        };
        let client = json_key(&obj, &self.field).map_err(|p| LineProblem {
            field: "key",
            problem: format!("`{}` {p}", self.field),
        })?;
        Ok(Some(Parsed {
            time_ms,
            client: Cow::Owned(client.into_bytes()),
            cost: 1,
            duration_ms: origin_duration(&obj)?,
        }))
    }
}

/// The field holding how long the origin took to answer, in ms: the request's time in flight
/// behind the edge, which releases a concurrency lease.
pub(crate) const DURATION_FIELD: &str = "OriginResponseDurationMs";

/// `OriginResponseDurationMs`, when the job logs it.
fn origin_duration(obj: &Map<String, Value>) -> Result<Option<u32>, LineProblem> {
    obj.get(DURATION_FIELD)
        .map_or(Ok(None), |v| json_duration(v, DURATION_FIELD))
}

/// Logpush fields read as a request's place (`--config` with regions): the colo that served it
/// and the client's country.
const PLACE_FIELDS: [(&str, PlaceField); 2] = [
    ("EdgeColoCode", PlaceField::Colo),
    ("ClientCountry", PlaceField::Country),
];

/// Logpush fields read as request headers (`--config`), beside `RequestHeaders`.
const HEADER_FIELDS: [(&str, &str); 4] = [
    ("ClientIP", CLIENT_IP_HEADER),
    ("ClientRequestUserAgent", "user-agent"),
    ("ClientRequestReferer", "referer"),
    ("ClientCountry", "cf-ipcountry"),
];

impl LogpushParser {
    /// Reads one line as the request the Worker would have seen (`--config`):
    /// `ClientRequestMethod`, `ClientRequestHost`, `ClientRequestURI` (or `ClientRequestPath`),
    /// `ClientIP` as `CF-Connecting-IP`, `ClientRequestUserAgent`, `ClientRequestReferer`,
    /// `ClientCountry` as `CF-IPCountry` (the headers Cloudflare sets), and every field of a
    /// `RequestHeaders` object (the job's custom request-header fields); `EdgeColoCode` and
    /// `ClientCountry` as its place. `Ok(false)` for a blank line.
    pub fn parse_request(
        &self,
        line: &[u8],
        out: &mut Request,
        options: &RequestOptions,
    ) -> Result<bool, LineProblem> {
        if line.trim_ascii().is_empty() {
            return Ok(false);
        }
        let obj: Map<String, Value> = serde_json::from_slice(line)
            .map_err(|e| LineProblem::new("json", format!("not a JSON object: {e}")))?;
        out.time_ms = match obj.get("EdgeStartTimestamp") {
            None => {
                return Err(LineProblem::new(
                    "EdgeStartTimestamp",
                    "missing (add it to the Logpush job's fields)",
                ))
            }
            Some(v) => {
                json_time(v, false).map_err(|p| LineProblem::new("EdgeStartTimestamp", p))?
            }
        };
        let text = |field: &str| match obj.get(field) {
            Some(Value::String(s)) => Some(s.as_str()),
            _ => None,
        };
        out.set_method(text("ClientRequestMethod").unwrap_or("GET").as_bytes());
        let target = text("ClientRequestURI")
            .or_else(|| text("ClientRequestPath"))
            .ok_or_else(|| {
                LineProblem::new(
                    "ClientRequestURI",
                    "missing (add it to the Logpush job's fields)",
                )
            })?;
        out.set_host(
            text("ClientRequestHost")
                .unwrap_or(options.host.as_str())
                .as_bytes(),
        );
        out.set_target(target.as_bytes());
        for (field, header) in HEADER_FIELDS {
            if let Some(value) = text(field) {
                out.add_header(header.as_bytes(), value.as_bytes());
            }
        }
        for (field, place) in PLACE_FIELDS {
            if let Some(value) = text(field) {
                out.set_place(place, value.as_bytes());
            }
        }
        out.duration_ms = origin_duration(&obj)?;
        if let Some(Value::Object(headers)) = obj.get("RequestHeaders") {
            for (name, value) in headers {
                if let Value::String(value) = value {
                    out.add_header(name.as_bytes(), value.as_bytes());
                }
            }
        }
        Ok(true)
    }
}

/// A JSON timestamp: an integer or float Unix time (unit by magnitude, or milliseconds when
/// `millis`) or an RFC 3339 string.
pub(crate) fn json_time(v: &Value, millis: bool) -> Result<u64, String> {
    let integer = |i: u64| {
        if millis {
            checked_ms(i)
        } else {
            unix_integer_to_ms(i)
        }
    };
    match v {
        Value::Number(n) => match n.as_u64() {
            Some(i) => integer(i),
            None => unix_number_to_ms(n.as_f64().unwrap_or(f64::NAN), millis),
        },
        Value::String(s) if s.bytes().all(|c| c.is_ascii_digit()) && !s.is_empty() => s
            .parse::<u64>()
            .map_err(|e| format!("`{s}`: {e}"))
            .and_then(integer),
        Value::String(s) => parse_rfc3339(s.as_bytes()),
        other => Err(format!("`{other}` is not a timestamp")),
    }
}

/// A JSON field as an identifier: strings as they are, numbers and booleans as text.
pub(crate) fn json_key(obj: &Map<String, Value>, field: &str) -> Result<String, String> {
    match obj.get(field) {
        None => Err("is missing".into()),
        Some(Value::String(s)) if s.is_empty() => Err("is empty".into()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Null) => Err("is null".into()),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(v.to_string()),
        Some(_) => Err("is not a string or number".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Field names and value shapes as Cloudflare documents them for http_requests.
    const NANO: &[u8] = br#"{"ClientIP":"198.51.100.7","ClientRequestHost":"example.com","ClientRequestMethod":"GET","ClientRequestURI":"/api/v1/items?id=3","EdgeStartTimestamp":1700000000123456789,"EdgeResponseStatus":200,"RayID":"7f1f2b3c4d5e6f70"}"#;
    const RFC: &[u8] = br#"{"ClientIP":"2001:db8::1","ClientRequestHost":"api.example.com","EdgeStartTimestamp":"2023-11-14T22:13:20.123Z"}"#;
    const UNIX: &[u8] = br#"{"ClientIP":"203.0.113.9","EdgeStartTimestamp":1700000000}"#;

    #[test]
    fn reads_each_timestamp_format() {
        let p = LogpushParser::new(&Key::Ip);
        let e = p.parse(NANO).unwrap().unwrap();
        assert_eq!(
            (e.time_ms, &*e.client),
            (1_700_000_000_123, &b"198.51.100.7"[..])
        );
        assert_eq!(p.parse(RFC).unwrap().unwrap().time_ms, 1_700_000_000_123);
        assert_eq!(p.parse(UNIX).unwrap().unwrap().time_ms, 1_700_000_000_000);
        let host = LogpushParser::new(&Key::Host);
        assert_eq!(
            &*host.parse(RFC).unwrap().unwrap().client,
            b"api.example.com"
        );
        let ray = LogpushParser::new(&Key::Field("RayID".into()));
        assert_eq!(
            &*ray.parse(NANO).unwrap().unwrap().client,
            b"7f1f2b3c4d5e6f70"
        );
    }

    #[test]
    fn problems_name_the_field() {
        let p = LogpushParser::new(&Key::Host);
        assert_eq!(p.parse(UNIX).unwrap_err().field, "key");
        assert_eq!(p.parse(&NANO[..50]).unwrap_err().field, "json");
        let p = LogpushParser::new(&Key::Ip);
        let bad = br#"{"ClientIP":"1.2.3.4","EdgeStartTimestamp":"soon"}"#;
        assert_eq!(p.parse(bad).unwrap_err().field, "EdgeStartTimestamp");
    }
}
