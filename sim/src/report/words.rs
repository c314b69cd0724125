//! Values in words, written alike in the terminal table and the HTML page.

use std::borrow::Cow;

use crate::readers::time::format_utc;
use crate::readers::ReadStats;

/// A window in words: `10s`, `1m`, `1500ms`.
pub fn window_text(ms: u64) -> String {
    edgelimit::policy::format_window(ms)
}

/// Bytes in KiB/MiB.
pub fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// The trace's span, `first → last` in UTC, or `-` for a trace with no event.
pub fn span_text(t: &ReadStats) -> String {
    match (t.first_ms, t.last_ms) {
        (Some(a), Some(b)) => format!("{} → {}", format_utc(a), format_utc(b)),
        _ => "-".into(),
    }
}

/// The trace's format (`clf`, `csv`, …), or `-` when nothing was read to tell.
pub fn format_text(t: &ReadStats) -> String {
    t.format.map_or("-".into(), |f| f.to_string())
}

/// `text` as it is when it has at most `max` characters; else its first `keep` and `…`. Long
/// names (user agents run to 150 characters) would widen a table or overrun a chart's margin.
pub fn fit(text: &str, max: usize, keep: usize) -> Cow<'_, str> {
    if text.chars().nth(max).is_none() {
        return text.into();
    }
    let mut cut: String = text.chars().take(keep).collect();
    cut.push('…');
    cut.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_to_its_first_characters() {
        assert_eq!(fit("abcdef", 6, 5), "abcdef");
        assert_eq!(fit("abcdefg", 6, 5), "abcde…");
        assert_eq!(fit("ü".repeat(8).as_str(), 4, 4), "üüüü…");
        assert_eq!(fit("", 0, 0), "");
    }
}
