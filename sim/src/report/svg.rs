//! Hand-made SVG charts: no dependencies, no scripts, no network assets — they inline into one
//! HTML page that opens anywhere. The pieces every chart shares: its frame, axis ticks, headings
//! and colours.

use std::fmt::Write;

/// What admitted requests are drawn in.
pub const ADMITTED: &str = "#2ca02c";

/// What denied requests are drawn in.
pub const DENIED: &str = "#d62728";

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

/// Starts a chart `w` by `h` whose text is `font_size` px.
pub fn open(o: &mut String, w: f64, h: f64, font_size: u32) {
    let _ = write!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" font-family="system-ui,sans-serif" font-size="{font_size}">"#
    );
}

/// A chart's title (HTML: escaped by the caller), its baseline at `y`.
pub fn title(o: &mut String, x: f64, y: f64, text: &str) {
    let _ = write!(
        o,
        r#"<text x="{x}" y="{y}" font-size="13" font-weight="600">{text}</text>"#
    );
}

/// The line under a chart's title (HTML: escaped by the caller).
pub fn subtitle(o: &mut String, x: f64, text: &str) {
    let _ = write!(o, r##"<text x="{x}" y="28" fill="#555">{text}</text>"##);
}

/// A chart over time: its size, the margins around its plot, and its y axis from 0 to `ymax`.
#[derive(Debug, Clone, Copy)]
pub struct Frame {
    /// Width.
    pub w: f64,
    /// Height.
    pub h: f64,
    /// Margin left of the plot (the y axis' labels).
    pub left: f64,
    /// Margin right of it.
    pub right: f64,
    /// Margin above it (title and subtitle).
    pub top: f64,
    /// Margin below it (the time labels, marks, a legend).
    pub bottom: f64,
    /// The top of the y axis.
    pub ymax: f64,
}

impl Frame {
    /// The plot's width.
    pub fn plot_width(&self) -> f64 {
        self.w - self.left - self.right
    }

    /// Where a value sits on the y axis.
    pub fn y(&self, value: f64) -> f64 {
        self.top + (1.0 - value / self.ymax) * (self.h - self.top - self.bottom)
    }

    /// Starts the chart (11 px text) with its title and subtitle (HTML: escaped by the caller).
    pub fn open(&self, o: &mut String, title_text: &str, subtitle_text: &str) {
        open(o, self.w, self.h, 11);
        title(o, self.left, 14.0, title_text);
        subtitle(o, self.left, subtitle_text);
    }

    /// A grey line across the plot at each tick, labelled on the left.
    pub fn y_grid(&self, o: &mut String, ticks: &[f64]) {
        for v in ticks {
            let yy = self.y(*v);
            let _ = write!(
                o,
                r##"<line x1="{}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end" fill="#666">{v}</text>"##,
                self.left,
                self.w - self.right,
                self.left - 4.0,
                yy + 3.5
            );
        }
    }
}

/// Ends a chart.
pub fn close(o: &mut String) {
    o.push_str("</svg>");
}
