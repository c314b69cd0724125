//! Simple traces: CSV `timestamp,client[,cost]` (a header row is optional; a `duration_ms` column
//! needs one) or NDJSON objects with `timestamp`/`timestamp_ms`, `client` and optional `cost` and
//! `duration_ms` fields.
//!
//! Timestamps may be RFC 3339 or Unix times; a bare integer's unit is chosen by magnitude
//! (seconds, ms, µs, ns) unless the column is named `timestamp_ms`/`time_ms`, which is always
//! milliseconds — what `sim generate` writes.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::format::{
    json_cost, json_duration, parse_cost, parse_duration, Key, LineProblem, LineResult, Parsed,
};
use super::logpush::{json_key, json_time};
use super::time::parse_any;

pub(super) const MS_NAMES: [&str; 2] = ["timestamp_ms", "time_ms"];
pub(super) const TIME_NAMES: [&str; 5] = ["timestamp_ms", "time_ms", "timestamp", "time", "ts"];

/// Column positions, known once the first line has been seen.
#[derive(Debug, Clone, Copy)]
struct Columns {
    time: usize,
    millis: bool,
    client: usize,
    cost: Option<usize>,
    duration: Option<usize>,
}

/// The column (or NDJSON field) holding how long a request was in flight, in ms.
const DURATION: &str = "duration_ms";

/// Parses CSV or generic NDJSON lines.
#[derive(Debug, Clone)]
pub struct CsvParser {
    key: Key,
    columns: Option<Columns>,
}

impl CsvParser {
    /// A parser keyed by `ip`/`host` (the `client` column) or a named column/field.
    pub fn new(key: &Key) -> CsvParser {
        CsvParser {
            key: key.clone(),
            columns: None,
        }
    }

    /// Parses one line.
    pub fn parse<'a>(&mut self, line: &'a [u8]) -> LineResult<'a> {
        let line = line.trim_ascii();
        if line.is_empty() || line.starts_with(b"#") {
            return Ok(None);
        }
        if line.starts_with(b"{") {
            return self.parse_json(line);
        }
        let columns = match self.columns {
            Some(c) => c,
            None => {
                let (columns, header) = self.columns_from(line)?;
                self.columns = Some(columns);
                if header {
                    return Ok(None);
                }
                columns
            }
        };
        let mut time = None;
        let mut client = None;
        let mut cost = None;
        let mut duration = None;
        for (i, field) in line.split(|&c| c == b',').enumerate() {
            let field = field.trim_ascii();
            if i == columns.time {
                time = Some(field);
            }
            if i == columns.client {
                client = Some(field);
            }
            if Some(i) == columns.cost {
                cost = Some(field);
            }
            if Some(i) == columns.duration {
                duration = Some(field);
            }
        }
        let time = time.ok_or_else(|| LineProblem::new("timestamp", "truncated line: missing"))?;
        let time_ms =
            parse_any(time, columns.millis).map_err(|p| LineProblem::new("timestamp", p))?;
        let client = match client {
            Some(c) if !c.is_empty() => c,
            _ => {
                return Err(LineProblem::new(
                    "client",
                    "truncated line: missing or empty",
                ))
            }
        };
        let cost = match cost {
            None | Some(b"") => 1,
            Some(c) => parse_cost(c)?,
        };
        let duration_ms = match duration {
            None | Some(b"") => None,
            Some(d) => Some(parse_duration(d, DURATION)?),
        };
        Ok(Some(Parsed {
            time_ms,
            client: Cow::Borrowed(client),
            cost,
            duration_ms,
        }))
    }

    /// Works out the columns from the first line; `true` if it is a header row.
    fn columns_from(&self, line: &[u8]) -> Result<(Columns, bool), LineProblem> {
        let first = line.split(|&c| c == b',').next().unwrap_or_default();
        let is_header = parse_any(first, false).is_err()
            && first.iter().any(|c| c.is_ascii_alphabetic())
            && !first.contains(&b':');
        if !is_header {
            if let Key::Field(f) = &self.key {
                return Err(LineProblem::new(
                    "header",
                    format!("--key {f} needs a header row naming the CSV columns"),
                ));
            }
            return Ok((
                Columns {
                    time: 0,
                    millis: false,
                    client: 1,
                    cost: Some(2),
                    duration: None,
                },
                false,
            ));
        }
        let names: Vec<String> = line
            .split(|&c| c == b',')
            .map(|n| String::from_utf8_lossy(n.trim_ascii()).to_ascii_lowercase())
            .collect();
        let find = |want: &str| names.iter().position(|n| n == want);
        let time = TIME_NAMES
            .iter()
            .find_map(|n| find(n))
            .ok_or_else(|| LineProblem::new("header", "no timestamp column"))?;
        let client = match &self.key {
            Key::Field(f) => find(&f.to_ascii_lowercase()).ok_or_else(|| {
                LineProblem::new("header", format!("no column named `{f}` for --key"))
            })?,
            Key::Ip => find("client").or_else(|| find("ip")).unwrap_or(1),
            Key::Host => find("host").or_else(|| find("client")).unwrap_or(1),
        };
        Ok((
            Columns {
                time,
                millis: MS_NAMES.contains(&names[time].as_str()),
                client,
                cost: find("cost"),
                duration: find(DURATION),
            },
            true,
        ))
    }

    fn parse_json<'a>(&self, line: &[u8]) -> LineResult<'a> {
        let obj: Map<String, Value> = serde_json::from_slice(line)
            .map_err(|e| LineProblem::new("json", format!("not a JSON object: {e}")))?;
        let time_ms = match TIME_NAMES.iter().find_map(|n| obj.get(*n).map(|v| (n, v))) {
            None => return Err(LineProblem::new("timestamp", "missing")),
            Some((name, v)) => json_time(v, MS_NAMES.contains(name))
                .map_err(|p| LineProblem::new("timestamp", p))?,
        };
        let field = match &self.key {
            Key::Ip => ["client", "ip"].into_iter().find(|f| obj.contains_key(*f)),
            Key::Host => ["host", "client"]
                .into_iter()
                .find(|f| obj.contains_key(*f)),
            Key::Field(f) => Some(f.as_str()),
        }
        .unwrap_or("client");
        let client = json_key(&obj, field)
            .map_err(|p| LineProblem::new("client", format!("`{field}` {p}")))?;
        let cost = match obj.get("cost") {
            None => 1,
            Some(Value::Number(n)) => json_cost(n)?,
            Some(v) => return Err(LineProblem::new("cost", format!("`{v}` is not a number"))),
        };
        let duration_ms = match obj.get(DURATION) {
            None => None,
            Some(v) => json_duration(v, DURATION)?,
        };
        Ok(Some(Parsed {
            time_ms,
            client: Cow::Owned(client.into_bytes()),
            cost,
            duration_ms,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_with_and_without_header() {
        let mut p = CsvParser::new(&Key::Ip);
        assert!(p.parse(b"timestamp_ms,client,cost").unwrap().is_none());
        let e = p.parse(b"1700000000000,alice,3").unwrap().unwrap();
        assert_eq!(
            (e.time_ms, &*e.client, e.cost),
            (1_700_000_000_000, &b"alice"[..], 3)
        );
        let e = p.parse(b"5,bob").unwrap().unwrap();
        assert_eq!((e.time_ms, e.cost), (5, 1));

        let mut p = CsvParser::new(&Key::Ip);
        let e = p.parse(b"2023-11-14T22:13:20Z,10.0.0.1").unwrap().unwrap();
        assert_eq!(e.time_ms, 1_700_000_000_000);
        let e = p.parse(b"1700000000.5,10.0.0.1,2").unwrap().unwrap();
        assert_eq!((e.time_ms, e.cost), (1_700_000_000_500, 2));
        assert_eq!(p.parse(b"1700000000").unwrap_err().field, "client");
        assert_eq!(p.parse(b"soon,10.0.0.1").unwrap_err().field, "timestamp");
        assert_eq!(p.parse(b"1700000000,a,x").unwrap_err().field, "cost");
    }

    #[test]
    fn named_columns_and_ndjson() {
        let mut p = CsvParser::new(&Key::Field("user".into()));
        assert!(p.parse(b"ts,ip,user").unwrap().is_none());
        let e = p.parse(b"1700000000,1.2.3.4,carol").unwrap().unwrap();
        assert_eq!(&*e.client, b"carol");

        let mut p = CsvParser::new(&Key::Ip);
        let e = p
            .parse(br#"{"timestamp_ms":1700000000001,"client":"dave","cost":2}"#)
            .unwrap()
            .unwrap();
        assert_eq!(
            (e.time_ms, &*e.client, e.cost),
            (1_700_000_000_001, &b"dave"[..], 2)
        );
        assert_eq!(
            p.parse(br#"{"client":"x"}"#).unwrap_err().field,
            "timestamp"
        );
    }
}
