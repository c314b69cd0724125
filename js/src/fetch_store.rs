//! `FetchStore` (wasm32 only): a [`Store`] over the Upstash REST protocol whose HTTP call is
//! JavaScript's `fetch` — the global one in Cloudflare Workers and Node 22, or one the caller
//! passes — so the package links no HTTP client of its own. Everything but the call itself is the
//! library's: the plans and their scripts (`CheckPlan`), the `/pipeline` body, the reply parser
//! (`decode_pipeline`) and the EVALSHA/EVAL sequence (`run_scripts`).

use async_trait::async_trait;
use edgelimit::script::{control, Invocation, Reply};
use edgelimit::store::upstash::{check_by_scripts, decode_pipeline, run_scripts, LoadedScripts};
use edgelimit::{Check, Identifier, Limit, Store, StoreError, TimeSource, Verdict};
use js_sys::{Function, Object, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use crate::options::Setup;

#[wasm_bindgen]
extern "C" {
    /// The global `AbortSignal` (Workers and Node 22 both have `AbortSignal.timeout`).
    type AbortSignal;

    /// A signal that aborts after `ms`: the fetch, and the reading of its body, then reject with
    /// a `TimeoutError`.
    #[wasm_bindgen(static_method_of = AbortSignal, catch)]
    fn timeout(ms: f64) -> Result<JsValue, JsValue>;
}

/// A store reached through `fetch`.
#[derive(Debug, Clone)]
pub(crate) struct FetchStore {
    fetch: Function,
    pipeline_url: JsValue,
    // What every request sends alike, made once: the headers object (fetch copies it) and the
    // names of `init`'s fields, so a request crosses into JavaScript only for what changes.
    headers: Object,
    keys: InitKeys,
    namespace: String,
    timeout_ms: u64,
    // Shared by clones: one Redis, one set of scripts it holds.
    loaded: std::rc::Rc<LoadedScripts>,
}

/// The field names of a fetch `init`, and its method, as JavaScript strings.
#[derive(Debug, Clone)]
struct InitKeys {
    method: JsValue,
    post: JsValue,
    headers: JsValue,
    body: JsValue,
    signal: JsValue,
}

impl FetchStore {
    /// A store for `setup`'s URL, token, namespace and timeout, calling `fetch(url, init)`.
    pub(crate) fn new(setup: &Setup, fetch: Function) -> Result<FetchStore, JsValue> {
        let headers = Object::new();
        let authorization = format!("Bearer {}", setup.token);
        Reflect::set(&headers, &"Authorization".into(), &authorization.into())?;
        Reflect::set(&headers, &"Content-Type".into(), &"application/json".into())?;
        // Results in base64, as the official clients ask: any bytes survive JSON.
        Reflect::set(&headers, &"Upstash-Encoding".into(), &"base64".into())?;
        Ok(FetchStore {
            fetch,
            pipeline_url: JsValue::from_str(&format!("{}/pipeline", setup.url)),
            headers,
            keys: InitKeys {
                method: "method".into(),
                post: "POST".into(),
                headers: "headers".into(),
                body: "body".into(),
                signal: "signal".into(),
            },
            namespace: setup.namespace.clone(),
            timeout_ms: setup.timeout.as_millis() as u64,
            loaded: Default::default(),
        })
    }

    /// Sends one `/pipeline` of `n` commands and reads one reply per command.
    async fn post(&self, body: Vec<u8>, n: usize) -> Result<Vec<Reply>, StoreError> {
        let started = web_time::Instant::now();
        let timed_out = StoreError::Timeout {
            after_ms: self.timeout_ms,
        };
        // Whether a rejection is the timeout firing: a `TimeoutError` (or an `AbortError` from a
        // fetch that reports its signal so), or any failure once the time is up.
        let failure = |e: JsValue| {
            let name = Reflect::get(&e, &"name".into())
                .ok()
                .and_then(|n| n.as_string())
                .unwrap_or_default();
            if name == "TimeoutError"
                || name == "AbortError"
                || started.elapsed().as_millis() as u64 >= self.timeout_ms
            {
                timed_out.clone()
            } else {
                StoreError::Unreachable(describe(&e))
            }
        };
        let body = String::from_utf8(body)
            .map_err(|e| StoreError::Protocol(format!("the pipeline is not UTF-8: {e}")))?;
        let init = self
            .init(&body)
            .map_err(|e| StoreError::Unreachable(describe(&e)))?;
        let called = self
            .fetch
            .call2(&JsValue::UNDEFINED, &self.pipeline_url, &init)
            .map_err(failure)?;
        let response = JsFuture::from(Promise::resolve(&called))
            .await
            .map_err(failure)?;
        let status = Reflect::get(&response, &"status".into())
            .ok()
            .and_then(|s| s.as_f64())
            .filter(|s| (100.0..1000.0).contains(s))
            .ok_or_else(|| {
                StoreError::Protocol("fetch answered something without a status".into())
            })? as u16;
        let text = Reflect::get(&response, &"text".into())
            .ok()
            .and_then(|f| f.dyn_into::<Function>().ok())
            .ok_or_else(|| StoreError::Protocol("fetch answered something without text()".into()))?
            .call0(&response)
            .map_err(failure)?;
        let text = JsFuture::from(Promise::resolve(&text))
            .await
            .map_err(failure)?
            .as_string()
            .ok_or_else(|| StoreError::Protocol("the response's text() is not a string".into()))?;
        decode_pipeline(status, &text, n)
    }

    /// `{ method, headers, body, signal }` for one `/pipeline`.
    fn init(&self, body: &str) -> Result<Object, JsValue> {
        let keys = &self.keys;
        let timeout = AbortSignal::timeout(self.timeout_ms as f64)?;
        let init = Object::new();
        Reflect::set(&init, &keys.method, &keys.post)?;
        Reflect::set(&init, &keys.headers, &self.headers)?;
        Reflect::set(&init, &keys.body, &body.into())?;
        Reflect::set(&init, &keys.signal, &timeout)?;
        Ok(init)
    }

    async fn run(
        &self,
        invocations: &[&Invocation],
        idempotent: bool,
    ) -> Result<Vec<Reply>, StoreError> {
        run_scripts(
            |body, n| self.post(body, n),
            invocations,
            idempotent,
            &self.loaded,
        )
        .await
    }

    async fn run_one(&self, invocation: &Invocation) -> Result<Reply, StoreError> {
        // A peek and a reset are idempotent: resent once when an answer is lost.
        self.run(&[invocation], true)
            .await?
            .pop()
            .ok_or_else(|| StoreError::Protocol("a pipeline of one command answered none".into()))
    }

    /// `identifier`'s standing on `limit`, charging nothing and writing nothing.
    pub(crate) async fn peek(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        time: TimeSource,
    ) -> Result<Verdict, StoreError> {
        let call = control::peek(&self.namespace, limit, identifier, time)?;
        control::read_peek(&self.run_one(&call).await?)
    }

    /// Deletes `identifier`'s state on `limit`; whether there was any.
    pub(crate) async fn reset(
        &self,
        limit: &Limit,
        identifier: &Identifier,
    ) -> Result<bool, StoreError> {
        let call = control::reset(&self.namespace, limit, identifier);
        control::read_reset(&self.run_one(&call).await?)
    }
}

/// A JavaScript error as one line: its `message` (and `cause`'s, which Node's fetch fills with
/// the socket's error), else its text.
fn describe(e: &JsValue) -> String {
    let field = |v: &JsValue, k: &str| {
        Reflect::get(v, &k.into())
            .ok()
            .and_then(|m| m.as_string())
            .filter(|m| !m.is_empty())
    };
    let message = field(e, "message").or_else(|| e.as_string());
    let cause = Reflect::get(e, &"cause".into())
        .ok()
        .and_then(|c| field(&c, "message").or_else(|| field(&c, "code")));
    match (message, cause) {
        (Some(m), Some(c)) => format!("{m} ({c})"),
        (Some(m), None) => m,
        (None, _) => format!("{e:?}"),
    }
}

#[async_trait(?Send)]
impl Store for FetchStore {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        check_by_scripts(
            |body, n| self.post(body, n),
            checks,
            time,
            &self.namespace,
            &self.loaded,
        )
        .await
    }
}
