//! CSV and NDJSON read as requests (`--config`): besides the timestamp, columns (or NDJSON keys)
//! named `method`, `host`, `path` (the target, query included), `ip` (or `client`: the client
//! address, `CF-Connecting-IP`), `header:<name>` and `query:<name>`, and where the request came
//! from for a configuration's regions: `region`, `colo`, `country`, `continent`. CSV needs a
//! header row naming them; values are split at commas (no quoting: write NDJSON for values with
//! commas). In NDJSON, a `header:` or `query:` key holding an array is a field the request sent
//! once per value.

use serde_json::{Map, Value};

use super::csv::{MS_NAMES, TIME_NAMES};
use super::format::{json_duration, parse_duration, LineProblem, RequestOptions};
use super::logpush::json_time;
use super::request::{PlaceField, Request};
use super::time::parse_any;

/// The column (or NDJSON key) holding how long a request was in flight, in ms.
const DURATION: &str = "duration_ms";

/// What a column holds.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Column {
    Time { millis: bool },
    Method,
    Host,
    Path,
    Ip,
    Duration,
    Place(PlaceField),
    Header(String),
    Query(String),
    Other,
}

impl Column {
    /// The column a header-row name (or an NDJSON key) stands for.
    fn named(name: &str) -> Column {
        let lower = name.trim().to_ascii_lowercase();
        if let Some(header) = lower.strip_prefix("header:") {
            return Column::Header(header.trim().to_string());
        }
        if let Some(param) = name.trim().strip_prefix("query:") {
            return Column::Query(param.to_string());
        }
        match lower.as_str() {
            t if TIME_NAMES.contains(&t) => Column::Time {
                millis: MS_NAMES.contains(&t),
            },
            "method" => Column::Method,
            "host" => Column::Host,
            "path" | "uri" | "url" => Column::Path,
            "ip" | "client" => Column::Ip,
            DURATION => Column::Duration,
            "region" => Column::Place(PlaceField::Region),
            "colo" => Column::Place(PlaceField::Colo),
            "country" => Column::Place(PlaceField::Country),
            "continent" => Column::Place(PlaceField::Continent),
            _ => Column::Other,
        }
    }
}

/// Parses CSV (with a header row) or NDJSON lines into requests.
#[derive(Debug, Clone, Default)]
pub struct CsvRequestParser {
    columns: Option<Vec<Column>>,
}

impl CsvRequestParser {
    /// A parser that learns its columns from the header row.
    pub fn new() -> CsvRequestParser {
        CsvRequestParser::default()
    }

    /// Reads one line into `out`; `Ok(false)` for a blank line, a comment or the header row.
    pub fn parse_request(
        &mut self,
        line: &[u8],
        out: &mut Request,
        options: &RequestOptions,
    ) -> Result<bool, LineProblem> {
        let line = line.trim_ascii();
        if line.is_empty() || line.starts_with(b"#") {
            return Ok(false);
        }
        if line.starts_with(b"{") {
            return parse_json(line, out, options).map(|()| true);
        }
        let Some(columns) = &self.columns else {
            let columns: Vec<Column> = line
                .split(|&c| c == b',')
                .map(|name| Column::named(&String::from_utf8_lossy(name)))
                .collect();
            if !columns.iter().any(|c| matches!(c, Column::Time { .. })) {
                return Err(LineProblem::new(
                    "header",
                    "--config needs a header row naming the columns: a timestamp (timestamp_ms, \
                     timestamp, time, ts), and any of method, host, path, ip, header:<name>, \
                     query:<name>",
                ));
            }
            self.columns = Some(columns);
            return Ok(false);
        };
        let mut time = None;
        let mut target: &[u8] = b"/";
        for (column, value) in columns.iter().zip(line.split(|&c| c == b',')) {
            let value = value.trim_ascii();
            match column {
                Column::Time { millis } => {
                    time = Some(
                        parse_any(value, *millis).map_err(|p| LineProblem::new("timestamp", p))?,
                    )
                }
                Column::Method => out.set_method(value),
                Column::Host => out.set_host(value),
                Column::Path if !value.is_empty() => target = value,
                Column::Ip => out.set_client_ip(value),
                Column::Duration if !value.is_empty() => {
                    out.duration_ms = Some(parse_duration(value, DURATION)?)
                }
                Column::Place(field) => out.set_place(*field, value),
                Column::Header(name) => out.add_header(name.as_bytes(), value),
                Column::Path | Column::Duration | Column::Query(_) | Column::Other => {}
            }
        }
        out.time_ms =
            time.ok_or_else(|| LineProblem::new("timestamp", "truncated line: missing"))?;
        out.set_target(target);
        // Query columns join the target's own query, so they are added once it is set.
        for (column, value) in columns.iter().zip(line.split(|&c| c == b',')) {
            if let Column::Query(name) = column {
                let value = value.trim_ascii();
                if !value.is_empty() {
                    out.add_query(name, &String::from_utf8_lossy(value));
                }
            }
        }
        finish(out, options);
        Ok(true)
    }
}

/// Defaults for what a line left out: `GET`, and the configured host.
fn finish(out: &mut Request, options: &RequestOptions) {
    use edgelimit_engine::RequestView;
    if out.method().is_empty() {
        out.set_method(b"GET");
    }
    if out.host().is_empty() {
        out.set_host(options.host.as_bytes());
    }
}

fn parse_json(line: &[u8], out: &mut Request, options: &RequestOptions) -> Result<(), LineProblem> {
    let obj: Map<String, Value> = serde_json::from_slice(line)
        .map_err(|e| LineProblem::new("json", format!("not a JSON object: {e}")))?;
    let mut time = None;
    let mut target = String::from("/");
    let mut queries = Vec::new();
    for (key, value) in &obj {
        // A field sent several times: an array of its values, each one line of the request.
        if let Value::Array(values) = value {
            let lines = values.iter().filter_map(Value::as_str);
            match Column::named(key) {
                Column::Header(name) => {
                    lines.for_each(|v| out.add_header(name.as_bytes(), v.as_bytes()))
                }
                Column::Query(name) => queries.extend(lines.map(|v| (name.clone(), v.to_string()))),
                _ => {}
            }
            continue;
        }
        let text = match value {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Null if key == DURATION => String::new(),
            _ => continue,
        };
        match Column::named(key) {
            Column::Time { millis } => {
                time =
                    Some(json_time(value, millis).map_err(|p| LineProblem::new("timestamp", p))?);
            }
            Column::Method => out.set_method(text.as_bytes()),
            Column::Host => out.set_host(text.as_bytes()),
            Column::Path if !text.is_empty() => target = text,
            Column::Ip => out.set_client_ip(text.as_bytes()),
            Column::Duration => out.duration_ms = json_duration(value, DURATION)?,
            Column::Place(field) => out.set_place(field, text.as_bytes()),
            Column::Header(name) => out.add_header(name.as_bytes(), text.as_bytes()),
            Column::Query(name) => queries.push((name, text)),
            Column::Path | Column::Other => {}
        }
    }
    out.time_ms = time.ok_or_else(|| LineProblem::new("timestamp", "missing"))?;
    out.set_target(target.as_bytes());
    for (name, value) in queries {
        if !value.is_empty() {
            out.add_query(&name, &value);
        }
    }
    finish(out, options);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgelimit_engine::RequestView;

    #[test]
    fn named_columns_become_the_request() {
        let mut p = CsvRequestParser::new();
        let options = RequestOptions::default();
        let mut r = Request::default();
        let header = b"timestamp_ms,method,host,path,ip,header:X-User,query:key,referrer";
        assert!(!p.parse_request(header, &mut r, &options).unwrap());
        let line = b"1700000000000,post,API.example.com,/v1/items?a=1,203.0.113.7,alice,k 1,x";
        assert!(p.parse_request(line, &mut r, &options).unwrap());
        assert_eq!(r.time_ms, 1_700_000_000_000);
        assert_eq!(
            (r.method(), r.host(), r.path()),
            ("POST", "api.example.com", "/v1/items")
        );
        assert_eq!(r.header("x-user").as_deref(), Some("alice"));
        assert_eq!(r.header("cf-connecting-ip").as_deref(), Some("203.0.113.7"));
        assert_eq!(r.query("a").as_deref(), Some("1"));
        assert_eq!(r.query("key").as_deref(), Some("k 1"));

        let mut p = CsvRequestParser::new();
        let e = p
            .parse_request(b"client,path", &mut r, &options)
            .unwrap_err();
        assert_eq!(e.field, "header");
    }

    #[test]
    fn ndjson_keys_are_the_column_names() {
        let mut p = CsvRequestParser::new();
        let mut r = Request::default();
        let options = RequestOptions {
            host: "default.example".into(),
            ..RequestOptions::default()
        };
        let line = br#"{"timestamp_ms":1700000000001,"path":"/a","header:Authorization":"Bearer x","query:page":2}"#;
        assert!(p.parse_request(line, &mut r, &options).unwrap());
        assert_eq!(
            (r.method(), r.host(), r.path()),
            ("GET", "default.example", "/a")
        );
        assert_eq!(r.header("authorization").as_deref(), Some("Bearer x"));
        assert_eq!(r.query("page").as_deref(), Some("2"));
        let bad = p
            .parse_request(br#"{"path":"/a"}"#, &mut r, &options)
            .unwrap_err();
        assert_eq!(bad.field, "timestamp");
    }
}
