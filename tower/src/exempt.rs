//! Paths the layer passes through untouched, as the service is told: neither counted nor given
//! headers. Matched against the path as the request path reads it (normalised), so no other
//! spelling of a path reaches an exemption it is not.

use edgelimit_engine::rules::PathMatch;

/// What the layer exempts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Exemptions {
    /// Paths that pass, as the rules' segment patterns (`/health`, `/static/**`).
    pub(crate) paths: Vec<PathMatch>,
}

impl Exemptions {
    /// Whether a request to `path` (as read, [`edgelimit_engine::Config::reading`]) passes
    /// through.
    pub(crate) fn exempts(&self, path: &str) -> bool {
        self.paths.iter().any(|p| p.matches(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_paths_pass_and_nothing_else() {
        let mut exempt = Exemptions::default();
        assert!(!exempt.exempts("/health"));
        exempt.paths.push(PathMatch::pattern("/health").unwrap());
        exempt.paths.push(PathMatch::pattern("/static/**").unwrap());
        assert!(exempt.exempts("/health"));
        assert!(exempt.exempts("/static/app.js"));
        assert!(!exempt.exempts("/healthz"));
    }
}
