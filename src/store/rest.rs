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
use base64::Engine as _;
use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use serde_json::Value as Json;

use super::check::{Check, TimeSource, Verdict};
use super::error::StoreError;
use super::key::DEFAULT_NAMESPACE;
use super::traits::Store;
use crate::script::{is_noscript, CheckPlan, Invocation, Reply, Topology};
// The control operations (assignments, lists, peek, reset) are native only, see `impl Store`.
#[cfg(not(target_arch = "wasm32"))]
use {
    super::check::{Identifier, Limit},
    super::key::control_key,
    crate::control::assignment::{assign_command, read_assignments},
    crate::control::list::{self, ListEntry},
    crate::control::{Assignment, AssignmentKind},
    crate::script::control,
};

/// The environment variable holding the REST URL (Upstash's own name).
pub const REST_URL_VAR: &str = "UPSTASH_REDIS_REST_URL";
/// The environment variable holding the REST token (Upstash's own name).
pub const REST_TOKEN_VAR: &str = "UPSTASH_REDIS_REST_TOKEN";

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

/// Reads a `/pipeline` answer — the HTTP status and the body text — into one reply per command,
/// expecting `commands` of them. Pure, so what a server (or an attacker between us and it) may
/// send can be tested and fuzzed without a network: every answer is a reply list or a
/// [`StoreError`] saying whether to retry, never a panic.
pub fn decode_pipeline(status: u16, text: &str, commands: usize) -> Result<Vec<Reply>, StoreError> {
    let message = || {
        serde_json::from_str::<Json>(text)
            .ok()
            .and_then(|j| j.get("error").and_then(Json::as_str).map(str::to_string))
            .unwrap_or_else(|| text.chars().take(200).collect())
    };
    // As reqwest prints a status (`500 Internal Server Error`), when it knows the code.
    let shown = || {
        reqwest::StatusCode::from_u16(status)
            .map(|s| s.to_string())
            .unwrap_or_else(|_| status.to_string())
    };
    match status {
        200 => {}
        401 | 403 => return Err(StoreError::Auth(message())),
        500..=599 => {
            return Err(StoreError::Unreachable(format!(
                "HTTP {}: {}",
                shown(),
                message()
            )))
        }
        _ => {
            return Err(StoreError::Protocol(format!(
                "HTTP {}: {}",
                shown(),
                message()
            )))
        }
    }
    let entries: Vec<PipelineEntry> = serde_json::from_str(text)
        .map_err(|e| StoreError::Protocol(format!("the pipeline answer cannot be read: {e}")))?;
    if entries.len() != commands {
        return Err(StoreError::Protocol(format!(
            "pipeline of {commands} commands answered {} entries",
            entries.len()
        )));
    }
    Ok(entries.into_iter().map(|e| e.0).collect())
}

/// The body of the `/pipeline` request that runs `invocations` by `EVALSHA`, as
/// [`RestStore`] sends it first (pure: the Worker's CPU benchmark times it under wasm32).
pub fn evalsha_pipeline_body(invocations: &[&Invocation]) -> Result<Vec<u8>, StoreError> {
    pipeline_body("EVALSHA", invocations, |i| i.script.sha1())
}

/// The body of the `/pipeline` request that runs `invocations` by `EVAL` and their sources, as
/// [`RestStore`] (and any other carrier of the protocol) resends those a fresh Redis answered
/// `NOSCRIPT`.
pub fn eval_pipeline_body(invocations: &[&Invocation]) -> Result<Vec<u8>, StoreError> {
    pipeline_body("EVAL", invocations, |i| i.script.source())
}

/// `[[verb, script, <number of keys>, "<key>", …, "<arg>", …], …]`: each invocation as the JSON
/// array the protocol carries, written straight from its keys and arguments into one buffer
/// sized for them — byte for byte what `serde_json` makes of the same arrays of strings, each
/// string escaped by `serde_json` itself.
fn pipeline_body(
    verb: &'static str,
    invocations: &[&Invocation],
    script: impl Fn(&Invocation) -> &str,
) -> Result<Vec<u8>, StoreError> {
    // Every part with its quotes and comma; room for a few escapes besides.
    let room: usize = invocations
        .iter()
        .map(|i| {
            let parts = i.keys().len() + i.args().len();
            let text = verb.len() + script(i).len() + i.text_len();
            8 + 20 + text + text / 8 + 3 * parts
        })
        .sum();
    let mut body = Vec::with_capacity(2 + room);
    body.push(b'[');
    for (n, &invocation) in invocations.iter().enumerate() {
        if n > 0 {
            body.push(b',');
        }
        body.push(b'[');
        json_string(&mut body, verb)?;
        body.push(b',');
        json_string(&mut body, script(invocation))?;
        body.push(b',');
        let keys = invocation.keys();
        body.extend_from_slice(itoa::Buffer::new().format(keys.len()).as_bytes());
        for part in keys.iter().chain(invocation.args()) {
            body.push(b',');
            json_string(&mut body, part)?;
        }
        body.push(b']');
    }
    body.push(b']');
    Ok(body)
}

/// Appends `text` as a JSON string, escaped as `serde_json` escapes it (by `serde_json`: no
/// second escaper to keep in step).
fn json_string(body: &mut Vec<u8>, text: &str) -> Result<(), StoreError> {
    serde_json::to_writer(body, text)
        .map_err(|e| StoreError::Protocol(format!("cannot encode the pipeline: {e}")))
}

/// `{"result": …}` or `{"error": "…"}` into a transport-neutral reply.
/// One entry of a `/pipeline` answer, `{"result": …}` or `{"error": "…"}`, read straight into
/// its [`Reply`]: a JSON tree first would be an allocation per object, key and value, on every
/// request the Worker makes.
struct PipelineEntry(Reply);

/// The keys of an entry that mean something; any other is skipped.
#[derive(serde::Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum EntryField {
    Result,
    Error,
    #[serde(other)]
    Other,
}

impl<'de> serde::Deserialize<'de> for PipelineEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entry;
        impl<'de> serde::de::Visitor<'de> for Entry {
            type Value = PipelineEntry;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a pipeline entry, an object with `result` or `error`")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let (mut result, mut error) = (None, None);
                while let Some(field) = map.next_key::<EntryField>()? {
                    match field {
                        EntryField::Result => result = Some(map.next_value::<ResultValue>()?.0),
                        // Only a string says what went wrong; anything else is still an error.
                        EntryField::Error => {
                            let value: Json = map.next_value()?;
                            error = Some(value.as_str().unwrap_or("ERR").to_string());
                        }
                        EntryField::Other => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                // An error wins, wherever it stands.
                match (error, result) {
                    (Some(message), _) => Ok(PipelineEntry(Reply::Error(message))),
                    (None, Some(reply)) => Ok(PipelineEntry(reply)),
                    (None, None) => Err(serde::de::Error::custom(
                        "a pipeline entry has neither result nor error",
                    )),
                }
            }
        }
        d.deserialize_map(Entry)
    }
}

/// A `result`: null, an integer, a base64 string (the status `OK` as it is), or an array of these.
struct ResultValue(Reply);

impl<'de> serde::Deserialize<'de> for ResultValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Value;
        impl<'de> serde::de::Visitor<'de> for Value {
            type Value = ResultValue;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("null, an integer, a base64 string or an array of these")
            }

            fn visit_unit<E: serde::de::Error>(self) -> Result<ResultValue, E> {
                Ok(ResultValue(Reply::Nil))
            }

            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<ResultValue, E> {
                Ok(ResultValue(Reply::Int(n)))
            }

            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<ResultValue, E> {
                i64::try_from(n)
                    .map(|n| ResultValue(Reply::Int(n)))
                    .map_err(|_| E::custom(format!("not an integer: {n}")))
            }

            fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<ResultValue, E> {
                Err(E::custom(format!("not an integer: {n}")))
            }

            // Base64 was asked for: every string is encoded except the status "OK".
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<ResultValue, E> {
                if s == "OK" {
                    return Ok(ResultValue(Reply::Bulk(b"OK".to_vec())));
                }
                base64::engine::general_purpose::STANDARD
                    .decode(s)
                    .map(|bytes| ResultValue(Reply::Bulk(bytes)))
                    .map_err(|e| E::custom(format!("a result is not base64 ({e}): {s}")))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<ResultValue, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(ResultValue(item)) = seq.next_element()? {
                    items.push(item);
                }
                Ok(ResultValue(Reply::Array(items)))
            }
        }
        d.deserialize_any(Value)
    }
}

impl RestStore {
    /// [`RestStore::pipeline`], sent once more after a transient failure when `idempotent`
    /// (the `EVAL` fall back after `NOSCRIPT` as much as the first `EVALSHA` pipeline).
    async fn pipeline_resent_if(
        &self,
        idempotent: bool,
        body: Vec<u8>,
        n: usize,
    ) -> Result<Vec<Reply>, StoreError> {
        let resend = idempotent.then(|| body.clone());
        match (self.pipeline(body, n).await, resend) {
            (Err(e), Some(body)) if e.is_transient() => self.pipeline(body, n).await,
            (answer, _) => answer,
        }
    }
}

impl RestStore {
    /// Runs `invocations` in one `/pipeline` by `EVALSHA`, then those answered `NOSCRIPT` by
    /// `EVAL` in one more; each pipeline sent again after a transient failure when `idempotent`.
    /// One reply per invocation, in order.
    async fn run(
        &self,
        invocations: &[&Invocation],
        idempotent: bool,
    ) -> Result<Vec<Reply>, StoreError> {
        if invocations.is_empty() {
            return Ok(Vec::new());
        }
        let body = evalsha_pipeline_body(invocations)?;
        let mut replies = self
            .pipeline_resent_if(idempotent, body, invocations.len())
            .await?;
        let missing: Vec<usize> = replies
            .iter()
            .enumerate()
            .filter_map(|(i, r)| matches!(r, Reply::Error(m) if is_noscript(m)).then_some(i))
            .collect();
        if !missing.is_empty() {
            let resend: Vec<&Invocation> = missing.iter().map(|&i| invocations[i]).collect();
            let resent = self
                .pipeline_resent_if(idempotent, eval_pipeline_body(&resend)?, resend.len())
                .await?;
            for (i, reply) in missing.into_iter().zip(resent) {
                replies[i] = reply;
            }
        }
        Ok(replies)
    }

    /// Runs one invocation and returns its reply.
    #[cfg(not(target_arch = "wasm32"))]
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

// The control operations (assign, lists, peek, reset) are native only: what the admin CLI runs.
// A Worker decides with tiers and lists but never writes them, and each of these would be linked
// into its wasm anyway (stores are `dyn Store` in a `ShardedStore`): on wasm32 the trait's
// defaults refuse them, and the Worker stays within its size budget (docs/decisions.md, Size).
#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl Store for RestStore {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        let plans = checks
            .iter()
            .map(|c| CheckPlan::controlled(c, &self.namespace, time, Topology::SingleNode))
            .collect::<Result<Vec<_>, _>>()?;
        let invocations: Vec<&Invocation> = plans.iter().flat_map(|p| p.invocations()).collect();
        // A pipeline may have run with its answer lost: it is sent again only when a repeat
        // charges nothing twice (every item remembered under a request id, or a look).
        let idempotent = checks.iter().all(Check::is_idempotent);
        let mut replies = self.run(&invocations, idempotent).await?.into_iter();
        plans
            .iter()
            .map(|plan| {
                let mine: Vec<Reply> = replies.by_ref().take(plan.invocations().len()).collect();
                plan.verdict(&mine)
            })
            .collect()
    }

    #[cfg(not(target_arch = "wasm32"))]
    async fn assign(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        assignment: Option<&Assignment>,
        until_ms: Option<u64>,
    ) -> Result<(), StoreError> {
        let key = control_key(&self.namespace, &limit.name, identifier);
        self.change_assignments(assign_command(key, assignment, until_ms, None))
            .await
    }

    #[cfg(not(target_arch = "wasm32"))]
    async fn clear_assignment(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        kind: AssignmentKind,
    ) -> Result<(), StoreError> {
        let key = control_key(&self.namespace, &limit.name, identifier);
        self.change_assignments(assign_command(key, None, None, Some(kind)))
            .await
    }

    #[cfg(not(target_arch = "wasm32"))]
    async fn assignments(
        &self,
        limit: &Limit,
        identifier: &Identifier,
    ) -> Result<Vec<(Assignment, Option<u64>)>, StoreError> {
        let key = control_key(&self.namespace, &limit.name, identifier);
        let body = plain_pipeline_body(&["GET".to_string(), key.clone()])?;
        let reply = self.pipeline_resent_if(true, body, 1).await?.remove(0);
        read_assignments(reply, &key)
    }

    // Adding, removing and reading a list are idempotent (an add sets the same lapse time
    // again), as are a peek and a reset: each is resent once when its answer is lost.

    #[cfg(not(target_arch = "wasm32"))]
    async fn list_add(
        &self,
        list: &str,
        entry: &ListEntry,
        until_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        let lapse = list::checked_addition(list, until_ms, now_ms)?;
        let call = control::list_add(&self.namespace, list, entry, lapse, now_ms)?;
        control::read_added(&self.run_one(&call, true).await?)
    }

    #[cfg(not(target_arch = "wasm32"))]
    async fn list_remove(&self, list: &str, entry: &ListEntry) -> Result<bool, StoreError> {
        let call = control::list_remove(&self.namespace, list, entry);
        control::read_removed(&self.run_one(&call, true).await?)
    }

    #[cfg(not(target_arch = "wasm32"))]
    async fn list_entries(
        &self,
        list: &str,
        now_ms: u64,
    ) -> Result<Vec<(String, Option<u64>)>, StoreError> {
        let call = control::list_entries(&self.namespace, list, now_ms)?;
        control::read_entries(&self.run_one(&call, true).await?)
    }

    #[cfg(not(target_arch = "wasm32"))]
    async fn peek(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        time: TimeSource,
    ) -> Result<Verdict, StoreError> {
        let call = control::peek(&self.namespace, limit, identifier, time)?;
        control::read_peek(&self.run_one(&call, true).await?)
    }

    #[cfg(not(target_arch = "wasm32"))]
    async fn reset(&self, limit: &Limit, identifier: &Identifier) -> Result<bool, StoreError> {
        let call = control::reset(&self.namespace, limit, identifier);
        control::read_reset(&self.run_one(&call, true).await?)
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl RestStore {
    /// Runs the control key's `EVAL` of [`assign_command`]: one `/pipeline`, resent once if its
    /// answer is lost (writing the same line again is harmless).
    async fn change_assignments(&self, command: Vec<String>) -> Result<(), StoreError> {
        let body = plain_pipeline_body(&command)?;
        match self.pipeline_resent_if(true, body, 1).await?.remove(0) {
            Reply::Error(e) => Err(StoreError::Script(e)),
            _ => Ok(()),
        }
    }
}

/// The `/pipeline` body of one plain command: `[["GET", "key"]]`.
#[cfg(not(target_arch = "wasm32"))]
fn plain_pipeline_body(parts: &[String]) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(&[parts])
        .map_err(|e| StoreError::Protocol(format!("cannot encode the pipeline: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Algorithm;
    use crate::script::Script;

    #[test]
    fn commands_serialize_as_the_json_arrays_they_stand_for() {
        let invocation = Invocation::from_parts(
            Script::single(Algorithm::Gcra),
            ["k\"1", "k2"],
            ["1000", "é\n"],
        );
        let sha = invocation.script.sha1();
        let source = invocation.script.source();
        let evalsha = evalsha_pipeline_body(&[&invocation]).unwrap();
        let eval = eval_pipeline_body(&[&invocation, &invocation]).unwrap();
        let expected = serde_json::json!([["EVALSHA", sha, 2, "k\"1", "k2", "1000", "é\n"]]);
        assert_eq!(evalsha, serde_json::to_vec(&expected).unwrap());
        let one = serde_json::json!(["EVAL", source, 2, "k\"1", "k2", "1000", "é\n"]);
        assert_eq!(eval, serde_json::to_vec(&[&one, &one]).unwrap());
        assert_eq!(evalsha_pipeline_body(&[]).unwrap(), b"[]");
    }

    /// The body as it was made before keys and arguments shared a buffer: `serde_json` over
    /// `Vec<String>`s, by the `Serialize` this module had. What the written body must equal.
    mod before {
        use serde::ser::{Serialize, SerializeSeq, Serializer};

        pub(super) struct Command<'a> {
            pub(super) verb: &'static str,
            pub(super) script: &'a str,
            pub(super) keys: &'a [String],
            pub(super) args: &'a [String],
        }

        impl Serialize for Command<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let (keys, args) = (self.keys, self.args);
                let mut seq = serializer.serialize_seq(Some(3 + keys.len() + args.len()))?;
                seq.serialize_element(self.verb)?;
                seq.serialize_element(self.script)?;
                seq.serialize_element(&keys.len())?;
                for part in keys.iter().chain(args) {
                    seq.serialize_element(part.as_str())?;
                }
                seq.end()
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// Any keys and arguments — quotes, backslashes, control characters, DEL, non-ASCII,
        /// empty — make the body `serde_json` made of the same strings, by EVALSHA and by EVAL.
        #[test]
        fn the_body_is_what_serde_json_made_of_the_strings(
            calls in proptest::collection::vec(
                (
                    0usize..7,
                    proptest::collection::vec(part(), 0..6),
                    proptest::collection::vec(part(), 0..12),
                ),
                0..4,
            )
        ) {
            let scripts = [
                Script::multi(),
                Script::single(Algorithm::Gcra),
                Script::single(Algorithm::FixedWindow),
                Script::single(Algorithm::SlidingLog),
                Script::list(),
                Script::peek(),
                Script::reset(),
            ];
            let invocations: Vec<Invocation> = calls
                .iter()
                .map(|(script, keys, args)| Invocation::from_parts(scripts[*script], keys, args))
                .collect();
            for ((_, keys, args), invocation) in calls.iter().zip(&invocations) {
                proptest::prop_assert!(invocation.keys() == keys[..], "{keys:?}");
                proptest::prop_assert!(invocation.args() == args[..], "{args:?}");
            }
            let refs: Vec<&Invocation> = invocations.iter().collect();
            for verb in ["EVALSHA", "EVAL"] {
                let old: Vec<before::Command<'_>> = calls
                    .iter()
                    .zip(&invocations)
                    .map(|((_, keys, args), invocation)| before::Command {
                        verb,
                        script: match verb {
                            "EVALSHA" => invocation.script.sha1(),
                            _ => invocation.script.source(),
                        },
                        keys,
                        args,
                    })
                    .collect();
                let body = match verb {
                    "EVALSHA" => evalsha_pipeline_body(&refs).unwrap(),
                    _ => eval_pipeline_body(&refs).unwrap(),
                };
                let expected = serde_json::to_vec(&old).unwrap();
                proptest::prop_assert_eq!(
                    String::from_utf8(body).unwrap(),
                    String::from_utf8(expected).unwrap()
                );
            }
        }
    }

    /// A key or argument: any string, or one drawn mostly from what JSON must escape.
    fn part() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            any::<String>(),
            "[\\\\\"/\\x00-\\x1f\\x7fa-z0-9{}:%#é€😀\\u{2028}\\u{2029}]{0,24}",
            "[0-9-]{0,20}",
        ]
    }

    #[test]
    fn pipeline_answers_decode_or_say_what_is_wrong() {
        let replies = decode_pipeline(
            200,
            r#"[{"result":["MQ==",2,null,"OK"]},{"error":"NOSCRIPT x"}]"#,
            2,
        )
        .unwrap();
        assert_eq!(
            replies,
            vec![
                Reply::Array(vec![
                    Reply::Bulk(b"1".to_vec()),
                    Reply::Int(2),
                    Reply::Nil,
                    Reply::Bulk(b"OK".to_vec()),
                ]),
                Reply::Error("NOSCRIPT x".into()),
            ]
        );
        let err = |status, text: &str, n| decode_pipeline(status, text, n).unwrap_err();
        assert!(
            matches!(err(401, r#"{"error":"bad token"}"#, 1), StoreError::Auth(m) if m == "bad token")
        );
        assert!(
            matches!(err(503, "down", 1), StoreError::Unreachable(m) if m == "HTTP 503 Service Unavailable: down")
        );
        for (status, text, n) in [
            (404, "nope", 1),
            (200, "not json", 1),
            (200, "[]", 1),
            (200, r#"[{"result":"not base64!"}]"#, 1),
            (200, r#"[{"result":1.5}]"#, 1),
            (200, r#"[{"neither":1}]"#, 1),
        ] {
            assert!(
                matches!(err(status, text, n), StoreError::Protocol(_)),
                "{text}"
            );
        }
    }

    #[test]
    fn pipeline_answers_decode_into_one_reply_per_command() {
        let text = r#"[{"result":[1,-2]},{"error":"NOSCRIPT No matching script"},{"result":"aGk="},{"result":"OK"},{"result":null}]"#;
        assert_eq!(
            decode_pipeline(200, text, 5).unwrap(),
            [
                Reply::Array(vec![Reply::Int(1), Reply::Int(-2)]),
                Reply::Error("NOSCRIPT No matching script".into()),
                Reply::Bulk(b"hi".to_vec()),
                Reply::Bulk(b"OK".to_vec()),
                Reply::Nil,
            ]
        );
        let short = decode_pipeline(200, r#"[{"result":1}]"#, 2).unwrap_err();
        assert!(
            short.to_string().contains("2 commands answered 1"),
            "{short}"
        );
        assert!(decode_pipeline(200, "not json", 1).is_err());
        assert!(decode_pipeline(200, r#"[{"result":"%%"}]"#, 1).is_err());
        // An error wins wherever it stands, a non-string one still is one, other keys are
        // skipped, and an integer must fit an i64.
        let text =
            r#"[{"result":1,"error":"BUSY"},{"error":7},{"x":{"y":[1]},"result":[[],"OK"]}]"#;
        assert_eq!(
            decode_pipeline(200, text, 3).unwrap(),
            [
                Reply::Error("BUSY".into()),
                Reply::Error("ERR".into()),
                Reply::Array(vec![Reply::Array(vec![]), Reply::Bulk(b"OK".to_vec())]),
            ]
        );
        for bad in [
            r#"[{"result":9223372036854775808}]"#,
            r#"[{"result":true}]"#,
            r#"[{"result":{"a":1}}]"#,
            r#"[7]"#,
        ] {
            assert!(
                matches!(decode_pipeline(200, bad, 1), Err(StoreError::Protocol(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_evalsha_body_names_each_script_by_its_sha() {
        let invocation =
            Invocation::from_parts(Script::single(Algorithm::FixedWindow), ["k"], ["", "5"]);
        let body = evalsha_pipeline_body(&[&invocation, &invocation]).unwrap();
        let sha = invocation.script.sha1();
        let one = format!(r#"["EVALSHA","{sha}",1,"k","","5"]"#);
        assert_eq!(String::from_utf8(body).unwrap(), format!("[{one},{one}]"));
    }
}
