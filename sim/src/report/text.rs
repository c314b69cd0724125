//! The terminal text: plain, aligned, and pasted into docs as it is — the trace's header lines
//! every report opens with, and tables whose columns line up.

use std::fmt::Write;

use super::words::{format_text, span_text};
use crate::readers::ReadStats;

/// The lines describing what was read: name, format, events, span, bad lines, reordering.
pub fn trace_header(t: &ReadStats) -> String {
    let mut out = String::new();
    let span = span_text(t);
    let _ = writeln!(
        out,
        "trace   {} ({}, key {})",
        t.name,
        format_text(t),
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
