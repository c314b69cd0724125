//! The report kit both replays render through: the terminal text (an aligned table under the
//! trace's header lines), JSON, and the self-contained HTML page with its inline SVG charts, and
//! the words and numbers they share. What a replay reports lives with that replay
//! (`policy::report`, `config::report`); how any report is written lives here, once.

pub mod html;
pub mod json;
pub mod svg;
pub mod text;
pub mod words;
