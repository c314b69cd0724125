//! Store failures, typed by whether retrying can help and by what a limit does about them: a
//! store that cannot answer (an outage, [`FailureClass::is_misconfiguration`] false) leaves each
//! limit to its `fail` mode; a store that refuses us (credentials, permissions, a script, an
//! answer we cannot read) is a misconfiguration, and each limit follows its
//! `fail_misconfigured` mode instead (docs/design.md §3, "Store failures").

/// Why a store could not decide.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store could not be reached, dropped the connection, or is not ready to serve yet
    /// (an HTTP 5xx, Redis `LOADING`, `BUSY`, `MASTERDOWN`, `CLUSTERDOWN`, `TRYAGAIN`,
    /// `READONLY`): transient.
    #[error("store unreachable: {0}")]
    Unreachable(String),
    /// The store did not answer within the budget (transient).
    #[error("store timed out after {after_ms} ms")]
    Timeout {
        /// The budget that ran out.
        after_ms: u64,
    },
    /// The store is over a quota of its own: its plan's request or memory limit (an HTTP 429,
    /// an Upstash `max requests limit exceeded`, Redis `OOM`). Not worth retrying at once, but
    /// an outage of capacity rather than a refusal of the limiter.
    #[error("store over its quota: {0}")]
    OverQuota(String),
    /// The store refused our credentials or their permissions (HTTP 401/403, Redis `NOAUTH`,
    /// `WRONGPASS`, `NOPERM`).
    #[error("store refused the credentials: {0}")]
    Auth(String),
    /// The store answered something we cannot read.
    #[error("store protocol error: {0}")]
    Protocol(String),
    /// A limiter script failed inside the store, or the store refused the command that runs it.
    #[error("limiter script failed: {0}")]
    Script(String),
    /// The request itself is invalid for this store (e.g. a time Lua cannot hold exactly).
    #[error("invalid request: {0}")]
    InvalidInput(String),
}

/// What kind of failure a [`StoreError`] is, as counted (the `class` label of
/// `edgelimit_store_errors_total`) and logged: a small closed set, never an identifier.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureClass {
    /// Not reached, dropped, or not ready to serve (transient).
    Unreachable,
    /// No answer within the budget (transient).
    Timeout,
    /// Over the store's own request or memory quota.
    OverQuota,
    /// Credentials or permissions refused.
    RefusedAuth,
    /// A limiter script failed, or the command running it was refused.
    RefusedScript,
    /// The store refused the request as invalid for it.
    RefusedRequest,
    /// An answer that cannot be read.
    Protocol,
}

impl FailureClass {
    /// Every class, in the order the metrics list them.
    pub const ALL: [FailureClass; 7] = [
        FailureClass::Unreachable,
        FailureClass::Timeout,
        FailureClass::OverQuota,
        FailureClass::RefusedAuth,
        FailureClass::RefusedScript,
        FailureClass::RefusedRequest,
        FailureClass::Protocol,
    ];

    /// The name in metrics and logs: `unreachable`, `timeout`, `over_quota`, `refused_auth`,
    /// `refused_script`, `refused_request`, `protocol`.
    pub const fn as_str(self) -> &'static str {
        match self {
            FailureClass::Unreachable => "unreachable",
            FailureClass::Timeout => "timeout",
            FailureClass::OverQuota => "over_quota",
            FailureClass::RefusedAuth => "refused_auth",
            FailureClass::RefusedScript => "refused_script",
            FailureClass::RefusedRequest => "refused_request",
            FailureClass::Protocol => "protocol",
        }
    }

    /// Whether the store refused the limiter — it answered, but not as a working deployment's
    /// store would: credentials, permissions, a script, a request or an answer wrong. Retrying
    /// does not help and waiting does not end it; limits follow their `fail_misconfigured`
    /// mode. The other classes are outages (down, slow, out of quota): limits follow `fail`.
    pub const fn is_misconfiguration(self) -> bool {
        matches!(
            self,
            FailureClass::RefusedAuth
                | FailureClass::RefusedScript
                | FailureClass::RefusedRequest
                | FailureClass::Protocol
        )
    }

    /// The class's place in [`FailureClass::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for FailureClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl StoreError {
    /// Whether the same call may succeed if retried.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Unreachable(_) | StoreError::Timeout { .. }
        )
    }

    /// What kind of failure this is.
    pub const fn class(&self) -> FailureClass {
        match self {
            StoreError::Unreachable(_) => FailureClass::Unreachable,
            StoreError::Timeout { .. } => FailureClass::Timeout,
            StoreError::OverQuota(_) => FailureClass::OverQuota,
            StoreError::Auth(_) => FailureClass::RefusedAuth,
            StoreError::Script(_) => FailureClass::RefusedScript,
            StoreError::InvalidInput(_) => FailureClass::RefusedRequest,
            StoreError::Protocol(_) => FailureClass::Protocol,
        }
    }

    /// The error a Redis error reply stands for (`-CODE detail`, without the dash): transient
    /// for a server not ready to serve, refused credentials for `NOAUTH`, `WRONGPASS` and
    /// `NOPERM`, over quota for `OOM` and Upstash's limits, else a failed script. Every
    /// transport reads error replies with it, so a code means the same on each.
    pub fn from_error_reply(reply: &str) -> StoreError {
        StoreError::from_error_code(reply, reply.to_string())
    }

    /// [`StoreError::from_error_reply`] for `reply`, carrying `message` (the reply with its
    /// context) rather than the bare reply.
    pub fn from_error_code(reply: &str, message: String) -> StoreError {
        let trimmed = reply.trim_start();
        let code = trimmed.split_ascii_whitespace().next().unwrap_or("");
        match code {
            "LOADING" | "BUSY" | "MASTERDOWN" | "CLUSTERDOWN" | "TRYAGAIN" | "READONLY"
            | "MOVED" | "ASK" => StoreError::Unreachable(message),
            "NOAUTH" | "WRONGPASS" | "NOPERM" => StoreError::Auth(message),
            "OOM" => StoreError::OverQuota(message),
            "ERR" if is_quota_message(trimmed) => StoreError::OverQuota(message),
            _ => StoreError::Script(message),
        }
    }
}

/// Whether an `ERR` reply is a store's quota (Upstash: `ERR max requests limit exceeded`,
/// `ERR max daily request limit exceeded`, `ERR max concurrent connections exceeded`, `ERR
/// DB capacity quota exceeded`).
fn is_quota_message(reply: &str) -> bool {
    let lower = reply.to_ascii_lowercase();
    lower.contains("limit exceeded")
        || lower.contains("quota exceeded")
        || lower.contains("max concurrent connections exceeded")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_replies_are_classified_by_their_code() {
        let cases = [
            (
                "LOADING Redis is loading the dataset in memory",
                FailureClass::Unreachable,
            ),
            (
                "BUSY Redis is busy running a script. You can only call SCRIPT KILL",
                FailureClass::Unreachable,
            ),
            ("CLUSTERDOWN The cluster is down", FailureClass::Unreachable),
            (
                "TRYAGAIN Multiple keys request during rehashing of slot",
                FailureClass::Unreachable,
            ),
            (
                "MASTERDOWN Link with MASTER is down",
                FailureClass::Unreachable,
            ),
            (
                "READONLY You can't write against a read only replica.",
                FailureClass::Unreachable,
            ),
            ("NOAUTH Authentication required.", FailureClass::RefusedAuth),
            (
                "WRONGPASS invalid username-password pair or user is disabled.",
                FailureClass::RefusedAuth,
            ),
            (
                "NOPERM User default has no permissions to run the 'evalsha' command",
                FailureClass::RefusedAuth,
            ),
            (
                "OOM command not allowed when used memory > 'maxmemory'.",
                FailureClass::OverQuota,
            ),
            (
                "ERR max requests limit exceeded. Limit: 10000, Usage: 10000.",
                FailureClass::OverQuota,
            ),
            (
                "ERR max daily request limit exceeded. Limit: 10000, Usage: 10000.",
                FailureClass::OverQuota,
            ),
            (
                "ERR Error running script (call to f_0123): @user_script:4: attempt to compare",
                FailureClass::RefusedScript,
            ),
            (
                "ERR unknown command 'EVALSHA', with args beginning with:",
                FailureClass::RefusedScript,
            ),
            (
                "WRONGTYPE Operation against a key holding the wrong kind of value",
                FailureClass::RefusedScript,
            ),
            ("", FailureClass::RefusedScript),
        ];
        for (reply, class) in cases {
            let error = StoreError::from_error_reply(reply);
            assert_eq!(error.class(), class, "{reply}");
            // The reply is kept whole, for the log line.
            assert!(error.to_string().ends_with(reply), "{error}");
        }
    }

    #[test]
    fn outages_follow_fail_and_refusals_fail_misconfigured() {
        let outages: Vec<_> = FailureClass::ALL
            .into_iter()
            .filter(|c| !c.is_misconfiguration())
            .collect();
        assert_eq!(
            outages,
            [
                FailureClass::Unreachable,
                FailureClass::Timeout,
                FailureClass::OverQuota
            ]
        );
        for (i, class) in FailureClass::ALL.into_iter().enumerate() {
            assert_eq!(class.index(), i);
        }
        // A transient error is always an outage, never a misconfiguration.
        for error in [
            StoreError::Unreachable("reset".into()),
            StoreError::Timeout { after_ms: 50 },
        ] {
            assert!(error.is_transient() && !error.class().is_misconfiguration());
        }
    }
}
