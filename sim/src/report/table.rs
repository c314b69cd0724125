//! The terminal table: one row per policy, aligned, plain text (it is pasted into docs).

use std::fmt::Write;

use super::model::Report;
use crate::readers::time::format_utc;
use crate::readers::ReadStats;

/// The header lines describing the trace, then the table.
pub fn render(report: &Report) -> String {
    let mut out = trace_header(&report.trace);
    let store = match report.store_mismatches {
        Some(m) => format!(
            "{} ({m} decisions differ from the library's steps)",
            report.store
        ),
        None => report.store.clone(),
    };
    let _ = writeln!(
        out,
        "store   {store}; replayed in {} ms\n",
        report.elapsed_ms
    );
    let header = [
        "policy",
        "admitted",
        "denied",
        "max/window",
        "×limit",
        "false allow",
        "false deny",
        "wrongly allowed",
        "wrongly limited",
        "rate error",
        "state",
    ];
    let rows: Vec<Vec<String>> = report
        .policies
        .iter()
        .map(|p| {
            vec![
                p.spec.clone(),
                p.admitted.to_string(),
                p.denied.to_string(),
                p.max_admitted_in_window.to_string(),
                format!("{:.2}×", p.max_window_multiple),
                p.false_allows.to_string(),
                p.false_denies.to_string(),
                format!("{:.3}%", p.wrongly_allowed_pct),
                format!("{:.3}%", p.wrongly_limited_pct),
                p.rate_error_pct.map_or("-".into(), |e| format!("{e:.1}%")),
                human_bytes(p.state_bytes),
            ]
        })
        .collect();
    out.push_str(&aligned(&header, &rows));
    let _ = writeln!(
        out,
        "\nmax/window: most admitted for one client in any span of the exact log's window; \
         false allow/deny: against that exact sliding log, replayed alongside."
    );
    for p in &report.policies {
        let Some(f) = &p.in_flight else { continue };
        let _ = writeln!(
            out,
            "\n{}: peak in flight {} (limit {}); {} requests released after their duration, {} \
             without one held their lease to the timeout; held against the exact in-flight \
             count (durations, no timeout)",
            p.spec,
            f.peak_in_flight,
            p.limit,
            f.requests_with_duration,
            f.requests_without_duration
        );
        let rows: Vec<Vec<String>> = f
            .top
            .iter()
            .map(|t| vec![t.client.clone(), t.peak.to_string(), t.at_utc.clone()])
            .collect();
        if !rows.is_empty() {
            out.push_str(&aligned(&["client", "peak in flight", "first at"], &rows));
        }
    }
    out
}

/// The lines describing what was read: name, format, events, span, bad lines, reordering.
pub fn trace_header(t: &ReadStats) -> String {
    let mut out = String::new();
    let span = match (t.first_ms, t.last_ms) {
        (Some(a), Some(b)) => format!("{} → {}", format_utc(a), format_utc(b)),
        _ => "-".into(),
    };
    let _ = writeln!(
        out,
        "trace   {} ({}, key {})",
        t.name,
        t.format.map_or("-".into(), |f| f.to_string()),
        t.key
    );
    let _ = match t.clients {
        0 => writeln!(out, "        {} events, {span}", t.events),
        clients => writeln!(
            out,
            "        {} events from {clients} clients, {span}",
            t.events
        ),
    };
    let _ = writeln!(
        out,
        "        {} lines, {} bad; reorder window {} ms: {} reordered, {} beyond it (clamped)",
        t.lines, t.bad_lines, t.reorder.window_ms, t.reorder.reordered, t.reorder.late_clamped
    );
    for b in &t.bad_samples {
        let _ = writeln!(
            out,
            "        bad line {}: {}: {}",
            b.line, b.field, b.problem
        );
    }
    out
}

/// Rows under a header, columns aligned: the first to the left, the others to the right.
pub fn aligned(header: &[&str], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .chain([header[i].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::new();
        for (i, c) in cells.enumerate() {
            let pad = widths
                .get(i)
                .copied()
                .unwrap_or(0)
                .saturating_sub(c.chars().count());
            if i == 0 {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str("  ");
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            }
        }
        s.trim_end().to_string()
    };
    let mut out = line(&mut header.iter().copied());
    out.push('\n');
    for r in rows {
        out.push_str(&line(&mut r.iter().map(String::as_str)));
        out.push('\n');
    }
    out
}

/// Bytes in KiB/MiB.
pub fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}
