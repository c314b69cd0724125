//! `--store` (which Redis, and how it is reached) or `--worker` (a Worker's admin route, for
//! state in its Durable Objects). Parsed (and its token found) before anything else happens, so
//! a wrong URL is bad input (exit 2), not a store failure.

use std::fmt;
use std::time::Duration;

use edgelimit::redact::redact;
use edgelimit::store::{StoreSpec, StoreSpecError, REST_URL_VAR};
use edgelimit::Control;
use edgelimit_engine::config::{StoreKind, ADMIN_TOKEN_VAR};
use edgelimit_engine::Config;

use crate::error::AdminError;
use edgelimit_engine::wire::calls::Calls;

use crate::worker::{AdminRoute, Token};

/// Where the CLI's operations go: a Redis store the library builds, or a Worker's admin route.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// Redis, as the library reaches it (one server or a Cluster over RESP, a REST endpoint, or
    /// the configuration's REST shards).
    Redis(StoreSpec),
    /// A Worker's admin route (`--worker`), for state in its Durable Objects.
    Worker {
        /// The route: the Worker's URL and the configuration's `admin_path`.
        url: String,
        /// The admin token (kept out of `Debug` and `Display`).
        token: Token,
    },
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Without a token, and with every secret in a URL (a password, a `_token`) redacted.
impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Redis(spec) => fmt::Display::fmt(spec, f),
            StoreUrl::Worker { url, .. } => f.write_str(&redact(&format!("worker {url}"))),
        }
    }
}

impl StoreUrl {
    /// The store the Worker configured by `config` uses: with shards, their REST URLs and
    /// tokens from the variables each names (as the Worker reads its secrets), and `--store`
    /// must not be given, since one store would miss every other shard's identifiers; without,
    /// [`StoreUrl::parse`].
    pub fn for_config(
        given: Option<&str>,
        cluster: bool,
        config: &Config,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<StoreUrl, AdminError> {
        let shards = &config.shards;
        if shards.is_empty() {
            return StoreUrl::parse(given, cluster, env);
        }
        let names: Vec<&str> = shards.iter().map(|s| s.name.as_str()).collect();
        if given.is_some() || cluster {
            return Err(AdminError::input(
                if given.is_some() {
                    "--store"
                } else {
                    "--cluster"
                },
                format!(
                    "the configuration spreads identifiers over {} shards ({}): leave --store out \
                     and set each shard's URL and token variables, as the Worker's secrets",
                    shards.len(),
                    names.join(", ")
                ),
            ));
        }
        match config
            .store_spec(env)
            .map_err(|e| spec_error("--store", e))?
        {
            Some(spec) => Ok(StoreUrl::Redis(spec)),
            None => unreachable!("a configuration with shards names its store"),
        }
    }

    /// `--worker URL` (`given`) under `config` (read from `file`): the admin route at the
    /// configuration's `admin_path` there, with `token` (`--token`, else `EDGELIMIT_ADMIN_TOKEN`
    /// from `env`). The Worker serves the route only for Durable Objects and only where
    /// `admin_path` says, so a configuration without it, or keeping its state in Redis, is bad
    /// input here rather than a request the Worker would answer as any other.
    pub fn for_worker(
        given: &str,
        token: Option<&Token>,
        config: &Config,
        file: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<StoreUrl, AdminError> {
        let bad = |problem: String| AdminError::input("--worker", problem);
        let given = given.trim();
        let Some((scheme, rest)) = given.split_once("://") else {
            return Err(bad(format!(
                "`{given}` is not a URL: give the Worker's, e.g. https://edge.example.com"
            )));
        };
        if scheme != "http" && scheme != "https" {
            return Err(bad(format!("`{given}`: expected http:// or https://")));
        }
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        if host.is_empty() {
            return Err(bad(format!("`{given}` names no host")));
        }
        if !path.is_empty() {
            return Err(bad(format!(
                "`{given}` has a path: give the Worker's URL alone ({scheme}://{host}); the \
                 route is the configuration's admin_path"
            )));
        }
        if scheme == "https" && !cfg!(feature = "tls") {
            return Err(bad(format!("`{given}` needs TLS: {NO_TLS}")));
        }
        if config.store == Some(StoreKind::Upstash) || !config.shards.is_empty() {
            return Err(bad(format!(
                "{file} keeps the state in Redis (Upstash): the admin route controls Durable \
                 Objects only; give --store instead"
            )));
        }
        let Some(admin_path) = &config.admin_path else {
            return Err(bad(format!(
                "{file} names no admin_path: the Worker serves its admin route only there (add \
                 e.g. admin_path = \"/__edgelimit/admin\" and the {ADMIN_TOKEN_VAR} secret, and \
                 deploy)"
            )));
        };
        let token = match token {
            Some(token) => token.clone(),
            None => Token::new(env(ADMIN_TOKEN_VAR).unwrap_or_default()),
        };
        if token.is_blank() {
            return Err(AdminError::input(
                "--token",
                format!(
                    "not given, and {ADMIN_TOKEN_VAR} is not set: the admin route takes the \
                     Worker's {ADMIN_TOKEN_VAR} secret"
                ),
            ));
        }
        Ok(StoreUrl::Worker {
            url: format!("{scheme}://{host}{admin_path}"),
            token,
        })
    }

    /// Reads `--store` (`given`, else `UPSTASH_REDIS_REST_URL` from `env`), `--cluster` (a
    /// `redis://` store is a Cluster's seed nodes) and, for REST, the token from `env` (the
    /// process environment in the binary; a map in tests).
    pub fn parse(
        given: Option<&str>,
        cluster: bool,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<StoreUrl, AdminError> {
        let bad = |problem: String| AdminError::input("--store", problem);
        let text = match given {
            Some(text) => text.trim().to_string(),
            None => match env(REST_URL_VAR) {
                Some(url) if !url.trim().is_empty() => format!("upstash+{}", url.trim()),
                _ => {
                    return Err(bad(format!(
                        "not given, and {REST_URL_VAR} is not set (e.g. --store redis://127.0.0.1:6379)"
                    )))
                }
            },
        };
        let text = match text.strip_prefix("redis://") {
            Some(nodes) if cluster => format!("redis+cluster://{nodes}"),
            Some(nodes) if nodes.contains(',') => {
                return Err(bad(format!(
                    "`{}` lists several nodes: add --cluster, or write redis+cluster://",
                    redact(&text)
                )))
            }
            _ if cluster && text.starts_with("upstash+") => {
                return Err(bad("--cluster applies to redis:// stores only".into()))
            }
            _ => text,
        };
        let spec = StoreSpec::parse(&text)
            .and_then(|spec| spec.with_token(env))
            .map_err(|e| spec_error("--store", e))?;
        if spec == StoreSpec::Memory {
            return Err(bad(
                "`memory` is a process's own store, which no other process sees: name the \
                 Redis the limiter uses (redis://…, redis+cluster://…, upstash+http(s)://…)"
                    .into(),
            ));
        }
        Ok(StoreUrl::Redis(spec))
    }

    /// Connects, with `timeout` for connecting and for each answer, keeping keys under
    /// `namespace` (the configuration's, so the CLI sees what the Worker wrote).
    pub async fn connect(
        &self,
        namespace: &str,
        timeout: Duration,
    ) -> Result<Box<dyn Control>, AdminError> {
        match self {
            StoreUrl::Redis(spec) => {
                refuse_https_without_tls(spec)?;
                spec.connect(namespace, timeout)
                    .await
                    .map_err(|e| spec_error("--store", e))
            }
            StoreUrl::Worker { url, token } => Ok(Box::new(Calls(AdminRoute::new(
                url.clone(),
                token.clone(),
                timeout,
            )))),
        }
    }
}

/// Why a build without the `tls` feature refuses https, and how to get one that takes it.
const NO_TLS: &str = "this edgelimit-admin was built without its default `tls` feature; \
                      reinstall it without --no-default-features";

/// The library's refusal of a store as the CLI reports it: bad input (exit 2) naming `argument`
/// (the store's URL), the variable or the shard; a store that did not answer, a store failure.
fn spec_error(argument: &str, e: StoreSpecError) -> AdminError {
    match e {
        StoreSpecError::Invalid { field, problem } => {
            AdminError::input(field.as_deref().unwrap_or(argument), problem)
        }
        StoreSpecError::Unset { var, needed_by } => {
            AdminError::input(var, format!("is not set: {needed_by}"))
        }
        other => AdminError::Store(redact(&other.to_string()).into_owned()),
    }
}

/// An https REST URL in a build without TLS: bad input saying how to get a build that has it,
/// rather than the library's own refusal, which names the library's feature.
fn refuse_https_without_tls(spec: &StoreSpec) -> Result<(), AdminError> {
    if cfg!(feature = "tls") {
        return Ok(());
    }
    let urls: Vec<(String, &str)> = match spec {
        StoreSpec::Upstash { url, .. } => vec![("--store".to_string(), url.as_str())],
        StoreSpec::Shards(shards) => shards
            .iter()
            .map(|s| (format!("shard `{}`", s.name), s.url.as_str()))
            .collect(),
        _ => Vec::new(),
    };
    match urls
        .iter()
        .find(|(_, url)| url.trim().starts_with("https://"))
    {
        Some((argument, url)) => Err(AdminError::input(
            argument.as_str(),
            format!("`{}` needs TLS: {NO_TLS}", redact(url.trim())),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgelimit::store::REST_TOKEN_VAR;

    fn parse(
        given: Option<&str>,
        cluster: bool,
        vars: &[(&str, &str)],
    ) -> Result<StoreUrl, String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        StoreUrl::parse(given, cluster, |name| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
        .map_err(|e| e.to_string())
    }

    #[test]
    fn every_store_form_parses() {
        assert_eq!(
            parse(Some("redis://127.0.0.1:6379/0"), false, &[]),
            Ok(StoreUrl::Redis(StoreSpec::Redis(
                "redis://127.0.0.1:6379/0".into()
            )))
        );
        let cluster = StoreUrl::Redis(StoreSpec::Cluster(vec![
            "redis://:pw@10.0.0.1:7000".into(),
            "redis://:pw@10.0.0.2:7001".into(),
        ]));
        assert_eq!(
            parse(
                Some("redis+cluster://:pw@10.0.0.1:7000,10.0.0.2:7001"),
                false,
                &[]
            ),
            Ok(cluster.clone())
        );
        assert_eq!(
            parse(Some("redis://:pw@10.0.0.1:7000,10.0.0.2:7001"), true, &[]),
            Ok(cluster)
        );
        let token = [(REST_TOKEN_VAR, "t0k")];
        assert_eq!(
            parse(Some("upstash+http://127.0.0.1:8080"), false, &token),
            Ok(StoreUrl::Redis(StoreSpec::Upstash {
                url: "http://127.0.0.1:8080".into(),
                token: Some("t0k".into())
            }))
        );
        assert_eq!(
            parse(
                None,
                false,
                &[(REST_URL_VAR, "https://eu1.upstash.io"), token[0]]
            ),
            Ok(StoreUrl::Redis(StoreSpec::Upstash {
                url: "https://eu1.upstash.io".into(),
                token: Some("t0k".into())
            }))
        );
    }

    #[test]
    fn bad_stores_name_the_argument_and_never_print_secrets() {
        let e = parse(Some("upstash+http://h"), false, &[]).unwrap_err();
        assert!(e.starts_with(REST_TOKEN_VAR), "{e}");
        let e = parse(None, false, &[]).unwrap_err();
        assert!(e.starts_with("--store: not given"), "{e}");
        let e = parse(Some("rediss://:hunter2@h:6380"), false, &[]).unwrap_err();
        assert!(e.contains("TLS") && !e.contains("hunter2"), "{e}");
        let e = parse(Some("redis://:hunter2@a:1,b:2"), false, &[]).unwrap_err();
        assert!(e.contains("--cluster") && !e.contains("hunter2"), "{e}");
        let e = parse(Some("memcached://h"), false, &[]).unwrap_err();
        assert!(e.contains("unknown store"), "{e}");
        let e = parse(Some("memory"), false, &[]).unwrap_err();
        assert!(
            e.starts_with("--store: `memory` is a process's own store"),
            "{e}"
        );
        let e = parse(Some("redis+cluster://a:1,,b:2"), false, &[]).unwrap_err();
        assert!(e.contains("cluster node 2"), "{e}");
        let shown = StoreUrl::Redis(StoreSpec::Upstash {
            url: "http://h".into(),
            token: Some("s3cret".into()),
        });
        assert!(!format!("{shown:?} {shown}").contains("s3cret"));
        // A password holding `@` and `:`: its first `@` is not the host's.
        let redis = StoreUrl::Redis(StoreSpec::Redis("redis://u:hun@ter:2@h:1/0".into()));
        assert_eq!(
            format!("{redis} {redis:?}"),
            "redis://u:***@h:1/0 redis://u:***@h:1/0"
        );
        let e = parse(Some("rediss://u:hun@ter2@h:6380"), false, &[]).unwrap_err();
        assert!(!e.contains("ter2") && e.contains("u:***@h:6380"), "{e}");
        let in_query = StoreUrl::Redis(StoreSpec::Upstash {
            url: "https://h.upstash.io/?_token=s3cret".into(),
            token: Some("t".into()),
        });
        assert_eq!(
            in_query.to_string(),
            "upstash+https://h.upstash.io/?_token=***"
        );
    }
}
