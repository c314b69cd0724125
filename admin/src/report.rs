//! What a command answers: one serializable value per command, printed as JSON for scripts
//! (`--json`) or as an aligned two-column table for people. The JSON field names are stable
//! (README, "Live control"): add fields, never rename them.

use std::fmt;

use edgelimit::control::Assignment;
use edgelimit::{Limit, Policy, Verdict};
use serde::Serialize;

use crate::command::Subject;
use crate::time::{relative, span};

/// A command's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Report {
    /// `peek`.
    Standing(Standing),
    /// `reset`.
    Reset(ResetReport),
    /// `tier set|get|clear`, `override set|clear`.
    Assignment(AssignmentReport),
    /// `deny|allow add|remove`.
    Entry(EntryReport),
    /// `deny|allow list`.
    Entries(EntriesReport),
}

/// Which limit and identifier an answer is about.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Who {
    /// The limit's name.
    pub limit: String,
    /// The identifier as given.
    pub identifier: String,
    /// The identifier as it appears in the Redis keys (escaped; an API key's SHA-256).
    pub stored_identifier: String,
}

impl From<&Subject> for Who {
    fn from(s: &Subject) -> Who {
        Who {
            limit: s.limit.name.to_string(),
            identifier: s.given.clone(),
            stored_identifier: s.stored(),
        }
    }
}

/// An identifier's tier or override, as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AssignmentView {
    /// `tier` or `override`.
    pub kind: &'static str,
    /// The tier's name (a tier only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// The policy it gives: the override's, or the tier's (`null` for a tier the configuration
    /// no longer names).
    pub policy: Option<Policy>,
    /// When it lapses (epoch ms); `null` = never.
    pub until_ms: Option<u64>,
    /// Whether it decides now: not lapsed, a tier the limit names, an override of the limit's
    /// algorithm. One that does not is ignored by every store (the limit's policy applies).
    pub in_force: bool,
}

impl AssignmentView {
    /// `assignment` (lapsing at `until_ms`) on `limit`, seen at `now_ms`.
    pub fn new(
        limit: &Limit,
        assignment: &Assignment,
        until_ms: Option<u64>,
        now_ms: u64,
    ) -> AssignmentView {
        let unlapsed = until_ms.map_or(true, |until| until > now_ms);
        match assignment {
            Assignment::Tier(name) => {
                let policy = limit.tiers.get(name).copied();
                AssignmentView {
                    kind: "tier",
                    tier: Some(name.to_string()),
                    policy,
                    until_ms,
                    in_force: unlapsed && policy.is_some(),
                }
            }
            Assignment::Override(policy) => AssignmentView {
                kind: "override",
                tier: None,
                policy: Some(*policy),
                until_ms,
                in_force: unlapsed && policy.algorithm() == limit.policy.algorithm(),
            },
        }
    }

    /// `tier pro (gcra 100/1s burst 200), until …` for a table.
    fn describe(&self, now_ms: u64) -> String {
        let mut text = match (&self.tier, &self.policy) {
            (Some(tier), Some(policy)) => format!("tier {tier} ({policy})"),
            (Some(tier), None) => format!("tier {tier} (not in the configuration: ignored)"),
            (None, Some(policy)) => format!("override {policy}"),
            (None, None) => self.kind.to_string(),
        };
        match self.until_ms {
            Some(until) if until > now_ms => {
                text.push_str(&format!(", until {}", relative(until, now_ms)))
            }
            Some(until) => text.push_str(&format!(", lapsed {}", relative(until, now_ms))),
            None => {}
        }
        let unlapsed = self.until_ms.map_or(true, |until| until > now_ms);
        if unlapsed && !self.in_force && self.tier.is_none() {
            text.push_str(" (another algorithm than the limit's: ignored)");
        }
        text
    }
}

/// `peek`: an identifier's standing, nothing consumed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Standing {
    /// Whose.
    #[serde(flatten)]
    pub who: Who,
    /// The policy deciding for this identifier now (its tier's, its override's, or the limit's).
    pub policy: Policy,
    /// Its tier or override, if any.
    pub assignment: Option<AssignmentView>,
    /// Whether a request costing nothing would be admitted now (`false` only for a listed or
    /// failed look).
    pub allowed: bool,
    /// Why (`admitted`, …).
    pub reason: String,
    /// The effective policy's capacity.
    pub capacity: u64,
    /// What could be admitted right now.
    pub remaining: u64,
    /// When the quota is whole again (epoch ms, the deciding clock's).
    pub reset_at_ms: u64,
    /// How long until a denied look would pass (0 when admitted).
    pub retry_after_ms: u64,
    /// When the look was made (epoch ms): Redis's clock when the configuration says `time =
    /// "server"` (the default), else this machine's.
    pub decided_at_ms: u64,
}

impl Standing {
    /// The standing reported by `verdict` for `subject`.
    pub fn new(
        subject: &Subject,
        policy: Policy,
        assignment: Option<AssignmentView>,
        verdict: &Verdict,
    ) -> Standing {
        let decision = verdict.decisions.first();
        Standing {
            who: subject.into(),
            policy,
            assignment,
            allowed: verdict.allowed,
            reason: decision.map_or("admitted", |d| d.reason.as_str()).to_string(),
            capacity: decision.map_or(policy.capacity(), |d| d.limit),
            remaining: decision.map_or(policy.capacity(), |d| d.remaining),
            reset_at_ms: decision.map_or(verdict.decided_at_ms, |d| d.reset_at_ms),
            retry_after_ms: decision.map_or(0, |d| d.retry_after_ms),
            decided_at_ms: verdict.decided_at_ms,
        }
    }
}

/// `reset`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResetReport {
    /// Whose.
    #[serde(flatten)]
    pub who: Who,
    /// Whether any state existed (and was deleted).
    pub existed: bool,
}

/// `tier …` and `override …`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AssignmentReport {
    /// Whose.
    #[serde(flatten)]
    pub who: Who,
    /// `set`, `get` or `clear`.
    pub action: &'static str,
    /// After `set` and `get`: the assignment now stored (`null`: none). After `clear`: the one
    /// removed (`null`: there was none, nothing was written).
    pub assignment: Option<AssignmentView>,
    /// The policy deciding for this identifier after the command.
    pub policy: Policy,
    /// When the command ran (epoch ms, this machine's clock): what `until_ms` was computed from.
    pub now_ms: u64,
}

/// `deny|allow add|remove`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EntryReport {
    /// The list (`deny`, `allow:<rule>`).
    pub list: String,
    /// `add` or `remove`.
    pub action: &'static str,
    /// The entry as stored (normalised: `ip 203.0.113.0/24`, `country CN`).
    pub entry: String,
    /// After `add`: when it lapses (epoch ms; `null` = never).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<Option<u64>>,
    /// After `remove`: whether it was listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed: Option<bool>,
    /// When the command ran (epoch ms, this machine's clock).
    pub now_ms: u64,
}

/// `deny|allow list`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EntriesReport {
    /// The list.
    pub list: String,
    /// Its unlapsed entries, in the store's order.
    pub entries: Vec<ListedEntry>,
    /// When the command ran (epoch ms, this machine's clock): entries lapsed by then are left out.
    pub now_ms: u64,
}

/// One entry of a list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ListedEntry {
    /// The entry as stored.
    pub entry: String,
    /// When it lapses (epoch ms); `null` = never.
    pub until_ms: Option<u64>,
}

/// Rows of a two-column table.
struct Rows(Vec<(&'static str, String)>);

impl fmt::Display for Rows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self.0.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (key, value) in &self.0 {
            writeln!(f, "{key:<width$}  {value}")?;
        }
        Ok(())
    }
}

fn who_rows(who: &Who) -> Vec<(&'static str, String)> {
    let mut rows = vec![
        ("limit", who.limit.clone()),
        ("identifier", who.identifier.clone()),
    ];
    if who.stored_identifier != who.identifier {
        rows.push(("stored as", who.stored_identifier.clone()));
    }
    rows
}

fn assignment_text(view: Option<&AssignmentView>, now_ms: u64) -> String {
    view.map_or_else(|| "none".to_string(), |a| a.describe(now_ms))
}

/// The human form.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Report::Standing(s) => {
                let mut rows = who_rows(&s.who);
                rows.push(("policy", s.policy.to_string()));
                rows.push((
                    "assignment",
                    assignment_text(s.assignment.as_ref(), s.decided_at_ms),
                ));
                rows.push(("remaining", format!("{} of {}", s.remaining, s.capacity)));
                rows.push(("full again", relative(s.reset_at_ms, s.decided_at_ms)));
                if !s.allowed {
                    rows.push(("standing", s.reason.clone()));
                    rows.push((
                        "retry after",
                        if s.retry_after_ms == edgelimit::RETRY_NEVER {
                            "never".to_string()
                        } else {
                            span(s.retry_after_ms)
                        },
                    ));
                }
                write!(f, "{}", Rows(rows))
            }
            Report::Reset(r) => {
                let mut rows = who_rows(&r.who);
                rows.push((
                    "reset",
                    if r.existed {
                        "state deleted".to_string()
                    } else {
                        "no state was stored".to_string()
                    },
                ));
                write!(f, "{}", Rows(rows))
            }
            Report::Assignment(a) => {
                let mut rows = who_rows(&a.who);
                let label = match a.action {
                    "clear" => "cleared",
                    _ => "assignment",
                };
                rows.push((label, assignment_text(a.assignment.as_ref(), a.now_ms)));
                rows.push(("policy", a.policy.to_string()));
                write!(f, "{}", Rows(rows))
            }
            Report::Entry(e) => {
                let mut rows = vec![("list", e.list.clone()), ("entry", e.entry.clone())];
                if let Some(until) = e.until_ms {
                    rows.push((
                        "added",
                        until.map_or("until removed".to_string(), |u| {
                            format!("until {}", relative(u, e.now_ms))
                        }),
                    ));
                }
                if let Some(removed) = e.removed {
                    rows.push((
                        "removed",
                        if removed { "yes" } else { "no (it was not listed)" }.to_string(),
                    ));
                }
                write!(f, "{}", Rows(rows))
            }
            Report::Entries(list) => {
                if list.entries.is_empty() {
                    return writeln!(f, "{}: no entries", list.list);
                }
                let width = list
                    .entries
                    .iter()
                    .map(|e| e.entry.chars().count())
                    .max()
                    .unwrap_or(0)
                    .max("ENTRY".len());
                writeln!(f, "{:<width$}  UNTIL", "ENTRY")?;
                for entry in &list.entries {
                    let until = entry
                        .until_ms
                        .map_or("never".to_string(), |u| relative(u, list.now_ms));
                    writeln!(f, "{:<width$}  {until}", entry.entry)?;
                }
                Ok(())
            }
        }
    }
}
