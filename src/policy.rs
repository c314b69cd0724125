//! Policies: which algorithm, how many, per how long, with what burst.
//!
//! A policy is written as a human spec, `<algorithm> <limit>/<window> [burst <n>]`:
//! `fixed 100/60s`, `gcra 10/1s burst 20`, `sliding-counter 1000/day` — or, for the sixth kind,
//! `concurrency <n> [timeout <duration>]` (at most `n` requests in flight, each lease ending after
//! the timeout, 30 s unless given; docs/design.md §2). The same text is accepted
//! A fixed window may instead count per calendar period, `fixed <limit>/<week|month|year> [anchor
//! <day|MM-DD>] [utc±HH:MM]` (`fixed 10000/month anchor 15 utc+02:00`; [`Calendar`]).
//! The same text is accepted
//! by serde (TOML/JSON), by the simulator's `--policy` flag and by the Worker's configuration,
//! and [`Policy`]'s `Display` prints it back in canonical form, so a spec round-trips.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::algorithm::calendar::{parse_anchor, parse_offset};
pub use crate::algorithm::calendar::{Calendar, Period};

/// The largest value any scaled product in an algorithm may reach: `limit × window_ms` and
/// `burst × window_ms` must stay at or below it.
///
/// Redis runs Lua with doubles, exact only below 2^53. The sliding window counter adds two such
/// products and the buckets add a cost term to one, so bounding each product by 2^50 keeps every
/// intermediate value of every Lua twin exact, with room to spare.
pub const MAX_SCALED: u64 = 1 << 50;

/// The longest window a policy may have: 366 days, in milliseconds.
pub const MAX_WINDOW_MS: u64 = 366 * DAY_MS;

const SECOND_MS: u64 = 1_000;
const MINUTE_MS: u64 = 60 * SECOND_MS;
const HOUR_MS: u64 = 60 * MINUTE_MS;
const DAY_MS: u64 = 24 * HOUR_MS;

/// The rate-limiting algorithm a policy runs. See the modules under [`crate::algorithm`] for the
/// exact semantics and worst case of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// Per-window counter (`fixed`); admits up to 2×limit across a window boundary.
    FixedWindow,
    /// Exact sliding window log (`sliding-log`); memory O(limit) per key.
    SlidingLog,
    /// Two weighted fixed windows (`sliding-counter`); the Cloudflare/Upstash approximation.
    SlidingCounter,
    /// Continuously refilled token bucket (`token-bucket`); capacity = burst.
    TokenBucket,
    /// Generic cell rate algorithm (`gcra`); decides exactly as the token bucket.
    Gcra,
    /// At most `limit` requests in flight (`concurrency`), each holding a lease that ends when
    /// it is released or after `window_ms` (the timeout), whichever comes first. Not a rate:
    /// absent from [`Algorithm::ALL`], listed in [`Algorithm::EVERY`].
    Concurrency,
}

/// The lease timeout of a `concurrency` policy that names none: 30 s.
pub const DEFAULT_LEASE_TIMEOUT_MS: u64 = 30 * SECOND_MS;

impl Algorithm {
    /// Every rate algorithm (the windows and the buckets), in a stable order (the order reports
    /// list them in). Their guarantees are stated per window of time; `concurrency` is not a rate
    /// and is listed only in [`Algorithm::EVERY`].
    pub const ALL: [Algorithm; 5] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingCounter,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
    ];

    /// Every kind of policy: the rate algorithms of [`Algorithm::ALL`], then `concurrency`.
    pub const EVERY: [Algorithm; 6] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingCounter,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
        Algorithm::Concurrency,
    ];

    /// The name used in specs: `fixed`, `sliding-log`, `sliding-counter`, `token-bucket`, `gcra`,
    /// `concurrency`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed",
            Algorithm::SlidingLog => "sliding-log",
            Algorithm::SlidingCounter => "sliding-counter",
            Algorithm::TokenBucket => "token-bucket",
            Algorithm::Gcra => "gcra",
            Algorithm::Concurrency => "concurrency",
        }
    }

    /// Whether the algorithm takes a `burst` (the buckets do; the windows admit `limit` at once).
    pub const fn takes_burst(self) -> bool {
        matches!(self, Algorithm::TokenBucket | Algorithm::Gcra)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Algorithm {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Algorithm::EVERY
            .into_iter()
            .find(|a| a.as_str() == name)
            .ok_or_else(|| {
                format!(
                    "unknown algorithm `{name}` (expected one of: fixed, sliding-log, \
                     sliding-counter, token-bucket, gcra, concurrency)"
                )
            })
    }
}

/// A validated rate-limiting policy: `limit` units of cost per `window_ms`, with `burst` for the
/// buckets — or, for a calendar fixed window, per calendar period ([`Policy::calendar`]).
/// Construct with [`Policy::new`] or [`Policy::new_calendar`], or parse a spec; an invalid policy
/// cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Policy {
    algorithm: Algorithm,
    limit: u64,
    window_ms: u64,
    burst: u64,
    calendar: Option<Calendar>,
    // Derived once so GCRA steps need no division for them: the emission interval W/L and the
    // tolerance B·W/L, each as whole ms and a remainder in units of 1/L ms.
    interval: Fraction,
    tolerance: Fraction,
}

/// `whole + rem / L` milliseconds, `0 ≤ rem < L`: an exact fraction of the policy's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Fraction {
    pub(crate) whole: u64,
    pub(crate) rem: u64,
}

/// Why a policy or a spec was rejected. The message names the spec and the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid policy `{spec}`: {problem}")]
pub struct PolicyError {
    /// The spec as written (or the canonical form of the parts, for [`Policy::new`]).
    pub spec: String,
    /// What is wrong with it.
    pub problem: String,
}

impl Policy {
    /// Builds a policy, checking every bound. `burst` applies to `token-bucket` and `gcra` only and
    /// defaults to `limit`; giving it to a window algorithm is an error rather than silently ignored.
    pub fn new(
        algorithm: Algorithm,
        limit: u64,
        window_ms: u64,
        burst: Option<u64>,
    ) -> Result<Policy, PolicyError> {
        let spec = || {
            if algorithm == Algorithm::Concurrency {
                return format!("{algorithm} {limit} timeout {window_ms}ms");
            }
            let mut s = format!("{algorithm} {limit}/{window_ms}ms");
            if let Some(b) = burst {
                s.push_str(&format!(" burst {b}"));
            }
            s
        };
        Policy::validated(algorithm, limit, window_ms, burst).map_err(|problem| PolicyError {
            spec: spec(),
            problem,
        })
    }

    /// A fixed window of `limit` per calendar period (docs/design.md §2): `fixed 10000/month`.
    /// The limit is at most [`MAX_SCALED`] (a fixed window only counts, so no product with the
    /// window bounds it).
    pub fn new_calendar(limit: u64, calendar: Calendar) -> Result<Policy, PolicyError> {
        Policy::validated_calendar(Algorithm::FixedWindow, limit, calendar, None).map_err(
            |problem| PolicyError {
                spec: format!("fixed {limit}/{calendar}"),
                problem,
            },
        )
    }

    fn validated_calendar(
        algorithm: Algorithm,
        limit: u64,
        calendar: Calendar,
        burst: Option<u64>,
    ) -> Result<Policy, String> {
        if algorithm != Algorithm::FixedWindow {
            return Err(format!(
                "a calendar period (`/{}`) takes the fixed window only, not `{algorithm}`",
                calendar.period()
            ));
        }
        if burst.is_some() {
            return Err(
                "`burst` applies only to token-bucket and gcra; `fixed` admits up to its limit at once"
                    .into(),
            );
        }
        if limit == 0 {
            return Err("the limit must be at least 1".into());
        }
        if limit > MAX_SCALED {
            return Err(format!(
                "the limit ({limit}) exceeds 2^50, the most a Redis Lua twin counts exactly"
            ));
        }
        let window_ms = calendar.period().longest_ms();
        Ok(Policy {
            algorithm,
            limit,
            window_ms,
            burst: limit,
            calendar: Some(calendar),
            interval: Fraction {
                whole: window_ms / limit,
                rem: window_ms % limit,
            },
            tolerance: Fraction {
                whole: window_ms,
                rem: 0,
            },
        })
    }

    /// This policy with another limit (and burst, for the buckets), its algorithm and window —
    /// or calendar — kept.
    pub fn with_limit(&self, limit: u64, burst: Option<u64>) -> Result<Policy, PolicyError> {
        match self.calendar {
            Some(calendar) => Policy::new_calendar(limit, calendar),
            None => Policy::new(self.algorithm, limit, self.window_ms, burst),
        }
    }

    /// Builds a policy from the parts the scripts take (its window as
    /// [`Policy::script_window`] sends it: a window in ms or a calendar's code).
    pub fn from_script_parts(
        algorithm: Algorithm,
        limit: u64,
        script_window: u64,
        burst: Option<u64>,
    ) -> Result<Policy, PolicyError> {
        match Calendar::from_script_code(script_window) {
            Some(calendar) => Policy::validated_calendar(algorithm, limit, calendar, burst)
                .map_err(|problem| PolicyError {
                    spec: format!("{algorithm} {limit}/{calendar}"),
                    problem,
                }),
            None => Policy::new(algorithm, limit, script_window, burst),
        }
    }

    fn validated(
        algorithm: Algorithm,
        limit: u64,
        window_ms: u64,
        burst: Option<u64>,
    ) -> Result<Policy, String> {
        if limit == 0 {
            return Err("the limit must be at least 1".into());
        }
        if window_ms == 0 {
            return Err("the window must be at least 1ms".into());
        }
        if window_ms > MAX_WINDOW_MS {
            return Err(format!(
                "the window ({window_ms}ms) exceeds the longest allowed, 366 days"
            ));
        }
        if burst.is_some() && !algorithm.takes_burst() {
            return Err(format!(
                "`burst` applies only to token-bucket and gcra; `{algorithm}` admits up to its limit at once"
            ));
        }
        let burst = burst.unwrap_or(limit);
        if burst == 0 {
            return Err("the burst must be at least 1".into());
        }
        for (what, n) in [("limit", limit), ("burst", burst)] {
            if n.checked_mul(window_ms).is_none_or(|p| p > MAX_SCALED) {
                return Err(format!(
                    "{what} × window in ms ({n} × {window_ms}) exceeds 2^50, the most a Redis Lua \
                     twin can compute exactly; use a shorter window or a smaller {what}"
                ));
            }
        }
        Ok(Policy {
            algorithm,
            limit,
            window_ms,
            burst,
            calendar: None,
            interval: Fraction {
                whole: window_ms / limit,
                rem: window_ms % limit,
            },
            tolerance: Fraction {
                whole: burst * window_ms / limit,
                rem: burst * window_ms % limit,
            },
        })
    }

    /// The algorithm.
    pub const fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Units of cost admitted per window (for the buckets: the refill per window).
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// The window in milliseconds. For a calendar period, the longest such period (7, 31 or
    /// 366 days): what bounds how long its state matters, how long request ids are remembered,
    /// and the window `w` the `RateLimit-Policy` field advertises. Its decisions count to the
    /// period's end, not to this.
    pub const fn window_ms(&self) -> u64 {
        self.window_ms
    }

    /// The calendar period a calendar fixed window counts in; `None` for a window of fixed
    /// length.
    pub const fn calendar(&self) -> Option<Calendar> {
        self.calendar
    }

    /// The window as the scripts take it: the window in ms, or the calendar's
    /// [`Calendar::script_code`] (above every window in ms).
    pub const fn script_window(&self) -> u64 {
        match self.calendar {
            Some(calendar) => calendar.script_code(),
            None => self.window_ms,
        }
    }

    /// The bucket capacity for `token-bucket` and `gcra`; equal to `limit` for the windows.
    pub const fn burst(&self) -> u64 {
        self.burst
    }

    /// The emission interval `W/L` as an exact fraction.
    pub(crate) const fn interval(&self) -> Fraction {
        self.interval
    }

    /// The tolerance `B·W/L` as an exact fraction.
    pub(crate) const fn tolerance(&self) -> Fraction {
        self.tolerance
    }

    /// The most cost a single request can ever be admitted with: the burst for the buckets, the
    /// limit for the windows. A request costing more is denied for good.
    pub const fn capacity(&self) -> u64 {
        if self.algorithm.takes_burst() {
            self.burst
        } else {
            self.limit
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.algorithm == Algorithm::Concurrency {
            write!(f, "concurrency {}", self.limit)?;
            if self.window_ms != DEFAULT_LEASE_TIMEOUT_MS {
                write!(f, " timeout {}", format_window(self.window_ms))?;
            }
            return Ok(());
        }
        if let Some(calendar) = self.calendar {
            return write!(f, "{} {}/{calendar}", self.algorithm, self.limit);
        }
        write!(
            f,
            "{} {}/{}",
            self.algorithm,
            self.limit,
            format_window(self.window_ms)
        )?;
        if self.algorithm.takes_burst() && self.burst != self.limit {
            write!(f, " burst {}", self.burst)?;
        }
        Ok(())
    }
}

/// Prints a window in the largest unit that divides it exactly: `day`, `2h`, `5m`, `60s` is `1m`.
pub fn format_window(ms: u64) -> String {
    for (unit, size) in [
        ("day", DAY_MS),
        ("h", HOUR_MS),
        ("m", MINUTE_MS),
        ("s", SECOND_MS),
    ] {
        if ms.is_multiple_of(size) {
            let n = ms / size;
            return match (unit, n) {
                ("day", 1) => "day".to_string(),
                ("day", _) => format!("{n}d"),
                _ => format!("{n}{unit}"),
            };
        }
    }
    format!("{ms}ms")
}

/// Parses a window: a count and a unit (`500ms`, `1s`, `60s`, `5m`, `1h`, `2d`), or a bare unit
/// meaning one of it (`s`, `second`, `minute`, `hour`, `day`).
pub fn parse_window(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let count: u64 = if digits.is_empty() {
        1
    } else {
        digits
            .parse()
            .map_err(|_| format!("window count `{digits}` is too large"))?
    };
    let size = match unit.trim() {
        "ms" | "millisecond" | "milliseconds" => 1,
        "s" | "sec" | "second" | "seconds" => SECOND_MS,
        "m" | "min" | "minute" | "minutes" => MINUTE_MS,
        "h" | "hour" | "hours" => HOUR_MS,
        "d" | "day" | "days" => DAY_MS,
        "" => {
            return Err(format!(
                "window `{text}` has no unit (use ms, s, m, h or day)"
            ))
        }
        other => {
            return Err(format!(
                "unknown window unit `{other}` in `{text}` (use ms, s, m, h or day)"
            ))
        }
    };
    count
        .checked_mul(size)
        .ok_or_else(|| format!("window `{text}` overflows"))
}

impl FromStr for Policy {
    type Err = PolicyError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        parse_spec(spec).map_err(|problem| PolicyError {
            spec: spec.to_string(),
            problem,
        })
    }
}

fn parse_spec(spec: &str) -> Result<Policy, String> {
    let mut words = spec.split_whitespace();
    let algorithm: Algorithm = words
        .next()
        .ok_or("empty spec; expected `<algorithm> <limit>/<window> [burst <n>]`")?
        .parse()?;
    if algorithm == Algorithm::Concurrency {
        return parse_concurrency(words);
    }
    let rate = words
        .next()
        .ok_or("missing `<limit>/<window>` after the algorithm")?;
    let (limit, window) = rate
        .split_once('/')
        .ok_or_else(|| format!("`{rate}` is not `<limit>/<window>` (e.g. `100/60s`)"))?;
    let limit = parse_count("limit", limit)?;
    if let Some(period) = Period::from_name(window.trim()) {
        return parse_calendar(algorithm, limit, period, words);
    }
    let window_ms = parse_window(window).map_err(|e| {
        if e.starts_with("unknown window unit") {
            format!("{e}, or a calendar period: `/week`, `/month` or `/year`")
        } else {
            e
        }
    })?;
    let burst = match words.next() {
        None => None,
        Some("burst") => {
            let n = words.next().ok_or("`burst` needs a number after it")?;
            Some(parse_count("burst", n)?)
        }
        Some(word @ "anchor") => {
            return Err(format!(
                "`{word}` applies only to a calendar period (`/month`, `/year`)"
            ))
        }
        Some(word) if word.starts_with("utc") || word.starts_with("UTC") => {
            return Err(format!(
                "a UTC offset (`{word}`) applies only to a calendar period (`/week`, `/month`, \
                 `/year`)"
            ))
        }
        Some(other) => {
            return Err(format!(
                "unexpected `{other}` (only `burst <n>` may follow)"
            ))
        }
    };
    if let Some(extra) = words.next() {
        return Err(format!("unexpected `{extra}` at the end"));
    }
    Policy::validated(algorithm, limit, window_ms, burst)
}

/// `[anchor <day|MM-DD>] [utc±HH:MM]` after `<limit>/<period>`, in either order.
fn parse_calendar<'a>(
    algorithm: Algorithm,
    limit: u64,
    period: Period,
    mut words: impl Iterator<Item = &'a str>,
) -> Result<Policy, String> {
    let (mut anchor, mut offset, mut burst) = (None, None, None);
    while let Some(word) = words.next() {
        match word {
            "anchor" if anchor.is_none() => {
                let text = words
                    .next()
                    .ok_or("`anchor` needs a day (month) or MM-DD (year)")?;
                anchor = Some(parse_anchor(period, text)?);
            }
            "burst" if burst.is_none() => {
                let n = words.next().ok_or("`burst` needs a number after it")?;
                burst = Some(parse_count("burst", n)?);
            }
            w if (w.starts_with("utc") || w.starts_with("UTC")) && offset.is_none() => {
                offset = Some(parse_offset(w)?);
            }
            "anchor" | "burst" => return Err(format!("`{word}` is given twice")),
            w if w.starts_with("utc") || w.starts_with("UTC") => {
                return Err("the UTC offset is given twice".into())
            }
            other => {
                return Err(format!(
                    "unexpected `{other}` (a calendar period takes `anchor <day>` or \
                     `anchor <MM-DD>` and `utc±HH:MM`)"
                ))
            }
        }
    }
    let calendar = Calendar::new(period, anchor, offset.unwrap_or(0))?;
    Policy::validated_calendar(algorithm, limit, calendar, burst)
}

/// `concurrency <n> [timeout <duration>]`, after the algorithm's name.
fn parse_concurrency<'a>(mut words: impl Iterator<Item = &'a str>) -> Result<Policy, String> {
    let limit = words
        .next()
        .ok_or("`concurrency` needs the number of requests in flight (e.g. `concurrency 10`)")?;
    let limit = parse_count("limit", limit)?;
    let timeout = match words.next() {
        None => DEFAULT_LEASE_TIMEOUT_MS,
        Some("timeout") => {
            parse_window(words.next().ok_or("`timeout` needs a duration after it")?)?
        }
        Some(other) => {
            return Err(format!(
                "unexpected `{other}` (only `timeout <duration>` may follow)"
            ))
        }
    };
    if let Some(extra) = words.next() {
        return Err(format!("unexpected `{extra}` at the end"));
    }
    Policy::validated(Algorithm::Concurrency, limit, timeout, None)
}

fn parse_count(what: &str, text: &str) -> Result<u64, String> {
    let text = text.trim().replace('_', "");
    text.parse::<u64>().map_err(|e| match e.kind() {
        std::num::IntErrorKind::PosOverflow => format!("{what} `{text}` overflows"),
        _ => format!("{what} `{text}` is not a whole number"),
    })
}

impl Serialize for Policy {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A policy in serde form: either the spec string or a table with the parts.
#[derive(Deserialize)]
#[serde(untagged)]
enum PolicyForm {
    Spec(String),
    Parts {
        algorithm: String,
        limit: u64,
        window: WindowForm,
        #[serde(default)]
        burst: Option<u64>,
    },
}

#[derive(Deserialize)]
#[serde(untagged)]
enum WindowForm {
    Millis(u64),
    Text(String),
}

impl<'de> Deserialize<'de> for Policy {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match PolicyForm::deserialize(deserializer)? {
            PolicyForm::Spec(spec) => spec.parse().map_err(D::Error::custom),
            PolicyForm::Parts {
                algorithm,
                limit,
                window,
                burst,
            } => {
                let algorithm: Algorithm = algorithm.parse().map_err(D::Error::custom)?;
                if let WindowForm::Text(t) = &window {
                    if Period::from_name(t.trim()).is_some() {
                        let spec = match burst {
                            Some(b) => format!("{algorithm} {limit}/{} burst {b}", t.trim()),
                            None => format!("{algorithm} {limit}/{}", t.trim()),
                        };
                        return spec.parse().map_err(D::Error::custom);
                    }
                }
                let window_ms = match window {
                    WindowForm::Millis(ms) => ms,
                    WindowForm::Text(t) => parse_window(&t).map_err(D::Error::custom)?,
                };
                Policy::new(algorithm, limit, window_ms, burst).map_err(D::Error::custom)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_examples() {
        let p: Policy = "fixed 100/60s".parse().unwrap();
        assert_eq!(
            (p.algorithm(), p.limit(), p.window_ms(), p.burst()),
            (Algorithm::FixedWindow, 100, 60_000, 100)
        );
        let p: Policy = "gcra 10/1s burst 20".parse().unwrap();
        assert_eq!((p.limit(), p.window_ms(), p.burst()), (10, 1000, 20));
        let p: Policy = "sliding-counter 1000/day".parse().unwrap();
        assert_eq!(p.window_ms(), 86_400_000);
        let p: Policy = "token-bucket 5/500ms".parse().unwrap();
        assert_eq!((p.window_ms(), p.capacity()), (500, 5));
        assert_eq!(
            "sliding-log 3/5m".parse::<Policy>().unwrap().window_ms(),
            300_000
        );
        assert_eq!(
            "fixed 3/1h".parse::<Policy>().unwrap().window_ms(),
            3_600_000
        );
    }

    #[test]
    fn concurrency_specs_name_the_limit_and_the_lease_timeout() {
        let p: Policy = "concurrency 2".parse().unwrap();
        assert_eq!(
            (p.algorithm(), p.limit(), p.window_ms(), p.capacity()),
            (Algorithm::Concurrency, 2, 30_000, 2)
        );
        let p: Policy = "concurrency 3 timeout 2m".parse().unwrap();
        assert_eq!((p.limit(), p.window_ms()), (3, 120_000));
        assert_eq!(p.to_string(), "concurrency 3 timeout 2m");
        assert_eq!(
            "concurrency 3 timeout 30s"
                .parse::<Policy>()
                .unwrap()
                .to_string(),
            "concurrency 3"
        );
    }

    #[test]
    fn display_round_trips() {
        for spec in [
            "fixed 100/1m",
            "gcra 10/1s burst 20",
            "sliding-counter 1000/day",
            "token-bucket 7/1500ms",
            "sliding-log 1/2d",
            "concurrency 2",
            "concurrency 10 timeout 5s",
            "fixed 10000/month",
            "fixed 500/week",
            "fixed 1000000/year",
            "fixed 10000/month anchor 15 utc+02:00",
            "fixed 10/month anchor 31",
            "fixed 10/week utc-05:30",
            "fixed 10/year anchor 04-01 utc+14:00",
            "fixed 10/year anchor 02-29",
        ] {
            let p: Policy = spec.parse().unwrap();
            assert_eq!(p.to_string(), spec);
            assert_eq!(p.to_string().parse::<Policy>().unwrap(), p);
        }
    }

    #[test]
    fn bad_specs_name_the_spec_and_the_problem() {
        let cases = [
            ("fixed 0/1s", "at least 1"),
            ("fixed 10/0s", "at least 1ms"),
            ("fixed 10/5y", "unknown window unit `y`"),
            (
                "fixed 10/2month",
                "or a calendar period: `/week`, `/month` or `/year`",
            ),
            ("leaky 10/1s", "unknown algorithm `leaky`"),
            ("fixed 99999999999999999999/1s", "overflows"),
            ("fixed 10/99999999999999999999d", "too large"),
            ("sliding-counter 100000000000/day", "exceeds 2^50"),
            (
                "fixed 10/1s burst 5",
                "applies only to token-bucket and gcra",
            ),
            ("gcra 10/1s burst 0", "burst must be at least 1"),
            ("gcra 10/1s burst", "needs a number"),
            ("gcra 10", "not `<limit>/<window>`"),
            ("", "empty spec"),
            ("fixed 10/1s extra", "unexpected `extra`"),
            ("fixed ten/1s", "not a whole number"),
            ("fixed 10/400d", "366 days"),
            ("concurrency", "needs the number of requests in flight"),
            ("concurrency 0", "at least 1"),
            ("concurrency 2 timeout", "needs a duration"),
            ("concurrency 2 timeout 0s", "at least 1ms"),
            ("concurrency 2/1s", "not a whole number"),
            (
                "concurrency 2 burst 3",
                "only `timeout <duration>` may follow",
            ),
            ("concurrency 2 timeout 1s x", "unexpected `x`"),
            (
                "gcra 10/month",
                "a calendar period (`/month`) takes the fixed window only",
            ),
            ("sliding-log 10/week", "takes the fixed window only"),
            (
                "fixed 10/month burst 5",
                "applies only to token-bucket and gcra",
            ),
            ("fixed 10/month anchor 32", "1–31"),
            ("fixed 10/month anchor 0", "1–31"),
            ("fixed 10/month anchor x", "day of the month 1–31, not `x`"),
            ("fixed 10/month anchor", "`anchor` needs a day"),
            (
                "fixed 10/month anchor 1 anchor 2",
                "`anchor` is given twice",
            ),
            ("fixed 10/year anchor 13-01", "13-01 is none"),
            ("fixed 10/year anchor 02-30", "02-30 is none"),
            ("fixed 10/year anchor 15", "MM-DD"),
            ("fixed 10/week anchor 2", "starts on Monday"),
            ("fixed 10/month utc+2", "`utc+2` is not a UTC offset"),
            ("fixed 10/month utc+24:00", "beyond ±23:59"),
            ("fixed 10/month utc+01:00 utc", "given twice"),
            ("fixed 10/month every", "unexpected `every`"),
            ("fixed 0/month", "at least 1"),
            ("fixed 2000000000000000/month", "exceeds 2^50"),
            ("fixed 10/1h anchor 3", "only to a calendar period"),
            ("fixed 10/1h utc+01:00", "only to a calendar period"),
        ];
        for (spec, problem) in cases {
            let err = spec.parse::<Policy>().unwrap_err();
            let text = err.to_string();
            assert!(text.contains(&format!("`{spec}`")), "{text}");
            assert!(text.contains(problem), "{spec}: {text}");
        }
    }

    #[test]
    fn calendar_specs_name_the_period_anchor_and_offset() {
        let p: Policy = "fixed 10000/month anchor 15 utc+02:00".parse().unwrap();
        let cal = p.calendar().unwrap();
        assert_eq!(
            (cal.period(), cal.anchor(), cal.offset_minutes()),
            (Period::Month, (0, 15), 120)
        );
        assert_eq!(
            (p.limit(), p.capacity(), p.window_ms()),
            (10_000, 10_000, 31 * DAY_MS)
        );
        assert_eq!(
            "fixed 5/week".parse::<Policy>().unwrap().window_ms(),
            7 * DAY_MS
        );
        assert_eq!(
            "fixed 1000000/year".parse::<Policy>().unwrap().window_ms(),
            MAX_WINDOW_MS
        );
        // The canonical form leaves out default anchors and a zero offset, in either order.
        for (spec, canonical) in [
            (
                "fixed 10/month utc+02:00 anchor 15",
                "fixed 10/month anchor 15 utc+02:00",
            ),
            ("fixed 10/month anchor 1 utc", "fixed 10/month"),
            ("fixed 10/year anchor 01-01 UTC+00:00", "fixed 10/year"),
            ("fixed 10/year anchor 4-1", "fixed 10/year anchor 04-01"),
            ("fixed 1_000/week utc-00:00", "fixed 1000/week"),
        ] {
            assert_eq!(spec.parse::<Policy>().unwrap().to_string(), canonical);
        }
        assert_ne!(p, "fixed 10000/month anchor 15".parse::<Policy>().unwrap());
        assert_eq!("fixed 10/31d".parse::<Policy>().unwrap().calendar(), None);
    }

    #[test]
    fn the_scripts_window_carries_the_calendar_and_reads_back() {
        for spec in [
            "fixed 7/month anchor 31 utc-09:30",
            "fixed 7/week",
            "fixed 7/1m",
        ] {
            let p: Policy = spec.parse().unwrap();
            let back = Policy::from_script_parts(p.algorithm(), p.limit(), p.script_window(), None);
            assert_eq!(back, Ok(p), "{spec}");
        }
        assert_eq!(
            "fixed 7/1m".parse::<Policy>().unwrap().script_window(),
            60_000
        );
        let month = "fixed 7/month".parse::<Policy>().unwrap().script_window();
        assert!(month > MAX_WINDOW_MS);
        let err = Policy::from_script_parts(Algorithm::Gcra, 7, month, Some(7)).unwrap_err();
        assert!(
            err.to_string().contains("takes the fixed window only"),
            "{err}"
        );
        let p: Policy = "fixed 10/month anchor 5".parse().unwrap();
        assert_eq!(
            p.with_limit(3, None).unwrap().to_string(),
            "fixed 3/month anchor 5"
        );
    }

    #[test]
    fn serde_accepts_a_spec_or_parts() {
        #[derive(Debug, Deserialize, Serialize)]
        struct Config {
            policy: Policy,
        }
        let c: Config = toml::from_str("policy = \"gcra 10/1s burst 20\"").unwrap();
        assert_eq!(c.policy.burst(), 20);
        let c: Config =
            toml::from_str("[policy]\nalgorithm = \"fixed\"\nlimit = 5\nwindow = \"1m\"").unwrap();
        assert_eq!(c.policy.window_ms(), 60_000);
        let c: Config = serde_json::from_str(
            r#"{"policy":{"algorithm":"sliding-log","limit":5,"window":250}}"#,
        )
        .unwrap();
        assert_eq!(c.policy.window_ms(), 250);
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            r#"{"policy":"sliding-log 5/250ms"}"#
        );
        let c: Config =
            toml::from_str("[policy]\nalgorithm = \"fixed\"\nlimit = 5\nwindow = \"month\"")
                .unwrap();
        assert_eq!(c.policy, "fixed 5/month".parse().unwrap());
        let c: Config = toml::from_str("policy = \"fixed 9/week utc+01:00\"").unwrap();
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            r#"{"policy":"fixed 9/week utc+01:00"}"#
        );
        let err = toml::from_str::<Config>(
            "[policy]\nalgorithm = \"gcra\"\nlimit = 5\nwindow = \"week\"",
        )
        .unwrap_err();
        assert!(err.to_string().contains("fixed window only"), "{err}");
        let err = toml::from_str::<Config>("policy = \"fixed 0/1s\"").unwrap_err();
        assert!(
            err.to_string().contains("invalid policy `fixed 0/1s`"),
            "{err}"
        );
    }
}
