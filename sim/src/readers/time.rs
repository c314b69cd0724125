//! Timestamp parsing shared by the readers: everything becomes UTC epoch milliseconds.
//!
//! Hand-written rather than chrono: these run once per line, and the log formats are fixed-width
//! enough that a direct parse is both simpler and several times faster.
//!
//! A trace's times lie from the epoch to the end of year 9999 ([`LATEST_MS`]); a date that does
//! not exist (`30/Feb/2020`, `2021-02-29`) is an error, never moved to a neighbouring day. A
//! `:60` second is read as a leap second (the next second, as Unix time does).

/// The latest time a trace may hold: 9999-12-31T23:59:59.999Z, the last instant a four-digit
/// year can write. Later (or earlier than 1970) is a bad line.
pub const LATEST_MS: u64 = 253_402_300_799_999;

/// Days from 1970-01-01 to the given civil date (proleptic Gregorian; Howard Hinnant's algorithm).
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date and time of UTC epoch ms, for display: `2015-05-17T10:05:03.000Z`.
pub fn format_utc(ms: u64) -> String {
    let secs = (ms / 1000) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Inverse of days_from_civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        ms % 1000
    )
}

fn month_from_abbrev(m: &[u8]) -> Option<u32> {
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    MONTHS
        .iter()
        .position(|x| x[..] == *m)
        .map(|i| i as u32 + 1)
}

fn digits(b: &[u8]) -> Option<u32> {
    if b.is_empty() || b.len() > 9 {
        return None;
    }
    b.iter().try_fold(0u32, |acc, &c| {
        c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0'))
    })
}

/// Days in `month` of `year` (proleptic Gregorian).
fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn to_epoch_ms(
    year: i64,
    month: u32,
    day: u32,
    hms: (u32, u32, u32),
    ms: u32,
    offset_s: i64,
) -> Result<u64, String> {
    let (h, mi, s) = hms;
    if !(1..=12).contains(&month) {
        return Err(format!("month {month} does not exist"));
    }
    if day == 0 || day > days_in_month(year, month) {
        return Err(format!(
            "{year:04}-{month:02}-{day:02} does not exist ({year:04}-{month:02} has {} days)",
            days_in_month(year, month)
        ));
    }
    if h > 23 || mi > 59 || s > 60 {
        return Err(format!("{h:02}:{mi:02}:{s:02} is not a time of day"));
    }
    let secs = days_from_civil(year, month, day) * 86_400
        + i64::from(h) * 3600
        + i64::from(mi) * 60
        + i64::from(s)
        - offset_s;
    if secs < 0 {
        return Err(BEFORE_EPOCH.into());
    }
    checked_ms(secs as u64 * 1000 + u64::from(ms))
}

const BEFORE_EPOCH: &str = "before 1970-01-01 (the epoch)";

/// `ms` if it is no later than [`LATEST_MS`].
pub(crate) fn checked_ms(ms: u64) -> Result<u64, String> {
    if ms > LATEST_MS {
        return Err(format!(
            "{ms} ms is after 9999-12-31T23:59:59.999Z, the latest time a trace may hold"
        ));
    }
    Ok(ms)
}

/// Parses a `±hhmm` or `±hh:mm` zone offset into seconds east of UTC; `Z` is zero.
fn parse_offset(b: &[u8]) -> Option<i64> {
    if b == b"Z" || b == b"z" {
        return Some(0);
    }
    let sign = match b.first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let rest: Vec<u8> = b[1..].iter().copied().filter(|&c| c != b':').collect();
    if rest.len() != 4 {
        return None;
    }
    let h = i64::from(digits(&rest[..2])?);
    let m = i64::from(digits(&rest[2..])?);
    Some(sign * (h * 3600 + m * 60))
}

/// Parses the Apache/HAProxy date `17/May/2015:10:05:03 +0000` (the part inside brackets), with
/// optional milliseconds (`12:14:14.655`) and an optional zone (absent: UTC).
pub(crate) fn parse_clf_time(b: &[u8]) -> Result<u64, String> {
    let bad = || format!("`{}` is not dd/Mon/yyyy:hh:mm:ss[.mmm] [±hhmm]", lossy(b));
    if b.len() < 20 || b[2] != b'/' || b[6] != b'/' || b[11] != b':' {
        return Err(bad());
    }
    let day = digits(&b[0..2]).ok_or_else(bad)?;
    let month = month_from_abbrev(&b[3..6]).ok_or_else(bad)?;
    let year = digits(&b[7..11]).ok_or_else(bad)?;
    if b[14] != b':' || b[17] != b':' {
        return Err(bad());
    }
    let h = digits(&b[12..14]).ok_or_else(bad)?;
    let mi = digits(&b[15..17]).ok_or_else(bad)?;
    let s = digits(&b[18..20]).ok_or_else(bad)?;
    let mut rest = &b[20..];
    let mut ms = 0;
    if let Some(frac) = rest.strip_prefix(b".") {
        let end = frac
            .iter()
            .position(|c| !c.is_ascii_digit())
            .unwrap_or(frac.len());
        ms = frac_to_ms(&frac[..end]).ok_or_else(bad)?;
        rest = &frac[end..];
    }
    let offset = match rest {
        [] => 0,
        [b' ', zone @ ..] => parse_offset(zone).ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    to_epoch_ms(i64::from(year), month, day, (h, mi, s), ms, offset)
}

fn frac_to_ms(f: &[u8]) -> Option<u32> {
    if f.is_empty() {
        return None;
    }
    let mut ms = 0;
    for i in 0..3 {
        let d = f.get(i).map_or(Some(0), |&c| {
            c.is_ascii_digit().then(|| u32::from(c - b'0'))
        })?;
        ms = ms * 10 + d;
    }
    Some(ms)
}

/// Parses RFC 3339: `2019-04-09T20:47:41Z`, `2019-04-09T20:47:41.123+02:00`, `… 20:47:41Z`.
pub(crate) fn parse_rfc3339(b: &[u8]) -> Result<u64, String> {
    let bad = || format!("`{}` is not an RFC 3339 time", lossy(b));
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return Err(bad());
    }
    if b[13] != b':' || b[16] != b':' {
        return Err(bad());
    }
    let year = digits(&b[0..4]).ok_or_else(bad)?;
    let month = digits(&b[5..7]).ok_or_else(bad)?;
    let day = digits(&b[8..10]).ok_or_else(bad)?;
    let h = digits(&b[11..13]).ok_or_else(bad)?;
    let mi = digits(&b[14..16]).ok_or_else(bad)?;
    let s = digits(&b[17..19]).ok_or_else(bad)?;
    let mut rest = &b[19..];
    let mut ms = 0;
    if let Some(frac) = rest.strip_prefix(b".") {
        let end = frac
            .iter()
            .position(|c| !c.is_ascii_digit())
            .unwrap_or(frac.len());
        ms = frac_to_ms(&frac[..end]).ok_or_else(bad)?;
        rest = &frac[end..];
    }
    let offset = parse_offset(rest).ok_or_else(bad)?;
    to_epoch_ms(i64::from(year), month, day, (h, mi, s), ms, offset)
}

/// Interprets a bare number as a Unix time, choosing the unit by magnitude: nanoseconds (as
/// Logpush's `unixnano`), microseconds, milliseconds or seconds. Dates between 1973 and 5138 are
/// read unambiguously this way. `millis` reads it as milliseconds whatever its size.
pub(crate) fn unix_number_to_ms(v: f64, millis: bool) -> Result<u64, String> {
    if !v.is_finite() {
        return Err(format!("`{v}` is not a Unix time"));
    }
    if v < 0.0 {
        return Err(BEFORE_EPOCH.into());
    }
    let ms = if millis || (1e11..1e14).contains(&v) {
        v
    } else if v >= 1e17 {
        v / 1e6
    } else if v >= 1e14 {
        v / 1e3
    } else {
        v * 1e3
    };
    // Compared as a float first: the cast saturates, so a huge `ms` would read as u64::MAX.
    if ms.floor() > LATEST_MS as f64 {
        return checked_ms(u64::MAX);
    }
    checked_ms(ms.floor() as u64)
}

/// Parses an integer Unix time (unit by magnitude, as [`unix_number_to_ms`]) exactly.
pub(crate) fn unix_integer_to_ms(v: u64) -> Result<u64, String> {
    checked_ms(if v >= 100_000_000_000_000_000 {
        v / 1_000_000
    } else if v >= 100_000_000_000_000 {
        v / 1_000
    } else if v >= 100_000_000_000 {
        v
    } else {
        v * 1_000
    })
}

/// Any timestamp a CSV/NDJSON trace may hold: RFC 3339, an integer or a decimal Unix time.
/// `millis` forces a bare integer to be read as milliseconds (a `timestamp_ms` column).
pub(crate) fn parse_any(b: &[u8], millis: bool) -> Result<u64, String> {
    let b = b.trim_ascii();
    if b.is_empty() {
        return Err("empty timestamp".into());
    }
    if b.iter().all(u8::is_ascii_digit) {
        let v: u64 = std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("`{}` is too large", lossy(b)))?;
        return if millis {
            checked_ms(v)
        } else {
            unix_integer_to_ms(v)
        };
    }
    if b.len() >= 20 && b[4] == b'-' {
        return parse_rfc3339(b);
    }
    let v: f64 = std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            format!(
                "`{}` is neither a Unix time nor RFC 3339",
                lossy(&b[..b.len().min(40)])
            )
        })?;
    unix_number_to_ms(v, millis)
}

/// Lossy text of a byte slice, for error messages.
pub(crate) fn lossy(b: &[u8]) -> String {
    let b = &b[..b.len().min(80)];
    String::from_utf8_lossy(b).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clf_honours_the_zone() {
        let utc = parse_clf_time(b"17/May/2015:10:05:03 +0000").unwrap();
        assert_eq!(utc, 1_431_857_103_000);
        assert_eq!(format_utc(utc), "2015-05-17T10:05:03.000Z");
        let east = parse_clf_time(b"17/May/2015:12:05:03 +0200").unwrap();
        assert_eq!(east, utc);
        let west = parse_clf_time(b"17/May/2015:05:35:03 -0430").unwrap();
        assert_eq!(west, utc);
    }

    #[test]
    fn haproxy_milliseconds() {
        let t = parse_clf_time(b"06/Feb/2009:12:14:14.655").unwrap();
        assert_eq!(t % 1000, 655);
        assert_eq!(format_utc(t), "2009-02-06T12:14:14.655Z");
    }

    #[test]
    fn rfc3339_and_numbers() {
        let t = parse_rfc3339(b"2019-04-09T20:47:41Z").unwrap();
        assert_eq!(t, 1_554_842_861_000);
        assert_eq!(
            parse_rfc3339(b"2019-04-09T22:47:41.5+02:00").unwrap(),
            t + 500
        );
        assert_eq!(unix_integer_to_ms(1_554_842_861_000_000_000), Ok(t));
        assert_eq!(unix_integer_to_ms(1_554_842_861), Ok(t));
        assert_eq!(parse_any(b"1554842861.25", false).unwrap(), t + 250);
        assert_eq!(parse_any(b"42", true).unwrap(), 42);
        assert!(parse_any(b"yesterday", false).is_err());
        assert!(parse_clf_time(b"17/Mai/2015:10:05:03 +0000").is_err());
        assert!(parse_clf_time(b"17/May/2015:10:05").is_err());
    }
}
