//! Errors the simulator reports: every one names the file, and for bad input the line and field.

use std::path::PathBuf;

/// Why a trace could not be read or replayed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// The trace could not be opened or read.
    #[error("{file}: {cause}")]
    Io {
        /// The trace's name.
        file: String,
        /// The underlying failure (shown in the message, so not chained as a source too).
        cause: std::io::Error,
    },
    /// Reading failed part way through the trace (a truncated or corrupt gzip stream, a device
    /// error). What was read before is counted in the message; the replay stops, because a
    /// report of part of a trace would read as one of all of it.
    #[error("{file}: {cause} (after {lines} lines, {events} events)")]
    Read {
        /// The trace's name.
        file: String,
        /// Lines read whole before the failure.
        lines: u64,
        /// Events parsed from them.
        events: u64,
        /// The underlying failure.
        cause: std::io::Error,
    },
    /// A line could not be parsed (only returned with `--strict`), or named a region the
    /// configuration does not have (always).
    #[error("{file}:{line}: {field}: {problem}")]
    BadLine {
        /// The trace's name.
        file: String,
        /// The 1-based line number.
        line: u64,
        /// The field that is wrong.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// The trace held no event at all (empty, or every line was bad).
    #[error("{file}: no events in the trace{hint}")]
    Empty {
        /// The trace's name.
        file: String,
        /// What the first bad line said, if there was one.
        hint: String,
    },
    /// The arguments do not fit the trace (e.g. `--key host` on a log without hosts).
    #[error("{0}")]
    Usage(String),
    /// A store failed during a store-backed replay.
    #[error("store: {0}")]
    Store(String),
    /// A line of an `--overrides` file is not a command the replay can apply: the
    /// `edgelimit-admin` CLI's own message (clap's, or its validation against the configuration).
    #[error("{file}:{line}: {message}")]
    Overrides {
        /// The overrides file.
        file: String,
        /// The 1-based line number.
        line: u64,
        /// What is wrong, in the admin CLI's words.
        message: String,
    },
    /// `sim suggest`'s verifying replay disagreed with its search (a suggestion that does not
    /// meet its target, or one less that does): a defect in the simulator, reported rather than
    /// printed as a suggestion.
    #[error("suggest: the verifying replay disagrees with the search: {0}")]
    Verification(String),
    /// A `--config` file could not be used: the Worker's own message, naming the field.
    #[error("{file}: {message}")]
    Config {
        /// The file.
        file: String,
        /// What is wrong (`EDGELIMIT_CONFIG: rules[0] "api" → …` for the Worker's checks).
        message: String,
    },
}

impl SimError {
    /// An I/O error on `file`.
    pub fn io(file: impl Into<PathBuf>, cause: std::io::Error) -> SimError {
        SimError::Io {
            file: file.into().display().to_string(),
            cause,
        }
    }
}

impl From<edgelimit_engine::config::file::ConfigFileError> for SimError {
    fn from(e: edgelimit_engine::config::file::ConfigFileError) -> SimError {
        SimError::Config {
            file: e.file,
            message: e.message,
        }
    }
}
