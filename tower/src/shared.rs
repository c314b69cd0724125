//! What every service a layer wraps shares: the request path over the store and how requests are
//! read.

use std::sync::Arc;

use edgelimit::Clock;
use edgelimit_engine::Edge;

use crate::exempt::Exemptions;
use crate::request::Reading;

/// What every service the layer wraps shares: the request path over the store, and how
/// requests are read.
pub(crate) struct Shared<S> {
    pub(crate) edge: Edge<S>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) reading: Reading,
    pub(crate) exempt: Exemptions,
}
