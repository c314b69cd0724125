//! Trace readers: one parser per log format, and the streaming [`TraceReader`] over them —
//! reading one identifier per line (`--policy`), or whole requests as the Worker sees them
//! (`--config`, [`Request`]).

mod clf;
mod csv;
mod csv_request;
mod edgelimit;
mod format;
mod haproxy;
mod lines;
mod logpush;
mod reorder;
mod request;
pub mod time;
mod trace;

pub use clf::{ClfParser, REMOTE_USER_HEADER};
pub use csv::CsvParser;
pub use csv_request::CsvRequestParser;
pub use edgelimit::EdgelimitParser;
pub use format::{Format, Key, LineProblem, LineResult, Parsed, RequestOptions, MAX_COST};
pub use haproxy::HaproxyParser;
pub use lines::MAX_LINE_BYTES;
pub use logpush::LogpushParser;
pub use reorder::{Reorder, ReorderStats};
pub use request::{PlaceField, Request};
pub use trace::{BadLine, ReadOptions, ReadStats, TraceReader};
