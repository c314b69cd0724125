//! `RestStore`: Redis over the Upstash REST protocol — the store a Cloudflare Worker uses, and
//! native services too. One `/pipeline` request per batch; natively and on wasm32 alike.
//!
//! Scripts run by `EVALSHA`; entries that come back `NOSCRIPT` (a fresh or flushed Redis) are
//! re-sent with `EVAL` and the source in one more `/pipeline` — never more than two round trips.
//! Results are asked for in base64 (`Upstash-Encoding: base64`), as the official clients do, so
//! any bytes survive JSON.

use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use serde_json::Value as Json;

use super::check::{Check, TimeSource, Verdict};
use super::error::StoreError;
use super::traits::Store;
use crate::script::{is_noscript, CheckPlan, Invocation, Reply, Topology};

/// The environment variable holding the REST URL (Upstash's own name).
pub const REST_URL_VAR: &str = "UPSTASH_REDIS_REST_URL";
/// The environment variable holding the REST token (Upstash's own name).
pub const REST_TOKEN_VAR: &str = "UPSTASH_REDIS_REST_TOKEN";

/// A [`Store`] speaking the Upstash REST protocol (Upstash, or `edgelimit-gateway` in front of
/// any Redis).
#[derive(Clone)]
pub struct RestStore {
    client: reqwest::Client,
    pipeline_url: String,
    token: String,
    namespace: String,
    timeout: Duration,
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
    /// The namespace keys live under unless [`RestStore::with_namespace`] says otherwise.
    pub const DEFAULT_NAMESPACE: &'static str = "default";

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
        Ok(RestStore {
            client: reqwest::Client::new(),
            pipeline_url: format!("{url}/pipeline"),
            token: token.trim().to_string(),
            namespace: RestStore::DEFAULT_NAMESPACE.to_string(),
            timeout: RestStore::DEFAULT_TIMEOUT,
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

    /// Sends one `/pipeline` and reads one reply per command.
    async fn pipeline(&self, commands: Vec<Json>) -> Result<Vec<Reply>, StoreError> {
        let n = commands.len();
        let body = serde_json::to_vec(&Json::Array(commands))
            .map_err(|e| StoreError::Protocol(format!("cannot encode the pipeline: {e}")))?;
        let started = web_time::Instant::now();
        let sent = self
            .client
            .post(&self.pipeline_url)
            .bearer_auth(&self.token)
            .header("Upstash-Encoding", "base64")
            .header("Content-Type", "application/json")
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
        let status = response.status();
        let text = match response.text().await {
            Ok(t) => t,
            Err(e) if timed_out(&e) => {
                return Err(StoreError::Timeout {
                    after_ms: self.timeout.as_millis() as u64,
                })
            }
            Err(e) => return Err(StoreError::Unreachable(e.to_string())),
        };
        let message = || {
            serde_json::from_str::<Json>(&text)
                .ok()
                .and_then(|j| j.get("error").and_then(Json::as_str).map(str::to_string))
                .unwrap_or_else(|| text.chars().take(200).collect())
        };
        match status.as_u16() {
            200 => {}
            401 | 403 => return Err(StoreError::Auth(message())),
            500..=599 => {
                return Err(StoreError::Unreachable(format!(
                    "HTTP {status}: {}",
                    message()
                )))
            }
            _ => {
                return Err(StoreError::Protocol(format!(
                    "HTTP {status}: {}",
                    message()
                )))
            }
        }
        let entries: Vec<Json> = serde_json::from_str(&text).map_err(|e| {
            StoreError::Protocol(format!("the pipeline answer is not a JSON array: {e}"))
        })?;
        if entries.len() != n {
            return Err(StoreError::Protocol(format!(
                "pipeline of {n} commands answered {} entries",
                entries.len()
            )));
        }
        entries.iter().map(entry).collect()
    }
}

/// One command as the JSON array the protocol carries.
fn command(verb: &str, script: &str, invocation: &Invocation) -> Json {
    let mut parts = Vec::with_capacity(3 + invocation.keys.len() + invocation.args.len());
    parts.push(Json::from(verb));
    parts.push(Json::from(script));
    parts.push(Json::from(invocation.keys.len()));
    parts.extend(invocation.keys.iter().map(|k| Json::from(k.as_str())));
    parts.extend(invocation.args.iter().map(|a| Json::from(a.as_str())));
    Json::Array(parts)
}

/// `{"result": …}` or `{"error": "…"}` into a transport-neutral reply.
fn entry(json: &Json) -> Result<Reply, StoreError> {
    if let Some(error) = json.get("error") {
        return Ok(Reply::Error(error.as_str().unwrap_or("ERR").to_string()));
    }
    match json.get("result") {
        Some(result) => value(result),
        None => Err(StoreError::Protocol(format!(
            "a pipeline entry has neither result nor error: {json}"
        ))),
    }
}

fn value(json: &Json) -> Result<Reply, StoreError> {
    match json {
        Json::Null => Ok(Reply::Nil),
        Json::Number(n) => n
            .as_i64()
            .map(Reply::Int)
            .ok_or_else(|| StoreError::Protocol(format!("not an integer: {n}"))),
        // Base64 was asked for: every string is encoded except the status "OK".
        Json::String(s) if s == "OK" => Ok(Reply::Bulk(b"OK".to_vec())),
        Json::String(s) => base64::engine::general_purpose::STANDARD
            .decode(s)
            .map(Reply::Bulk)
            .map_err(|e| StoreError::Protocol(format!("a result is not base64 ({e}): {s}"))),
        Json::Array(items) => items
            .iter()
            .map(value)
            .collect::<Result<_, _>>()
            .map(Reply::Array),
        other => Err(StoreError::Protocol(format!("unexpected result {other}"))),
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl Store for RestStore {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        let plans = checks
            .iter()
            .map(|c| CheckPlan::new(c, &self.namespace, time, Topology::SingleNode))
            .collect::<Result<Vec<_>, _>>()?;
        let invocations: Vec<&Invocation> = plans.iter().flat_map(|p| p.invocations()).collect();
        let mut replies = if invocations.is_empty() {
            Vec::new()
        } else {
            self.pipeline(
                invocations
                    .iter()
                    .map(|i| command("EVALSHA", i.script.sha1(), i))
                    .collect(),
            )
            .await?
        };
        let missing: Vec<usize> = replies
            .iter()
            .enumerate()
            .filter_map(|(i, r)| matches!(r, Reply::Error(m) if is_noscript(m)).then_some(i))
            .collect();
        if !missing.is_empty() {
            let resent = self
                .pipeline(
                    missing
                        .iter()
                        .map(|&i| command("EVAL", invocations[i].script.source(), invocations[i]))
                        .collect(),
                )
                .await?;
            for (i, reply) in missing.into_iter().zip(resent) {
                replies[i] = reply;
            }
        }
        let mut replies = replies.into_iter();
        plans
            .iter()
            .map(|plan| {
                let mine: Vec<Reply> = replies.by_ref().take(plan.invocations().len()).collect();
                plan.verdict(&mine)
            })
            .collect()
    }
}
