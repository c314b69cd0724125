//! Carrying out a [`Planned`] control operation on a store. Time is a parameter: the caller passes
//! `now_ms` (what TTLs count from and lapses are judged by) and the time source looks are
//! decided on.

use edgelimit::control::{Assignment, AssignmentKind, ControlOp};
use edgelimit::{Control, TimeSource};

use crate::command::{Planned, Subject};
use crate::error::AdminError;
use crate::report::{
    AssignmentReport, AssignmentView, EntriesReport, EntryReport, ListedEntry, Report, ResetReport,
    Standing,
};

/// Runs `planned` on `store` at `now_ms`; peeks are decided on `time`.
pub async fn execute(
    planned: &Planned,
    store: &dyn Control,
    time: TimeSource,
    now_ms: u64,
) -> Result<Report, AdminError> {
    let operation = planned.at(now_ms, time);
    let subject = planned.subject();
    Ok(match (operation, subject) {
        (ControlOp::Peek { time, .. }, Some(subject)) => {
            let held = held(store, &subject).await?;
            let (views, policy) = AssignmentView::all(&subject.limit, &held, now_ms);
            // The look is taken under the effective policy: the stores' peek scripts read no
            // control key (yet), so the policy travels with the limit. An assignment keeps the
            // limit's algorithm, so the state key is the same.
            let mut effective = subject.limit.clone();
            effective.policy = policy;
            let verdict = store.peek(&effective, &subject.identifier, time).await?;
            Report::Standing(Standing::new(&subject, policy, views, &verdict))
        }
        (ControlOp::Reset { .. }, Some(subject)) => Report::Reset(ResetReport {
            who: (&subject).into(),
            existed: store.reset(&subject.limit, &subject.identifier).await?,
        }),
        (
            ControlOp::Assign {
                assignment: Some(assignment),
                until_ms: until,
                ..
            },
            Some(subject),
        ) => {
            let mut held = held(store, &subject).await?;
            store
                .assign(
                    &subject.limit,
                    &subject.identifier,
                    Some(&assignment),
                    until,
                )
                .await?;
            // The store replaced the assignment of this kind and kept the other.
            held.retain(|(a, _)| a.kind() != assignment.kind());
            held.push((assignment.clone(), until));
            held.sort_by_key(|(a, _)| a.kind() == AssignmentKind::Tier);
            let set = of_kind(&subject.limit, &held, assignment.kind(), now_ms);
            report(&subject, "set", Some(set), &held, now_ms)
        }
        (ControlOp::Assignments { .. }, Some(subject)) => {
            let held = held(store, &subject).await?;
            report(&subject, "get", None, &held, now_ms)
        }
        (ControlOp::ClearAssignment { kind, .. }, Some(subject)) => {
            let mut held = held(store, &subject).await?;
            // As it stood before: whether the removed one was deciding.
            let cleared = of_kind(&subject.limit, &held, kind, now_ms);
            if cleared.is_some() {
                store
                    .clear_assignment(&subject.limit, &subject.identifier, kind)
                    .await?;
            }
            held.retain(|(a, _)| a.kind() != kind);
            report(&subject, "clear", Some(cleared), &held, now_ms)
        }
        (
            ControlOp::ListAdd {
                list,
                entry,
                until_ms: until,
                now_ms,
            },
            _,
        ) => {
            store.list_add(&list, &entry, until, now_ms).await?;
            Report::Entry(EntryReport {
                list,
                action: "add",
                entry: entry.member(),
                until_ms: Some(until),
                removed: None,
                now_ms,
            })
        }
        (ControlOp::ListRemove { list, entry }, _) => {
            let removed = store.list_remove(&list, &entry).await?;
            Report::Entry(EntryReport {
                list,
                action: "remove",
                entry: entry.member(),
                until_ms: None,
                removed: Some(removed),
                now_ms,
            })
        }
        (ControlOp::ListEntries { list, now_ms }, _) => Report::Entries(EntriesReport {
            entries: store
                .list_entries(&list, now_ms)
                .await?
                .into_iter()
                .map(|(entry, until_ms)| ListedEntry { entry, until_ms })
                .collect(),
            list,
            now_ms,
        }),
        // What `plan` never makes: an assignment clearing both kinds, an operation on one
        // identifier without it.
        (operation, _) => {
            return Err(AdminError::Store(format!(
                "`{}` is not a command of the command line",
                operation.name()
            )))
        }
    })
}

/// What the subject holds: its override and tier, the override first.
async fn held(
    store: &dyn Control,
    subject: &Subject,
) -> Result<Vec<(Assignment, Option<u64>)>, AdminError> {
    Ok(store
        .assignments(&subject.limit, &subject.identifier)
        .await?)
}

/// The view of the assignment of `kind` among `held`, if one is held.
fn of_kind(
    limit: &edgelimit::Limit,
    held: &[(Assignment, Option<u64>)],
    kind: AssignmentKind,
    now_ms: u64,
) -> Option<AssignmentView> {
    let position = held.iter().position(|(a, _)| a.kind() == kind)?;
    AssignmentView::all(limit, held, now_ms)
        .0
        .into_iter()
        .nth(position)
}

fn report(
    subject: &Subject,
    action: &'static str,
    changed: Option<Option<AssignmentView>>,
    held: &[(Assignment, Option<u64>)],
    now_ms: u64,
) -> Report {
    let (assignments, policy) = AssignmentView::all(&subject.limit, held, now_ms);
    Report::Assignment(AssignmentReport {
        who: subject.into(),
        action,
        changed,
        assignments,
        policy,
        now_ms,
    })
}
