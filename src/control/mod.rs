//! Live control without a redeploy: deny and allow lists (and, from the `tiers` work,
//! per-identifier assignments).

pub mod list;
