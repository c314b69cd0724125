//! Carrying out a validated [`Operation`] on a store. Time is a parameter: the caller passes
//! `now_ms` (what TTLs count from and lapsed entries are judged by) and the time source looks
//! are decided on.

use edgelimit::control::Assignment;
use edgelimit::{Store, TimeSource};

use crate::command::{Operation, Subject};
use crate::error::AdminError;
use crate::report::{
    AssignmentReport, AssignmentView, EntriesReport, EntryReport, ListedEntry, Report, ResetReport,
    Standing,
};

/// Runs `operation` on `store` at `now_ms`; peeks are decided on `time`.
pub async fn execute(
    operation: &Operation,
    store: &dyn Store,
    time: TimeSource,
    now_ms: u64,
) -> Result<Report, AdminError> {
    Ok(match operation {
        Operation::Peek(subject) => {
            let assignment = current(store, subject, now_ms).await?;
            let verdict = store.peek(&subject.limit, &subject.identifier, time).await?;
            let policy = effective(subject, assignment.as_ref());
            Report::Standing(Standing::new(subject, policy, assignment, &verdict))
        }
        Operation::Reset(subject) => Report::Reset(ResetReport {
            who: subject.into(),
            existed: store.reset(&subject.limit, &subject.identifier).await?,
        }),
        Operation::Assign {
            subject,
            assignment,
            ttl_ms,
        } => {
            let until = ttl_ms.map(|ttl| now_ms.saturating_add(ttl));
            store
                .assign(&subject.limit, &subject.identifier, Some(assignment), until)
                .await?;
            let view = AssignmentView::new(&subject.limit, assignment, until, now_ms);
            assignment_report(subject, "set", Some(view), now_ms)
        }
        Operation::Show(subject) => {
            let view = current(store, subject, now_ms).await?;
            assignment_report(subject, "get", view, now_ms)
        }
        Operation::Clear {
            subject,
            is_override,
        } => {
            let view = current(store, subject, now_ms).await?;
            if let Some(view) = &view {
                let (wanted, other) = if *is_override {
                    ("override", "tier")
                } else {
                    ("tier", "override")
                };
                // One slot holds either: clearing a tier must not silently drop an override.
                if view.kind != wanted {
                    return Err(AdminError::input(
                        "IDENTIFIER",
                        format!(
                            "`{}` has {} {other} on limit `{}`, not a {wanted}: use `{other} clear`",
                            subject.given,
                            if other == "override" { "an" } else { "a" },
                            subject.limit.name
                        ),
                    ));
                }
                store
                    .assign(&subject.limit, &subject.identifier, None, None)
                    .await?;
            }
            let mut report = assignment_report(subject, "clear", view, now_ms);
            if let Report::Assignment(a) = &mut report {
                a.policy = subject.limit.policy;
            }
            report
        }
        Operation::ListAdd {
            list,
            entry,
            ttl_ms,
        } => {
            let until = ttl_ms.map(|ttl| now_ms.saturating_add(ttl));
            store.list_add(list, entry, until, now_ms).await?;
            Report::Entry(EntryReport {
                list: list.clone(),
                action: "add",
                entry: entry.member(),
                until_ms: Some(until),
                removed: None,
                now_ms,
            })
        }
        Operation::ListRemove { list, entry } => {
            let removed = store.list_remove(list, entry).await?;
            Report::Entry(EntryReport {
                list: list.clone(),
                action: "remove",
                entry: entry.member(),
                until_ms: None,
                removed: Some(removed),
                now_ms,
            })
        }
        Operation::ListShow { list } => Report::Entries(EntriesReport {
            list: list.clone(),
            entries: store
                .list_entries(list, now_ms)
                .await?
                .into_iter()
                .map(|(entry, until_ms)| ListedEntry { entry, until_ms })
                .collect(),
            now_ms,
        }),
    })
}

/// The subject's stored assignment, if any.
async fn current(
    store: &dyn Store,
    subject: &Subject,
    now_ms: u64,
) -> Result<Option<AssignmentView>, AdminError> {
    Ok(store
        .assignment(&subject.limit, &subject.identifier)
        .await?
        .map(|(assignment, until): (Assignment, Option<u64>)| {
            AssignmentView::new(&subject.limit, &assignment, until, now_ms)
        }))
}

/// The policy deciding for the subject: its assignment's when in force, else the limit's.
fn effective(subject: &Subject, assignment: Option<&AssignmentView>) -> edgelimit::Policy {
    assignment
        .filter(|a| a.in_force)
        .and_then(|a| a.policy)
        .unwrap_or(subject.limit.policy)
}

fn assignment_report(
    subject: &Subject,
    action: &'static str,
    view: Option<AssignmentView>,
    now_ms: u64,
) -> Report {
    let policy = effective(subject, view.as_ref());
    Report::Assignment(AssignmentReport {
        who: subject.into(),
        action,
        assignment: view,
        policy,
        now_ms,
    })
}
