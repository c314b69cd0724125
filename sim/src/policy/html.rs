//! The policy report as one self-contained HTML page (through the report kit): the trace and
//! store, the comparison table, the charts of each policy's worst moment and of its clients'
//! errors, the peaks in flight and the bad lines.

use std::fmt::Write;

use super::charts::{boundary_chart, client_error_chart, multiples_chart};
use super::report::Report;
use crate::report::html::{self, escape};
use crate::report::svg::color;
use crate::report::words::{format_text, human_bytes, span_text, window_text};

/// The concurrency policies' peaks in flight, one table each (nothing when there are none).
fn in_flight(o: &mut String, report: &Report) {
    for p in &report.policies {
        let Some(f) = &p.in_flight else { continue };
        let _ = write!(
            o,
            "<h2>Peak in flight — {}</h2><p class=\"meta\">Peak {} (limit {}); {} requests released after their duration, {} without one held their lease to the {} timeout. Exact reference: the requests really in flight by their durations, with no timeout.</p>",
            escape(&p.spec),
            f.peak_in_flight,
            p.limit,
            f.requests_with_duration,
            f.requests_without_duration,
            window_text(f.timeout_ms),
        );
        html::table_start(o, &["client", "peak in flight", "first at"]);
        for t in &f.top {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&t.client),
                t.peak,
                escape(&t.at_utc)
            );
        }
        o.push_str("</table>");
    }
}

/// Renders the report as one HTML document.
pub fn render(report: &Report) -> String {
    let t = &report.trace;
    let mut o = String::new();
    html::open(
        &mut o,
        "edgelimit sim report",
        "edgelimit sim — what each policy admits",
    );
    let span = span_text(t);
    let _ = write!(
        o,
        "<p class=\"meta\">Trace <b>{}</b> ({}, keyed by {}): {} requests from {} clients, {span}.</p>",
        escape(&t.name),
        format_text(t),
        escape(&t.key),
        t.events,
        t.clients
    );
    let _ = write!(
        o,
        "<p class=\"meta\">{} lines, {} bad. Reorder window {}: {} lines put back in time order, {} arrived later than that and were clamped. Decisions by <b>{}</b>{}, replayed in {} ms.</p>",
        t.lines,
        t.bad_lines,
        window_text(t.reorder.window_ms),
        t.reorder.reordered,
        t.reorder.late_clamped,
        escape(&report.store),
        report
            .store_mismatches
            .map_or(String::new(), |m| format!(" ({m} decisions differ from the library's steps)")),
        report.elapsed_ms
    );
    o.push_str("<h2>Policies compared</h2>");
    html::table_start(
        &mut o,
        &[
            "policy",
            "exact reference",
            "admitted",
            "denied",
            "max in window",
            "× limit",
            "false allows",
            "false denies",
            "wrongly allowed",
            "wrongly limited",
            "rate error",
            "keys",
            "state",
            "per key (max)",
        ],
    );
    for p in &report.policies {
        let _ = write!(
            o,
            "<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><b>{:.2}×</b></td><td>{}</td><td>{}</td><td>{:.3}%</td><td>{:.3}%</td><td>{}</td><td>{}</td><td>{}</td><td>{} B</td></tr>",
            color(&p.algorithm),
            escape(&p.spec),
            escape(&p.reference),
            p.admitted,
            p.denied,
            p.max_admitted_in_window,
            p.max_window_multiple,
            p.false_allows,
            p.false_denies,
            p.wrongly_allowed_pct,
            p.wrongly_limited_pct,
            p.rate_error_pct
                .map_or("—".into(), |e| format!("{e:.1}%")),
            p.keys,
            human_bytes(p.state_bytes),
            p.state_bytes_per_key_max
        );
    }
    o.push_str("</table>");
    o.push_str("<p class=\"note\"><b>max in window</b>: the most requests admitted for one client in any span of the exact reference's window (every start time, not only aligned windows). <b>false allows / denies</b>: requests the policy admitted that the exact sliding log denied, and the reverse, with the exact log replayed alongside as its own limiter. <b>wrongly allowed / limited</b>: those as a share of all requests (Cloudflare reported 0.003% wrongly allowed for its sliding counter). <b>rate error</b>: Σ|real − believed count in the window| / Σ real (Cloudflare: 6%), for the window algorithms. Buckets are held against B per B·W/L, the time they take to refill.</p>");
    in_flight(&mut o, report);
    o.push_str("<div class=\"grid\"><div>");
    o.push_str(&multiples_chart(&report.policies));
    o.push_str("</div><div class=\"note\" style=\"align-self:center\">A fixed window counts per aligned window, so a client can spend its whole limit at the end of one window and again at the start of the next: up to 2× the limit inside one window's span. The sliding log never exceeds 1×. The charts below show each policy's worst moment on this trace.</div></div>");
    if !report.boundaries.is_empty() {
        o.push_str("<h2>Admitted in the trailing window around each policy's worst moment</h2><div class=\"grid\">");
        for (s, p) in report
            .boundaries
            .iter()
            .zip(report.policies.iter().filter(|p| p.worst_window.is_some()))
        {
            let _ = write!(o, "<div>{}</div>", boundary_chart(s, &p.algorithm));
        }
        o.push_str("</div><p class=\"note\">Dotted verticals: the window edges a fixed window or sliding counter resets at (a calendar period's boundaries for a calendar fixed window). Grey: the exact sliding log on the same client's requests.</p>");
    }
    o.push_str("<h2>Per-client error against the exact log</h2><div class=\"grid\">");
    for p in &report.policies {
        let _ = write!(o, "<div>{}</div>", client_error_chart(p));
    }
    o.push_str("</div>");
    if !t.bad_samples.is_empty() {
        o.push_str("<h2>Bad lines</h2><ul>");
        for b in &t.bad_samples {
            let _ = write!(
                o,
                "<li>line {}: {}: {}</li>",
                b.line,
                b.field,
                escape(&b.problem)
            );
        }
        o.push_str("</ul>");
    }
    html::close(
        &mut o,
        report.version,
        " with the library's own algorithm steps",
    );
    o
}
