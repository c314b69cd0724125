//! Hand-made SVG charts: no dependencies, no scripts, no network assets — they inline into one
//! HTML file that opens anywhere.

use std::fmt::Write;

use crate::readers::time::format_utc;
use crate::replay::{BoundarySeries, Point, PolicyResult};

/// The colour each algorithm is drawn in, the same in every chart.
pub fn color(algorithm: &str) -> &'static str {
    match algorithm {
        "fixed" => "#d62728",
        "sliding-log" => "#2ca02c",
        "sliding-counter" => "#ff7f0e",
        "token-bucket" => "#1f77b4",
        "gcra" => "#9467bd",
        _ => "#555555",
    }
}

/// Escapes text for SVG/HTML.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Round tick values from 0 to at least `max`.
pub fn ticks(max: f64) -> Vec<f64> {
    let max = max.max(1.0);
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| max / s <= 6.0)
        .unwrap_or(10.0 * mag)
        .max(1.0);
    let mut v = vec![0.0];
    while *v.last().unwrap_or(&0.0) < max {
        let next = v.last().unwrap_or(&0.0) + step;
        v.push(next);
    }
    v
}

const W: f64 = 560.0;
const H: f64 = 250.0;
const L: f64 = 44.0;
const R: f64 = 12.0;
const T: f64 = 36.0;
const B: f64 = 42.0;

/// The admitted-in-trailing-window chart around a policy's worst window.
pub fn boundary_chart(s: &BoundarySeries, algorithm: &str) -> String {
    let peak = s
        .policy
        .iter()
        .chain(&s.exact)
        .map(|p| p.count)
        .max()
        .unwrap_or(0);
    let yt = ticks((peak.max(s.limit) as f64) * 1.1);
    let ymax = *yt.last().unwrap_or(&1.0);
    let span = (s.to_ms - s.from_ms).max(1) as f64;
    let x = |t: u64| L + (t.saturating_sub(s.from_ms)) as f64 / span * (W - L - R);
    let y = |c: f64| T + (1.0 - c / ymax) * (H - T - B);
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" font-family="system-ui,sans-serif" font-size="11">"#
    );
    let _ = write!(
        o,
        r##"<text x="{L}" y="14" font-size="13" font-weight="600">{}</text><text x="{L}" y="28" fill="#555">client {} · trailing {} window · peak {peak} vs limit {}</text>"##,
        escape(&s.spec),
        escape(&s.client),
        crate::report::window_text(s.window_ms),
        s.limit
    );
    for v in &yt {
        let yy = y(*v);
        let _ = write!(
            o,
            r##"<line x1="{L}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end" fill="#666">{v}</text>"##,
            W - R,
            L - 4.0,
            yy + 3.5
        );
    }
    for e in &s.edges {
        let xx = x(*e);
        let _ = write!(
            o,
            r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{T}" y2="{}" stroke="#999" stroke-dasharray="2,3"/>"##,
            H - B
        );
    }
    let ly = y(s.limit as f64);
    let _ = write!(
        o,
        r##"<line x1="{L}" x2="{}" y1="{ly:.1}" y2="{ly:.1}" stroke="#000" stroke-dasharray="6,3"/><text x="{}" y="{:.1}" text-anchor="end">limit {}</text>"##,
        W - R,
        W - R - 2.0,
        ly - 3.0,
        s.limit
    );
    let _ = write!(
        o,
        r##"<path d="{}" fill="none" stroke="#888" stroke-width="1.5"/>"##,
        step_path(&s.exact, &x, &y, s.to_ms)
    );
    let _ = write!(
        o,
        r##"<path d="{}" fill="none" stroke="{}" stroke-width="2"/>"##,
        step_path(&s.policy, &x, &y, s.to_ms),
        color(algorithm)
    );
    for (t, ok) in &s.requests {
        let xx = x(*t);
        let (c, y0) = if *ok {
            ("#2ca02c", H - B + 4.0)
        } else {
            ("#d62728", H - B + 10.0)
        };
        let _ = write!(
            o,
            r#"<line x1="{xx:.1}" x2="{xx:.1}" y1="{y0}" y2="{}" stroke="{c}" stroke-opacity="0.6"/>"#,
            y0 + 5.0
        );
    }
    for i in 0..=4 {
        let t = s.from_ms + (s.to_ms - s.from_ms) * i / 4;
        let label = &format_utc(t)[11..19];
        // The end labels hang inward so they are not cut off at the chart's edges.
        let anchor = match i {
            0 => "start",
            4 => "end",
            _ => "middle",
        };
        let _ = write!(
            o,
            r##"<text x="{:.1}" y="{}" text-anchor="{anchor}" fill="#666">{label}</text>"##,
            x(t),
            H - 12.0
        );
    }
    let _ = write!(
        o,
        r##"<text x="{}" y="{}" text-anchor="end" fill="#666"><tspan fill="{}">━ policy</tspan>  <tspan fill="#888">━ exact log</tspan>  <tspan fill="#2ca02c">| admitted</tspan> <tspan fill="#d62728">| denied</tspan></text>"##,
        W - R,
        H - 1.0,
        color(algorithm)
    );
    o.push_str("</svg>");
    o
}

fn step_path(points: &[Point], x: &dyn Fn(u64) -> f64, y: &dyn Fn(f64) -> f64, end: u64) -> String {
    let mut d = String::new();
    let mut last: Option<f64> = None;
    for p in points {
        let xx = x(p.t_ms);
        let yy = y(p.count as f64);
        match last {
            None => {
                let _ = write!(d, "M{xx:.1},{yy:.1}");
            }
            Some(prev) => {
                let _ = write!(d, " L{xx:.1},{prev:.1} L{xx:.1},{yy:.1}");
            }
        }
        last = Some(yy);
    }
    if let Some(prev) = last {
        let _ = write!(d, " L{:.1},{prev:.1}", x(end));
    }
    d
}

/// Horizontal bars: the most admitted in one window as a multiple of the limit, per policy.
pub fn multiples_chart(policies: &[PolicyResult]) -> String {
    let row = 26.0;
    let h = T + row * policies.len() as f64 + 26.0;
    let w = 560.0;
    let left = 190.0;
    let max = policies
        .iter()
        .map(|p| p.max_window_multiple)
        .fold(2.0f64, f64::max)
        * 1.05;
    let x = |v: f64| left + v / max * (w - left - 50.0);
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" font-family="system-ui,sans-serif" font-size="12"><text x="0" y="16" font-size="13" font-weight="600">Most admitted in any window, × the limit</text>"#
    );
    for (i, p) in policies.iter().enumerate() {
        let yy = T + i as f64 * row;
        let _ = write!(
            o,
            r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text><rect x="{left}" y="{yy:.1}" width="{:.1}" height="{}" fill="{}"/><text x="{:.1}" y="{:.1}">{:.2}×</text>"#,
            left - 6.0,
            yy + 14.0,
            escape(&p.spec),
            x(p.max_window_multiple) - left,
            row - 8.0,
            color(&p.algorithm),
            x(p.max_window_multiple) + 4.0,
            yy + 14.0,
            p.max_window_multiple
        );
    }
    for (v, label) in [(1.0, "1× limit"), (2.0, "2×")] {
        let _ = write!(
            o,
            r##"<line x1="{0:.1}" x2="{0:.1}" y1="{1}" y2="{2}" stroke="#aaa" stroke-dasharray="4,3"/><text x="{0:.1}" y="{3}" text-anchor="middle" fill="#444">{label}</text>"##,
            x(v),
            T - 6.0,
            h - 20.0,
            h - 6.0
        );
    }
    o.push_str("</svg>");
    o
}

/// Stacked horizontal bars of false allows and false denies for a policy's worst clients.
pub fn client_error_chart(p: &PolicyResult) -> String {
    let w = 560.0;
    let row = 20.0;
    let top = &p.per_client.top[..p.per_client.top.len().min(8)];
    let h = T + row * top.len().max(1) as f64 + 40.0;
    let left = 150.0;
    let max = top
        .iter()
        .map(|c| c.false_allows + c.false_denies)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let sx = |v: u64| v as f64 / max * (w - left - 160.0);
    let mut o = String::new();
    let _ = write!(
        o,
        r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" font-family="system-ui,sans-serif" font-size="11"><text x="0" y="14" font-size="13" font-weight="600">{}</text><text x="0" y="28" fill="#555">{} of {} clients with any error · <tspan fill="#ff7f0e">■ false allows</tspan> <tspan fill="#1f77b4">■ false denies</tspan></text>"##,
        escape(&p.spec),
        p.per_client.clients_with_errors,
        p.per_client.clients
    );
    if top.is_empty() {
        let _ = write!(
            o,
            r##"<text x="{left}" y="{}" fill="#2ca02c">no client differs from the exact log</text>"##,
            T + 14.0
        );
    }
    for (i, c) in top.iter().enumerate() {
        let yy = T + i as f64 * row;
        let fa = sx(c.false_allows);
        let fd = sx(c.false_denies);
        let _ = write!(
            o,
            r##"<text x="{}" y="{:.1}" text-anchor="end">{}</text><rect x="{left}" y="{yy:.1}" width="{fa:.1}" height="{}" fill="#ff7f0e"/><rect x="{:.1}" y="{yy:.1}" width="{fd:.1}" height="{}" fill="#1f77b4"/><text x="{:.1}" y="{:.1}" fill="#444">{} + {} of {} requests</text>"##,
            left - 6.0,
            yy + 12.0,
            escape(&truncate(&c.client, 24)),
            row - 6.0,
            left + fa,
            row - 6.0,
            left + fa + fd + 4.0,
            yy + 12.0,
            c.false_allows,
            c.false_denies,
            c.requests
        );
    }
    let histogram: Vec<String> = p
        .per_client
        .histogram
        .iter()
        .map(|b| format!("{} {}", b.label, b.clients))
        .collect();
    let _ = write!(
        o,
        r##"<text x="0" y="{:.1}" fill="#555">clients by error share: {}</text>"##,
        h - 8.0,
        escape(&histogram.join(" · "))
    );
    o.push_str("</svg>");
    o
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}
