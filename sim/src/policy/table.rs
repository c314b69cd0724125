//! The policy report as terminal text (through the report kit): the trace, the store, one row
//! per policy, and the peaks in flight of concurrency policies.

use std::fmt::Write;

use super::report::Report;
use crate::report::text::{aligned, trace_header};
use crate::report::words::human_bytes;

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
