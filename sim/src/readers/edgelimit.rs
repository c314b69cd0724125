//! The Worker's own decision log lines (`--format edgelimit`): with `log_sample = 1.0` every
//! request's line carries what a replay needs — the times the decision used, method, host, path,
//! and each limit's identifier as keyed, cost, decision and reason.
//!
//! Three shapes are read, in any mix:
//! - the bare line the Worker logs (`{"edgelimit":"decision",…}`), also with text before it on
//!   its line (`wrangler dev` output);
//! - `wrangler tail --format json` events, pretty-printed over many lines, the line in
//!   `logs[].message[]`;
//! - Workers Logpush (`workers_trace_events`) NDJSON, the line in `Logs[].Message[]`.
//!
//! Other text (wrangler's own output, events of requests that were not sampled) is skipped.

use edgelimit_engine::LogLine;
use serde::Deserialize;
use serde_json::Value;

use super::format::LineProblem;
use super::request::{PlaceField, Request};

/// The marker every decision line starts with.
const MARKER: &[u8] = br#"{"edgelimit":"decision""#;

/// Reads decision lines; stateful, since a pretty-printed tail event spans many lines.
#[derive(Debug, Clone, Default)]
pub struct EdgelimitParser {
    /// The lines of a multi-line event read so far.
    pending: Option<String>,
}

impl EdgelimitParser {
    /// A parser.
    pub fn new() -> EdgelimitParser {
        EdgelimitParser::default()
    }

    /// Reads one line into `out`; `Ok(false)` when the line completes no decision (other text,
    /// part of a multi-line event, an event without a decision line).
    pub fn parse_request(&mut self, line: &[u8], out: &mut Request) -> Result<bool, LineProblem> {
        if let Some(pending) = self.pending.as_mut() {
            pending.push_str(&String::from_utf8_lossy(line));
            pending.push('\n');
            // Pretty-printed events close at the start of a line; nested objects are indented.
            if line.trim_ascii_end() != b"}" {
                return Ok(false);
            }
            let event = self.pending.take().unwrap_or_default();
            return read_event(event.as_bytes(), out);
        }
        let trimmed = line.trim_ascii();
        if trimmed == b"{" {
            self.pending = Some(String::from("{\n"));
            return Ok(false);
        }
        if let Some(at) = memchr::memmem::find(line, MARKER) {
            return read_decision(&line[at..], out).map(|()| true);
        }
        if trimmed.starts_with(b"{") {
            return read_event(trimmed, out);
        }
        Ok(false)
    }
}

/// A tail or Logpush event: its decision line, if it logged one.
fn read_event(text: &[u8], out: &mut Request) -> Result<bool, LineProblem> {
    let event: Value = serde_json::from_slice(text)
        .map_err(|e| LineProblem::new("json", format!("not a JSON event: {e}")))?;
    if event.get("edgelimit").is_some() {
        let logged = LogLine::deserialize(&event)
            .map_err(|e| LineProblem::new("decision", e.to_string()))?;
        fill(logged, out);
        return Ok(true);
    }
    let logs = event.get("logs").or_else(|| event.get("Logs"));
    let messages = logs
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|log| log.get("message").or_else(|| log.get("Message")))
        .flat_map(|message| match message {
            Value::Array(parts) => parts.iter().collect::<Vec<_>>(),
            other => vec![other],
        })
        .filter_map(Value::as_str);
    for message in messages {
        if let Some(at) = memchr::memmem::find(message.as_bytes(), MARKER) {
            read_decision(&message.as_bytes()[at..], out)?;
            return Ok(true);
        }
    }
    Ok(false)
}

fn read_decision(text: &[u8], out: &mut Request) -> Result<(), LineProblem> {
    // Text may follow the object on its line; the first complete value is the decision.
    let mut values = serde_json::Deserializer::from_slice(text).into_iter::<LogLine>();
    let logged = match values.next() {
        Some(Ok(logged)) => logged,
        Some(Err(e)) => return Err(LineProblem::new("decision", e.to_string())),
        None => return Err(LineProblem::new("decision", "empty")),
    };
    fill(logged, out);
    Ok(())
}

fn fill(logged: LogLine, out: &mut Request) {
    out.time_ms = logged.local_ms;
    out.set_method(logged.method.as_bytes());
    out.set_host(logged.host.as_bytes());
    out.set_path(&logged.path);
    if let Some(colo) = &logged.colo {
        out.set_place(PlaceField::Colo, colo.as_bytes());
    }
    if let Some(continent) = &logged.continent {
        out.set_place(PlaceField::Continent, continent.as_bytes());
    }
    out.logged = Some(Box::new(logged));
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgelimit::Identifier;
    use edgelimit_engine::RequestView;

    const LINE: &str = r#"{"edgelimit":"decision","time_ms":1700000000123,"local_ms":1700000000120,"method":"GET","host":"api.example.com","path":"/api/items","rules":["api"],"allowed":false,"status":429,"limits":[{"name":"per-ip","identifier":"2001%3Adb8%3A%3A7","cost":1,"allowed":false,"remaining":0,"reason":"over_limit","shadow":false}],"shadow_denied":[],"atomic":true,"store_ms":2.0}"#;

    fn read(parser: &mut EdgelimitParser, text: &str) -> Vec<Request> {
        let mut out = Vec::new();
        for line in text.lines() {
            let mut r = Request::default();
            if parser.parse_request(line.as_bytes(), &mut r).unwrap() {
                out.push(r);
            }
        }
        out
    }

    fn check(r: &Request) {
        let logged = r.logged.as_ref().unwrap();
        assert_eq!(r.time_ms, 1_700_000_000_120);
        assert_eq!(
            (r.method(), r.host(), r.path()),
            ("GET", "api.example.com", "/api/items")
        );
        assert_eq!(logged.time_ms, Some(1_700_000_000_123));
        assert_eq!(logged.status, 429);
        assert_eq!(
            logged.identifier("per-ip"),
            Some(Identifier::from("2001:db8::7"))
        );
        assert_eq!(logged.identifier("other"), None);
    }

    #[test]
    fn reads_the_bare_line_the_tail_event_and_the_logpush_event() {
        let mut p = EdgelimitParser::new();
        let bare = read(
            &mut p,
            &format!("[wrangler:info] Ready\n{LINE}\nGET /x 429 Too Many Requests"),
        );
        assert_eq!(bare.len(), 1);
        check(&bare[0]);
        let tail = serde_json::json!({
            "outcome": "ok", "scriptName": "edgelimit", "exceptions": [],
            "logs": [{"message": [LINE], "level": "log", "timestamp": 1700000000125u64}],
            "eventTimestamp": 1700000000120u64,
            "event": {"request": {"url": "https://api.example.com/api/items", "method": "GET"}}
        });
        let pretty = serde_json::to_string_pretty(&tail).unwrap();
        let events = read(&mut p, &format!("{pretty}\n{pretty}"));
        assert_eq!(events.len(), 2);
        check(&events[1]);
        let logpush = serde_json::json!({
            "EventTimestampMs": 1700000000120u64, "Outcome": "ok", "ScriptName": "edgelimit",
            "Logs": [{"Level": "log", "Message": [LINE], "TimestampMs": 1700000000125u64}]
        });
        let unsampled = serde_json::json!({"Outcome": "ok", "Logs": []});
        let lines = read(&mut p, &format!("{logpush}\n{unsampled}"));
        assert_eq!(lines.len(), 1);
        check(&lines[0]);
    }

    #[test]
    fn a_broken_decision_names_the_problem() {
        let mut p = EdgelimitParser::new();
        let mut r = Request::default();
        let e = p
            .parse_request(br#"{"edgelimit":"decision","local_ms":"soon"}"#, &mut r)
            .unwrap_err();
        assert_eq!(e.field, "decision");
    }
}
