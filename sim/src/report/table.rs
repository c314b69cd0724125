//! The terminal table: one row per policy, aligned, plain text (it is pasted into docs).

use std::fmt::Write;

use super::model::Report;
use crate::readers::time::format_utc;

/// The header lines describing the trace, then the table.
pub fn render(report: &Report) -> String {
    let t = &report.trace;
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
    let _ = writeln!(
        out,
        "        {} events from {} clients, {span}",
        t.events, t.clients
    );
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
    let rows: Vec<[String; 11]> = report
        .policies
        .iter()
        .map(|p| {
            [
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
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([header[i].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[&str]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = widths[i] - c.chars().count();
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
    let _ = writeln!(out, "{}", line(&header));
    for r in &rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        let _ = writeln!(out, "{}", line(&cells));
    }
    let _ = writeln!(
        out,
        "\nmax/window: most admitted for one client in any span of the exact log's window; \
         false allow/deny: against that exact sliding log, replayed alongside."
    );
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
