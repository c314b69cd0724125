//! The routes: one command (`POST /` and the path form), `/pipeline`, `/multi-exec`, and the
//! metrics page. The token was checked before any of them runs (see `middleware`).

mod call;
mod metrics_page;
mod pipeline;
mod single;
mod transaction;

pub(crate) use metrics_page::metrics_page;
pub(crate) use pipeline::pipeline;
pub(crate) use single::{path_form, single};
pub(crate) use transaction::multi_exec;
