//! [`BuildError`]: why a layer could not be built from its configuration and closures.

/// A layer that could not be built: each names what is wrong and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The configuration names a `custom:` source no closure was registered for.
    #[error("{field}: `custom:{name}` has no closure: register one with {}", hint(name, *cost))]
    Unregistered {
        /// Where the configuration names it.
        field: String,
        /// The name after `custom:`.
        name: String,
        /// Whether it is a cost (`from = "custom:<name>"`), not an identifier.
        cost: bool,
    },
    /// A closure was registered under a name no limit uses (a typo on one side or the other).
    #[error(
        "the custom {} `{name}` is registered, but no limit names `custom:{name}`{}",
        if *cost { "cost" } else { "identifier" },
        if *cost { " as its cost's `from`" } else { " as its identifier" }
    )]
    Unused {
        /// The name it was registered under.
        name: String,
        /// Whether it is a cost.
        cost: bool,
    },
    /// A configuration key only the Cloudflare Worker runs.
    #[error("{field}: {why}")]
    WorkerOnly {
        /// The key.
        field: &'static str,
        /// Why a tower service has no use for it, and what to do instead.
        why: &'static str,
    },
    /// The metrics page (`metrics_path`, not `metrics_public`) has no token, or one shorter
    /// than 32 bytes.
    #[error("metrics_path: {problem}")]
    MetricsToken {
        /// What is wrong, and what to do.
        problem: String,
    },
    /// An exempt path that is not a path pattern.
    #[error("exempt path `{path}`: {problem}")]
    ExemptPath {
        /// The pattern as given.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
}

/// How to register the closure `name` of its kind.
fn hint(name: &str, cost: bool) -> String {
    if cost {
        format!("`.count_when(\"{name}\", …)` or `.response_cost(\"{name}\", …)`")
    } else {
        format!("`.custom_identifier(\"{name}\", …)`")
    }
}
