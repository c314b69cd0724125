//! `--decisions FILE`: every decision of a configuration replay as CSV, one row per request and
//! limit decided, in trace order — what a spreadsheet or a script can join against a log.
//!
//! Rows are written where the tallies count (`tally::tally_rule`), from the same decision of the
//! Worker's request path, so the file and the report cannot disagree.

use std::fs::File;
use std::path::{Path, PathBuf};

use edgelimit::store::key::encode_identifier;
use edgelimit::Identifier;
#[cfg(doc)]
use edgelimit::Reason;

use crate::error::SimError;

/// The columns, in order.
pub const COLUMNS: [&str; 7] = [
    "time_ms",
    "region",
    "rule",
    "limit",
    "identifier",
    "status",
    "reason",
];

/// The column a replay in regions adds: the status the exact reference (one store) answered.
pub const EXACT_STATUS: &str = "exact_status";

/// The reason of a limit whose identifier the request lacks, under `missing = "deny"`: the
/// request is refused (400) without asking the store (the report's `denied_by` key).
pub const MISSING_IDENTIFIER: &str = "missing_identifier";

/// The writer's buffer: rows are small and many.
const BUFFER: usize = 1 << 16;

/// The decisions file being written.
#[derive(Debug)]
pub struct DecisionLog {
    path: PathBuf,
    writer: csv::Writer<File>,
    rows: u64,
    /// Whether rows carry the reference's status (a replay in regions).
    exact_status: bool,
    /// The first write that failed: the replay stops at the end of that request.
    failed: Option<csv::Error>,
}

/// One row.
#[derive(serde::Serialize)]
struct Row<'a> {
    time_ms: u64,
    region: &'a str,
    rule: &'a str,
    limit: &'a str,
    identifier: &'a str,
    status: u16,
    reason: &'static str,
}

/// One row of a replay in regions.
#[derive(serde::Serialize)]
struct RowInRegions<'a> {
    time_ms: u64,
    region: &'a str,
    rule: &'a str,
    limit: &'a str,
    identifier: &'a str,
    status: u16,
    reason: &'static str,
    exact_status: u16,
}

/// What one request's rows share.
#[derive(Debug, Clone, Copy)]
pub(super) struct RequestRow<'a> {
    /// Its time (the isolate's clock: the trace's).
    pub(super) time_ms: u64,
    /// The name of the region it was placed in; empty without regions.
    pub(super) region: &'a str,
    /// The status the Worker answered it with (in its region, for a replay in regions).
    pub(super) status: u16,
    /// For a replay in regions: the status of the exact reference (one store).
    pub(super) exact_status: Option<u16>,
}

impl DecisionLog {
    /// Creates `path` (truncating it) and writes the header row.
    pub fn create(path: &Path) -> Result<DecisionLog, SimError> {
        DecisionLog::create_with(path, false)
    }

    /// [`DecisionLog::create`], each row with the exact reference's status after the others
    /// ([`EXACT_STATUS`]) when `exact_status` (a replay in regions).
    pub fn create_with(path: &Path, exact_status: bool) -> Result<DecisionLog, SimError> {
        let file = File::create(path).map_err(|e| SimError::io(path, e))?;
        let mut writer = csv::WriterBuilder::new()
            .has_headers(false)
            .buffer_capacity(BUFFER)
            .from_writer(file);
        let mut header = COLUMNS.to_vec();
        if exact_status {
            header.push(EXACT_STATUS);
        }
        writer
            .write_record(header)
            .map_err(|e| write_error(path, e))?;
        Ok(DecisionLog {
            path: path.to_path_buf(),
            writer,
            rows: 0,
            exact_status,
            failed: None,
        })
    }

    /// Writes the row of `rule`'s `limit` deciding `identifier` with `reason` (its name, as
    /// [`Reason::as_str`] gives it, or [`MISSING_IDENTIFIER`]) for the request `request`. The
    /// identifier is written as the Worker logs it (escaped, or `#` and a SHA-256 when long;
    /// empty for `missing = "shared"` and a missing one). A failure is kept for
    /// [`DecisionLog::check`].
    pub(super) fn push(
        &mut self,
        request: RequestRow<'_>,
        rule: &str,
        limit: &str,
        identifier: Option<&Identifier>,
        reason: &'static str,
    ) {
        if self.failed.is_some() {
            return;
        }
        let identifier = &identifier.map(encode_identifier).unwrap_or_default();
        let written = match (self.exact_status, request.exact_status) {
            (true, exact) => self.writer.serialize(RowInRegions {
                time_ms: request.time_ms,
                region: request.region,
                rule,
                limit,
                identifier,
                status: request.status,
                reason,
                exact_status: exact.unwrap_or(request.status),
            }),
            (false, _) => self.writer.serialize(Row {
                time_ms: request.time_ms,
                region: request.region,
                rule,
                limit,
                identifier,
                status: request.status,
                reason,
            }),
        };
        match written {
            Ok(()) => self.rows += 1,
            Err(e) => self.failed = Some(e),
        }
    }

    /// Rows written so far, the header not counted.
    pub(super) fn rows(&self) -> u64 {
        self.rows
    }

    /// Copies the next `count` rows of `share` (another decisions file being read, its header
    /// read already) here, as they were written.
    pub(super) fn copy_rows(
        &mut self,
        share: &mut csv::Reader<File>,
        count: u64,
        record: &mut csv::ByteRecord,
    ) -> Result<(), SimError> {
        for _ in 0..count {
            let read = share
                .read_byte_record(record)
                .map_err(|e| SimError::io(&self.path, std::io::Error::other(e.to_string())))?;
            if !read {
                return Err(SimError::io(
                    &self.path,
                    std::io::Error::other("a replay thread's decisions ended early"),
                ));
            }
            self.writer
                .write_byte_record(record)
                .map_err(|e| write_error(&self.path, e))?;
            self.rows += 1;
        }
        Ok(())
    }

    /// Fails if a write did.
    pub fn check(&mut self) -> Result<(), SimError> {
        match self.failed.take() {
            Some(e) => Err(write_error(&self.path, e)),
            None => Ok(()),
        }
    }

    /// Flushes the file: what was written, as reported.
    pub fn finish(mut self) -> Result<DecisionsReport, SimError> {
        self.check()?;
        self.writer
            .flush()
            .map_err(|e| SimError::io(&self.path, e))?;
        Ok(DecisionsReport {
            file: self.path.display().to_string(),
            rows: self.rows,
        })
    }
}

fn write_error(path: &Path, e: csv::Error) -> SimError {
    let message = e.to_string();
    match e.into_kind() {
        csv::ErrorKind::Io(e) => SimError::io(path, e),
        _ => SimError::io(path, std::io::Error::other(message)),
    }
}

/// What `--decisions` wrote.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DecisionsReport {
    /// The file.
    pub file: String,
    /// Rows written, the header not counted.
    pub rows: u64,
}
