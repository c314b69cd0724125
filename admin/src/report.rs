//! What a command answers: one serializable value per command, printed as JSON for scripts
//! (`--json`) or as an aligned two-column table for people. The JSON field names are stable
//! (docs/admin.md): add fields, never rename them.

use std::fmt;

use edgelimit::control::{effective_policy, Assignment};
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
    /// Whether it decides now. An identifier holds at most one tier and one override; the
    /// override decides while unlapsed and of the limit's algorithm, else the tier while
    /// unlapsed and named by the limit, else the limit's own policy.
    pub in_force: bool,
    /// Why it does not decide (`lapsed`, `unknown tier`, `another algorithm`, `overridden`);
    /// absent when in force.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignored: Option<&'static str>,
}

impl AssignmentView {
    /// Every assignment held on `limit` (each lapsing at its `until`), seen at `now_ms`, and the
    /// policy that decides — the library's own effective-policy rule, not a copy.
    pub fn all(
        limit: &Limit,
        assigned: &[(Assignment, Option<u64>)],
        now_ms: u64,
    ) -> (Vec<AssignmentView>, Policy) {
        let effective = effective_policy(limit, assigned, now_ms);
        let views = assigned
            .iter()
            .map(|(assignment, until_ms)| {
                let lapsed = until_ms.is_some_and(|until| until <= now_ms);
                let (kind, tier, policy) = match assignment {
                    Assignment::Tier(name) => {
                        ("tier", Some(name.to_string()), limit.tiers.get(name))
                    }
                    Assignment::Override(policy) => ("override", None, Some(policy)),
                };
                // The rule picked this very policy (by address: a tier's and an override's
                // policy may be equal without being the one that decides).
                let in_force = policy.is_some_and(|p| std::ptr::eq(p, effective));
                let ignored = match assignment {
                    _ if in_force => None,
                    _ if lapsed => Some("lapsed"),
                    Assignment::Tier(_) if policy.is_none() => Some("unknown tier"),
                    Assignment::Override(p) if p.algorithm() != limit.policy.algorithm() => {
                        Some("another algorithm")
                    }
                    _ => Some("overridden"),
                };
                AssignmentView {
                    kind,
                    tier,
                    policy: policy.copied(),
                    until_ms: *until_ms,
                    in_force,
                    ignored,
                }
            })
            .collect();
        (views, *effective)
    }

    /// `tier pro (gcra 100/1s burst 200), until …` for a table.
    fn describe(&self, now_ms: u64) -> String {
        let mut text = match (&self.tier, &self.policy) {
            (Some(tier), Some(policy)) => format!("tier {tier} ({policy})"),
            (Some(tier), None) => format!("tier {tier}"),
            (None, Some(policy)) => format!("override {policy}"),
            (None, None) => self.kind.to_string(),
        };
        if let Some(until) = self.until_ms {
            text.push_str(&format!(", until {}", relative(until, now_ms)));
        }
        if let Some(why) = self.ignored {
            text.push_str(&format!(" [ignored: {why}]"));
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
    /// Its tier and override, as held (the override first).
    pub assignments: Vec<AssignmentView>,
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
        assignments: Vec<AssignmentView>,
        verdict: &Verdict,
    ) -> Standing {
        let decision = verdict.decisions.first();
        Standing {
            who: subject.into(),
            policy,
            assignments,
            allowed: verdict.allowed,
            reason: decision
                .map_or("admitted", |d| d.reason.as_str())
                .to_string(),
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
    /// After `set`: the assignment written. After `clear`: the one removed (`null`: there was
    /// none). Absent after `get`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changed: Option<Option<AssignmentView>>,
    /// Every assignment held after the command (the override first).
    pub assignments: Vec<AssignmentView>,
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

fn assignments_text(views: &[AssignmentView], now_ms: u64) -> String {
    if views.is_empty() {
        return "none".to_string();
    }
    let texts: Vec<String> = views.iter().map(|a| a.describe(now_ms)).collect();
    texts.join("; ")
}

/// The human form.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Report::Standing(s) => {
                let mut rows = who_rows(&s.who);
                rows.push(("policy", s.policy.to_string()));
                rows.push((
                    "assigned",
                    assignments_text(&s.assignments, s.decided_at_ms),
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
                match (a.action, &a.changed) {
                    ("set", Some(Some(set))) => rows.push(("set", set.describe(a.now_ms))),
                    ("clear", Some(Some(cleared))) => {
                        rows.push(("cleared", cleared.describe(a.now_ms)))
                    }
                    ("clear", _) => rows.push(("cleared", "nothing (none was held)".into())),
                    _ => {}
                }
                rows.push(("assigned", assignments_text(&a.assignments, a.now_ms)));
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
                        if removed {
                            "yes"
                        } else {
                            "no (it was not listed)"
                        }
                        .to_string(),
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
