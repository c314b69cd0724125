//! The suggest report as one self-contained HTML page (through the report kit): the table of
//! suggestions; per stream and window, the clients' peak rates with the suggested limit drawn
//! across them, and the curve of clients denied against the limit for each algorithm with its
//! suggestion marked; and the configuration to paste.

use std::fmt::Write;

use super::peaks::PeakRates;
use super::report::{SuggestReport, Suggestion};
use crate::report::html::{self, escape};
use crate::report::svg::{self, color, ADMITTED, DENIED};
use crate::report::words::{format_text, span_text};

/// The chart's size and margins.
const W: f64 = 820.0;
const H: f64 = 380.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 220.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 40.0;

/// Each line's dashes, so that algorithms deciding alike (their lines on top of each other)
/// still show.
const DASHES: [&str; 5] = ["none", "7 3", "2 2", "9 3 2 3", "4 4"];

/// A value on a log axis from 1 to `max` (0 drawn at the axis, as 1 would be).
fn log_position(value: f64, max: f64) -> f64 {
    (1.0 + value).log10() / (1.0 + max).log10().max(1e-9)
}

/// Powers of ten up to `max`: a log axis' ticks.
fn decades(max: f64) -> Vec<f64> {
    let mut v = vec![1.0];
    while *v.last().unwrap_or(&1.0) * 10.0 <= max {
        let next = v.last().unwrap_or(&1.0) * 10.0;
        v.push(next);
    }
    v
}

/// A log–log chart's grid: a line and a label at each decade of either axis (`x` and `y` place
/// a value), and the horizontal axis's `label`.
fn log_grid(
    o: &mut String,
    (max_x, x): (f64, &dyn Fn(f64) -> f64),
    (max_y, y): (f64, &dyn Fn(f64) -> f64),
    label: &str,
) {
    for t in decades(max_y) {
        let yy = y(t);
        let _ = write!(
            o,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#666">{t}</text>"##,
            W - RIGHT,
            LEFT - 4.0,
            yy + 3.5
        );
    }
    for t in decades(max_x) {
        let xx = x(t);
        let _ = write!(
            o,
            r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{TOP}" y2="{:.1}" stroke="#eee"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle" fill="#666">{t}</text>"##,
            H - BOTTOM,
            H - BOTTOM + 14.0
        );
    }
    let _ = write!(
        o,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#555">{label}</text>"##,
        LEFT + (W - LEFT - RIGHT) / 2.0,
        H - 8.0
    );
}

/// One chart: clients denied against the limit, one step line per suggestion of the group
/// (one stream and window), the suggestion marked by a dot.
fn curve_chart(o: &mut String, title: &str, group: &[&Suggestion]) {
    let max_limit = group
        .iter()
        .flat_map(|s| s.curve.iter().map(|p| p.limit).chain(s.suggested_limit))
        .max()
        .unwrap_or(1)
        .max(2) as f64
        * 1.5;
    let max_denied = group.iter().map(|s| s.clients).max().unwrap_or(1).max(1) as f64;
    let x = |limit: f64| LEFT + log_position(limit, max_limit) * (W - LEFT - RIGHT);
    let y = |denied: f64| TOP + (1.0 - log_position(denied, max_denied)) * (H - TOP - BOTTOM);
    svg::open(o, W, H, 11);
    svg::title(o, LEFT, 14.0, &escape(title));
    svg::subtitle(
        o,
        LEFT,
        "clients denied at least once (log) against the limit (log; buckets: burst = limit)",
    );
    log_grid(o, (max_limit, &x), (max_denied, &y), "limit per window");
    for (i, s) in group.iter().enumerate() {
        let c = color(&s.algorithm);
        let mut path = String::new();
        let mut last: Option<f64> = None;
        for p in &s.curve {
            let (xx, yy) = (x(p.limit as f64), y(p.clients_denied as f64));
            match last {
                None => {
                    let _ = write!(path, "M{xx:.1},{yy:.1}");
                }
                Some(prev) => {
                    let _ = write!(path, " H{xx:.1} V{yy:.1}");
                    let _ = prev;
                }
            }
            last = Some(yy);
        }
        if last.is_some() {
            let _ = write!(path, " H{:.1}", x(max_limit));
        }
        let _ = write!(
            o,
            r#"<path d="{path}" fill="none" stroke="{c}" stroke-width="1.6" stroke-dasharray="{}"/>"#,
            DASHES[i % DASHES.len()]
        );
        if let (Some(limit), Some(denied)) = (s.suggested_limit, s.clients_denied) {
            let _ = write!(
                o,
                r#"<circle cx="{:.1}" cy="{:.1}" r="4.5" fill="{c}" stroke="white"><title>{}: {} clients denied</title></circle>"#,
                x(limit as f64),
                y(denied as f64),
                escape(s.policy.as_deref().unwrap_or("")),
                denied
            );
        }
        let ly = TOP + 8.0 + 16.0 * i as f64;
        let _ = write!(
            o,
            r#"<rect x="{:.1}" y="{:.1}" width="10" height="10" fill="{c}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            W - RIGHT + 10.0,
            ly - 9.0,
            W - RIGHT + 24.0,
            ly,
            escape(s.policy.as_deref().unwrap_or(&s.algorithm))
        );
    }
    svg::close(o);
}

/// One chart of the clients' peak rates at a window: a bar per peak reached, as high as the
/// clients that reached it (both axes log), green up to the suggested limit and red beyond it,
/// the limit a dashed line and the percentiles dotted lines.
fn peak_chart(o: &mut String, title: &str, p: &PeakRates) {
    let max_peak = (p.max.max(p.suggested_limit.unwrap_or(0)).max(2) as f64) * 1.5;
    let max_clients = p
        .distribution
        .iter()
        .map(|d| d.clients)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let x = |peak: f64| LEFT + log_position(peak, max_peak) * (W - LEFT - RIGHT);
    let y = |clients: f64| TOP + (1.0 - log_position(clients, max_clients)) * (H - TOP - BOTTOM);
    svg::open(o, W, H, 11);
    svg::title(o, LEFT, 14.0, &escape(title));
    svg::subtitle(
        o,
        LEFT,
        "clients (log) by their peak: the most sent in any span of the window (log)",
    );
    log_grid(o, (max_peak, &x), (max_clients, &y), "peak per window");
    let base = H - BOTTOM;
    for d in &p.distribution {
        let over = p.suggested_limit.is_some_and(|l| d.peak > l);
        let _ = write!(
            o,
            r#"<line x1="{xx:.1}" x2="{xx:.1}" y1="{base:.1}" y2="{:.1}" stroke="{}" stroke-width="2.5"><title>peak {}: {} clients</title></line>"#,
            y(d.clients as f64).min(base - 1.5),
            if over { DENIED } else { ADMITTED },
            d.peak,
            d.clients,
            xx = x(d.peak as f64),
        );
    }
    for (row, (label, value)) in [("p50", p.p50), ("p90", p.p90), ("p99", p.p99)]
        .into_iter()
        .enumerate()
    {
        let xx = x(value as f64);
        let _ = write!(
            o,
            r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{TOP}" y2="{base:.1}" stroke="#888" stroke-dasharray="1 3"/><text x="{:.1}" y="{:.1}" fill="#555">{label}</text>"##,
            xx + 3.0,
            TOP + 24.0 + 12.0 * row as f64
        );
    }
    let clients = |n: u64| format!("{n} client{}", if n == 1 { "" } else { "s" });
    let mut legend = vec![
        clients(p.clients),
        format!("p50 {} · p90 {} · p99 {}", p.p50, p.p90, p.p99),
        format!("max {}", p.max),
    ];
    if let (Some(policy), Some(limit)) = (&p.suggested, p.suggested_limit) {
        let xx = x(limit as f64);
        let _ = write!(
            o,
            r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{TOP}" y2="{base:.1}" stroke="#222" stroke-width="1.4" stroke-dasharray="6 3"><title>{}</title></line><text x="{:.1}" y="{:.1}" fill="#222">{}</text>"##,
            escape(policy),
            xx + 4.0,
            TOP + 10.0,
            limit
        );
        legend.push(format!("suggested: {policy}"));
        legend.push(format!(
            "{} above it",
            clients(p.clients_above.unwrap_or(0))
        ));
    }
    for (i, line) in legend.iter().enumerate() {
        let _ = write!(
            o,
            r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
            W - RIGHT + 10.0,
            TOP + 8.0 + 16.0 * i as f64,
            escape(line)
        );
    }
    svg::close(o);
}

/// The peak-rate charts, one per stream and window, and the configuration to paste.
fn peak_rates(o: &mut String, report: &SuggestReport) {
    o.push_str("<h2>Clients' peak rates</h2>");
    let _ = write!(
        o,
        "<p class=\"note\">Each bar is the clients whose peak — the most they sent in any span of the window — is that value; green up to the suggested limit, red above it (the clients {}). The dotted lines are the 50th, 90th and 99th percentiles (nearest rank), the dashed one the suggested limit.</p>",
        if report.config.is_some() {
            "a sliding log at that limit would deny; the limit's own algorithm counts otherwise"
        } else {
            "the sliding log at that limit denies"
        }
    );
    for p in &report.peaks {
        let title = match &p.limit {
            Some(l) => format!("limit {l}, {} window", p.window),
            None => format!("{} window", p.window),
        };
        o.push_str("<div>");
        peak_chart(o, &title, p);
        o.push_str("</div>");
    }
    if let Some(block) = &report.configuration {
        let file = report
            .configuration_file
            .as_deref()
            .unwrap_or("suggested.toml");
        let _ = write!(
            o,
            "<h2>To paste into wrangler.toml</h2><p class=\"note\">In shadow first: decided and reported, never refusing; then <code>enforce = \"10%\"</code> in an enforcing rule, then 100%. Replay it, saved as {}: <code>{}</code></p><pre>{}</pre>",
            escape(file),
            escape(&report.replay_command(file)),
            escape(block)
        );
    }
}

/// The table of suggestions.
fn suggestions_table(o: &mut String, report: &SuggestReport) {
    let config = report.config.is_some();
    let header = [
        "limit",
        "algorithm",
        "window",
        "suggested policy",
        "clients denied",
        "requests denied",
        "×limit",
        "one less",
        "its clients",
        "its requests",
    ];
    html::table_start(o, &header[usize::from(!config)..]);
    for s in &report.suggestions {
        let dash = || "—".to_string();
        let (lp, lc, lr) = match &s.one_less {
            Some(l) => (
                escape(&l.policy),
                l.clients_denied.to_string(),
                l.requests_denied.to_string(),
            ),
            None => (dash(), dash(), dash()),
        };
        let _ = write!(
            o,
            "<tr>{}<td>{}</td><td>{}</td><td><b>{}</b></td><td>{}</td><td>{}</td><td>{}</td><td>{lp}</td><td>{lc}</td><td>{lr}</td></tr>",
            match &s.limit {
                Some(l) => format!("<td>{}</td>", escape(l)),
                None => String::new(),
            },
            escape(&s.algorithm),
            escape(&s.window),
            escape(s.policy.as_deref().unwrap_or("none")),
            s.clients_denied.map_or_else(dash, |v| v.to_string()),
            s.requests_denied.map_or_else(dash, |v| v.to_string()),
            s.max_window_multiple.map_or_else(dash, |v| format!("{v:.2}")),
        );
    }
    o.push_str("</table>");
}

/// The curves, one chart per stream and window.
fn curves(o: &mut String, report: &SuggestReport) {
    let mut groups: Vec<(String, Vec<&Suggestion>)> = Vec::new();
    for s in &report.suggestions {
        let key = match &s.limit {
            Some(l) => format!("limit {l}, {} window", s.window),
            None => format!("{} window", s.window),
        };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => g.push(s),
            None => groups.push((key, vec![s])),
        }
    }
    o.push_str("<h2>Clients denied against the limit</h2>");
    o.push_str("<p class=\"note\">Each line is one algorithm: how many clients its policy at that limit would have denied at least once (the buckets with a burst equal to the limit). The dot is the suggestion.</p>");
    for (title, group) in &groups {
        o.push_str("<div>");
        curve_chart(o, title, group);
        o.push_str("</div>");
    }
}

/// Renders the report as one HTML document.
pub fn render(report: &SuggestReport) -> String {
    let t = &report.trace;
    let mut o = String::new();
    html::open(
        &mut o,
        "edgelimit sim suggest",
        "edgelimit sim — what should my limit be?",
    );
    let _ = write!(
        o,
        "<p class=\"meta\">Trace <b>{}</b> ({}, keyed by {}): {} requests from {} clients, {}.</p><p class=\"meta\">Target: at most {} of {} denied.</p>",
        escape(&t.name),
        format_text(t),
        escape(&t.key),
        t.events,
        t.clients,
        span_text(t),
        escape(&report.spare),
        report.by
    );
    suggestions_table(&mut o, report);
    peak_rates(&mut o, report);
    curves(&mut o, report);
    html::close(
        &mut o,
        crate::report::json::VERSION,
        ": every suggestion replayed through the library's steps",
    );
    o
}
