//! Trace readers: one parser per log format, and the streaming [`TraceReader`] over them.

mod clf;
mod csv;
mod format;
mod haproxy;
mod lines;
mod logpush;
mod reorder;
pub mod time;
mod trace;

pub use clf::ClfParser;
pub use csv::CsvParser;
pub use format::{Format, Key, LineProblem, LineResult, Parsed, MAX_COST};
pub use haproxy::HaproxyParser;
pub use lines::MAX_LINE_BYTES;
pub use logpush::LogpushParser;
pub use reorder::{Reorder, ReorderStats};
pub use trace::{BadLine, ReadOptions, ReadStats, TraceReader};
