//! Live control without a redeploy (docs/design.md §2, "Policy changes"): per-identifier tiers
//! and overrides, stored beside the limiter state and read in the same round trip that decides.
//!
//! # Layout
//!
//! - [`assignment`]: [`Assignment`] (a tier name or an override policy; an identifier holds one
//!   of each kind at most) and its stored text, [`Tiers`] (a limit's named policies), and the
//!   effective-policy rule.

pub mod assignment;

pub use assignment::{
    effective_policy, valid_tier_name, Assignment, AssignmentKind, Tiers, ASSIGNMENT_GRACE_MS,
    MAX_TIER_NAME_LEN,
};
