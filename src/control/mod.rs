//! Live control without a redeploy: per-identifier tiers and overrides (docs/design.md §2,
//! "Policy changes"), stored beside the limiter state and read in the same round trip that
//! decides, and deny and allow lists (§"Deny and allow lists").
//!
//! # Layout
//!
//! - [`assignment`]: [`Assignment`] (a tier name or an override policy; an identifier holds one
//!   of each kind at most) and its stored text, [`Tiers`] (a limit's named policies), and the
//!   effective-policy rule.
//! - [`list`]: list entries, what a request offers the lists, and the gate rule.
//! - [`operation`]: [`ControlOp`], every control operation a store takes, and its
//!   [`ControlAnswer`].

pub mod assignment;
pub mod list;
pub mod operation;

pub use assignment::{
    effective_policy, valid_tier_name, Assignment, AssignmentKind, Tiers, ASSIGNMENT_GRACE_MS,
    MAX_TIER_NAME_LEN,
};
pub use operation::{ControlAnswer, ControlOp};
