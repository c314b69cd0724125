//! The configuration report as one self-contained HTML page (through the report kit): totals, and
//! per rule a chart of its requests over time (admitted and denied) beside the table of its
//! limits; then what-if, outages and the comparison with the Worker's log when there are any.

use std::fmt::Write;

use super::report::{ConfigReport, GlobalReport, RuleReport};
use super::series::Series;
use crate::readers::time::format_utc;
use crate::report::html::{self, escape};
use crate::report::svg::{self, ticks, Frame, ADMITTED, DENIED};
use crate::report::words::{format_text, window_text};

/// The size and margins of a rule's chart.
const FRAME: Frame = Frame {
    w: 560.0,
    h: 230.0,
    left: 48.0,
    right: 12.0,
    top: 36.0,
    bottom: 40.0,
    ymax: 1.0,
};

/// Admitted (green) and denied (red) requests of one rule per bucket, stacked.
fn rule_chart(rule: &RuleReport, series: &Series, counts: &[[u64; 2]]) -> String {
    let peak = counts.iter().map(|c| c[0] + c[1]).max().unwrap_or(0);
    let yt = ticks(peak as f64 * 1.1);
    let f = Frame {
        ymax: *yt.last().unwrap_or(&1.0),
        ..FRAME
    };
    let n = counts.len().max(1) as f64;
    let bar = f.plot_width() / n;
    let y = |c: f64| f.y(c);
    let mut o = String::new();
    f.open(
        &mut o,
        &format!(
            "{}{}",
            escape(&rule.name),
            if rule.shadow { " (shadow)" } else { "" }
        ),
        &format!(
            r#"requests per {} · <tspan fill="{ADMITTED}">■ {}</tspan> <tspan fill="{DENIED}">■ {}</tspan>"#,
            window_text(series.bucket_ms.max(1)),
            if rule.shadow {
                "would admit"
            } else {
                "admitted"
            },
            if rule.shadow { "would deny" } else { "denied" },
        ),
    );
    f.y_grid(&mut o, &yt);
    for (i, c) in counts.iter().enumerate() {
        let x = f.left + i as f64 * bar;
        let (ok, denied) = (c[0] as f64, c[1] as f64);
        let w = (bar - 0.5).max(0.5);
        let _ = write!(
            o,
            r#"<rect x="{x:.1}" y="{:.1}" width="{w:.1}" height="{:.1}" fill="{ADMITTED}"/><rect x="{x:.1}" y="{:.1}" width="{w:.1}" height="{:.1}" fill="{DENIED}"/>"#,
            y(ok),
            y(0.0) - y(ok),
            y(ok + denied),
            y(ok) - y(ok + denied),
        );
    }
    let span = series.bucket_ms * counts.len() as u64;
    for i in 0..=2u64 {
        let t = series.start_ms + span * i / 2;
        let anchor = ["start", "middle", "end"][i as usize];
        let _ = write!(
            o,
            r##"<text x="{:.1}" y="{}" text-anchor="{anchor}" fill="#666">{}</text>"##,
            f.left + f.plot_width() * i as f64 / 2.0,
            f.h - 14.0,
            &format_utc(t)[..19]
        );
    }
    svg::close(&mut o);
    o
}

fn limits_table(rule: &RuleReport) -> String {
    let mut o = String::new();
    html::table_start(
        &mut o,
        &[
            "limit",
            "policy",
            "identifier",
            "decided",
            "denied",
            "429s",
            "missing",
            "max in window",
            "× limit",
            "false allows",
            "false denies",
            "most limited",
        ],
    );
    for l in &rule.limits {
        let b = &l.boundary;
        let top: Vec<String> = l
            .top_identifiers
            .iter()
            .take(3)
            .map(|t| format!("{} ({})", escape(&t.identifier), t.denied))
            .collect();
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><b>{:.2}×</b></td><td>{}</td><td>{}</td><td style=\"text-align:left\">{}</td></tr>",
            escape(&l.name),
            escape(&l.policy),
            escape(&l.identifier),
            l.checked,
            l.denied,
            l.answered,
            l.missing,
            b.max_admitted_in_window,
            b.max_window_multiple,
            b.false_allows,
            b.false_denies,
            top.join(", ")
        );
    }
    o.push_str("</table>");
    for l in &rule.limits {
        let Some(f) = &l.boundary.in_flight else {
            continue;
        };
        let peaks: Vec<String> = f
            .top_peaks
            .iter()
            .map(|p| format!("{} ({})", escape(&p.identifier), p.peak))
            .collect();
        let _ = write!(
            o,
            "<p class=\"note\"><b>{}</b> is a concurrency limit: max in window is its peak in flight, false allows and denies are against the exact in-flight count (each request in flight for its duration, no timeout). {} requests released after their duration, {} without one held their lease to the timeout. Highest peaks: {}.</p>",
            escape(&l.name),
            f.requests_with_duration,
            f.requests_without_duration,
            if peaks.is_empty() { "—".to_string() } else { peaks.join(", ") }
        );
    }
    o
}

/// The global limits decided in their regions against the exact reference: per limit, per
/// region, and what the round trips add.
fn global_section(o: &mut String, g: &GlobalReport) {
    let _ = write!(
        o,
        "<h2>Global limits in {} regions</h2><p class=\"meta\">Static share {:.1}%, bucket leases {} ms, local round trip {} ms. {} requests: {} admitted in the regions, {} by the exact reference on one store; <b>{}</b> falsely denied, {} over admitted; {:.1}% waited for the home; {:.3} home round trips per request; {:.3} script calls per request, an estimated {} commands per million requests (one store deciding every request: a million); added latency p50 {} ms, p99 {} ms.</p>",
        g.regions.len(),
        g.static_share_ppm as f64 / 10_000.0,
        g.lease_ms,
        g.local_round_trip_ms,
        g.requests,
        g.admitted,
        g.admitted_exact,
        g.false_denied,
        g.over_admitted,
        100.0 * g.waited_share,
        g.home_round_trips_per_request,
        g.script_calls_per_request,
        g.commands_per_million_requests,
        g.latency.p50_ms,
        g.latency.p99_ms
    );
    html::table_start(
        o,
        &[
            "limit",
            "policy",
            "scope",
            "requests",
            "admitted",
            "exact",
            "false denied",
            "over admitted",
            "max/window",
            "waited",
        ],
    );
    for l in &g.limits {
        let window = match (l.max_admitted_in_window, l.limit) {
            (Some(max), Some(limit)) => format!("{max}/{limit}"),
            _ => "—".to_string(),
        };
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}%</td></tr>",
            escape(&l.name),
            escape(&l.policy),
            l.scope,
            l.requests,
            l.admitted,
            l.admitted_exact,
            l.false_denied,
            l.over_admitted,
            window,
            100.0 * l.waited_share
        );
    }
    o.push_str("</table>");
    html::table_start(
        o,
        &[
            "region",
            "home round trip ms",
            "requests",
            "admitted",
            "exact",
            "false denied",
            "waited",
            "home trips/req",
            "calls/req",
            "leased",
            "p50 ms",
            "p99 ms",
        ],
    );
    for r in &g.regions {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}%</td><td>{:.3}</td><td>{:.3}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&r.name),
            r.home_round_trip_ms,
            r.requests,
            r.admitted,
            r.admitted_exact,
            r.false_denied,
            100.0 * r.waited_share,
            r.home_round_trips_per_request,
            r.script_calls_per_request,
            r.leased,
            r.latency.p50_ms,
            r.latency.p99_ms
        );
    }
    o.push_str("</table><p class=\"note\"><b>false denied</b>: admitted by the exact reference, refused in the regions. <b>over admitted</b>: the reverse — an earlier false denial leaves capacity a later request takes; <b>max/window</b> is the bound: a fixed window's most admitted for one identifier across the regions, never above its limit.</p>");
}

/// Renders the report as one HTML document.
pub fn render(report: &ConfigReport) -> String {
    let t = &report.trace;
    let mut o = String::new();
    html::open(
        &mut o,
        "edgelimit sim: what the configuration did",
        &format!("What {} would have done", escape(&report.config)),
    );
    let _ = write!(
        o,
        "<p class=\"meta\">Trace <b>{}</b> ({}): {} requests, {} lines, {} bad. Replayed through the Worker's own rules, identifiers and answers, one isolate, in {} ms.</p>",
        escape(&t.name),
        format_text(t),
        report.requests,
        t.lines,
        t.bad_lines,
        report.elapsed_ms
    );
    let statuses: Vec<String> = report
        .statuses
        .iter()
        .map(|(s, n)| format!("{s}: {n}"))
        .collect();
    let _ = write!(
        o,
        "<p class=\"meta\"><b>{}</b> forwarded, <b>{}</b> refused ({}); {} matched no enforced rule; {} lacked an identifier; shadow rules would have refused {}.</p>",
        report.admitted,
        report.denied,
        escape(&statuses.join(", ")),
        report.unmatched,
        report.missing_identifiers,
        report.shadow_would_deny
    );
    if let Some(exceeding) = &report.exceeding {
        let waits = exceeding.waits_ms.as_ref().map_or(String::new(), |w| {
            format!(
                " (waits: mean {:.0} ms, p50 {} ms, p90 {} ms, p99 {} ms, max {} ms)",
                w.mean, w.p50, w.p90, w.p99, w.max
            )
        });
        let _ = write!(
            o,
            "<p class=\"meta\">Soft limits tagged <b>{}</b> forwarded requests for the origin; staged limits would have refused <b>{}</b> more; blocks refused <b>{}</b>; <b>{}</b> requests waited{}.</p>",
            exceeding.soft_tagged,
            exceeding.staged_shadow_denied,
            exceeding.blocked,
            exceeding.delayed,
            escape(&waits)
        );
    }
    if let Some(applied) = &report.overrides {
        let _ = write!(
            o,
            "<p class=\"meta\">Overrides <b>{}</b>: {}, applied at the first request.</p>",
            escape(&applied.file),
            escape(&applied.summary())
        );
    }
    for (i, rule) in report.rules.iter().enumerate() {
        // Said only when lists settled some of its requests, as in the table.
        let lists = if rule.listed + rule.allowlisted > 0 {
            format!(
                " ({} by a deny list, {} exempted by an allow list)",
                rule.listed, rule.allowlisted
            )
        } else {
            String::new()
        };
        let _ = write!(
            o,
            "<h2>{}{} — {} matched, {} admitted, {} denied{lists}</h2><div class=\"grid\"><div>{}</div><div>{}</div></div>",
            escape(&rule.name),
            if rule.shadow { " (shadow)" } else { "" },
            rule.matched,
            rule.admitted,
            rule.denied,
            rule_chart(rule, &report.series, report.series.rules.get(i).map_or(&[][..], |c| &c[..])),
            limits_table(rule)
        );
    }
    o.push_str("<p class=\"note\"><b>denied</b> (a limit): requests it alone would not have admitted — its own denials and refusals for a missing identifier. <b>429s</b>: refusals whose answer named it. <b>max in window</b>, <b>false allows / denies</b>: against the exact sliding log of the limit's reference, replayed alongside per identifier, as for <code>--policy</code>.</p>");
    if let Some(w) = &report.whatif {
        let _ = write!(
            o,
            "<h2>What changes from {}</h2><p class=\"meta\">{} requests forwarded before are refused now; {} refused before are forwarded now.</p>",
            escape(&w.baseline),
            w.newly_denied,
            w.newly_admitted
        );
        html::table_start(
            &mut o,
            &[
                "rule",
                "matched",
                "200 → refused",
                "refused → 200",
                "most affected",
            ],
        );
        for r in &w.rules {
            let affected: Vec<String> = r
                .top_identifiers
                .iter()
                .map(|a| {
                    format!(
                        "{} (+{}/−{})",
                        escape(&a.identifier),
                        a.newly_denied,
                        a.newly_admitted
                    )
                })
                .collect();
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td style=\"text-align:left\">{}</td></tr>",
                escape(&r.name),
                r.matched,
                r.newly_denied,
                r.newly_admitted,
                affected.join(", ")
            );
        }
        o.push_str("</table>");
    }
    if let Some(g) = &report.global {
        global_section(&mut o, g);
    }
    if let Some(out) = &report.outage {
        let _ = write!(
            o,
            "<h2>Outages</h2><p class=\"meta\">{} requests while the store was down: {} answered 503, {} limit decisions failed open, {} made by the fallback.</p>",
            out.requests, out.failed_closed, out.failed_open, out.fallback_decisions
        );
    }
    if let Some(a) = &report.against_log {
        let _ = write!(
            o,
            "<h2>Against the Worker's log</h2><p class=\"meta\">{} requests compared, {} differ ({} in status).</p><ul>",
            a.compared, a.mismatches, a.status_mismatches
        );
        for s in &a.samples {
            let _ = write!(o, "<li>{}</li>", escape(s));
        }
        o.push_str("</ul>");
    }
    html::close(&mut o, report.version, "");
    o
}
