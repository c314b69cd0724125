//! Requests the layer passes through untouched: CORS preflights (unless told otherwise) and the
//! paths it is told. They are neither counted nor given headers.

use edgelimit_engine::rules::PathMatch;
use http::header::ACCESS_CONTROL_REQUEST_METHOD;
use http::request::Parts;
use http::Method;

/// What the layer exempts.
#[derive(Debug, Clone)]
pub(crate) struct Exemptions {
    /// Whether CORS preflights pass (the default): a browser sends one before the request it
    /// guards, which is itself counted, so counting both would halve a browser client's quota.
    pub(crate) preflights: bool,
    /// Paths that pass, as the rules' segment patterns (`/health`, `/static/**`).
    pub(crate) paths: Vec<PathMatch>,
}

impl Default for Exemptions {
    fn default() -> Exemptions {
        Exemptions {
            preflights: true,
            paths: Vec::new(),
        }
    }
}

impl Exemptions {
    /// Whether `request` passes through.
    pub(crate) fn exempts(&self, request: &Parts) -> bool {
        (self.preflights && is_preflight(request))
            || self.paths.iter().any(|p| p.matches(request.uri.path()))
    }
}

/// A CORS preflight, as the Fetch standard sends one: `OPTIONS` with
/// `Access-Control-Request-Method`. Any other `OPTIONS` is an ordinary request.
pub(crate) fn is_preflight(request: &Parts) -> bool {
    request.method == Method::OPTIONS && request.headers.contains_key(ACCESS_CONTROL_REQUEST_METHOD)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(method: Method, path: &str, preflight: bool) -> Parts {
        let mut builder = http::Request::builder().method(method).uri(path);
        if preflight {
            builder = builder.header("access-control-request-method", "POST");
        }
        builder.body(()).unwrap().into_parts().0
    }

    #[test]
    fn preflights_and_listed_paths_pass_and_nothing_else() {
        let mut exempt = Exemptions::default();
        assert!(exempt.exempts(&parts(Method::OPTIONS, "/api/x", true)));
        assert!(!exempt.exempts(&parts(Method::OPTIONS, "/api/x", false)));
        assert!(!exempt.exempts(&parts(Method::POST, "/api/x", true)));
        exempt.paths.push(PathMatch::pattern("/health").unwrap());
        exempt.paths.push(PathMatch::pattern("/static/**").unwrap());
        assert!(exempt.exempts(&parts(Method::GET, "/health", false)));
        assert!(exempt.exempts(&parts(Method::GET, "/static/app.js", false)));
        assert!(!exempt.exempts(&parts(Method::GET, "/healthz", false)));
        exempt.preflights = false;
        assert!(!exempt.exempts(&parts(Method::OPTIONS, "/api/x", true)));
    }
}
