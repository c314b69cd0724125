//! Calendar periods: the week, month or year containing an instant, in a fixed UTC offset.
//!
//! A calendar fixed window (`fixed 10000/month anchor 15 utc+02:00`, docs/design.md §2) counts in
//! the calendar period that contains `t` in the offset's local time, not in a window aligned to
//! the epoch. [`Calendar::period`] finds that period's start and end as epoch milliseconds with
//! integer civil-date arithmetic only (days from and to a proleptic Gregorian date, after Howard
//! Hinnant's `days_from_civil`/`civil_from_days`), so `fixed_window.lua` computes the very same
//! instants with its own integer twin of these functions.
//!
//! - **week**: ISO weeks, from Monday 00:00 local to the next Monday 00:00.
//! - **month**: from the anchor day 00:00 local to the anchor day of the next month; a day the
//!   month lacks (`anchor 31` in April, `anchor 29`–`31` in February) is that month's last day.
//! - **year**: from the anchor date (`MM-DD`, 01-01 unless given) 00:00 local to the same date a
//!   year later; 02-29 is 02-28 in a common year.

use std::fmt;

const DAY_MS: i128 = 86_400_000;
const MINUTE_MS: i128 = 60_000;

/// The longest UTC offset a calendar takes, in minutes: 23:59 either way (every offset in use is
/// within −12:00…+14:00).
pub const MAX_OFFSET_MINUTES: i16 = 23 * 60 + 59;

/// Where [`Calendar::script_code`]s begin.
pub const SCRIPT_CODE_BASE: u64 = 1_000_000_000_000;
const OFFSET_BIAS: i64 = 1440;

/// Which calendar period a window is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Period {
    /// An ISO week, Monday to Monday.
    Week,
    /// A month, from its anchor day.
    Month,
    /// A year, from its anchor date.
    Year,
}

impl Period {
    /// The name in specs: `week`, `month`, `year`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Period::Week => "week",
            Period::Month => "month",
            Period::Year => "year",
        }
    }

    /// The period named `name` (`week`, `month`, `year`), if it is one.
    pub fn from_name(name: &str) -> Option<Period> {
        match name {
            "week" => Some(Period::Week),
            "month" => Some(Period::Month),
            "year" => Some(Period::Year),
            _ => None,
        }
    }

    /// The longest such period, in ms: 7, 31 and 366 days.
    pub const fn longest_ms(self) -> u64 {
        const DAY: u64 = DAY_MS as u64;
        match self {
            Period::Week => 7 * DAY,
            Period::Month => 31 * DAY,
            Period::Year => 366 * DAY,
        }
    }
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A calendar period with its anchor and UTC offset. Build with [`Calendar::new`]; every
/// `Calendar` holds a valid anchor and offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Calendar {
    period: Period,
    // Year only: the anchor's month, 1–12; 0 otherwise.
    anchor_month: u8,
    // Month: 1–31; year: 1–(days of anchor_month in a leap year); week: 0.
    anchor_day: u8,
    offset_minutes: i16,
}

impl Calendar {
    /// A calendar of `period` starting on `anchor` — `(month, day)`: a day 1–31 for a month
    /// (month given as 0), a date for a year, nothing for a week (which starts on Monday) —
    /// in local time `offset_minutes` east of UTC. The error says what is wrong.
    pub fn new(
        period: Period,
        anchor: Option<(u8, u8)>,
        offset_minutes: i16,
    ) -> Result<Calendar, String> {
        if offset_minutes.abs() > MAX_OFFSET_MINUTES {
            return Err(format!(
                "the UTC offset ({}) is beyond ±23:59",
                format_offset(offset_minutes)
            ));
        }
        let (anchor_month, anchor_day) = match (period, anchor) {
            (Period::Week, None) => (0, 0),
            (Period::Week, Some(_)) => {
                return Err("a week starts on Monday (ISO 8601); `anchor` applies to a \
                            month (a day 1–31) or a year (a date MM-DD)"
                    .into())
            }
            (Period::Month, None) => (0, 1),
            (Period::Month, Some((0, day))) if (1..=31).contains(&day) => (0, day),
            (Period::Month, Some(_)) => {
                return Err("a month's anchor is a day of the month, 1–31".into())
            }
            (Period::Year, None) => (1, 1),
            (Period::Year, Some((month, day)))
                if (1..=12).contains(&month)
                    && (1..=days_in_month(2000, month as i64)).contains(&(day as i64)) =>
            {
                (month, day)
            }
            (Period::Year, Some((month, day))) => {
                return Err(format!(
                    "a year's anchor is a date MM-DD; {month:02}-{day:02} is none"
                ))
            }
        };
        Ok(Calendar {
            period,
            anchor_month,
            anchor_day,
            offset_minutes,
        })
    }

    /// The period.
    pub const fn period(&self) -> Period {
        self.period
    }

    /// The anchor as `(month, day)`: `(0, day)` for a month, the date for a year, `(0, 0)` for a
    /// week.
    pub const fn anchor(&self) -> (u8, u8) {
        (self.anchor_month, self.anchor_day)
    }

    /// Minutes east of UTC of the local time the periods follow.
    pub const fn offset_minutes(&self) -> i16 {
        self.offset_minutes
    }

    /// Whether the anchor is the period's natural start (Monday, the 1st, January 1st): specs
    /// leave it out.
    pub const fn default_anchor(&self) -> bool {
        matches!(
            (self.period, self.anchor_month, self.anchor_day),
            (Period::Week, _, _) | (Period::Month, _, 1) | (Period::Year, 1, 1)
        )
    }

    /// The period containing `t_ms`: its start (inclusive) and end (exclusive), epoch ms. The
    /// end is at most 366 days after `t_ms`; `t_ms` is at most [`super::MAX_TIME_MS`], so it
    /// cannot overflow. A start before the epoch reads as 0.
    pub fn period_of(&self, t_ms: u64) -> (u64, u64) {
        let offset = i128::from(self.offset_minutes) * MINUTE_MS;
        let local = i128::from(t_ms) + offset;
        let day = local.div_euclid(DAY_MS) as i64;
        let (start, end) = match self.period {
            Period::Week => {
                // 1970-01-01 was a Thursday: day 0 is 3 days after a Monday.
                let start = day - (day + 3).rem_euclid(7);
                (start, start + 7)
            }
            Period::Month => {
                let (y, m, d) = civil_from_days(day);
                let here = month_start(y, m, self.anchor_day);
                if d >= here {
                    let (ny, nm) = next_month(y, m);
                    (
                        days_from_civil(y, m, here),
                        days_from_civil(ny, nm, month_start(ny, nm, self.anchor_day)),
                    )
                } else {
                    let (py, pm) = previous_month(y, m);
                    (
                        days_from_civil(py, pm, month_start(py, pm, self.anchor_day)),
                        days_from_civil(y, m, here),
                    )
                }
            }
            Period::Year => {
                let (y, _, _) = civil_from_days(day);
                let this = self.year_start(y);
                if day >= this {
                    (this, self.year_start(y + 1))
                } else {
                    (self.year_start(y - 1), this)
                }
            }
        };
        let ms = |day: i64| (i128::from(day) * DAY_MS - offset).max(0) as u64;
        (ms(start), ms(end))
    }

    /// The calendar as the scripts take it, in place of a window in ms (docs/design.md §2,
    /// "The Lua twin"): `10^12 + period·10^10 + month·10^8 + day·10^6 + (offset + 1440)`, with
    /// period 1 week, 2 month, 3 year. Every such number is above any window in ms
    /// ([`crate::policy::MAX_WINDOW_MS`]), so a script tells the two apart, and below 2^53.
    pub const fn script_code(&self) -> u64 {
        let period = match self.period {
            Period::Week => 1,
            Period::Month => 2,
            Period::Year => 3,
        };
        SCRIPT_CODE_BASE
            + period * 10_000_000_000
            + self.anchor_month as u64 * 100_000_000
            + self.anchor_day as u64 * 1_000_000
            + (self.offset_minutes as i64 + OFFSET_BIAS) as u64
    }

    /// The calendar [`Calendar::script_code`] made `code` into, if it is one.
    pub fn from_script_code(code: u64) -> Option<Calendar> {
        let rest = code.checked_sub(SCRIPT_CODE_BASE)?;
        let period = match rest / 10_000_000_000 {
            1 => Period::Week,
            2 => Period::Month,
            3 => Period::Year,
            _ => return None,
        };
        let month = (rest / 100_000_000 % 100) as u8;
        let day = (rest / 1_000_000 % 100) as u8;
        let offset = i16::try_from(rest % 1_000_000).ok()? - OFFSET_BIAS as i16;
        let anchor = match period {
            Period::Week => None,
            _ => Some((month, day)),
        };
        let calendar = Calendar::new(period, anchor, offset).ok()?;
        (calendar.script_code() == code).then_some(calendar)
    }

    /// The day (since the epoch) year `y`'s period starts on.
    fn year_start(&self, y: i64) -> i64 {
        let month = self.anchor_month as i64;
        days_from_civil(y, month, month_start(y, month, self.anchor_day))
    }
}

impl fmt::Display for Calendar {
    /// The spec's tail after the limit: `month anchor 15 utc+02:00`, anchor and offset left out
    /// when they are the defaults.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.period.as_str())?;
        if !self.default_anchor() {
            match self.period {
                Period::Year => {
                    write!(f, " anchor {:02}-{:02}", self.anchor_month, self.anchor_day)?
                }
                _ => write!(f, " anchor {}", self.anchor_day)?,
            }
        }
        if self.offset_minutes != 0 {
            write!(f, " {}", format_offset(self.offset_minutes))?;
        }
        Ok(())
    }
}

/// `utc+HH:MM` or `utc-HH:MM`.
pub fn format_offset(minutes: i16) -> String {
    let sign = if minutes < 0 { '-' } else { '+' };
    let m = minutes.unsigned_abs();
    format!("utc{sign}{:02}:{:02}", m / 60, m % 60)
}

/// Reads `utc`, `utc+HH:MM` or `utc-HH:MM` (also `UTC…`) as minutes east of UTC.
pub fn parse_offset(text: &str) -> Result<i16, String> {
    let bad = || format!("`{text}` is not a UTC offset `utc+HH:MM` or `utc-HH:MM`");
    let rest = text
        .strip_prefix("utc")
        .or_else(|| text.strip_prefix("UTC"))
        .ok_or_else(bad)?;
    if rest.is_empty() {
        return Ok(0);
    }
    let (sign, rest) = match rest.as_bytes()[0] {
        b'+' => (1, &rest[1..]),
        b'-' => (-1, &rest[1..]),
        _ => return Err(bad()),
    };
    let (h, m) = rest.split_once(':').ok_or_else(bad)?;
    let two_digits = |s: &str| {
        (s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<i16>().ok())
            .flatten()
    };
    let (h, m) = (
        two_digits(h).ok_or_else(bad)?,
        two_digits(m).ok_or_else(bad)?,
    );
    if h > 23 || m > 59 {
        return Err(format!(
            "the UTC offset `{text}` is beyond ±23:59 (hours 00–23, minutes 00–59)"
        ));
    }
    Ok(sign * (h * 60 + m))
}

/// Reads an anchor as `period` takes it: a day `1`–`31` for a month, a date `MM-DD` for a year.
/// Returns `(month, day)` with month 0 for a month's anchor. Range checks are [`Calendar::new`]'s.
pub fn parse_anchor(period: Period, text: &str) -> Result<(u8, u8), String> {
    let number = |s: &str| {
        (!s.is_empty() && s.len() <= 2 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u8>().ok())
            .flatten()
    };
    match period {
        Period::Year => text
            .split_once('-')
            .and_then(|(m, d)| Some((number(m)?, number(d)?)))
            .ok_or_else(|| format!("a year's anchor is a date MM-DD (e.g. `04-01`), not `{text}`")),
        _ => number(text)
            .map(|d| (0, d))
            .ok_or_else(|| format!("a month's anchor is a day of the month 1–31, not `{text}`")),
    }
}

/// Days since 1970-01-01 of the proleptic Gregorian date `y-m-d` (Hinnant's `days_from_civil`).
pub(crate) fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date `(y, m, d)` of a day since 1970-01-01 (Hinnant's `civil_from_days`).
pub(crate) fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn is_leap(y: i64) -> bool {
    y.rem_euclid(4) == 0 && (y.rem_euclid(100) != 0 || y.rem_euclid(400) == 0)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// The day of month `m` of year `y` a period anchored on `anchor` starts: the anchor, or the
/// month's last day when it has fewer days.
fn month_start(y: i64, m: i64, anchor: u8) -> i64 {
    i64::from(anchor).min(days_in_month(y, m))
}

fn next_month(y: i64, m: i64) -> (i64, i64) {
    if m == 12 {
        (y + 1, 1)
    } else {
        (y, m + 1)
    }
}

fn previous_month(y: i64, m: i64) -> (i64, i64) {
    if m == 1 {
        (y - 1, 12)
    } else {
        (y, m - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Datelike, Duration, FixedOffset, NaiveDate, TimeZone};
    use proptest::prelude::*;

    /// The period containing `t_ms` as chrono computes it, independently: the local date, then
    /// the period's first date by calendar rules, then that date's midnight in the offset.
    fn chrono_period(cal: &Calendar, t_ms: u64) -> (u64, u64) {
        let zone = FixedOffset::east_opt(i32::from(cal.offset_minutes()) * 60).unwrap();
        let local = zone.timestamp_millis_opt(t_ms as i64).unwrap().date_naive();
        let clamp = |y: i32, m: u32, d: u32| {
            (1..=d)
                .rev()
                .find_map(|d| NaiveDate::from_ymd_opt(y, m, d))
                .unwrap()
        };
        let (month, day) = cal.anchor();
        let (start, end) = match cal.period() {
            Period::Week => {
                let start =
                    local - Duration::days(i64::from(local.weekday().num_days_from_monday()));
                (start, start + Duration::days(7))
            }
            Period::Month => {
                let months = |d: NaiveDate| d.year() * 12 + d.month0() as i32;
                let at = |n: i32| clamp(n.div_euclid(12), n.rem_euclid(12) as u32 + 1, day.into());
                let mut n = months(local);
                if at(n) > local {
                    n -= 1;
                }
                (at(n), at(n + 1))
            }
            Period::Year => {
                let at = |y: i32| clamp(y, month.into(), day.into());
                let mut y = local.year();
                if at(y) > local {
                    y -= 1;
                }
                (at(y), at(y + 1))
            }
        };
        let ms = |d: NaiveDate| {
            zone.from_local_datetime(&d.and_hms_opt(0, 0, 0).unwrap())
                .unwrap()
                .timestamp_millis()
                .max(0) as u64
        };
        (ms(start), ms(end))
    }

    fn date_ms(y: i32, m: u32, d: u32, h: u32) -> u64 {
        NaiveDate::from_ymd_opt(y, m, d)
            .unwrap()
            .and_hms_opt(h, 0, 0)
            .unwrap()
            .and_utc()
            .timestamp_millis() as u64
    }

    fn calendars() -> impl Strategy<Value = Calendar> {
        let offset = -MAX_OFFSET_MINUTES..=MAX_OFFSET_MINUTES;
        prop_oneof![
            offset
                .clone()
                .prop_map(|o| Calendar::new(Period::Week, None, o).unwrap()),
            (1u8..=31, offset.clone()).prop_map(|(d, o)| Calendar::new(
                Period::Month,
                Some((0, d)),
                o
            )
            .unwrap()),
            (1u8..=12, 1u8..=31, offset).prop_filter_map("a date", |(m, d, o)| {
                Calendar::new(Period::Year, Some((m, d)), o).ok()
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        #[test]
        fn periods_equal_chronos_over_four_centuries(
            cal in calendars(),
            t in 0u64..date_ms(2400, 1, 1, 0),
        ) {
            let (start, end) = cal.period_of(t);
            prop_assert_eq!((start, end), chrono_period(&cal, t), "{} at {}", cal, t);
            prop_assert!(start <= t && t < end);
            prop_assert!(end - start <= cal.period().longest_ms());
        }

        #[test]
        fn the_period_of_its_last_millisecond_is_itself_and_the_next_starts_at_its_end(
            cal in calendars(),
            t in date_ms(1971, 1, 1, 0)..date_ms(2200, 1, 1, 0),
        ) {
            let (start, end) = cal.period_of(t);
            prop_assert_eq!(cal.period_of(end - 1), (start, end));
            prop_assert_eq!(cal.period_of(start), (start, end));
            prop_assert_eq!(cal.period_of(end).0, end);
        }
    }

    #[test]
    fn script_codes_round_trip_and_nothing_else_reads_as_one() {
        let cal = Calendar::new(Period::Month, Some((0, 15)), 120).unwrap();
        assert_eq!(cal.script_code(), 1_020_015_001_560);
        let year = Calendar::new(Period::Year, Some((4, 1)), -330).unwrap();
        assert_eq!(year.script_code(), 1_030_401_001_110);
        for c in [cal, year, Calendar::new(Period::Week, None, -1439).unwrap()] {
            assert_eq!(Calendar::from_script_code(c.script_code()), Some(c));
        }
        for code in [
            0,
            60_000,
            crate::policy::MAX_WINDOW_MS,
            SCRIPT_CODE_BASE,
            1_040_000_001_440,
        ] {
            assert_eq!(Calendar::from_script_code(code), None, "{code}");
        }
    }

    #[test]
    fn days_round_trip_through_dates() {
        for day in (-800_000..800_000).step_by(7) {
            let (y, m, d) = civil_from_days(day);
            assert_eq!(days_from_civil(y, m, d), day);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    }

    #[test]
    fn edge_periods_are_the_calendars() {
        let month = |d, o| Calendar::new(Period::Month, Some((0, d)), o).unwrap();
        // December to January.
        assert_eq!(
            month(1, 0).period_of(date_ms(2025, 12, 31, 23)),
            (date_ms(2025, 12, 1, 0), date_ms(2026, 1, 1, 0))
        );
        // Anchor 31: February's period starts on its last day, leap or not.
        assert_eq!(
            month(31, 0).period_of(date_ms(2024, 3, 1, 0)),
            (date_ms(2024, 2, 29, 0), date_ms(2024, 3, 31, 0))
        );
        assert_eq!(
            month(31, 0).period_of(date_ms(2025, 2, 27, 0)),
            (date_ms(2025, 1, 31, 0), date_ms(2025, 2, 28, 0))
        );
        // ISO week 1 of 2026 starts on Monday 2025-12-29.
        let week = Calendar::new(Period::Week, None, 0).unwrap();
        assert_eq!(
            week.period_of(date_ms(2026, 1, 1, 12)),
            (date_ms(2025, 12, 29, 0), date_ms(2026, 1, 5, 0))
        );
        // utc+02:00: the local month starts at 22:00 UTC the day before.
        assert_eq!(
            month(1, 120).period_of(date_ms(2026, 3, 31, 23)),
            (date_ms(2026, 3, 31, 22), date_ms(2026, 4, 30, 22))
        );
        // A year from 02-29 starts on 02-28 in a common year.
        let leap = Calendar::new(Period::Year, Some((2, 29)), 0).unwrap();
        assert_eq!(
            leap.period_of(date_ms(2025, 3, 1, 0)),
            (date_ms(2025, 2, 28, 0), date_ms(2026, 2, 28, 0))
        );
        // The end of time: no overflow, and the period still contains it.
        for cal in [
            week,
            month(31, MAX_OFFSET_MINUTES),
            Calendar::new(Period::Year, Some((12, 31)), -MAX_OFFSET_MINUTES).unwrap(),
        ] {
            let t = crate::algorithm::MAX_TIME_MS;
            let (start, end) = cal.period_of(t);
            assert!(start <= t && t < end && end - start <= cal.period().longest_ms());
        }
        // Before the epoch's first local period: the start reads as 0.
        assert_eq!(
            month(1, -60).period_of(0).0,
            0,
            "1969-12-31 23:00 local is in December 1969"
        );
    }

    #[test]
    fn bad_anchors_and_offsets_are_named() {
        assert!(Calendar::new(Period::Week, Some((0, 3)), 0)
            .unwrap_err()
            .contains("Monday"));
        assert!(Calendar::new(Period::Month, Some((0, 32)), 0)
            .unwrap_err()
            .contains("1–31"));
        assert!(Calendar::new(Period::Year, Some((2, 30)), 0)
            .unwrap_err()
            .contains("02-30 is none"));
        assert!(parse_offset("utc+24:00").unwrap_err().contains("±23:59"));
        assert!(parse_offset("utc+2").unwrap_err().contains("utc+HH:MM"));
        assert_eq!(parse_offset("utc-05:30"), Ok(-330));
        assert_eq!(parse_offset("utc"), Ok(0));
        assert!(parse_anchor(Period::Year, "4")
            .unwrap_err()
            .contains("MM-DD"));
    }
}
