//! The bearer secrets of a configuration's guarded routes — the admin route (`admin_path`) and
//! the metrics page (`metrics_path`, unless `metrics_public`) — read from the host's secrets
//! and checked once, when the configuration is loaded: a route that needs a token and has none,
//! or one shorter than [`MIN_TOKEN_BYTES`], is a configuration error naming the secret.

use std::fmt;

use super::{Config, ConfigError, ADMIN_TOKEN_VAR, METRICS_TOKEN_VAR};

/// The shortest bearer secret a guarded route accepts, in bytes: 32 random bytes' worth of
/// hex is 64, and anything under 32 is within reach of guessing even at the rate the routes
/// allow failures ([`crate::route_guard`]).
pub const MIN_TOKEN_BYTES: usize = 32;

/// A guarded route's bearer secret: at least [`MIN_TOKEN_BYTES`] long, surrounding whitespace
/// removed, and kept out of `Debug`; with the name of the variable it came from, which a
/// refusal names.
#[derive(Clone, PartialEq, Eq)]
pub struct RouteToken {
    var: String,
    secret: String,
}

impl fmt::Debug for RouteToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RouteToken({}, <redacted>)", self.var)
    }
}

impl RouteToken {
    /// The secret `value` of the variable `var`, when it is long enough; else an error naming
    /// `var` (never the value).
    pub fn new(var: &str, value: &str) -> Result<RouteToken, ConfigError> {
        let value = value.trim();
        if value.len() < MIN_TOKEN_BYTES {
            return Err(ConfigError::at(
                format!("{var} (secret)"),
                format!(
                    "is {} bytes; a route's bearer token must be at least {MIN_TOKEN_BYTES} \
                     (e.g. `openssl rand -hex 32`)",
                    value.len()
                ),
            ));
        }
        Ok(RouteToken {
            var: var.to_string(),
            secret: value.to_string(),
        })
    }

    /// The secret, to compare a presented token with.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The variable the secret came from (`EDGELIMIT_ADMIN_TOKEN`).
    pub fn var(&self) -> &str {
        &self.var
    }
}

/// The tokens a configuration's guarded routes ask for ([`Config::route_tokens`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteTokens {
    /// The admin route's (`admin_path`), when it is on.
    pub admin: Option<RouteToken>,
    /// The metrics page's (`metrics_path`), when it is on and not `metrics_public`:
    /// [`METRICS_TOKEN_VAR`]'s, else [`ADMIN_TOKEN_VAR`]'s.
    pub metrics: Option<RouteToken>,
}

impl Config {
    /// The tokens this configuration's routes need, from the host's secrets (`secret(name)`, a
    /// blank value counting as unset). Refused: an admin route without [`ADMIN_TOKEN_VAR`], a
    /// metrics page that is not `metrics_public` without [`METRICS_TOKEN_VAR`] or
    /// [`ADMIN_TOKEN_VAR`], and any of these shorter than [`MIN_TOKEN_BYTES`] — set, it must be
    /// long enough even where unused.
    pub fn route_tokens(
        &self,
        secret: impl Fn(&str) -> Option<String>,
    ) -> Result<RouteTokens, ConfigError> {
        let read = |var: &str| {
            secret(var)
                .filter(|value| !value.trim().is_empty())
                .map(|value| RouteToken::new(var, &value))
                .transpose()
        };
        let admin_secret = read(ADMIN_TOKEN_VAR)?;
        let metrics_secret = read(METRICS_TOKEN_VAR)?;
        let admin = match &self.admin_path {
            None => None,
            Some(path) => Some(admin_secret.clone().ok_or_else(|| {
                ConfigError::at(
                    "admin_path",
                    format!(
                        "`{path}` needs the {ADMIN_TOKEN_VAR} secret (`wrangler secret put \
                         {ADMIN_TOKEN_VAR}`; .dev.vars locally), at least {MIN_TOKEN_BYTES} bytes"
                    ),
                )
            })?),
        };
        let metrics = match &self.metrics_path {
            Some(_) if self.metrics_public => None,
            None => None,
            Some(path) => Some(metrics_secret.or(admin_secret).ok_or_else(|| {
                ConfigError::at(
                    "metrics_path",
                    format!(
                        "`{path}` answers a bearer token: set the {METRICS_TOKEN_VAR} secret (or \
                         {ADMIN_TOKEN_VAR}), at least {MIN_TOKEN_BYTES} bytes, or \
                         metrics_public = true to serve it to anyone"
                    ),
                )
            })?),
        };
        Ok(RouteTokens { admin, metrics })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LONG: &str = "0123456789abcdef0123456789abcdef";

    fn config(extra: serde_json::Value) -> Config {
        let mut value = json!({"rules": [{"name": "r", "limits": [
            {"name": "l", "policy": "fixed 1/1m", "identifier": "ip"}]}]});
        for (key, v) in extra.as_object().unwrap() {
            value[key] = v.clone();
        }
        Config::from_value(value).unwrap()
    }

    fn secrets<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn a_token_shorter_than_32_bytes_is_refused_naming_its_secret() {
        let short = &LONG[..31];
        let e = RouteToken::new(ADMIN_TOKEN_VAR, short).unwrap_err();
        assert_eq!(e.field, "EDGELIMIT_ADMIN_TOKEN (secret)");
        assert!(e.problem.contains("is 31 bytes"), "{e}");
        assert!(!e.to_string().contains(short), "the value stays out: {e}");
        // Whitespace around it does not count.
        assert!(RouteToken::new(ADMIN_TOKEN_VAR, &format!("  {short}\n")).is_err());
        assert_eq!(
            RouteToken::new(ADMIN_TOKEN_VAR, &format!(" {LONG} "))
                .unwrap()
                .secret(),
            LONG
        );
        assert_eq!(
            format!("{:?}", RouteToken::new("X", LONG).unwrap()),
            "RouteToken(X, <redacted>)"
        );
        // Checked wherever set, even when no route uses it.
        let e = config(json!({}))
            .route_tokens(secrets(&[(METRICS_TOKEN_VAR, "short")]))
            .unwrap_err();
        assert_eq!(e.field, "EDGELIMIT_METRICS_TOKEN (secret)");
    }

    #[test]
    fn the_admin_route_needs_its_token() {
        let with_admin = config(json!({"admin_path": "/__admin"}));
        let e = with_admin.route_tokens(secrets(&[])).unwrap_err();
        assert_eq!(e.field, "admin_path");
        assert!(
            e.problem.contains("needs the EDGELIMIT_ADMIN_TOKEN secret"),
            "{e}"
        );
        let tokens = with_admin
            .route_tokens(secrets(&[(ADMIN_TOKEN_VAR, LONG)]))
            .unwrap();
        assert_eq!(tokens.admin.unwrap().secret(), LONG);
        assert_eq!(tokens.metrics, None, "no metrics page");
        assert_eq!(
            config(json!({}))
                .route_tokens(secrets(&[(ADMIN_TOKEN_VAR, LONG)]))
                .unwrap(),
            RouteTokens::default(),
            "no route, no token"
        );
    }

    #[test]
    fn the_metrics_page_needs_a_token_unless_public() {
        let metrics = config(json!({"metrics_path": "/m"}));
        let e = metrics.route_tokens(secrets(&[])).unwrap_err();
        assert_eq!(e.field, "metrics_path");
        assert!(e.problem.contains("metrics_public = true"), "{e}");
        let own = "m".repeat(40);
        for (given, expected) in [
            (vec![(METRICS_TOKEN_VAR, own.as_str())], own.as_str()),
            (vec![(ADMIN_TOKEN_VAR, LONG)], LONG),
            (
                vec![(ADMIN_TOKEN_VAR, LONG), (METRICS_TOKEN_VAR, own.as_str())],
                own.as_str(),
            ),
        ] {
            let tokens = metrics.route_tokens(secrets(&given)).unwrap();
            assert_eq!(tokens.metrics.unwrap().secret(), expected, "{given:?}");
        }
        let public = config(json!({"metrics_path": "/m", "metrics_public": true}));
        assert_eq!(
            public.route_tokens(secrets(&[])).unwrap(),
            RouteTokens::default()
        );
    }
}
