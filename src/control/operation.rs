//! [`ControlOp`]: every control operation a store takes, named with its arguments, and
//! [`ControlAnswer`], what it answers. [`crate::Control::apply`] is the one entry point a store
//! implements, so a wrapper forwards one call, a client of a remote store (the Durable Object
//! wire) sends one value, and a command line plans one value; `Control`'s typed methods build
//! an operation and read its answer.

use super::assignment::{Assignment, AssignmentKind};
use super::list::ListEntry;
use crate::store::{Identifier, Limit, StoreError, TimeSource, Verdict};

/// One control operation on a store (docs/design.md §2 "Policy changes", §3 "Deny and allow
/// lists", §3 "Peek and reset"). Each variant is the `Control` method of the same name, whose
/// documentation gives its meaning.
#[derive(Debug, Clone, PartialEq)]
pub enum ControlOp {
    /// [`crate::Control::assign`]: `assignment` until `until_ms`; `None` clears both kinds.
    Assign {
        /// The limit.
        limit: Limit,
        /// Whose assignment.
        identifier: Identifier,
        /// The tier or the override; `None` clears both.
        assignment: Option<Assignment>,
        /// When it lapses (epoch ms on the callers' clock), if ever.
        until_ms: Option<u64>,
    },
    /// [`crate::Control::clear_assignment`]: the assignment of one kind, the other kept.
    ClearAssignment {
        /// The limit.
        limit: Limit,
        /// Whose assignment.
        identifier: Identifier,
        /// Which kind.
        kind: AssignmentKind,
    },
    /// [`crate::Control::assignments`]: every assignment held, the override first.
    Assignments {
        /// The limit.
        limit: Limit,
        /// Whose assignments.
        identifier: Identifier,
    },
    /// [`crate::Control::list_add`]: `entry` on `list` until `until_ms`.
    ListAdd {
        /// The list's name in the store (`deny`, `allow:<rule>`).
        list: String,
        /// The entry.
        entry: ListEntry,
        /// When it lapses (epoch ms), if ever.
        until_ms: Option<u64>,
        /// The caller's now: entries lapsed by then are dropped on the way.
        now_ms: u64,
    },
    /// [`crate::Control::list_remove`].
    ListRemove {
        /// The list's name in the store.
        list: String,
        /// The entry.
        entry: ListEntry,
    },
    /// [`crate::Control::list_entries`]: the entries live at `now_ms`.
    ListEntries {
        /// The list's name in the store.
        list: String,
        /// The caller's now.
        now_ms: u64,
    },
    /// [`crate::Control::peek`]: a standing, consuming nothing.
    Peek {
        /// The limit.
        limit: Limit,
        /// Whose standing.
        identifier: Identifier,
        /// The instant it is read at.
        time: TimeSource,
    },
    /// [`crate::Control::reset`]: the identifier's state on the limit deleted.
    Reset {
        /// The limit.
        limit: Limit,
        /// Whose state.
        identifier: Identifier,
    },
}

impl ControlOp {
    /// The limit and identifier the operation concerns, for the ones that concern one (every
    /// operation but the lists'): a store spread over shards sends it to the shard owning them.
    pub fn subject(&self) -> Option<(&Limit, &Identifier)> {
        match self {
            ControlOp::Assign {
                limit, identifier, ..
            }
            | ControlOp::ClearAssignment {
                limit, identifier, ..
            }
            | ControlOp::Assignments { limit, identifier }
            | ControlOp::Peek {
                limit, identifier, ..
            }
            | ControlOp::Reset { limit, identifier } => Some((limit, identifier)),
            ControlOp::ListAdd { .. }
            | ControlOp::ListRemove { .. }
            | ControlOp::ListEntries { .. } => None,
        }
    }

    /// The operation's name as `Control` spells it (`list_add`), for messages.
    pub fn name(&self) -> &'static str {
        match self {
            ControlOp::Assign { .. } => "assign",
            ControlOp::ClearAssignment { .. } => "clear_assignment",
            ControlOp::Assignments { .. } => "assignments",
            ControlOp::ListAdd { .. } => "list_add",
            ControlOp::ListRemove { .. } => "list_remove",
            ControlOp::ListEntries { .. } => "list_entries",
            ControlOp::Peek { .. } => "peek",
            ControlOp::Reset { .. } => "reset",
        }
    }
}

/// What a store answers to a [`ControlOp`]: each operation has one kind of answer, read back
/// by `Control`'s typed methods (an answer of another kind is a protocol error).
#[derive(Debug, Clone, PartialEq)]
pub enum ControlAnswer {
    /// Done: `assign`, `clear_assignment`, `list_add`.
    Done,
    /// Whether something existed: `reset`, `list_remove`.
    Existed(bool),
    /// `assignments`: each with when it lapses, the override first.
    Assignments(Vec<(Assignment, Option<u64>)>),
    /// `list_entries`: (member, lapse time), soonest lapsing first.
    Entries(Vec<(String, Option<u64>)>),
    /// `peek`: the standing.
    Verdict(Verdict),
}

impl ControlAnswer {
    /// `Done`, or the error of an answer to another operation.
    pub fn done(self) -> Result<(), StoreError> {
        match self {
            ControlAnswer::Done => Ok(()),
            other => Err(other.unexpected("done")),
        }
    }

    /// `Existed`'s flag.
    pub fn existed(self) -> Result<bool, StoreError> {
        match self {
            ControlAnswer::Existed(existed) => Ok(existed),
            other => Err(other.unexpected("existed")),
        }
    }

    /// `Assignments`' list.
    pub fn assignments(self) -> Result<Vec<(Assignment, Option<u64>)>, StoreError> {
        match self {
            ControlAnswer::Assignments(held) => Ok(held),
            other => Err(other.unexpected("assignments")),
        }
    }

    /// `Entries`' list.
    pub fn entries(self) -> Result<Vec<(String, Option<u64>)>, StoreError> {
        match self {
            ControlAnswer::Entries(entries) => Ok(entries),
            other => Err(other.unexpected("entries")),
        }
    }

    /// `Verdict`'s verdict.
    pub fn verdict(self) -> Result<Verdict, StoreError> {
        match self {
            ControlAnswer::Verdict(verdict) => Ok(verdict),
            other => Err(other.unexpected("a verdict")),
        }
    }

    fn unexpected(&self, wanted: &str) -> StoreError {
        StoreError::Protocol(format!(
            "wanted {wanted}, got an answer to another call: {self:?}"
        ))
    }
}
