//! `--outage FROM..TO`: spans of trace time during which the store cannot be reached, so every
//! limit follows its `fail` mode as the Worker's does. Each end is an RFC 3339 time, a Unix time
//! (unit by magnitude, as in traces), or `+DURATION` after the trace's first request (`+10m`).

use std::fmt;
use std::str::FromStr;

use crate::readers::time::{format_utc, parse_any};

/// One end of a span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    At(u64),
    AfterStart(u64),
}

/// A span `[from, to)` of trace time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outage {
    from: End,
    to: End,
}

impl FromStr for Outage {
    type Err = String;

    fn from_str(text: &str) -> Result<Outage, String> {
        let (from, to) = text
            .split_once("..")
            .ok_or_else(|| format!("`{text}` is not FROM..TO (e.g. +10m..+15m)"))?;
        let end = |part: &str| -> Result<End, String> {
            let part = part.trim();
            match part.strip_prefix('+') {
                Some(after) => edgelimit::policy::parse_window(after)
                    .map(End::AfterStart)
                    .map_err(|e| format!("`{part}`: {e}")),
                None => parse_any(part.as_bytes(), false)
                    .map(End::At)
                    .map_err(|e| format!("`{part}`: {e}")),
            }
        };
        Ok(Outage {
            from: end(from)?,
            to: end(to)?,
        })
    }
}

impl fmt::Display for Outage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let end = |e: End| match e {
            End::At(ms) => format_utc(ms),
            End::AfterStart(ms) => format!("+{}", edgelimit::policy::format_window(ms)),
        };
        write!(f, "{}..{}", end(self.from), end(self.to))
    }
}

/// A resolved span, in UTC epoch ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Span {
    /// The first millisecond the store is down.
    pub from_ms: u64,
    /// The first millisecond it is back.
    pub to_ms: u64,
}

/// The outages of one replay, resolved against the trace's first request.
#[derive(Debug, Clone, Default)]
pub struct Outages {
    given: Vec<Outage>,
    spans: Option<Vec<Span>>,
}

impl Outages {
    /// The spans as given on the command line.
    pub fn new(given: Vec<Outage>) -> Outages {
        Outages { given, spans: None }
    }

    /// Whether the store is down at `time_ms`; the first call fixes the trace's start.
    pub fn down_at(&mut self, time_ms: u64) -> bool {
        if self.given.is_empty() {
            return false;
        }
        let given = &self.given;
        let spans = self.spans.get_or_insert_with(|| {
            let at = |e: End| match e {
                End::At(ms) => ms,
                End::AfterStart(ms) => time_ms.saturating_add(ms),
            };
            given
                .iter()
                .map(|o| Span {
                    from_ms: at(o.from),
                    to_ms: at(o.to),
                })
                .collect()
        });
        spans
            .iter()
            .any(|s| (s.from_ms..s.to_ms).contains(&time_ms))
    }

    /// The resolved spans (empty before the first request).
    pub fn spans(&self) -> Vec<Span> {
        self.spans.clone().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_resolve_against_the_first_request() {
        let mut o = Outages::new(vec!["+10s..+20s".parse().unwrap()]);
        assert!(!o.down_at(1_000));
        assert!(o.down_at(11_000) && o.down_at(20_999));
        assert!(!o.down_at(21_000));
        let abs: Outage = "2023-11-14T22:13:20Z..1700000001000".parse().unwrap();
        let mut o = Outages::new(vec![abs]);
        assert!(o.down_at(1_700_000_000_500));
        assert!(!o.down_at(1_700_000_001_000));
        assert_eq!(
            o.spans(),
            [Span {
                from_ms: 1_700_000_000_000,
                to_ms: 1_700_000_001_000
            }]
        );
        assert!("10s".parse::<Outage>().is_err());
        assert!("+x..+1s".parse::<Outage>().is_err());
        assert_eq!(
            abs.to_string(),
            "2023-11-14T22:13:20.000Z..2023-11-14T22:13:21.000Z"
        );
    }
}
