//! `--worker`: a Worker's admin route as a store, for a deployment whose state only the Worker
//! can reach (its Durable Objects, `store = "durable-object"`). Every operation is one POST of a
//! `WireCall` (the Worker's own wire, `edgelimit_engine::wire`) with the admin token as a
//! bearer token, answered with an `WireAnswer`; the route decides it on the objects exactly as the
//! Worker's requests are decided.

use std::fmt;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use edgelimit::StoreError;
/// The admin route's bearer token, as `--token` reads it.
pub use edgelimit_engine::command::Token;
use edgelimit_engine::config::ADMIN_TOKEN_VAR;
use edgelimit_engine::wire::calls::SendCall;
use edgelimit_engine::wire::{error_of, WireAnswer, WireCall};

/// One Worker's admin route, as a store: `Store` (checks decided by the objects, for tests and
/// scripts) and `Control` (everything the commands do).
#[derive(Clone)]
pub struct AdminRoute {
    http: reqwest::Client,
    url: String,
    token: Token,
    timeout: Duration,
}

impl fmt::Debug for AdminRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminRoute")
            .field("url", &self.url)
            .field("token", &self.token)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl AdminRoute {
    /// The route at `url` (the Worker's URL and its `admin_path`), each call allowed `timeout`.
    pub fn new(url: impl Into<String>, token: Token, timeout: Duration) -> AdminRoute {
        AdminRoute {
            http: reqwest::Client::new(),
            url: url.into(),
            token,
            timeout,
        }
    }

    /// The route's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Posts `call` and reads its answer; a call the store failed is its error.
    pub async fn call(&self, call: &WireCall) -> Result<WireAnswer, StoreError> {
        let body = serde_json::to_string(call)
            .map_err(|e| StoreError::Protocol(format!("cannot encode a call: {e}")))?;
        let started = Instant::now();
        let sent = self
            .http
            .post(&self.url)
            .bearer_auth(self.token.expose())
            .header("content-type", "application/json")
            .body(body)
            .timeout(self.timeout)
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(e) if e.is_timeout() || started.elapsed() >= self.timeout => {
                return Err(StoreError::Timeout {
                    after_ms: self.timeout.as_millis() as u64,
                })
            }
            Err(e) => {
                return Err(StoreError::Unreachable(format!(
                    "the Worker at {}: {}",
                    self.url,
                    root_cause(&e)
                )))
            }
        };
        let status = response.status().as_u16();
        let text = response.text().await.map_err(|e| {
            StoreError::Unreachable(format!("the Worker at {}: {}", self.url, root_cause(&e)))
        })?;
        match status {
            200 => {}
            401 => {
                return Err(StoreError::Auth(format!(
                    "the Worker at {} refused the admin token: --token (or {ADMIN_TOKEN_VAR}) must \
                     equal the Worker's {ADMIN_TOKEN_VAR} secret",
                    self.url
                )))
            }
            _ => {
                return Err(StoreError::Protocol(format!(
                    "the Worker at {} answered {status}: {}",
                    self.url,
                    what_it_said(&text)
                )))
            }
        }
        match serde_json::from_str::<WireAnswer>(&text) {
            Ok(WireAnswer::Failed {
                message,
                invalid_input,
            }) => Err(error_of(message, invalid_input)),
            Ok(answer) => Ok(answer),
            Err(_) => Err(StoreError::Protocol(format!(
                "the Worker at {} answered what is not an admin answer (is admin_path, with \
                 the {ADMIN_TOKEN_VAR} secret, in the configuration it runs?): {}",
                self.url,
                excerpt(&text)
            ))),
        }
    }
}

/// The innermost cause of a failed request (reqwest's own message is only "error sending
/// request").
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    cause.to_string()
}

/// What a non-200 answer says: a problem body's `detail` (a Worker that cannot serve tells
/// only an `error_id`, under which its log has the reason), an admin route's `error`, else the
/// start of the body.
fn what_it_said(text: &str) -> String {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
        return excerpt(text);
    };
    if let Some(id) = value.get("error_id").and_then(|id| id.as_str()) {
        return format!(
            "an internal error, error_id {id}: the Worker's log (`wrangler tail`) has the reason \
             under that id"
        );
    }
    value
        .get("detail")
        .or_else(|| value.get("error"))
        .and_then(|d| d.as_str().map(str::to_string))
        .unwrap_or_else(|| excerpt(text))
}

fn excerpt(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(160) {
        Some((at, _)) => format!("`{}…`", &text[..at]),
        None if text.is_empty() => "an empty body".to_string(),
        None => format!("`{text}`"),
    }
}

#[async_trait]
impl SendCall for AdminRoute {
    async fn call(&self, call: &WireCall) -> Result<WireAnswer, StoreError> {
        AdminRoute::call(self, call).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_never_shows() {
        let route = AdminRoute::new(
            "http://127.0.0.1:1/__admin",
            Token::new("s3cret-t0ken"),
            Duration::from_secs(1),
        );
        let shown = format!("{route:?} {:?}", Token::new("s3cret-t0ken"));
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn a_non_answer_is_quoted_briefly_and_a_problem_by_its_detail() {
        assert_eq!(
            what_it_said(
                r#"{"type":"about:blank","detail":"admin_path `/a`: the admin route controls Durable Objects"}"#
            ),
            "admin_path `/a`: the admin route controls Durable Objects"
        );
        let internal = what_it_said(
            r#"{"type":"about:blank","status":500,"detail":"…","error_id":"9b1f-2c"}"#,
        );
        assert!(internal.contains("error_id 9b1f-2c"), "{internal}");
        assert_eq!(what_it_said(""), "an empty body");
        let long = "x".repeat(500);
        assert_eq!(what_it_said(&long).chars().count(), 163);
    }
}
