//! An argument of a control command that cannot be used ([`ArgumentError`]), and the durations
//! arguments give (`--ttl`, `--timeout`).

use edgelimit::policy::parse_window;

/// An argument (or the configuration file, or an environment variable) that cannot be used,
/// and why. Nothing was written: every argument is checked before the store is contacted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{argument}: {problem}")]
pub struct ArgumentError {
    /// The argument at fault, as typed on the command line: `--ttl`, `TIER`, `--config`.
    pub argument: String,
    /// What is wrong with it.
    pub problem: String,
}

impl ArgumentError {
    /// Bad input in `argument`.
    pub fn new(argument: impl Into<String>, problem: impl Into<String>) -> ArgumentError {
        ArgumentError {
            argument: argument.into(),
            problem: problem.into(),
        }
    }
}

/// `--ttl`: a positive duration (`30s`, `1h`, `7d`).
pub fn ttl_ms(text: Option<&str>) -> Result<Option<u64>, ArgumentError> {
    text.map(|t| duration_ms("--ttl", t)).transpose()
}

/// A positive duration in the policy windows' syntax (`500ms`, `30s`, `15m`, `1h`, `7d`).
pub fn duration_ms(argument: &str, text: &str) -> Result<u64, ArgumentError> {
    match parse_window(text) {
        Ok(0) => Err(ArgumentError::new(argument, format!("`{text}` is zero"))),
        Ok(ms) => Ok(ms),
        Err(problem) => Err(ArgumentError::new(argument, problem)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_must_be_positive_and_name_their_argument() {
        assert_eq!(ttl_ms(Some("7d")), Ok(Some(7 * 86_400_000)));
        assert_eq!(ttl_ms(Some("30s")), Ok(Some(30_000)));
        assert_eq!(ttl_ms(None), Ok(None));
        for bad in ["0s", "7", "1fortnight", "-5s", ""] {
            let e = ttl_ms(Some(bad)).unwrap_err().to_string();
            assert!(e.starts_with("--ttl: "), "{bad}: {e}");
        }
    }
}
