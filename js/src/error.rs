//! What the package throws: one typed error, a code saying what kind of mistake, and where.
//!
//! The wrapper turns it into an `EdgelimitError` (ts/errors.ts) with the same three fields, so a
//! caller can `switch` on `code` and show `path` to whoever wrote the options.

use edgelimit::StoreError;
use serde::Serialize;

/// What kind of mistake, as JavaScript sees it (`error.code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// An option of `new Ratelimit(…)` is missing, of the wrong type or invalid (a bad policy
    /// spec, an unknown fail mode, a duplicate limit name).
    InvalidOption,
    /// A call named a limit the `Ratelimit` does not have.
    UnknownLimit,
    /// A call gave no identifier (or an empty one) for one of the limits.
    MissingIdentifier,
    /// An identifier is not a string.
    InvalidIdentifier,
    /// A cost is not a whole number within ±2^52, or names an unknown limit.
    InvalidCost,
    /// Another argument of a call is of the wrong shape (`requestId`, `instance`, an unknown
    /// option).
    InvalidArgument,
    /// The store failed a `peek` or a `reset` (`limit` never throws it: each limit's fail mode
    /// answers instead).
    Store,
}

/// A typed error: what kind, where (an option's path, or the argument), and a sentence saying
/// what was wrong. Serialized to JSON for the wrapper to rethrow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Error {
    /// What kind of mistake.
    pub code: ErrorCode,
    /// Where: `limits[1].policy`, `identifiers["per-team"]`, `options.cost`.
    pub path: String,
    /// What was wrong, for a human.
    pub message: String,
    /// For [`ErrorCode::Store`]: whether the same call may succeed if retried.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transient: Option<bool>,
}

impl Error {
    /// An error of `code` at `path`.
    pub fn new(code: ErrorCode, path: impl Into<String>, message: impl Into<String>) -> Error {
        Error {
            code,
            path: path.into(),
            message: message.into(),
            transient: None,
        }
    }

    /// A store's failure during `what` (`peek`, `reset`).
    pub fn store(what: &str, error: &StoreError) -> Error {
        Error {
            code: ErrorCode::Store,
            path: what.to_string(),
            message: error.to_string(),
            transient: Some(error.is_transient()),
        }
    }

    /// The error as the JSON the wrapper parses.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_serialize_with_their_code_path_and_message() {
        let e = Error::new(
            ErrorCode::UnknownLimit,
            "identifiers[\"x\"]",
            "no such limit",
        );
        let json: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
        assert_eq!(json["code"], "unknown_limit");
        assert_eq!(json["path"], "identifiers[\"x\"]");
        assert_eq!(json["message"], "no such limit");
        assert!(json.get("transient").is_none());
        let store = Error::store("peek", &StoreError::Timeout { after_ms: 5 });
        let json: serde_json::Value = serde_json::from_str(&store.to_json()).unwrap();
        assert_eq!(
            (json["code"].as_str(), json["transient"].as_bool()),
            (Some("store"), Some(true))
        );
        assert!(json["message"].as_str().unwrap().contains("5 ms"));
    }
}
