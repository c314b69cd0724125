//! The service's own sources, by name: identifiers a configuration names as `custom:<name>`
//! (a closure over the request) and costs it settles `from = "custom:<name>"` (a closure over
//! the response). The layer checks when it is built that every name the configuration uses has
//! its closure and every closure is used.

use std::fmt;
use std::sync::Arc;

use edgelimit_engine::Config;
use http::{request, response};

use crate::error::BuildError;

/// A custom identifier: the value of `custom:<name>` for a request, `None` when it has none.
pub(crate) type IdentifyFn = Arc<dyn Fn(&request::Parts) -> Option<String> + Send + Sync>;

/// A custom cost: what a response costs, `None` to leave the reserved estimate charged.
pub(crate) type CostFn = Arc<dyn Fn(&response::Parts) -> Option<u64> + Send + Sync>;

/// The closures registered on a layer.
#[derive(Clone, Default)]
pub(crate) struct Customs {
    identifiers: Vec<(String, IdentifyFn)>,
    costs: Vec<(String, CostFn)>,
}

impl fmt::Debug for Customs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Customs")
            .field("identifiers", &names(&self.identifiers))
            .field("costs", &names(&self.costs))
            .finish()
    }
}

impl Customs {
    /// Registers (or replaces) the identifier `name`.
    pub(crate) fn add_identifier(&mut self, name: String, f: IdentifyFn) {
        self.identifiers.retain(|(n, _)| *n != name);
        self.identifiers.push((name, f));
    }

    /// Registers (or replaces) the cost `name`.
    pub(crate) fn add_cost(&mut self, name: String, f: CostFn) {
        self.costs.retain(|(n, _)| *n != name);
        self.costs.push((name, f));
    }

    /// The value of `custom:<name>` for `request`.
    pub(crate) fn identifier(&self, name: &str, request: &request::Parts) -> Option<String> {
        let (_, f) = self.identifiers.iter().find(|(n, _)| n == name)?;
        f(request)
    }

    /// The cost `custom:<name>` of `response`.
    pub(crate) fn cost(&self, name: &str, response: &response::Parts) -> Option<u64> {
        let (_, f) = self.costs.iter().find(|(n, _)| n == name)?;
        f(response)
    }

    /// Every `custom:` source of `config` has a closure here, and every closure here is named
    /// by `config`: an error names the first that is not (a typo on either side).
    pub(crate) fn check(&self, config: &Config) -> Result<(), BuildError> {
        let named = config.custom_sources();
        for source in &named {
            let registered = if source.cost {
                self.costs.iter().any(|(n, _)| *n == source.name)
            } else {
                self.identifiers.iter().any(|(n, _)| *n == source.name)
            };
            if !registered {
                return Err(BuildError::Unregistered {
                    field: source.field.clone(),
                    name: source.name.clone(),
                    cost: source.cost,
                });
            }
        }
        let unused = |names: Vec<&str>, cost: bool| {
            names
                .into_iter()
                .find(|n| !named.iter().any(|s| s.cost == cost && s.name == *n))
                .map(|n| BuildError::Unused {
                    name: n.to_string(),
                    cost,
                })
        };
        match unused(names(&self.identifiers), false).or_else(|| unused(names(&self.costs), true)) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The names registered in `list`.
fn names<T>(list: &[(String, T)]) -> Vec<&str> {
    list.iter().map(|(n, _)| n.as_str()).collect()
}
