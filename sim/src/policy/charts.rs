//! The policy report's charts: each policy's worst moment against the exact log, the most
//! admitted in any window per policy, and the clients each policy errs on most.

use std::fmt::Write;

use super::boundary::{BoundarySeries, Point};
use super::metrics::PolicyResult;
use crate::readers::time::format_utc;
use crate::report::html::escape;
use crate::report::svg::{self, color, ticks, Frame, ADMITTED, DENIED};
use crate::report::words::{fit, window_text};

/// The size and margins of a boundary chart.
const FRAME: Frame = Frame {
    w: 560.0,
    h: 250.0,
    left: 44.0,
    right: 12.0,
    top: 36.0,
    bottom: 42.0,
    ymax: 1.0,
};

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
    let f = Frame {
        ymax: *yt.last().unwrap_or(&1.0),
        ..FRAME
    };
    let (w, h, r, b) = (f.w, f.h, f.right, f.bottom);
    let span = (s.to_ms - s.from_ms).max(1) as f64;
    let x = |t: u64| f.left + (t.saturating_sub(s.from_ms)) as f64 / span * f.plot_width();
    let y = |c: f64| f.y(c);
    let mut o = String::new();
    f.open(
        &mut o,
        &escape(&s.spec),
        &format!(
            "client {} · trailing {} window · peak {peak} vs limit {}",
            escape(&s.client),
            window_text(s.window_ms),
            s.limit
        ),
    );
    f.y_grid(&mut o, &yt);
    for e in &s.edges {
        let xx = x(*e);
        let _ = write!(
            o,
            r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{}" y2="{}" stroke="#999" stroke-dasharray="2,3"/>"##,
            f.top,
            h - b
        );
    }
    let ly = y(s.limit as f64);
    let _ = write!(
        o,
        r##"<line x1="{}" x2="{}" y1="{ly:.1}" y2="{ly:.1}" stroke="#000" stroke-dasharray="6,3"/><text x="{}" y="{:.1}" text-anchor="end">limit {}</text>"##,
        f.left,
        w - r,
        w - r - 2.0,
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
            (ADMITTED, h - b + 4.0)
        } else {
            (DENIED, h - b + 10.0)
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
            h - 12.0
        );
    }
    let _ = write!(
        o,
        r##"<text x="{}" y="{}" text-anchor="end" fill="#666"><tspan fill="{}">━ policy</tspan>  <tspan fill="#888">━ exact log</tspan>  <tspan fill="{ADMITTED}">| admitted</tspan> <tspan fill="{DENIED}">| denied</tspan></text>"##,
        w - r,
        h - 1.0,
        color(algorithm)
    );
    svg::close(&mut o);
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

/// Space above the bar charts' first bar: their title and subtitle.
const TOP: f64 = 36.0;

/// Horizontal bars: the most admitted in one window as a multiple of the limit, per policy.
pub fn multiples_chart(policies: &[PolicyResult]) -> String {
    let row = 26.0;
    let h = TOP + row * policies.len() as f64 + 26.0;
    let w = 560.0;
    let left = 190.0;
    let max = policies
        .iter()
        .map(|p| p.max_window_multiple)
        .fold(2.0f64, f64::max)
        * 1.05;
    let x = |v: f64| left + v / max * (w - left - 50.0);
    let mut o = String::new();
    svg::open(&mut o, w, h, 12);
    svg::title(
        &mut o,
        0.0,
        16.0,
        "Most admitted in any window, × the limit",
    );
    for (i, p) in policies.iter().enumerate() {
        let yy = TOP + i as f64 * row;
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
            TOP - 6.0,
            h - 20.0,
            h - 6.0
        );
    }
    svg::close(&mut o);
    o
}

/// Stacked horizontal bars of false allows and false denies for a policy's worst clients.
pub fn client_error_chart(p: &PolicyResult) -> String {
    let w = 560.0;
    let row = 20.0;
    let top = &p.per_client.top[..p.per_client.top.len().min(8)];
    let h = TOP + row * top.len().max(1) as f64 + 40.0;
    let left = 150.0;
    let max = top
        .iter()
        .map(|c| c.false_allows + c.false_denies)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let sx = |v: u64| v as f64 / max * (w - left - 160.0);
    let mut o = String::new();
    svg::open(&mut o, w, h, 11);
    svg::title(&mut o, 0.0, 14.0, &escape(&p.spec));
    svg::subtitle(
        &mut o,
        0.0,
        &format!(
            r##"{} of {} clients with any error · <tspan fill="#ff7f0e">■ false allows</tspan> <tspan fill="#1f77b4">■ false denies</tspan>"##,
            p.per_client.clients_with_errors, p.per_client.clients
        ),
    );
    if top.is_empty() {
        let _ = write!(
            o,
            r##"<text x="{left}" y="{}" fill="#2ca02c">no client differs from the exact log</text>"##,
            TOP + 14.0
        );
    }
    for (i, c) in top.iter().enumerate() {
        let yy = TOP + i as f64 * row;
        let fa = sx(c.false_allows);
        let fd = sx(c.false_denies);
        let _ = write!(
            o,
            r##"<text x="{}" y="{:.1}" text-anchor="end">{}</text><rect x="{left}" y="{yy:.1}" width="{fa:.1}" height="{}" fill="#ff7f0e"/><rect x="{:.1}" y="{yy:.1}" width="{fd:.1}" height="{}" fill="#1f77b4"/><text x="{:.1}" y="{:.1}" fill="#444">{} + {} of {} requests</text>"##,
            left - 6.0,
            yy + 12.0,
            escape(&fit(&c.client, 24, 23)),
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
    svg::close(&mut o);
    o
}
