//! The suggest report: per stream (the `--key`, or each limit of a configuration) and per
//! algorithm and window, the suggestion, what it and one less denied, and the curve; per window,
//! the clients' peak rates and the configuration to paste — serialised as the JSON `--json`
//! writes (documented in docs/sim-reference.md, "The suggest JSON").

use super::paste::shadow_rules;
use super::peaks::PeakRates;
use super::search::CurvePoint;
use super::target::{By, Share};
use super::verify::Replayed;
use crate::readers::ReadStats;
use crate::report::json::{self, TOOL, VERSION};

/// One suggestion: the least policy of one algorithm and window meeting the target.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Suggestion {
    /// With `--config`: the limit's name (limits of one name share state, so they are searched
    /// together).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// With `--config`: the rules that apply the limit.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<String>,
    /// The algorithm (`fixed`, `sliding-log`, …).
    pub algorithm: String,
    /// The window, as a spec writes it (`1m`).
    pub window: String,
    /// The window in ms.
    pub window_ms: u64,
    /// Clients in the stream.
    pub clients: u64,
    /// Requests in the stream.
    pub requests: u64,
    /// The suggested policy as `--policy` takes it; `null` when no limit the library accepts
    /// meets the target.
    pub policy: Option<String>,
    /// Its limit.
    pub suggested_limit: Option<u64>,
    /// Its burst (the buckets; the limit for the windows).
    pub suggested_burst: Option<u64>,
    /// Clients it denied at least once.
    pub clients_denied: Option<u64>,
    /// Requests it denied.
    pub requests_denied: Option<u64>,
    /// The most it admitted from one client in any span of the window.
    pub max_admitted_in_window: Option<u64>,
    /// That as a multiple of the limit (above 1: what crossed a window boundary, or a burst).
    pub max_window_multiple: Option<f64>,
    /// The policy one step smaller (one less limit, or for the buckets one less burst),
    /// replayed: it misses the target.
    pub one_less: Option<Replayed>,
    /// Clients denied against the limit, the burst equal to it: the value at a limit is that of
    /// the last point at or below it.
    pub curve: Vec<CurvePoint>,
}

impl Suggestion {
    /// The `policy = "…"` line to paste into a configuration's limit.
    pub fn config_line(&self) -> Option<String> {
        self.policy.as_ref().map(|p| format!("policy = \"{p}\""))
    }
}

/// One `sim suggest` run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SuggestReport {
    /// `edgelimit-sim`.
    pub tool: &'static str,
    /// The simulator's version.
    pub version: &'static str,
    /// What was read.
    pub trace: ReadStats,
    /// What is spared: a share of clients or of requests.
    pub by: By,
    /// The share that may be denied, as given (`0.1%`).
    pub spare: String,
    /// The same as a fraction.
    pub spare_fraction: f64,
    /// With `--config`: the configuration file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// One per stream, algorithm and window, in that order.
    pub suggestions: Vec<Suggestion>,
    /// Per stream and window, the distribution of clients' peak rates and the suggestion drawn
    /// against it.
    pub peaks: Vec<PeakRates>,
    /// Without `--config`: the windows' suggestions as shadow rules to paste into
    /// `wrangler.toml` (`null` when no window has one).
    pub configuration: Option<String>,
    /// Where `--write-config` wrote that configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub configuration_file: Option<String>,
}

impl SuggestReport {
    /// A report of `suggestions` and `peaks`; without a configuration (`config`), the peaks'
    /// suggestions become the configuration to paste.
    pub fn new(
        trace: ReadStats,
        by: By,
        spare: Share,
        config: Option<String>,
        suggestions: Vec<Suggestion>,
        peaks: Vec<PeakRates>,
    ) -> SuggestReport {
        let configuration = match config {
            None => shadow_rules(&trace.key, &peaks),
            Some(_) => None,
        };
        SuggestReport {
            tool: TOOL,
            version: VERSION,
            trace,
            by,
            spare: spare.to_string(),
            spare_fraction: spare.fraction(),
            config,
            suggestions,
            peaks,
            configuration,
            configuration_file: None,
        }
    }

    /// The command replaying the trace through the pasted configuration, saved as `file`.
    pub fn replay_command(&self, file: &str) -> String {
        super::paste::replay_command(&self.trace.name, file)
    }

    /// The JSON text.
    pub fn to_json(&self) -> String {
        json::to_json(self)
    }
}
