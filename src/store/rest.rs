//! `RestStore`: Redis over the Upstash REST protocol — the store a Cloudflare Worker uses, and
//! native services too. One `/pipeline` request per batch; natively and on wasm32 alike.
//!
//! Scripts run by `EVALSHA`; entries that come back `NOSCRIPT` (a fresh or flushed Redis) are
//! re-sent with `EVAL` and the source in one more `/pipeline`; a lost answer is retried once when
//! the batch is idempotent — never more than three round trips.
//! Results are asked for in base64 (`Upstash-Encoding: base64`), as the official clients do, so
//! any bytes survive JSON.

use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};

use super::check::{Check, TimeSource, Verdict};
use super::error::StoreError;
use super::key::DEFAULT_NAMESPACE;
use super::redis_control::{redis_control, RedisCalls};
use super::traits::Store;
use super::upstash::{
    check_by_scripts, decode_pipeline, plain_pipeline_body, post_resent_if, run_scripts,
    LoadedScripts, REST_TOKEN_VAR, REST_URL_VAR,
};
use crate::global::take::{Take, Taken};
use crate::script::{read_taken, take_invocation, Invocation, Reply};

/// A [`Store`] speaking the Upstash REST protocol (Upstash, or `edgelimit-gateway` in front of
/// any Redis). A `/pipeline` whose answer is lost (the connection dropped, the time ran out) is
/// sent once more when every check of the batch is idempotent ([`Check::is_idempotent`]: its
/// items carry request ids), since the first may have run: the repeat then answers the first
/// decisions and charges nothing twice.
#[derive(Clone)]
pub struct RestStore {
    client: reqwest::Client,
    pipeline_url: String,
    // `pipeline_url` parsed once, not on every request; `None` when it does not parse, and
    // then each request fails on it as before.
    parsed_url: Option<reqwest::Url>,
    token: String,
    // `Authorization: Bearer <token>`, made once (marked sensitive, as `bearer_auth` does);
    // `None` when the token cannot be a header value, and then each request fails on it.
    authorization: Option<HeaderValue>,
    namespace: String,
    timeout: Duration,
    // Shared by clones: one Redis, one set of scripts it holds.
    loaded: std::sync::Arc<LoadedScripts>,
}

impl std::fmt::Debug for RestStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestStore")
            .field("pipeline_url", &self.pipeline_url)
            .field("token", &"<redacted>")
            .field("namespace", &self.namespace)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl RestStore {
    /// How long one request may take by default. At the edge a limiter must answer fast or
    /// step aside (each limit's fail mode decides how).
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(1_000);

    /// A store at `url` (`https://…upstash.io`, or `http://127.0.0.1:<port>` for a gateway),
    /// presenting `token`.
    pub fn new(url: &str, token: &str) -> Result<RestStore, StoreError> {
        let url = url.trim().trim_end_matches('/');
        let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
        if !scheme_ok {
            return Err(StoreError::InvalidInput(format!(
                "{REST_URL_VAR} must be an http:// or https:// URL, got `{url}`"
            )));
        }
        if token.trim().is_empty() {
            return Err(StoreError::InvalidInput(format!(
                "{REST_TOKEN_VAR} is empty"
            )));
        }
        #[cfg(all(not(target_arch = "wasm32"), not(feature = "rest-tls")))]
        if url.starts_with("https://") {
            return Err(StoreError::InvalidInput(format!(
                "`{url}` needs TLS: build edgelimit with the `rest-tls` feature for https on native targets"
            )));
        }
        let pipeline_url = format!("{url}/pipeline");
        let token = token.trim().to_string();
        let authorization = HeaderValue::try_from(format!("Bearer {token}"))
            .ok()
            .map(|mut v| {
                v.set_sensitive(true);
                v
            });
        Ok(RestStore {
            client: reqwest::Client::new(),
            parsed_url: reqwest::Url::parse(&pipeline_url).ok(),
            pipeline_url,
            authorization,
            token,
            namespace: DEFAULT_NAMESPACE.to_string(),
            timeout: RestStore::DEFAULT_TIMEOUT,
            loaded: Default::default(),
        })
    }

    /// A store configured from `UPSTASH_REDIS_REST_URL` and `UPSTASH_REDIS_REST_TOKEN`.
    pub fn from_env() -> Result<RestStore, StoreError> {
        let var = |name: &str| {
            std::env::var(name).map_err(|_| StoreError::InvalidInput(format!("{name} is not set")))
        };
        RestStore::new(&var(REST_URL_VAR)?, &var(REST_TOKEN_VAR)?)
    }

    /// The same store keeping its keys under `namespace`.
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> RestStore {
        self.namespace = namespace.into();
        self
    }

    /// The same store with another per-request timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> RestStore {
        self.timeout = timeout;
        self
    }

    /// The same store speaking HTTP/2 over cleartext TCP from the first byte ("h2c", prior
    /// knowledge) to an `http://` URL: concurrent requests share one connection, framed into
    /// few writes, instead of a connection and a write/read/wake-up each on both sides
    /// (`docs/performance.md` §3). For `edgelimit-gateway`, which serves HTTP/1.1 and h2c on one
    /// port; a server speaking only HTTP/1.1 refuses it, hence opt-in. An `https://` URL is left
    /// as it is: TLS negotiates HTTP/2 by ALPN when the server offers it. Native targets only (a
    /// Worker's `fetch` picks its own protocol).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn with_h2c(mut self) -> Result<RestStore, StoreError> {
        if self.pipeline_url.starts_with("http://") {
            self.client = reqwest::Client::builder()
                .http2_prior_knowledge()
                .build()
                .map_err(|e| StoreError::InvalidInput(format!("cannot make an h2c client: {e}")))?;
        }
        Ok(self)
    }

    /// Sends one `/pipeline` (`body`, `n` commands) and reads one reply per command.
    async fn pipeline(&self, body: Vec<u8>, n: usize) -> Result<Vec<Reply>, StoreError> {
        let started = web_time::Instant::now();
        let request = match &self.parsed_url {
            Some(url) => self.client.post(url.clone()),
            None => self.client.post(&self.pipeline_url),
        };
        let request = match &self.authorization {
            Some(value) => request.header(AUTHORIZATION, value.clone()),
            None => request.bearer_auth(&self.token),
        };
        let sent = request
            .header("Upstash-Encoding", HeaderValue::from_static("base64"))
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .timeout(self.timeout)
            .body(body)
            .send()
            .await;
        let timed_out = |e: &reqwest::Error| {
            // On wasm32 a fired timeout does not say so (`is_timeout` is false): judge by time.
            e.is_timeout() || started.elapsed() >= self.timeout
        };
        let response = match sent {
            Ok(r) => r,
            Err(e) if timed_out(&e) => {
                return Err(StoreError::Timeout {
                    after_ms: self.timeout.as_millis() as u64,
                })
            }
            Err(e) => return Err(StoreError::Unreachable(e.to_string())),
        };
        let status = response.status().as_u16();
        let text = match response.text().await {
            Ok(t) => t,
            Err(e) if timed_out(&e) => {
                return Err(StoreError::Timeout {
                    after_ms: self.timeout.as_millis() as u64,
                })
            }
            Err(e) => return Err(StoreError::Unreachable(e.to_string())),
        };
        decode_pipeline(status, &text, n)
    }
}

impl RestStore {
    /// [`RestStore::pipeline`], sent once more after a transient failure when `idempotent`.
    async fn pipeline_resent_if(
        &self,
        idempotent: bool,
        body: Vec<u8>,
        n: usize,
    ) -> Result<Vec<Reply>, StoreError> {
        post_resent_if(&|body, n| self.pipeline(body, n), idempotent, body, n).await
    }

    /// Runs `invocations` by `EVALSHA`, then `EVAL` for those a fresh Redis lacks
    /// ([`run_scripts`]). One reply per invocation, in order.
    async fn run(
        &self,
        invocations: &[&Invocation],
        idempotent: bool,
    ) -> Result<Vec<Reply>, StoreError> {
        run_scripts(
            |body, n| self.pipeline(body, n),
            invocations,
            idempotent,
            &self.loaded,
        )
        .await
    }

    /// Runs one invocation and returns its reply.
    async fn run_one(
        &self,
        invocation: &Invocation,
        idempotent: bool,
    ) -> Result<Reply, StoreError> {
        self.run(&[invocation], idempotent)
            .await?
            .pop()
            .ok_or_else(|| StoreError::Protocol("a pipeline of one command answered none".into()))
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl Store for RestStore {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        check_by_scripts(
            |body, n| self.pipeline(body, n),
            checks,
            time,
            &self.namespace,
            &self.loaded,
        )
        .await
    }

    /// One call of the take script (Upstash is one node to its clients). Not resent: a take
    /// whose answer was lost may have taken its units.
    async fn take(&self, takes: &[Take], time: TimeSource) -> Result<Vec<Taken>, StoreError> {
        if takes.is_empty() {
            return Ok(Vec::new());
        }
        let invocation = take_invocation(takes, &self.namespace, time)?;
        read_taken(&self.run_one(&invocation, false).await?, takes.len())
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl RedisCalls for RestStore {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    // Every control command is idempotent: each is resent once when its answer is lost.

    async fn plain(&self, command: &[String]) -> Result<Reply, StoreError> {
        let body = plain_pipeline_body(command)?;
        Ok(self.pipeline_resent_if(true, body, 1).await?.remove(0))
    }

    async fn script(&self, invocation: &Invocation) -> Result<Reply, StoreError> {
        self.run_one(invocation, true).await
    }
}

redis_control!(RestStore);
