//! The policy report: everything one policy replay measured, serialised as the JSON `--json`
//! writes (the schema is documented in docs/sim-reference.md, "The JSON report").

use std::time::Duration;

use super::boundary::BoundarySeries;
use super::metrics::PolicyResult;
use crate::readers::ReadStats;
use crate::report::json::{self, TOOL, VERSION};

/// One run's results.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// `edgelimit-sim`.
    pub tool: &'static str,
    /// The simulator's version.
    pub version: &'static str,
    /// What was read.
    pub trace: ReadStats,
    /// Where decisions were made (`memory`, or the store's URL).
    pub store: String,
    /// For a real store: decisions that differed from the library's steps (0 = identical).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_mismatches: Option<u64>,
    /// Wall time of the replay (ms).
    pub elapsed_ms: u64,
    /// One object per policy, in the order given.
    pub policies: Vec<PolicyResult>,
    /// The boundary charts' data, one per policy that admitted anything.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub boundaries: Vec<BoundarySeries>,
}

impl Report {
    /// A report without boundary data.
    pub fn new(
        trace: ReadStats,
        policies: Vec<PolicyResult>,
        store: String,
        store_mismatches: Option<u64>,
        elapsed: Duration,
    ) -> Report {
        Report {
            tool: TOOL,
            version: VERSION,
            trace,
            store,
            store_mismatches,
            elapsed_ms: elapsed.as_millis() as u64,
            policies,
            boundaries: Vec::new(),
        }
    }

    /// The JSON text.
    pub fn to_json(&self) -> String {
        json::to_json(self)
    }
}
