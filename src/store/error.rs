//! Store failures, typed by whether retrying can help.

/// Why a store could not decide.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store could not be reached or dropped the connection (transient).
    #[error("store unreachable: {0}")]
    Unreachable(String),
    /// The store did not answer within the budget (transient).
    #[error("store timed out after {after_ms} ms")]
    Timeout {
        /// The budget that ran out.
        after_ms: u64,
    },
    /// The store refused our credentials.
    #[error("store refused the credentials: {0}")]
    Auth(String),
    /// The store answered something we cannot read.
    #[error("store protocol error: {0}")]
    Protocol(String),
    /// A limiter script failed inside the store.
    #[error("limiter script failed: {0}")]
    Script(String),
    /// The request itself is invalid for this store (e.g. a time Lua cannot hold exactly).
    #[error("invalid request: {0}")]
    InvalidInput(String),
}

impl StoreError {
    /// Whether the same call may succeed if retried.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Unreachable(_) | StoreError::Timeout { .. }
        )
    }
}
