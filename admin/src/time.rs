//! Epoch milliseconds for people: `2026-11-23T14:18:00.412Z` and `in 1h 5m`. (A date library for
//! two functions would be the larger thing to read.)

/// An epoch-ms instant as RFC 3339 UTC, with milliseconds when they are not zero.
pub fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    let (h, m, s) = (rest / 3600, rest % 3600 / 60, rest % 60);
    let millis = ms % 1000;
    if millis == 0 {
        format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}Z")
    } else {
        format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{millis:03}Z")
    }
}

/// A duration in its two largest units: `0ms`, `850ms`, `12.5s`, `3m 20s`, `2h 5m`, `7d 0h`.
pub fn span(ms: u64) -> String {
    const S: u64 = 1000;
    const M: u64 = 60 * S;
    const H: u64 = 60 * M;
    const D: u64 = 24 * H;
    match ms {
        0..S => format!("{ms}ms"),
        S..M if ms.is_multiple_of(S) => format!("{}s", ms / S),
        S..M => format!("{}.{}s", ms / S, ms % S / 100),
        M..H => format!("{}m {}s", ms / M, ms % M / S),
        H..D => format!("{}h {}m", ms / H, ms % H / M),
        _ => format!("{}d {}h", ms / D, ms % D / H),
    }
}

/// `instant` seen from `now`: `2026-11-23T15:18:00Z (in 1h 0m)`, or `(… ago)` once past.
pub fn relative(instant: u64, now: u64) -> String {
    if instant >= now {
        format!("{} (in {})", rfc3339(instant), span(instant - now))
    } else {
        format!("{} ({} ago)", rfc3339(instant), span(now - instant))
    }
}

/// Howard Hinnant's `civil_from_days`: days since 1970-01-01 → (year, month, day), proleptic
/// Gregorian.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_print_as_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        // `date -u -d @1700000000`: Tue Nov 14 22:13:20 UTC 2023.
        assert_eq!(rfc3339(1_700_000_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(1_700_000_000_042), "2023-11-14T22:13:20.042Z");
        // A leap day, and the last millisecond of a year.
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_735_689_599_999), "2024-12-31T23:59:59.999Z");
    }

    #[test]
    fn spans_keep_two_units() {
        assert_eq!(span(0), "0ms");
        assert_eq!(span(850), "850ms");
        assert_eq!(span(30_000), "30s");
        assert_eq!(span(12_500), "12.5s");
        assert_eq!(span(200_000), "3m 20s");
        assert_eq!(span(7_500_000), "2h 5m");
        assert_eq!(span(7 * 86_400_000), "7d 0h");
        assert_eq!(relative(1_000, 0), "1970-01-01T00:00:01Z (in 1s)");
        assert_eq!(relative(0, 1_000), "1970-01-01T00:00:00Z (1s ago)");
    }
}
