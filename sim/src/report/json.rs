//! JSON for machines: every report is pretty-printed the same way and names its tool.

/// The `tool` every report names.
pub const TOOL: &str = "edgelimit-sim";

/// The simulator's version, the `version` every report names.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A report as the JSON `--json` writes.
pub fn to_json<T: serde::Serialize>(report: &T) -> String {
    serde_json::to_string_pretty(report).expect("a report always serialises")
}
