//! `--store` (which Redis, and how it is reached) or `--worker` (a Worker's admin route, for
//! state in its Durable Objects). Parsed (and its token found) before anything else happens, so
//! a wrong URL is bad input (exit 2), not a store failure.

use std::fmt;
use std::time::Duration;

use edgelimit::redact::redact;
use edgelimit::store::{Shard, ShardedStore, REST_TOKEN_VAR, REST_URL_VAR};
use edgelimit::{Control, RespStore, RestStore};
use edgelimit_engine::config::{ShardConfig, StoreKind, ADMIN_TOKEN_VAR};
use edgelimit_engine::Config;

use crate::error::AdminError;
use edgelimit_engine::wire::calls::Calls;

use crate::worker::{AdminRoute, Token};

/// A store named on the command line (or in the environment).
#[derive(Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// One Redis over RESP: `redis://[user:password@]host:port[/db]`.
    Redis(String),
    /// A Redis Cluster, given some of its nodes (`redis://host:port` each).
    Cluster(Vec<String>),
    /// An Upstash REST endpoint (or `edgelimit-gateway`): the `http(s)://` URL and its token.
    Rest {
        /// The endpoint, without `upstash+`.
        url: String,
        /// The bearer token (kept out of `Debug` and `Display`).
        token: String,
    },
    /// The configuration's shards (`shards = [...]`), each a REST endpoint: identifiers are
    /// spread over them by the Worker's rendezvous hashing, lists are kept on every one.
    Shards(Vec<RestShard>),
    /// A Worker's admin route (`--worker`), for state in its Durable Objects.
    Worker {
        /// The route: the Worker's URL and the configuration's `admin_path`.
        url: String,
        /// The admin token (kept out of `Debug` and `Display`).
        token: Token,
    },
}

/// One shard of a sharded configuration, found through its variables.
#[derive(Clone, PartialEq, Eq)]
pub struct RestShard {
    /// The shard's name (it decides which identifiers it owns).
    pub name: String,
    /// Its REST URL.
    pub url: String,
    /// Its token (kept out of `Display`).
    pub token: String,
}

/// Without the token.
impl fmt::Debug for RestShard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RestShard")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("token", &"<redacted>")
            .finish()
    }
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Without the token, and with every secret in a URL (a password, a `_token`) redacted.
impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(&self.unredacted()))
    }
}

impl StoreUrl {
    /// What `Display` shows before redaction (never the REST or admin token, which are kept
    /// apart from the URLs).
    fn unredacted(&self) -> String {
        match self {
            StoreUrl::Redis(url) => url.clone(),
            StoreUrl::Cluster(nodes) => format!("cluster {}", nodes.join(",")),
            StoreUrl::Rest { url, .. } => format!("upstash+{url}"),
            StoreUrl::Shards(shards) => {
                let names: Vec<String> = shards
                    .iter()
                    .map(|s| format!("{} upstash+{}", s.name, s.url))
                    .collect();
                format!("shards {}", names.join(", "))
            }
            StoreUrl::Worker { url, .. } => format!("worker {url}"),
        }
    }
}

impl StoreUrl {
    /// The store the Worker configured with `shards` uses: with shards, their REST URLs and
    /// tokens from the variables each names (as the Worker reads its secrets), and `--store`
    /// must not be given, since one store would miss every other shard's identifiers; without,
    /// [`StoreUrl::parse`].
    pub fn for_config(
        given: Option<&str>,
        cluster: bool,
        shards: &[ShardConfig],
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<StoreUrl, AdminError> {
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
        let var = |name: &str, shard: &str| {
            env(name).filter(|v| !v.trim().is_empty()).ok_or_else(|| {
                AdminError::input(name, format!("is not set (shard `{shard}` names it)"))
            })
        };
        let shards = shards
            .iter()
            .map(|s| {
                Ok(RestShard {
                    name: s.name.clone(),
                    url: var(&s.url_var, &s.name)?,
                    token: var(&s.token_var, &s.name)?,
                })
            })
            .collect::<Result<Vec<_>, AdminError>>()?;
        Ok(StoreUrl::Shards(shards))
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

    /// Reads `--store` (`given`), `--cluster` and, for REST, the token from `env` (the process
    /// environment in the binary; a map in tests).
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
        if text.starts_with("rediss://") || text.starts_with("rediss+cluster://") {
            return Err(bad(format!(
                "`{}`: TLS to Redis over RESP is not built in (the workspace's redis crate has no \
                 TLS feature); use a TLS tunnel to a local redis:// port, or the REST endpoint \
                 (upstash+https://)",
                redact(&text)
            )));
        }
        if let Some(nodes) = text.strip_prefix("redis+cluster://") {
            return cluster_nodes(nodes).map(StoreUrl::Cluster).map_err(bad);
        }
        if let Some(rest) = text.strip_prefix("redis://") {
            if cluster {
                return cluster_nodes(rest).map(StoreUrl::Cluster).map_err(bad);
            }
            if rest.contains(',') {
                return Err(bad(format!(
                    "`{}` lists several nodes: add --cluster, or write redis+cluster://",
                    redact(&text)
                )));
            }
            if host_of(rest).is_empty() {
                return Err(bad(format!("`{}` names no host", redact(&text))));
            }
            return Ok(StoreUrl::Redis(text));
        }
        if let Some(url) = text.strip_prefix("upstash+") {
            if cluster {
                return Err(bad("--cluster applies to redis:// stores only".into()));
            }
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(bad(format!(
                    "`{}`: expected upstash+http://host or upstash+https://host",
                    redact(&text)
                )));
            }
            let token = env(REST_TOKEN_VAR)
                .filter(|t| !t.trim().is_empty())
                .ok_or_else(|| {
                    AdminError::input(
                        REST_TOKEN_VAR,
                        format!(
                            "is not set: the REST store `{}` needs its token",
                            redact(url)
                        ),
                    )
                })?;
            return Ok(StoreUrl::Rest {
                url: url.to_string(),
                token,
            });
        }
        Err(bad(format!(
            "unknown store `{}` (expected redis://…, redis+cluster://…, upstash+http(s)://…)",
            redact(&text)
        )))
    }

    /// Connects, with `timeout` for connecting and for each answer, keeping keys under
    /// `namespace` (the configuration's, so the CLI sees what the Worker wrote).
    pub async fn connect(
        &self,
        namespace: &str,
        timeout: Duration,
    ) -> Result<Box<dyn Control>, AdminError> {
        let failed = |e: edgelimit::StoreError| {
            AdminError::Store(redact(&format!("{self}: {e}")).into_owned())
        };
        Ok(match self {
            StoreUrl::Redis(url) => Box::new(
                RespStore::connect_with_timeout(url, timeout)
                    .await
                    .map_err(failed)?
                    .with_namespace(namespace),
            ),
            StoreUrl::Cluster(nodes) => Box::new(
                RespStore::connect_cluster_with_timeout(nodes, timeout)
                    .await
                    .map_err(failed)?
                    .with_namespace(namespace),
            ),
            StoreUrl::Rest { url, token } => {
                Box::new(rest_store("--store", url, token, namespace, timeout)?)
            }
            StoreUrl::Shards(shards) => {
                let shards = shards
                    .iter()
                    .map(|s| {
                        let argument = format!("shard `{}`", s.name);
                        rest_store(&argument, &s.url, &s.token, namespace, timeout)
                            .map(|store| Shard::new(s.name.clone(), store))
                    })
                    .collect::<Result<Vec<_>, AdminError>>()?;
                Box::new(
                    ShardedStore::new(shards)
                        .map_err(|e| AdminError::input("shards", e.to_string()))?,
                )
            }
            StoreUrl::Worker { url, token } => {
                Box::new(Calls(AdminRoute::new(url.clone(), token.clone(), timeout)))
            }
        })
    }
}

/// Why a build without the `tls` feature refuses https, and how to get one that takes it.
const NO_TLS: &str = "this edgelimit-admin was built without its default `tls` feature; \
                      reinstall it without --no-default-features";

/// A REST store at `url`. A URL the library refuses (https without TLS) is the caller's to fix:
/// bad input naming `argument`, not a store failure.
fn rest_store(
    argument: &str,
    url: &str,
    token: &str,
    namespace: &str,
    timeout: Duration,
) -> Result<RestStore, AdminError> {
    if url.trim().starts_with("https://") && !cfg!(feature = "tls") {
        return Err(AdminError::input(
            argument,
            format!("`{}` needs TLS: {NO_TLS}", redact(url.trim())),
        ));
    }
    Ok(RestStore::new(url, token)
        .map_err(|e| AdminError::input(argument, redact(&format!("`{url}`: {e}")).into_owned()))?
        .with_namespace(namespace)
        .with_timeout(timeout))
}

/// `host:port` out of `[user:password@]host:port[/db]`.
fn host_of(rest: &str) -> &str {
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    rest.split('/').next().unwrap_or("")
}

/// `[user:password@]host:port,host:port…` → one `redis://` URL per node, each carrying the
/// first node's credentials unless it has its own.
fn cluster_nodes(list: &str) -> Result<Vec<String>, String> {
    let mut nodes = Vec::new();
    let mut userinfo: Option<&str> = None;
    for (i, part) in list.split(',').map(str::trim).enumerate() {
        let (own, host) = match part.rsplit_once('@') {
            Some((user, host)) => (Some(user), host),
            None => (None, part),
        };
        if i == 0 {
            userinfo = own;
        }
        let host = host.trim_end_matches('/');
        if host.is_empty() || host.contains('/') {
            return Err(format!(
                "cluster node {} `{}` is not host:port",
                i + 1,
                redact(&format!("redis://{part}"))
            ));
        }
        nodes.push(match own.or(userinfo) {
            Some(user) => format!("redis://{user}@{host}"),
            None => format!("redis://{host}"),
        });
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

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
            Ok(StoreUrl::Redis("redis://127.0.0.1:6379/0".into()))
        );
        let cluster = StoreUrl::Cluster(vec![
            "redis://:pw@10.0.0.1:7000".into(),
            "redis://:pw@10.0.0.2:7001".into(),
        ]);
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
            Ok(StoreUrl::Rest {
                url: "http://127.0.0.1:8080".into(),
                token: "t0k".into()
            })
        );
        assert_eq!(
            parse(
                None,
                false,
                &[(REST_URL_VAR, "https://eu1.upstash.io"), token[0]]
            ),
            Ok(StoreUrl::Rest {
                url: "https://eu1.upstash.io".into(),
                token: "t0k".into()
            })
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
        let e = parse(Some("redis+cluster://a:1,,b:2"), false, &[]).unwrap_err();
        assert!(e.contains("cluster node 2"), "{e}");
        let shown = StoreUrl::Rest {
            url: "http://h".into(),
            token: "s3cret".into(),
        };
        assert!(!format!("{shown:?} {shown}").contains("s3cret"));
        // A password holding `@` and `:`: its first `@` is not the host's.
        let redis = StoreUrl::Redis("redis://u:hun@ter:2@h:1/0".into());
        assert_eq!(
            format!("{redis} {redis:?}"),
            "redis://u:***@h:1/0 redis://u:***@h:1/0"
        );
        let e = parse(Some("rediss://u:hun@ter2@h:6380"), false, &[]).unwrap_err();
        assert!(!e.contains("ter2") && e.contains("u:***@h:6380"), "{e}");
        let in_query = StoreUrl::Rest {
            url: "https://h.upstash.io/?_token=s3cret".into(),
            token: "t".into(),
        };
        assert_eq!(
            in_query.to_string(),
            "upstash+https://h.upstash.io/?_token=***"
        );
    }
}
