//! The Worker's decision log line: one JSON object per logged request, written by the Worker
//! ([`LogLine::of`], serialised) and read back by `sim replay --format edgelimit` (deserialised)
//! — one type, so the two cannot drift apart. It carries what a replay needs: the times the
//! decision used, the request's method, host and path, and every decided limit with its
//! identifier as keyed, its cost, decision and reason.

use edgelimit::metrics::MetricsSnapshot;
use edgelimit::store::key::{decode_identifier, encode_identifier};
use edgelimit::{Checked, Identifier};
use serde::{Deserialize, Serialize};

use crate::identify::RequestView;
use crate::plan::Plan;
use crate::request_decision::RequestDecision;
use crate::ruling::Outcome;

/// The value of every line's first member, `"edgelimit":"decision"`: how a reader finds the
/// lines among other output.
pub const DECISION: &str = "decision";

/// One limit's decision in the log line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitLine {
    /// The limit's name.
    pub name: String,
    /// The identifier as keyed in Redis (escaped, or `#` and a SHA-256 when long): never a
    /// secret in the clear (API keys are keyed by their hash).
    pub identifier: String,
    /// The cost charged.
    pub cost: i64,
    /// Whether this limit admitted the request (alone).
    pub allowed: bool,
    /// Its remaining quota.
    pub remaining: u64,
    /// Why it decided as it did (`admitted`, `over_limit`, `cached_denial`, …).
    pub reason: String,
    /// Whether it was decided in shadow: its rule is a shadow rule, or (see `unenforced`) the
    /// limit is `soft` or its staged enforcement left the identifier out.
    pub shadow: bool,
    /// Why a limit of an enforced rule was decided in shadow: `soft`, or `staged` (its
    /// `enforce` share left the identifier out). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unenforced: Option<String>,
}

/// The isolate's counters, in a sampled line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IsolateLine {
    /// Checks the store admitted.
    pub allowed: u64,
    /// Checks the store denied.
    pub denied: u64,
    /// Denials answered from the isolate's cache.
    pub cache_hits: u64,
    /// Decisions that failed open.
    pub failed_open: u64,
    /// Decisions that failed closed.
    pub failed_closed: u64,
    /// Decisions made by the fallback policy.
    pub fallback: u64,
    /// Store calls that failed.
    pub store_errors: u64,
}

/// What the Worker logs for one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogLine {
    /// Always [`DECISION`].
    pub edgelimit: String,
    /// When the enforced limits were decided (the store's clock under `time = "server"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_ms: Option<u64>,
    /// The shadow check's own time: a second script in the same pipeline reads Redis `TIME`
    /// again, and may read the next millisecond.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow_time_ms: Option<u64>,
    /// The isolate's clock: what its denial cache and fail modes used.
    pub local_ms: u64,
    /// The method.
    pub method: String,
    /// The host.
    pub host: String,
    /// The path.
    pub path: String,
    /// The colo that served the request (`request.cf.colo`), when logged: with `continent`,
    /// what places a replayed request in a region of a configuration with global limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub colo: Option<String>,
    /// The client's continent (`request.cf.continent`), when logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continent: Option<String>,
    /// The rules that matched.
    #[serde(default)]
    pub rules: Vec<String>,
    /// Whether the request was forwarded.
    pub allowed: bool,
    /// The status answered (200 for forwarded).
    pub status: u16,
    /// What the path decided, in the words every host writes: `allowed`, `denied`, `soft`,
    /// `delayed`, `shadow_denied`, `failed_open`, `failed_closed`, `refused`, `list_denied`
    /// ([`RequestDecision`]). Absent from lines written before it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// The enforced limit the answer is about (the one that denied, when one did): the
    /// analytics point's index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// `denied` when a deny list refused the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The deny list that refused it (entries are not logged: one may be a secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list: Option<String>,
    /// How the match was found: `static`, `cache` or `store`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// Rules whose limits a static allow entry exempted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_rules: Vec<String>,
    /// Deny lists of shadow rules that would have refused the request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shadow_lists: Vec<String>,
    /// Every decided limit, enforced then shadow.
    #[serde(default)]
    pub limits: Vec<LimitLine>,
    /// Shadow limits that would have denied.
    #[serde(default)]
    pub shadow_denied: Vec<String>,
    /// `soft` limits that denied (the request was admitted and the origin told).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub soft_exceeded: Vec<String>,
    /// Limits with staged enforcement that denied an identifier they leave out (reported
    /// only); an enforced denial is in `limits` with `unenforced` absent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub staged_denied: Vec<String>,
    /// How long (ms) the request waited before it was forwarded (`exceed = "delay …"`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delay_ms: u64,
    /// Whether all-or-nothing held for the enforced limits.
    #[serde(default = "all_or_nothing")]
    pub atomic: bool,
    /// The store's latency for this request (ms), when it was asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_ms: Option<f64>,
    /// The isolate's counters, when the line carries them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolate: Option<IsolateLine>,
}

fn all_or_nothing() -> bool {
    true
}

fn is_zero(ms: &u64) -> bool {
    *ms == 0
}

impl LogLine {
    /// The line for a request `plan` planned, the store answered (`checked`) and the Worker
    /// ruled (`outcome`), with the isolate's counters when given.
    pub fn of(
        plan: &Plan<'_>,
        checked: &Checked,
        outcome: &Outcome,
        request: &(impl RequestView + ?Sized),
        isolate: Option<&MetricsSnapshot>,
    ) -> LogLine {
        let limits = plan
            .decided(&checked.verdicts)
            .flat_map(|decided| {
                decided
                    .check
                    .items()
                    .iter()
                    .zip(&decided.verdict.decisions)
                    .enumerate()
                    .map(move |(i, (item, d))| LimitLine {
                        name: item.limit.name.to_string(),
                        identifier: encode_identifier(&item.identifier),
                        cost: item.cost,
                        allowed: d.allowed,
                        remaining: d.remaining,
                        reason: d.reason.as_str().to_string(),
                        shadow: decided.shadow,
                        unenforced: decided
                            .shadow
                            .then(|| plan.unenforced(i))
                            .flatten()
                            .map(|kind| kind.as_str().to_string()),
                    })
            })
            .collect();
        let names = |names: &mut dyn Iterator<Item = &str>| names.map(str::to_string).collect();
        LogLine {
            edgelimit: DECISION.to_string(),
            time_ms: outcome.decided_at_ms,
            shadow_time_ms: plan
                .shadow_decided(&checked.verdicts)
                .map(|(_, verdict)| verdict.decided_at_ms),
            local_ms: checked.local_ms,
            method: request.method().to_string(),
            host: request.host().to_string(),
            path: request.path().to_string(),
            // `request.cf` is read by the Worker's glue (edge.rs), not by the request path.
            colo: None,
            continent: None,
            rules: names(&mut plan.rules.iter().map(|r| r.name.as_str())),
            allowed: outcome.allowed(),
            status: outcome.status,
            decision: Some(RequestDecision::of(outcome).as_str().to_string()),
            limit: outcome.binding.as_ref().map(|b| b.name.to_string()),
            reason: outcome.denied.as_ref().map(|_| "denied".to_string()),
            list: outcome.denied.as_ref().map(|d| d.list.clone()),
            via: outcome.denied.as_ref().map(|d| d.via.as_str().to_string()),
            allowed_rules: names(&mut plan.allowed.iter().map(|r| r.name.as_str())),
            shadow_lists: names(&mut outcome.shadow_listed.iter().map(|d| d.list.as_str())),
            limits,
            shadow_denied: names(&mut outcome.shadow_denied.iter().map(|n| &**n)),
            soft_exceeded: names(&mut outcome.soft_exceeded.iter().map(|n| &**n)),
            staged_denied: names(&mut outcome.staged_denied.iter().map(|n| &**n)),
            delay_ms: outcome.delay_ms,
            atomic: outcome.atomic,
            store_ms: checked.store_ms,
            isolate: isolate.map(|m| {
                let totals = m.totals();
                IsolateLine {
                    allowed: m.checks_allowed,
                    denied: m.checks_denied,
                    cache_hits: totals.cache_hits,
                    failed_open: totals.failed_open,
                    failed_closed: totals.failed_closed,
                    fallback: totals.fallback,
                    store_errors: m.store_errors,
                }
            }),
        }
    }

    /// The line as JSON, on one line.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The identifier logged for the limit called `name`, as the bytes the Worker keyed it by
    /// (the escaped form decoded; a hashed long identifier stays as logged — distinct from every
    /// other, which is all its state needs). `None` when the limit was not decided or its
    /// identifier was empty (the shared bucket of `missing = "shared"`).
    pub fn identifier(&self, name: &str) -> Option<Identifier> {
        let logged = self.limits.iter().find(|l| l.name == name)?;
        if logged.identifier.is_empty() {
            return None;
        }
        Some(decode_identifier(&logged.identifier))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line without a colo or continent (`request.cf` did not set them).
    const LINE: &str = r#"{"edgelimit":"decision","time_ms":1700000000100,"local_ms":1700000000100,"method":"GET","host":"api.example.com","path":"/api/items","rules":["api"],"allowed":true,"status":200,"limits":[{"name":"per-ip","identifier":"203.0.113.7","cost":1,"allowed":true,"remaining":1,"reason":"admitted","shadow":false}],"shadow_denied":[],"atomic":true}"#;

    #[test]
    fn the_colo_and_continent_are_written_only_when_known() {
        let mut line: LogLine = serde_json::from_str(LINE).unwrap();
        assert_eq!(
            (line.colo.as_deref(), line.continent.as_deref()),
            (None, None)
        );
        // Unknown: neither key is written.
        assert_eq!(line.to_json(), LINE);
        line.colo = Some("SYD".into());
        line.continent = Some("OC".into());
        let json = line.to_json();
        assert!(
            json.contains(r#","path":"/api/items","colo":"SYD","continent":"OC","rules":"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<LogLine>(&json).unwrap(), line);
    }
}
