//! A [`ControlOp`] on the wire and back, and its [`ControlAnswer`]: the one place that says how
//! each control operation travels. [`WireCall`]'s control variants are the operations' JSON
//! shape (field names kept stable, since deployed objects read them); both clients and the
//! store's side go through the four functions here.

use edgelimit::control::{ControlAnswer, ControlOp};
use edgelimit::{StoreError, TimeSource};

use super::{
    assignment_of, entry_of, invalid, kind_of, WireAnswer, WireBytes, WireCall, WireLimit,
    WireVerdict,
};

impl WireCall {
    /// The call carrying `op`.
    pub fn of(op: &ControlOp) -> WireCall {
        match op {
            ControlOp::Assign {
                limit,
                identifier,
                assignment,
                until_ms,
            } => WireCall::Assign {
                limit: WireLimit::of(limit),
                identifier: WireBytes::of(identifier.as_bytes()),
                assignment: assignment.as_ref().map(|a| a.encode(*until_ms)),
                until_ms: *until_ms,
            },
            ControlOp::ClearAssignment {
                limit,
                identifier,
                kind,
            } => WireCall::ClearAssignment {
                limit: WireLimit::of(limit),
                identifier: WireBytes::of(identifier.as_bytes()),
                kind: kind.letter().to_string(),
            },
            ControlOp::Assignments { limit, identifier } => WireCall::Assignments {
                limit: WireLimit::of(limit),
                identifier: WireBytes::of(identifier.as_bytes()),
            },
            ControlOp::ListAdd {
                list,
                entry,
                until_ms,
                now_ms,
            } => WireCall::ListAdd {
                list: list.clone(),
                entry: entry.member(),
                until_ms: *until_ms,
                now_ms: *now_ms,
            },
            ControlOp::ListRemove { list, entry } => WireCall::ListRemove {
                list: list.clone(),
                entry: entry.member(),
            },
            ControlOp::ListEntries { list, now_ms } => WireCall::ListEntries {
                list: list.clone(),
                now_ms: *now_ms,
            },
            ControlOp::Peek {
                limit,
                identifier,
                time,
            } => WireCall::Peek {
                limit: WireLimit::of(limit),
                identifier: WireBytes::of(identifier.as_bytes()),
                at_ms: time.at_ms(),
            },
            ControlOp::Reset { limit, identifier } => WireCall::Reset {
                limit: WireLimit::of(limit),
                identifier: WireBytes::of(identifier.as_bytes()),
            },
        }
    }

    /// The control operation this call carries, rebuilt; a peek without the caller's instant
    /// is read at `server_now_ms` when the store's side has its clock to give. A check is no
    /// control operation: refused.
    pub fn operation(&self, server_now_ms: Option<u64>) -> Result<ControlOp, StoreError> {
        Ok(match self {
            WireCall::Check { .. } => {
                return Err(invalid("a check is not a control operation".to_string()))
            }
            WireCall::Assign {
                limit,
                identifier,
                assignment,
                until_ms,
            } => ControlOp::Assign {
                limit: limit.limit()?,
                identifier: identifier.identifier()?,
                // The lapse travels in its own field; the text's copy is the stored form's.
                assignment: assignment
                    .as_deref()
                    .map(assignment_of)
                    .transpose()?
                    .map(|(a, _)| a),
                until_ms: *until_ms,
            },
            WireCall::ClearAssignment {
                limit,
                identifier,
                kind,
            } => ControlOp::ClearAssignment {
                limit: limit.limit()?,
                identifier: identifier.identifier()?,
                kind: kind_of(kind)?,
            },
            WireCall::Assignments { limit, identifier } => ControlOp::Assignments {
                limit: limit.limit()?,
                identifier: identifier.identifier()?,
            },
            WireCall::ListAdd {
                list,
                entry,
                until_ms,
                now_ms,
            } => ControlOp::ListAdd {
                list: list.clone(),
                entry: entry_of(entry)?,
                until_ms: *until_ms,
                now_ms: *now_ms,
            },
            WireCall::ListRemove { list, entry } => ControlOp::ListRemove {
                list: list.clone(),
                entry: entry_of(entry)?,
            },
            WireCall::ListEntries { list, now_ms } => ControlOp::ListEntries {
                list: list.clone(),
                now_ms: *now_ms,
            },
            WireCall::Peek {
                limit,
                identifier,
                at_ms,
            } => ControlOp::Peek {
                limit: limit.limit()?,
                identifier: identifier.identifier()?,
                time: match at_ms.or(server_now_ms) {
                    Some(ms) => TimeSource::At(ms),
                    None => TimeSource::Server,
                },
            },
            WireCall::Reset { limit, identifier } => ControlOp::Reset {
                limit: limit.limit()?,
                identifier: identifier.identifier()?,
            },
        })
    }
}

impl WireAnswer {
    /// The answer carrying `answer`.
    pub fn of(answer: &ControlAnswer) -> WireAnswer {
        match answer {
            ControlAnswer::Done => WireAnswer::Done,
            ControlAnswer::Existed(existed) => WireAnswer::Existed { existed: *existed },
            ControlAnswer::Assignments(held) => WireAnswer::Assignments {
                assignments: held
                    .iter()
                    .map(|(a, until)| (a.encode(*until), *until))
                    .collect(),
            },
            ControlAnswer::Entries(entries) => WireAnswer::Entries {
                entries: entries.clone(),
            },
            ControlAnswer::Verdict(verdict) => WireAnswer::Verdict {
                verdict: WireVerdict::of(verdict),
            },
        }
    }

    /// The control answer this is, rebuilt; `Failed` is its error, and the verdicts of a check
    /// answer no control operation.
    pub fn control_answer(self) -> Result<ControlAnswer, StoreError> {
        Ok(match self {
            WireAnswer::Done => ControlAnswer::Done,
            WireAnswer::Existed { existed } => ControlAnswer::Existed(existed),
            WireAnswer::Assignments { assignments } => ControlAnswer::Assignments(
                assignments
                    .iter()
                    .map(|(text, _)| assignment_of(text))
                    .collect::<Result<_, _>>()?,
            ),
            WireAnswer::Entries { entries } => ControlAnswer::Entries(entries),
            WireAnswer::Verdict { verdict } => ControlAnswer::Verdict(verdict.verdict()),
            WireAnswer::Failed {
                message,
                invalid_input,
            } => return Err(super::error_of(message, invalid_input)),
            other @ WireAnswer::Verdicts { .. } => {
                return Err(StoreError::Protocol(format!(
                    "an answer to another call: {other:?}"
                )))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgelimit::control::list::ListEntry;
    use edgelimit::control::{Assignment, AssignmentKind};
    use edgelimit::{Control, Identifier, Limit, MemoryStore};

    fn ops() -> Vec<ControlOp> {
        let limit = Limit::new("per-user", "fixed 5/1m".parse().unwrap())
            .with_tiers([("pro", "fixed 50/1m".parse().unwrap())])
            .unwrap()
            .with_block_for(60_000);
        let identifier = Identifier::from(&b"\xff\x00alice"[..]);
        let entry: ListEntry = "ip 203.0.113.0/24".parse().unwrap();
        vec![
            ControlOp::Assign {
                limit: limit.clone(),
                identifier: identifier.clone(),
                assignment: Some(Assignment::Tier("pro".into())),
                until_ms: Some(9_000),
            },
            ControlOp::Assign {
                limit: limit.clone(),
                identifier: identifier.clone(),
                assignment: Some(Assignment::Override("fixed 7/1m".parse().unwrap())),
                until_ms: None,
            },
            ControlOp::Assign {
                limit: limit.clone(),
                identifier: identifier.clone(),
                assignment: None,
                until_ms: None,
            },
            ControlOp::ClearAssignment {
                limit: limit.clone(),
                identifier: identifier.clone(),
                kind: AssignmentKind::Tier,
            },
            ControlOp::ClearAssignment {
                limit: limit.clone(),
                identifier: identifier.clone(),
                kind: AssignmentKind::Override,
            },
            ControlOp::Assignments {
                limit: limit.clone(),
                identifier: identifier.clone(),
            },
            ControlOp::ListAdd {
                list: "deny:api".into(),
                entry: entry.clone(),
                until_ms: Some(5_000),
                now_ms: 1_000,
            },
            ControlOp::ListRemove {
                list: "allow".into(),
                entry,
            },
            ControlOp::ListEntries {
                list: "deny".into(),
                now_ms: 1_000,
            },
            ControlOp::Peek {
                limit: limit.clone(),
                identifier: identifier.clone(),
                time: TimeSource::At(1_700_000_000_000),
            },
            ControlOp::Reset { limit, identifier },
        ]
    }

    /// Every operation comes back equal from its JSON, in the wire's field names.
    #[test]
    fn every_operation_crosses_the_wire_unchanged() {
        let ops = ops();
        let names: Vec<&str> = ops.iter().map(ControlOp::name).collect();
        for name in [
            "assign",
            "clear_assignment",
            "assignments",
            "list_add",
            "list_remove",
            "list_entries",
            "peek",
            "reset",
        ] {
            assert!(names.contains(&name), "no {name} among the operations");
        }
        for op in ops {
            let text = serde_json::to_string(&WireCall::of(&op)).unwrap();
            assert!(text.starts_with(&format!("{{\"{}\":", op.name())), "{text}");
            let call: WireCall = serde_json::from_str(&text).unwrap();
            assert_eq!(call.operation(None).unwrap(), op, "{text}");
        }
    }

    /// The JSON a deployed object reads: field names and shapes as they were first sent.
    #[test]
    fn the_json_shape_is_the_deployed_one() {
        let entry: ListEntry = "ip 192.0.2.0/24".parse().unwrap();
        let limit = Limit::new("per-ip", "fixed 5/1m".parse().unwrap());
        for (op, json) in [
            (
                ControlOp::ListAdd {
                    list: "deny".into(),
                    entry: entry.clone(),
                    until_ms: Some(5_000),
                    now_ms: 1_000,
                },
                r#"{"list_add":{"list":"deny","entry":"ip 192.0.2.0/24","until_ms":5000,"now_ms":1000}}"#,
            ),
            (
                ControlOp::ClearAssignment {
                    limit: limit.clone(),
                    identifier: Identifier::from("a"),
                    kind: AssignmentKind::Override,
                },
                r#"{"clear_assignment":{"limit":{"name":"per-ip","policy":"fixed 5/1m"},"identifier":"YQ==","kind":"o"}}"#,
            ),
            (
                ControlOp::Peek {
                    limit,
                    identifier: Identifier::from("a"),
                    time: TimeSource::Server,
                },
                r#"{"peek":{"limit":{"name":"per-ip","policy":"fixed 5/1m"},"identifier":"YQ==","at_ms":null}}"#,
            ),
        ] {
            assert_eq!(serde_json::to_string(&WireCall::of(&op)).unwrap(), json);
        }
    }

    /// A peek without the caller's instant is read on the store's side's clock when it has one.
    #[test]
    fn a_peek_without_an_instant_takes_the_servers() {
        let call = WireCall::Peek {
            limit: WireLimit::of(&Limit::new("l", "fixed 1/1s".parse().unwrap())),
            identifier: WireBytes::of(b"x"),
            at_ms: None,
        };
        let time = |now| match call.operation(now).unwrap() {
            ControlOp::Peek { time, .. } => time,
            other => panic!("{other:?}"),
        };
        assert_eq!(time(Some(42)), TimeSource::At(42));
        assert_eq!(time(None), TimeSource::Server);
        let check = super::super::check_call(&[], TimeSource::Server);
        assert!(check.operation(None).is_err());
    }

    /// Every answer a store gives comes back equal from its JSON.
    #[test]
    fn every_answer_crosses_the_wire_unchanged() {
        let store = MemoryStore::new();
        let mut answers = Vec::new();
        for op in ops() {
            answers.push(futures::executor::block_on(store.apply(op)).unwrap());
        }
        answers.push(ControlAnswer::Assignments(vec![
            (Assignment::Tier("pro".into()), Some(9_000)),
            (Assignment::Override("fixed 7/1m".parse().unwrap()), None),
        ]));
        answers.push(ControlAnswer::Entries(vec![(
            "ip 203.0.113.0/24".into(),
            Some(5_000),
        )]));
        for answer in answers {
            let text = serde_json::to_string(&WireAnswer::of(&answer)).unwrap();
            let back: WireAnswer = serde_json::from_str(&text).unwrap();
            assert_eq!(back.control_answer().unwrap(), answer, "{text}");
        }
    }
}
