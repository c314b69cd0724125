//! The suggest report as terminal text: the trace, the target, then one row per algorithm and
//! window — the suggestion, what it denied, what one less denied, and the most it let one
//! client send in a window —, the clients' peak rates per window with the suggestion beside them,
//! and the configuration to paste with the command that replays it.

use std::fmt::Write;

use super::report::SuggestReport;
use super::target::By;
use crate::report::text::{aligned, trace_header};

/// `n` of `total` as `n (p%)`.
fn share(n: u64, total: u64) -> String {
    if total == 0 {
        return n.to_string();
    }
    format!("{n} ({:.2}%)", n as f64 * 100.0 / total as f64)
}

/// Renders the report as text.
pub fn render(report: &SuggestReport) -> String {
    let mut out = trace_header(&report.trace);
    let _ = writeln!(
        out,
        "target  at most {} of {}",
        report.spare,
        match report.by {
            By::Clients => "clients denied at least once",
            By::Requests => "requests denied",
        }
    );
    out.push('\n');
    let config = report.config.is_some();
    let mut header = vec![];
    if config {
        header.push("limit");
    }
    header.extend([
        "algorithm",
        "window",
        "suggested policy",
        "clients denied",
        "requests denied",
        "×limit",
        "one less",
        "its clients",
        "its requests",
    ]);
    let rows: Vec<Vec<String>> = report
        .suggestions
        .iter()
        .map(|s| {
            let mut row = Vec::new();
            if config {
                row.push(s.limit.clone().unwrap_or_default());
            }
            row.push(s.algorithm.clone());
            row.push(s.window.clone());
            match (&s.policy, s.clients_denied, s.requests_denied) {
                (Some(p), Some(c), Some(r)) => {
                    row.push(p.clone());
                    row.push(share(c, s.clients));
                    row.push(share(r, s.requests));
                    row.push(format!("{:.2}", s.max_window_multiple.unwrap_or(0.0)));
                }
                _ => {
                    row.push("none within the library's largest limit".into());
                    row.extend(["—", "—", "—"].map(String::from));
                }
            }
            match &s.one_less {
                Some(l) => {
                    row.push(l.policy.clone());
                    row.push(share(l.clients_denied, s.clients));
                    row.push(share(l.requests_denied, s.requests));
                }
                None => row.extend(["—", "—", "—"].map(String::from)),
            }
            row
        })
        .collect();
    out.push_str(&aligned(&header, &rows));
    out.push_str(
        "\n×limit: the most one client got admitted in any span of the window, over the limit \
         (above 1: across a window boundary, or a bucket's burst).\n",
    );
    out.push('\n');
    out.push_str(&peaks(report));
    if let Some(file) = &report.config {
        out.push_str("\nto paste, per limit (its own algorithm and window):\n");
        for s in &report.suggestions {
            if let (Some(limit), Some(line)) = (&s.limit, s.config_line()) {
                let _ = writeln!(out, "  {limit} (rules {}): {line}", s.rules.join(", "));
            }
        }
        let _ = writeln!(
            out,
            "replay with them pasted: {}",
            report.replay_command(file)
        );
    } else if let Some(block) = &report.configuration {
        out.push_str(
            "\nto paste into wrangler.toml: in shadow first, then each limit in an enforcing rule with enforce = \"10%\", then 100%\n\n",
        );
        out.push_str(block);
        out.push('\n');
        let _ = match &report.configuration_file {
            Some(file) => writeln!(
                out,
                "written to {file}; replay it: {}",
                report.replay_command(file)
            ),
            None => writeln!(
                out,
                "replay it, saved as suggested.toml (--write-config FILE writes it): {}",
                report.replay_command("suggested.toml")
            ),
        };
    }
    out
}

/// The clients' peak rates per window: how many clients, the percentiles of their peaks, and
/// the suggestion drawn against them.
fn peaks(report: &SuggestReport) -> String {
    let config = report.config.is_some();
    let mut header = vec![];
    if config {
        header.push("limit");
    }
    header.extend([
        "window",
        "clients",
        "p50",
        "p90",
        "p99",
        "max",
        "suggested",
        "clients above it",
    ]);
    let rows: Vec<Vec<String>> = report
        .peaks
        .iter()
        .map(|p| {
            let mut row = Vec::new();
            if config {
                row.push(p.limit.clone().unwrap_or_default());
            }
            row.push(p.window.clone());
            row.push(p.clients.to_string());
            if p.clients == 0 {
                row.extend(["—", "—", "—", "—"].map(String::from));
            } else {
                row.extend([p.p50, p.p90, p.p99, p.max].map(|v| v.to_string()));
            }
            row.push(p.suggested.clone().unwrap_or_else(|| "—".into()));
            row.push(
                p.clients_above
                    .map_or_else(|| "—".into(), |c| share(c, p.clients)),
            );
            row
        })
        .collect();
    let mut out = String::from(
        "clients' peak rates: the most one client sent in any span of the window (percentiles by nearest rank)\n",
    );
    out.push_str(&aligned(&header, &rows));
    out
}
