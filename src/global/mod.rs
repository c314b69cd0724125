//! Global limits (docs/design.md §9): a limit held across regions, each deciding locally, the
//! regions together never over the limit.
//!
//! - [`split`]: a global policy's static shares and the home's pool.
//! - [`limits`]: what one region decides a global limit with (share, pool, lease ends, the
//!   other regions' shares it may borrow, the home's demand count).
//! - [`ledger`]: what a region knows of its leases, and when it asks the home for more.
//! - [`take`]: "take up to x", the one step an ask of the home or a lender is.
//! - [`store`]: [`GlobalStore`], a region's store deciding global limits in one local round
//!   trip, waiting for the home only when its share and lease both fall short, and borrowing
//!   from the other regions when the pool does too.

pub mod ledger;
pub mod limits;
pub mod split;
pub mod store;
pub mod take;

#[cfg(test)]
mod tests;

pub use ledger::Refill;
pub use limits::{GlobalLimitError, RegionalLimit, RegionalLimits};
pub use split::{is_global, Split, SplitError, MILLION};
pub use store::{GlobalStats, GlobalStore, Granted, MIN_REFILL_HORIZON_MS};
pub use take::{Take, Taken};
