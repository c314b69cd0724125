//! The store's round trips handed to JavaScript: a call (`limit`, `peek`, `reset`) runs in Rust
//! until it needs Redis, hands the `/pipeline` body it would send to the wrapper, which posts it
//! with `fetch` and hands back the reply, and so on until the call ends. The await stays in
//! JavaScript, where a promise costs nothing extra; the core is only ever called synchronously,
//! so a call is a future polled by hand ([`Exchange`], held by number in [`Calls`]) over a
//! [`StoreExchange`] whose one transport is the wrapper.
//!
//! Everything protocol-shaped is the library's (the plans and scripts, the `/pipeline` body, the
//! reply parser, the EVALSHA-then-EVAL sequence); this module only moves bodies and replies
//! across.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use async_trait::async_trait;
use edgelimit::script::{control, Invocation, Reply};
use edgelimit::store::upstash::{check_by_scripts, decode_pipeline, run_scripts, LoadedScripts};
use edgelimit::{Check, Identifier, Limit, Store, StoreError, TimeSource, Verdict};

/// What one call and its store say to each other: the body waiting to be posted, then the reply.
#[derive(Debug, Default)]
struct Round {
    /// The `/pipeline` body the call waits to have posted.
    outgoing: Option<String>,
    /// What the wrapper brought back for it.
    incoming: Option<Result<(u16, String), StoreError>>,
}

// Shared as the library's `Store` asks (`Send + Sync` natively, where the tests run); only ever
// touched by one thread.
type Slot = Arc<Mutex<Round>>;

fn locked<T>(shared: &Mutex<T>) -> MutexGuard<'_, T> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// A [`Store`] over the Upstash REST protocol whose transport is the wrapper's `fetch`, reached
/// through the [`Exchange`] that is running.
#[derive(Debug, Clone)]
pub struct StoreExchange {
    namespace: String,
    timeout_ms: u64,
    // Shared by clones: one Redis, one set of scripts it holds.
    loaded: Arc<LoadedScripts>,
    // The round of the exchange being polled: calls overlap, but only one runs at a time.
    running: Arc<Mutex<Option<Slot>>>,
}

impl StoreExchange {
    /// A store for keys under `namespace`, whose round trips time out after `timeout_ms`.
    pub fn new(namespace: &str, timeout_ms: u64) -> StoreExchange {
        StoreExchange {
            namespace: namespace.to_string(),
            timeout_ms,
            loaded: Default::default(),
            running: Default::default(),
        }
    }

    /// Posts one `/pipeline` of `n` commands through the running exchange and reads one reply
    /// per command.
    async fn post(&self, body: Vec<u8>, n: usize) -> Result<Vec<Reply>, StoreError> {
        let slot = locked(&self.running).clone().ok_or_else(|| {
            StoreError::Unreachable("a store round trip outside a running exchange".into())
        })?;
        let body = String::from_utf8(body)
            .map_err(|e| StoreError::Protocol(format!("the pipeline is not UTF-8: {e}")))?;
        locked(&slot).outgoing = Some(body);
        let (status, text) = std::future::poll_fn(|_| match locked(&slot).incoming.take() {
            Some(reply) => Poll::Ready(reply),
            None => Poll::Pending,
        })
        .await?;
        decode_pipeline(status, &text, n)
    }

    async fn run_one(&self, invocation: &Invocation) -> Result<Reply, StoreError> {
        // A peek and a reset are idempotent: resent once when an answer is lost.
        run_scripts(
            |body, n| self.post(body, n),
            &[invocation],
            true,
            &self.loaded,
        )
        .await?
        .pop()
        .ok_or_else(|| StoreError::Protocol("a pipeline of one command answered none".into()))
    }

    /// `identifier`'s standing on `limit`, charging nothing and writing nothing.
    pub async fn peek(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        time: TimeSource,
    ) -> Result<Verdict, StoreError> {
        let call = control::peek(&self.namespace, limit, identifier, time)?;
        control::read_peek(&self.run_one(&call).await?)
    }

    /// Deletes `identifier`'s state on `limit`; whether there was any.
    pub async fn reset(&self, limit: &Limit, identifier: &Identifier) -> Result<bool, StoreError> {
        let call = control::reset(&self.namespace, limit, identifier);
        control::read_reset(&self.run_one(&call).await?)
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl Store for StoreExchange {
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

/// One call in flight: its future, polled only when the wrapper hands something back.
pub struct Exchange<T> {
    future: Pin<Box<dyn Future<Output = T>>>,
    slot: Slot,
    output: Option<T>,
}

impl<T> std::fmt::Debug for Exchange<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange")
            .field("round", &self.slot)
            .field("over", &self.output.is_some())
            .finish()
    }
}

impl<T> Exchange<T> {
    /// The call `future`, whose store round trips go through the [`StoreExchange`] each
    /// [`Exchange::advance`] is given; nothing runs until the first.
    pub fn new(future: impl Future<Output = T> + 'static) -> Exchange<T> {
        Exchange {
            future: Box::pin(future),
            slot: Default::default(),
            output: None,
        }
    }

    /// Runs the call until it needs the store — the `/pipeline` body to post — or ends (`None`).
    pub fn advance(&mut self, store: &StoreExchange) -> Option<String> {
        if self.output.is_some() {
            return None;
        }
        let previous = locked(&store.running).replace(self.slot.clone());
        let polled = self
            .future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()));
        *locked(&store.running) = previous;
        match polled {
            Poll::Ready(output) => {
                self.output = Some(output);
                None
            }
            // Pending only ever waits for a reply: the body it asked to have posted is there.
            Poll::Pending => locked(&self.slot).outgoing.take(),
        }
    }

    /// The reply to the body [`Exchange::advance`] handed out: the HTTP status and the text.
    pub fn reply(&mut self, status: u16, text: String) {
        locked(&self.slot).incoming = Some(Ok((status, text)));
    }

    /// The post failed: `timed_out` when the time allowed ran out, else the failure's
    /// description.
    pub fn fail(&mut self, store: &StoreExchange, timed_out: bool, message: String) {
        let error = if timed_out {
            StoreError::Timeout {
                after_ms: store.timeout_ms,
            }
        } else {
            StoreError::Unreachable(message)
        };
        locked(&self.slot).incoming = Some(Err(error));
    }

    /// What the call ended with; `None` while it waits for the store.
    pub fn into_output(self) -> Option<T> {
        self.output
    }
}

/// The calls in flight, by number: what the wrapper holds of a call is its number, and a
/// finished call's number is given to the next.
#[derive(Debug)]
pub struct Calls<T> {
    slots: Vec<Option<Exchange<T>>>,
    free: Vec<u32>,
}

impl<T> Default for Calls<T> {
    fn default() -> Calls<T> {
        Calls {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Calls<T> {
    /// Holds `call`; its number.
    pub fn start(&mut self, call: Exchange<T>) -> u32 {
        match self.free.pop() {
            Some(number) => {
                self.slots[number as usize] = Some(call);
                number
            }
            None => {
                self.slots.push(Some(call));
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// The call numbered `number`, if it is in flight.
    pub fn get(&mut self, number: u32) -> Option<&mut Exchange<T>> {
        self.slots.get_mut(number as usize)?.as_mut()
    }

    /// Takes the call numbered `number` out, freeing its number.
    pub fn end(&mut self, number: u32) -> Option<Exchange<T>> {
        let call = self.slots.get_mut(number as usize)?.take()?;
        self.free.push(number);
        Some(call)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgelimit::Limit;

    fn limit() -> Arc<Limit> {
        let policy = "fixed 10/1m".parse().expect("a policy");
        Arc::new(Limit::new("api", policy))
    }

    fn checking(store: &StoreExchange) -> Exchange<Result<Vec<Verdict>, StoreError>> {
        let store = store.clone();
        let check = Check::single(limit(), "alice", 1);
        Exchange::new(async move { store.check(&[check], TimeSource::Server).await })
    }

    /// The verb of the body's first command.
    fn verb(body: &str) -> String {
        let sent: serde_json::Value = serde_json::from_str(body).expect("the body is JSON");
        sent[0][0].as_str().expect("a verb").to_string()
    }

    #[test]
    fn a_call_hands_out_its_body_and_ends_with_what_the_reply_says() {
        let store = StoreExchange::new("edgelimit", 1_000);
        let mut call = checking(&store);
        let body = call.advance(&store).expect("a check needs the store");
        assert!(body.contains("{el:edgelimit:api:alice}"), "{body}");
        // A reply Redis could not have given: the call ends with the protocol error.
        call.reply(200, r#"[{"result": "not a decision"}]"#.into());
        assert_eq!(call.advance(&store), None);
        let error = call.into_output().expect("over").expect_err("a bad reply");
        assert!(matches!(error, StoreError::Protocol(_)), "{error:?}");
    }

    #[test]
    fn a_script_redis_lost_is_sent_again_whole() {
        let store = StoreExchange::new("edgelimit", 1_000);
        let mut call = checking(&store);
        let body = call.advance(&store).expect("a body");
        assert_eq!(verb(&body), "EVALSHA", "{body}");
        call.reply(
            200,
            r#"[{"error": "NOSCRIPT No matching script. Please use EVAL."}]"#.into(),
        );
        let again = call.advance(&store).expect("the script resent");
        assert_eq!(verb(&again), "EVAL", "{again}");
    }

    #[test]
    fn a_timeout_and_a_failure_end_the_call_with_their_errors() {
        let store = StoreExchange::new("edgelimit", 250);
        let mut call = checking(&store);
        call.advance(&store).expect("a body");
        call.fail(&store, true, "aborted".into());
        assert_eq!(call.advance(&store), None);
        assert!(matches!(
            call.into_output().expect("over"),
            Err(StoreError::Timeout { after_ms: 250 })
        ));

        let mut call = checking(&store);
        call.advance(&store).expect("a body");
        call.fail(&store, false, "connection refused".into());
        call.advance(&store);
        match call.into_output().expect("over") {
            Err(StoreError::Unreachable(m)) => assert_eq!(m, "connection refused"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_call_is_found_by_its_number_until_it_ends_and_its_number_is_reused() {
        let store = StoreExchange::new("edgelimit", 1_000);
        let mut calls = Calls::default();
        let a = calls.start(checking(&store));
        let b = calls.start(checking(&store));
        assert_ne!(a, b);
        assert!(calls.get(b).is_some() && calls.get(b + 1).is_none());
        assert!(calls.end(a).is_some());
        assert!(
            calls.get(a).is_none() && calls.end(a).is_none(),
            "ended once"
        );
        assert_eq!(calls.start(checking(&store)), a, "the freed number");
        assert!(calls.get(b).is_some(), "b untouched");
    }

    #[test]
    fn overlapping_calls_keep_their_own_rounds() {
        let store = StoreExchange::new("edgelimit", 1_000);
        let mut a = checking(&store);
        let mut b = checking(&store);
        a.advance(&store).expect("a's body");
        b.advance(&store).expect("b's body");
        b.fail(&store, false, "b failed".into());
        b.advance(&store);
        a.fail(&store, true, "a timed out".into());
        a.advance(&store);
        assert!(matches!(
            b.into_output(),
            Some(Err(StoreError::Unreachable(_)))
        ));
        assert!(matches!(
            a.into_output(),
            Some(Err(StoreError::Timeout { .. }))
        ));
    }
}
