//! Global limits (docs/design.md §9): a limit held across regions, each deciding locally, the
//! regions together never over the limit.
//!
//! - [`split`]: a global policy's static shares and the home's pool.

pub mod split;

pub use split::{is_global, Split, SplitError, MILLION};
