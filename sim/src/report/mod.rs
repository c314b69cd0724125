//! Reports: the terminal table, JSON for machines, and a self-contained HTML page with SVG charts.

pub mod html;
mod model;
pub mod svg;
pub mod table;

pub use model::Report;

/// A window in words: `10s`, `1m`, `1500ms`.
pub fn window_text(ms: u64) -> String {
    edgelimit::policy::format_window(ms)
}
