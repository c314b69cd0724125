//! What can go wrong, split by who must act: the person at the keyboard (bad input, exit 2) or
//! the store (exit 1).

/// Why a command did not complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// An argument (or the configuration file, or an environment variable) is unusable. Nothing
    /// was written: every argument is validated before the store is contacted.
    #[error("{argument}: {problem}")]
    Input {
        /// The argument at fault, as typed on the command line: `--ttl`, `TIER`, `--config`.
        argument: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The store could not be reached or failed the operation.
    #[error("store: {0}")]
    Store(String),
}

impl AdminError {
    /// Bad input in `argument`.
    pub fn input(argument: impl Into<String>, problem: impl Into<String>) -> AdminError {
        AdminError::Input {
            argument: argument.into(),
            problem: problem.into(),
        }
    }

    /// The error for scripts (`--json`): `{"error": "<message>", "argument": "--ttl" | null,
    /// "exit_code": 2}`.
    pub fn to_json(&self) -> String {
        let argument = match self {
            AdminError::Input { argument, .. } => Some(argument.as_str()),
            AdminError::Store(_) => None,
        };
        serde_json::json!({
            "error": self.to_string(),
            "argument": argument,
            "exit_code": self.exit_code(),
        })
        .to_string()
    }

    /// The process exit code: 2 for bad input (as clap uses for bad usage), 1 for a store failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            AdminError::Input { .. } => 2,
            AdminError::Store(_) => 1,
        }
    }
}

impl From<edgelimit::StoreError> for AdminError {
    fn from(e: edgelimit::StoreError) -> AdminError {
        AdminError::Store(e.to_string())
    }
}

impl From<edgelimit_engine::command::ArgumentError> for AdminError {
    fn from(e: edgelimit_engine::command::ArgumentError) -> AdminError {
        AdminError::Input {
            argument: e.argument,
            problem: e.problem,
        }
    }
}
