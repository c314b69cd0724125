//! [`StoreSpec`]: a store named by a URL (`memory`, `redis://`, `redis+cluster://`,
//! `upstash+http(s)://`) or by a configuration's shards, and the store built from it. Every host
//! (the Worker, edgelimit-admin, `sim`, edgelimit-tower) turns its text and variables into a store
//! here, so a backend is added once: its own file, and one arm in [`StoreSpec::parse`] and in
//! [`StoreSpec::build`] (or [`StoreSpec::connect`] when reaching it needs a connection).

use std::fmt;
use std::time::Duration;

use super::error::StoreError;
use super::traits::Control;
use super::upstash::{REST_TOKEN_VAR, REST_URL_VAR};
use crate::redact::redact;

/// A store named by a host's user: parsed from a URL ([`StoreSpec::parse`]) or from the
/// variables a configuration names ([`StoreSpec::from_rest_vars`], [`StoreSpec::shards`]), and
/// built with a namespace and a timeout ([`StoreSpec::build`], [`StoreSpec::connect`]).
///
/// `Display` and `Debug` show it with every secret redacted (a URL's password, a `_token`) and
/// never the REST token, so a host may name it in any log line, error or report.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum StoreSpec {
    /// The library's own [`super::MemoryStore`], in process (`memory`).
    #[default]
    Memory,
    /// One Redis over RESP: `redis://[user:password@]host:port[/db]`.
    Redis(String),
    /// A Redis Cluster over RESP, given some of its nodes (a `redis://host:port` URL each):
    /// `redis+cluster://[user:password@]host:port,host:port…`.
    Cluster(Vec<String>),
    /// Redis over the Upstash REST protocol (Upstash, or `edgelimit-gateway` before any Redis):
    /// `upstash+http(s)://…`.
    Upstash {
        /// The endpoint, without `upstash+`.
        url: String,
        /// The bearer token; `None` until [`StoreSpec::with_token`] reads it from
        /// `UPSTASH_REDIS_REST_TOKEN`, which the URL cannot carry without showing it.
        token: Option<String>,
    },
    /// REST endpoints sharing the identifiers by rendezvous hashing (a configuration's
    /// `shards`), each found through its variables; lists are kept on every one.
    Shards(Vec<RestEndpoint>),
}

/// One REST endpoint named through variables (a shard, a global region's store): what makes it
/// a store, its URL and token being secrets a deployment keeps out of its configuration.
#[derive(Clone, PartialEq, Eq)]
pub struct RestEndpoint {
    /// Its name: for a shard, what decides which identifiers it owns.
    pub name: String,
    /// Its REST URL.
    pub url: String,
    /// Its token (kept out of `Debug`).
    pub token: String,
}

/// Why no store could be made from what was given: bad input naming what and where, or a store
/// that did not answer while connecting. Every URL in it is redacted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreSpecError {
    /// What was given names no store the library reads, or one it cannot build as written.
    #[error("{}{problem}", field.as_ref().map(|f| format!("{f}: ")).unwrap_or_default())]
    Invalid {
        /// Where, when it is not the store's own URL (e.g. "shard `eu`"): a host names its own
        /// argument for the URL.
        field: Option<String>,
        /// What is wrong.
        problem: String,
    },
    /// A variable holding a store's URL or token is not set (or is blank).
    #[error("{var}: is not set: {needed_by}")]
    Unset {
        /// The variable.
        var: String,
        /// Which store needs it.
        needed_by: String,
    },
    /// The store did not answer while connecting.
    #[error("{store}: {error}")]
    Unreachable {
        /// The store, redacted.
        store: String,
        /// What went wrong.
        error: StoreError,
    },
}

impl StoreSpecError {
    fn invalid(problem: String) -> StoreSpecError {
        StoreSpecError::Invalid {
            field: None,
            problem,
        }
    }
}

impl StoreSpec {
    /// Reads a store URL: `memory`, `redis://…`, `redis+cluster://…` or `upstash+http(s)://…`.
    /// A REST token is not part of the URL: [`StoreSpec::with_token`] adds it.
    pub fn parse(text: &str) -> Result<StoreSpec, StoreSpecError> {
        let text = text.trim();
        let bad = StoreSpecError::invalid;
        if text == "memory" {
            return Ok(StoreSpec::Memory);
        }
        if text.starts_with("rediss://") || text.starts_with("rediss+cluster://") {
            return Err(bad(format!(
                "`{}`: TLS to Redis over RESP is not built in (the workspace's redis crate has no \
                 TLS feature); use a TLS tunnel to a local redis:// port, or the REST endpoint \
                 (upstash+https://)",
                redact(text)
            )));
        }
        if let Some(nodes) = text.strip_prefix("redis+cluster://") {
            return cluster_nodes(nodes).map(StoreSpec::Cluster).map_err(bad);
        }
        if let Some(rest) = text.strip_prefix("redis://") {
            if rest.contains(',') {
                return Err(bad(format!(
                    "`{}` lists several nodes: a Redis Cluster is redis+cluster://…",
                    redact(text)
                )));
            }
            if host_of(rest).is_empty() {
                return Err(bad(format!("`{}` names no host", redact(text))));
            }
            return Ok(StoreSpec::Redis(text.to_string()));
        }
        if let Some(url) = text.strip_prefix("upstash+") {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(bad(format!(
                    "`{}`: expected upstash+http://host or upstash+https://host",
                    redact(text)
                )));
            }
            return Ok(StoreSpec::Upstash {
                url: url.to_string(),
                token: None,
            });
        }
        Err(bad(format!(
            "unknown store `{}` (expected memory, redis://…, redis+cluster://…, \
             upstash+http(s)://…)",
            redact(text)
        )))
    }

    /// The REST store of `UPSTASH_REDIS_REST_URL` and `UPSTASH_REDIS_REST_TOKEN` as `lookup`
    /// finds them (the process environment, a Worker's secrets, a map in tests): `None` when the
    /// URL is not set.
    pub fn from_rest_vars(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<StoreSpec>, StoreSpecError> {
        let Some(url) = set(&lookup, REST_URL_VAR) else {
            return Ok(None);
        };
        let url = url.trim();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(StoreSpecError::Invalid {
                field: Some(REST_URL_VAR.to_string()),
                problem: format!("must be an http:// or https:// URL, got `{}`", redact(url)),
            });
        }
        StoreSpec::Upstash {
            url: url.to_string(),
            token: None,
        }
        .with_token(lookup)
        .map(Some)
    }

    /// A configuration's shards — `(name, url_var, token_var)` each — with their URLs and
    /// tokens from `lookup`.
    pub fn shards<'a>(
        shards: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<StoreSpec, StoreSpecError> {
        shards
            .into_iter()
            .map(|(name, url_var, token_var)| {
                RestEndpoint::from_vars(
                    name,
                    url_var,
                    token_var,
                    &format!("shard `{name}`"),
                    &lookup,
                )
            })
            .collect::<Result<Vec<_>, _>>()
            .map(StoreSpec::Shards)
    }

    /// The same store with its REST token, when it has none yet, read through `lookup` as
    /// `UPSTASH_REDIS_REST_TOKEN`: before anything connects, so a missing token is bad input.
    pub fn with_token(
        self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<StoreSpec, StoreSpecError> {
        match self {
            StoreSpec::Upstash { url, token: None } => match set(&lookup, REST_TOKEN_VAR) {
                Some(token) => Ok(StoreSpec::Upstash {
                    url,
                    token: Some(token),
                }),
                None => Err(no_token(&url)),
            },
            other => Ok(other),
        }
    }

    /// Builds a store that needs no connection (memory, REST, shards), keeping keys under
    /// `namespace` and giving each call `timeout`. A RESP store is reached by
    /// [`StoreSpec::connect`].
    pub fn build(
        &self,
        namespace: &str,
        timeout: Duration,
    ) -> Result<Box<dyn Control>, StoreSpecError> {
        match self {
            StoreSpec::Memory => Ok(Box::new(super::MemoryStore::new())),
            StoreSpec::Redis(_) | StoreSpec::Cluster(_) => Err(StoreSpecError::invalid(
                if cfg!(all(feature = "resp", not(target_arch = "wasm32"))) {
                    format!("`{self}` is reached over RESP: it is connected, not built")
                } else {
                    format!(
                        "`{self}`: this build has no RESP store (edgelimit's `resp` feature, \
                         native only)"
                    )
                },
            )),
            StoreSpec::Upstash { url, token } => {
                let Some(token) = token else {
                    return Err(no_token(url));
                };
                rest::single(url, token, namespace, timeout)
            }
            StoreSpec::Shards(endpoints) => rest::sharded(endpoints, namespace, timeout),
        }
    }

    /// Builds a REST store (`upstash+…`, or a configuration's shards) as the one concrete type
    /// both take, a [`super::ShardedStore`] of [`super::RestStore`]s (a single endpoint is its
    /// one shard, `default`): for a host that reaches Redis only over REST and calls nothing
    /// but [`super::Store::check`], so no control operation is linked into it (the Worker's
    /// size budget). Any other store is refused, named.
    #[cfg(feature = "rest")]
    pub fn build_rest(
        &self,
        namespace: &str,
        timeout: Duration,
    ) -> Result<super::ShardedStore<super::RestStore>, StoreSpecError> {
        match self {
            StoreSpec::Upstash { url, token } => {
                let Some(token) = token else {
                    return Err(no_token(url));
                };
                let endpoint = RestEndpoint {
                    name: "default".to_string(),
                    url: url.clone(),
                    token: token.clone(),
                };
                rest::shards(false, std::slice::from_ref(&endpoint), namespace, timeout)
            }
            StoreSpec::Shards(endpoints) => rest::shards(true, endpoints, namespace, timeout),
            other => Err(StoreSpecError::invalid(format!(
                "`{other}` is not a REST store (upstash+http(s)://… or shards)"
            ))),
        }
    }

    /// Connects to the store (or builds it, when it needs no connection), keeping keys under
    /// `namespace`, with `timeout` for connecting and for each answer.
    pub async fn connect(
        &self,
        namespace: &str,
        timeout: Duration,
    ) -> Result<Box<dyn Control>, StoreSpecError> {
        #[cfg(all(feature = "resp", not(target_arch = "wasm32")))]
        if let Some(store) = self.connect_resp(timeout).await? {
            return Ok(Box::new(store.with_namespace(namespace)));
        }
        self.build(namespace, timeout)
    }

    /// The RESP store (one Redis, or a Cluster) connected, `None` for any other.
    #[cfg(all(feature = "resp", not(target_arch = "wasm32")))]
    async fn connect_resp(
        &self,
        timeout: Duration,
    ) -> Result<Option<super::RespStore>, StoreSpecError> {
        use super::RespStore;
        let connected = match self {
            StoreSpec::Redis(url) => RespStore::connect_with_timeout(url, timeout).await,
            StoreSpec::Cluster(nodes) => {
                RespStore::connect_cluster_with_timeout(nodes, timeout).await
            }
            _ => return Ok(None),
        };
        connected
            .map(Some)
            .map_err(|error| StoreSpecError::Unreachable {
                store: self.to_string(),
                error: redacted(error),
            })
    }

    /// What `Display` shows before redaction (never a REST token, kept apart from the URLs).
    fn unredacted(&self) -> String {
        match self {
            StoreSpec::Memory => "memory".to_string(),
            StoreSpec::Redis(url) => url.clone(),
            StoreSpec::Cluster(nodes) => format!("cluster {}", nodes.join(",")),
            StoreSpec::Upstash { url, .. } => format!("upstash+{url}"),
            StoreSpec::Shards(shards) => {
                let names: Vec<String> = shards
                    .iter()
                    .map(|s| format!("{} upstash+{}", s.name, s.url))
                    .collect();
                format!("shards {}", names.join(", "))
            }
        }
    }
}

impl std::str::FromStr for StoreSpec {
    type Err = StoreSpecError;

    fn from_str(text: &str) -> Result<StoreSpec, StoreSpecError> {
        StoreSpec::parse(text)
    }
}

/// Without the token, and with every secret in a URL (a password, a `_token`) redacted.
impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(&self.unredacted()))
    }
}

/// As `Display`: no secret in debug output and logs.
impl fmt::Debug for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl RestEndpoint {
    /// The endpoint `name` whose URL and token are the variables `url_var` and `token_var`, as
    /// `lookup` finds them; `owner` (e.g. "shard `eu`") is who names them, for the error.
    pub fn from_vars(
        name: &str,
        url_var: &str,
        token_var: &str,
        owner: &str,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<RestEndpoint, StoreSpecError> {
        let var = |var: &str| {
            set(&lookup, var).ok_or_else(|| StoreSpecError::Unset {
                var: var.to_string(),
                needed_by: format!("{owner} names it"),
            })
        };
        Ok(RestEndpoint {
            name: name.to_string(),
            url: var(url_var)?,
            token: var(token_var)?,
        })
    }

    /// Its REST store, keeping keys under `namespace`, each request given `timeout`.
    #[cfg(feature = "rest")]
    pub fn build(
        &self,
        namespace: &str,
        timeout: Duration,
    ) -> Result<super::RestStore, StoreSpecError> {
        let field = format!("store `{}`", self.name);
        rest::store(Some(field), &self.url, &self.token, namespace, timeout)
    }
}

/// Without the token.
impl fmt::Debug for RestEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RestEndpoint")
            .field("name", &self.name)
            .field("url", &redact(&self.url))
            .field("token", &"<redacted>")
            .finish()
    }
}

/// The REST store at `url` has no token: the variable it is read from is named.
fn no_token(url: &str) -> StoreSpecError {
    StoreSpecError::Unset {
        var: REST_TOKEN_VAR.to_string(),
        needed_by: format!("the REST store `{}` needs its token", redact(url)),
    }
}

/// A variable's value through `lookup`, unless unset or blank.
fn set(lookup: &impl Fn(&str) -> Option<String>, var: &str) -> Option<String> {
    lookup(var).filter(|v| !v.trim().is_empty())
}

/// A store failure with every secret its text quotes redacted (a driver's error may quote the
/// URL it was given).
#[cfg(all(feature = "resp", not(target_arch = "wasm32")))]
fn redacted(error: StoreError) -> StoreError {
    let text = |s: String| redact(&s).into_owned();
    match error {
        StoreError::Unreachable(s) => StoreError::Unreachable(text(s)),
        StoreError::OverQuota(s) => StoreError::OverQuota(text(s)),
        StoreError::Auth(s) => StoreError::Auth(text(s)),
        StoreError::Protocol(s) => StoreError::Protocol(text(s)),
        StoreError::Script(s) => StoreError::Script(text(s)),
        StoreError::InvalidInput(s) => StoreError::InvalidInput(text(s)),
        other => other,
    }
}

/// The REST stores, or why this build has none.
#[cfg(feature = "rest")]
mod rest {
    use std::time::Duration;

    use super::{redact, RestEndpoint, StoreSpecError};
    use crate::store::{Control, RestStore, Shard, ShardedStore};

    /// One REST store at `url`; a URL the store refuses (https without TLS) is bad input naming
    /// `field` (e.g. a shard) or, without one, the store's URL.
    pub(super) fn store(
        field: Option<String>,
        url: &str,
        token: &str,
        namespace: &str,
        timeout: Duration,
    ) -> Result<RestStore, StoreSpecError> {
        Ok(RestStore::new(url, token)
            .map_err(|e| StoreSpecError::Invalid {
                field,
                problem: redact(&format!("`{}`: {e}", url.trim())).into_owned(),
            })?
            .with_namespace(namespace)
            .with_timeout(timeout))
    }

    pub(super) fn single(
        url: &str,
        token: &str,
        namespace: &str,
        timeout: Duration,
    ) -> Result<Box<dyn Control>, StoreSpecError> {
        Ok(Box::new(store(None, url, token, namespace, timeout)?))
    }

    pub(super) fn sharded(
        endpoints: &[RestEndpoint],
        namespace: &str,
        timeout: Duration,
    ) -> Result<Box<dyn Control>, StoreSpecError> {
        Ok(Box::new(shards(true, endpoints, namespace, timeout)?))
    }

    /// The endpoints as one sharded store; `shards_named` says whether an endpoint's error names
    /// its shard (a configuration's shards) or only its URL (one store given by URL).
    pub(super) fn shards(
        shards_named: bool,
        endpoints: &[RestEndpoint],
        namespace: &str,
        timeout: Duration,
    ) -> Result<ShardedStore<RestStore>, StoreSpecError> {
        let shards = endpoints
            .iter()
            .map(|e| {
                let field = shards_named.then(|| format!("shard `{}`", e.name));
                store(field, &e.url, &e.token, namespace, timeout)
                    .map(|s| Shard::new(e.name.clone(), s))
            })
            .collect::<Result<Vec<_>, _>>()?;
        ShardedStore::new(shards).map_err(|e| StoreSpecError::Invalid {
            field: Some("shards".to_string()),
            problem: e.to_string(),
        })
    }
}

/// Without the `rest` feature: every REST store is refused, naming the feature.
#[cfg(not(feature = "rest"))]
mod rest {
    use std::time::Duration;

    use super::{RestEndpoint, StoreSpecError};
    use crate::store::Control;

    fn missing(what: String) -> StoreSpecError {
        StoreSpecError::invalid(format!(
            "{what}: this build has no REST store (edgelimit's `rest` feature)"
        ))
    }

    pub(super) fn single(
        url: &str,
        _token: &str,
        _namespace: &str,
        _timeout: Duration,
    ) -> Result<Box<dyn Control>, StoreSpecError> {
        Err(missing(format!("`upstash+{}`", super::redact(url))))
    }

    pub(super) fn sharded(
        _endpoints: &[RestEndpoint],
        _namespace: &str,
        _timeout: Duration,
    ) -> Result<Box<dyn Control>, StoreSpecError> {
        Err(missing("shards".to_string()))
    }
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

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    fn problem(text: &str) -> String {
        StoreSpec::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn every_scheme_parses() {
        assert_eq!(StoreSpec::parse("memory"), Ok(StoreSpec::Memory));
        assert_eq!(
            StoreSpec::parse(" redis://127.0.0.1:6379/0 "),
            Ok(StoreSpec::Redis("redis://127.0.0.1:6379/0".into()))
        );
        assert_eq!(
            StoreSpec::parse("redis+cluster://:pw@10.0.0.1:7000,10.0.0.2:7001"),
            Ok(StoreSpec::Cluster(vec![
                "redis://:pw@10.0.0.1:7000".into(),
                "redis://:pw@10.0.0.2:7001".into(),
            ]))
        );
        // A node with credentials of its own keeps them.
        assert_eq!(
            StoreSpec::parse("redis+cluster://a:1,u:p@b:2"),
            Ok(StoreSpec::Cluster(vec![
                "redis://a:1".into(),
                "redis://u:p@b:2".into()
            ]))
        );
        assert_eq!(
            "upstash+https://eu1.upstash.io".parse::<StoreSpec>(),
            Ok(StoreSpec::Upstash {
                url: "https://eu1.upstash.io".into(),
                token: None
            })
        );
    }

    #[test]
    fn the_rest_token_and_shards_come_from_variables() {
        let spec = StoreSpec::parse("upstash+http://127.0.0.1:8080").unwrap();
        assert_eq!(
            spec.clone().with_token(vars(&[(REST_TOKEN_VAR, "t0k")])),
            Ok(StoreSpec::Upstash {
                url: "http://127.0.0.1:8080".into(),
                token: Some("t0k".into())
            })
        );
        let e = spec.with_token(vars(&[(REST_TOKEN_VAR, " ")])).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{REST_TOKEN_VAR}: is not set: the REST store `http://127.0.0.1:8080` needs its \
                 token"
            )
        );
        assert_eq!(StoreSpec::from_rest_vars(vars(&[])), Ok(None));
        // A Redis URL pasted where the REST URL belongs: named, its password redacted.
        let e = StoreSpec::from_rest_vars(vars(&[(
            REST_URL_VAR,
            "rediss://default:Pa55w0rd%40@eu1.upstash.io:6379",
        )]))
        .unwrap_err()
        .to_string();
        assert!(
            e.ends_with("got `rediss://default:***@eu1.upstash.io:6379`"),
            "{e}"
        );
        let e = StoreSpec::from_rest_vars(vars(&[(REST_URL_VAR, "ftp://u:s3cret@h")]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!("{REST_URL_VAR}: must be an http:// or https:// URL, got `ftp://u:***@h`")
        );
        assert_eq!(
            StoreSpec::from_rest_vars(vars(&[
                (REST_URL_VAR, "https://eu1.upstash.io"),
                (REST_TOKEN_VAR, "t0k")
            ])),
            Ok(Some(StoreSpec::Upstash {
                url: "https://eu1.upstash.io".into(),
                token: Some("t0k".into())
            }))
        );
        let lookup = vars(&[
            ("EU_URL", "http://eu"),
            ("EU_TOKEN", "e"),
            ("US_URL", "http://us"),
        ]);
        let e = StoreSpec::shards(
            [("eu", "EU_URL", "EU_TOKEN"), ("us", "US_URL", "US_TOKEN")],
            &lookup,
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "US_TOKEN: is not set: shard `us` names it");
        let spec = StoreSpec::shards([("eu", "EU_URL", "EU_TOKEN")], &lookup).unwrap();
        assert_eq!(spec.to_string(), "shards eu upstash+http://eu");
    }

    #[test]
    fn bad_stores_say_what_is_wrong_without_secrets() {
        let e = problem("rediss://u:hun@ter2@h:6380");
        assert!(e.contains("TLS") && e.contains("u:***@h:6380"), "{e}");
        assert!(!e.contains("ter2") && !e.contains("hun"), "{e}");
        let e = problem("redis://:hunter2@a:1,b:2");
        assert!(
            e.contains("several nodes") && e.contains("redis+cluster://"),
            "{e}"
        );
        assert!(!e.contains("hunter2"), "{e}");
        assert!(problem("redis://").contains("names no host"));
        assert!(problem("redis://:pw@/0").contains("names no host"));
        let e = problem("redis+cluster://:hunter2@a:1,,b:2");
        assert!(
            e.contains("cluster node 2") && !e.contains("hunter2"),
            "{e}"
        );
        let e = problem("upstash+ftp://u:hunter2@h");
        assert!(
            e.contains("expected upstash+http://host") && !e.contains("hunter2"),
            "{e}"
        );
        let e = problem("memcached://u:hunter2@h");
        assert!(e.starts_with("unknown store `memcached://u:***@h`"), "{e}");
    }

    #[test]
    fn display_and_debug_never_show_a_password_or_a_token() {
        // A password holding `@` and `:`: its first `@` is not the host's.
        let redis = StoreSpec::parse("redis://u:hun@ter:2@h:1/0").unwrap();
        assert_eq!(
            format!("{redis} {redis:?}"),
            "redis://u:***@h:1/0 redis://u:***@h:1/0"
        );
        let cluster = StoreSpec::parse("redis+cluster://:s3cret@a:1,b:2").unwrap();
        assert_eq!(
            cluster.to_string(),
            "cluster redis://:***@a:1,redis://:***@b:2"
        );
        let rest = StoreSpec::Upstash {
            url: "https://h.upstash.io/?_token=s3cret".into(),
            token: Some("t0ken".into()),
        };
        assert_eq!(rest.to_string(), "upstash+https://h.upstash.io/?_token=***");
        let shown = format!("{rest} {rest:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("t0ken"),
            "{shown}"
        );
        let endpoint = RestEndpoint {
            name: "eu".into(),
            url: "https://u:s3cret@eu".into(),
            token: "t0ken".into(),
        };
        let shards = StoreSpec::Shards(vec![endpoint.clone()]);
        let shown = format!("{endpoint:?} {shards} {shards:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("t0ken"),
            "{shown}"
        );
    }

    #[test]
    fn building_refuses_what_it_cannot_make() {
        let timeout = Duration::from_millis(50);
        // A token the URL could not carry is asked for, not guessed.
        let e = StoreSpec::parse("upstash+http://h")
            .unwrap()
            .build("ns", timeout)
            .err()
            .unwrap();
        assert!(matches!(e, StoreSpecError::Unset { .. }), "{e}");
        // RESP needs a connection, which `build` does not make.
        assert!(StoreSpec::parse("redis://h:1")
            .unwrap()
            .build("ns", timeout)
            .is_err());
        assert!(StoreSpec::Memory.build("ns", timeout).is_ok());
    }

    #[cfg(feature = "rest")]
    #[test]
    fn rest_stores_are_built_and_a_refused_url_names_its_shard() {
        let timeout = Duration::from_millis(50);
        let rest = StoreSpec::Upstash {
            url: "http://127.0.0.1:1".into(),
            token: Some("t".into()),
        };
        assert!(rest.build("ns", timeout).is_ok());
        let shards = StoreSpec::Shards(vec![RestEndpoint {
            name: "eu".into(),
            url: "ftp://u:s3cret@eu".into(),
            token: "t".into(),
        }]);
        let e = shards.build("ns", timeout).err().unwrap().to_string();
        assert!(e.starts_with("shard `eu`: `ftp://u:***@eu`"), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
    }
}
