//! What JavaScript sees (wasm32 only): `Core`, one per `Ratelimit`, holding the library's
//! [`Limiter`] — its denial cache, fail modes and counters — over a [`StoreExchange`].
//!
//! Arguments and answers cross as JSON text: the wrapper (ts/index.ts) stringifies the options
//! and identifiers and parses the outcome, and errors are thrown as the JSON of
//! [`crate::error::Error`] for it to rethrow as an `EdgelimitError`. Every method is
//! synchronous: `limit`, `peek`, `reset`, `settle` and `release` start a call and return its
//! number; the wrapper posts each body `advance`, `reply` and `fail` hand it and takes the outcome
//! from `finish` (src/exchange.rs). Calls may overlap.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use edgelimit::{Clock, Identifier, Limit, Limiter, Store, SystemClock, TimeMode, TimeSource};
use wasm_bindgen::prelude::*;

use crate::answer::{DecisionOut, LimitResult};
use crate::error::{Error, ErrorCode};
use crate::exchange::{Calls, Exchange, StoreExchange};
use crate::options::Setup;
use crate::request::LimitCall;
use crate::settlement::{actual_costs, ActualCosts, OwnIds, Ticket};

/// One configured limiter: its options, the library's `Limiter` over the wrapper's `fetch`, and
/// the calls in flight.
#[wasm_bindgen]
#[derive(Debug)]
pub struct Core {
    shared: Rc<Shared>,
    calls: RefCell<Calls<Outcome>>,
}

#[derive(Debug)]
struct Shared {
    setup: Setup,
    store: StoreExchange,
    limiter: Limiter<StoreExchange>,
    ids: OwnIds,
}

/// A call's outcome: the JSON `limit`, `peek`, `reset`, `settle` or `release` resolves to, or
/// the error to throw.
type Outcome = Result<String, Error>;

impl Shared {
    fn limiter(setup: &Setup, store: &StoreExchange) -> Limiter<StoreExchange> {
        Limiter::new(store.clone())
            .with_time_mode(setup.time)
            .with_denial_cache(setup.denial_cache)
            .with_denial_cache_ms(setup.denial_cache_ms)
    }

    fn time(&self) -> TimeSource {
        match self.setup.time {
            TimeMode::Server => TimeSource::Server,
            TimeMode::Local => TimeSource::At(SystemClock.now_ms()),
        }
    }

    /// The limit `name` and a non-empty `identifier`, for `peek` and `reset`.
    fn configured(&self, name: &str, identifier: &str) -> Result<(Arc<Limit>, Identifier), Error> {
        let limit = self.setup.limit(name).ok_or_else(|| {
            Error::new(
                ErrorCode::UnknownLimit,
                "name",
                format!(
                    "no limit is named `{name}`; the limits are {}",
                    self.setup.names()
                ),
            )
        })?;
        if identifier.is_empty() {
            return Err(Error::new(
                ErrorCode::MissingIdentifier,
                "identifier",
                "is empty",
            ));
        }
        Ok((limit.limit.clone(), Identifier::from(identifier)))
    }
}

/// A random number naming this instance in its own request ids: JavaScript's `Math.random` (the
/// ids need to differ between instances, not to be secret) mixed with the time.
fn instance_number() -> u64 {
    let random = (js_sys::Math::random() * (1u64 << 53) as f64) as u64;
    random ^ (js_sys::Date::now() as u64).rotate_left(40)
}

fn thrown(e: Error) -> JsValue {
    JsValue::from_str(&e.to_json())
}

fn unknown_call(number: u32) -> JsValue {
    thrown(Error::new(
        ErrorCode::InvalidArgument,
        "call",
        format!("no call {number} is in flight"),
    ))
}

#[wasm_bindgen]
impl Core {
    /// Validates `options` (JSON).
    #[wasm_bindgen(constructor)]
    pub fn new(options: &str) -> Result<Core, JsValue> {
        let setup = Setup::from_json(options).map_err(thrown)?;
        let store = StoreExchange::new(&setup.namespace, setup.timeout.as_millis() as u64);
        let limiter = Shared::limiter(&setup, &store);
        Ok(Core {
            shared: Rc::new(Shared {
                setup,
                store,
                limiter,
                ids: OwnIds::seeded(instance_number()),
            }),
            calls: Default::default(),
        })
    }

    /// Where the wrapper posts each body: the store's `/pipeline`.
    #[wasm_bindgen(js_name = pipelineUrl)]
    pub fn pipeline_url(&self) -> String {
        format!("{}/pipeline", self.shared.setup.url)
    }

    /// The `Authorization` field every post carries.
    pub fn authorization(&self) -> String {
        format!("Bearer {}", self.shared.setup.token)
    }

    /// How long one post, its body read, may take, in ms.
    #[wasm_bindgen(js_name = timeoutMs)]
    pub fn timeout_ms(&self) -> f64 {
        self.shared.setup.timeout.as_millis() as f64
    }

    /// Starts deciding one request against every limit (JSON identifiers and options, see
    /// `LimitCall::new`); the call's outcome is the result's JSON, followed, when the call may be
    /// settled ([`LimitCall::settles`]), by a line feed and its [`Ticket`]'s JSON, empty when it
    /// took nothing (JSON text never holds a raw line feed, so the first one splits them). Bad
    /// arguments throw before anything is sent; a store failure is answered by each limit's fail
    /// mode, never thrown.
    pub fn limit(&self, identifiers: &str, options: &str) -> Result<u32, JsValue> {
        let call = LimitCall::new(&self.shared.setup, identifiers, options).map_err(thrown)?;
        let shared = self.shared.clone();
        Ok(self.start(async move {
            let checked = shared.limiter.check_all(&call.checks).await;
            let mut out = LimitResult::new(&shared.setup, &call, &checked).to_json();
            if call.settles {
                let id = match &call.request_id {
                    Some(id) => id.clone(),
                    None => shared.ids.next(),
                };
                out.push('\n');
                if let Some(ticket) = Ticket::new(&call, &checked, &id) {
                    out.push_str(&ticket.to_json());
                }
            }
            Ok(out)
        }))
    }

    /// Starts settling what a `limit()` took (`ticket`, the JSON it came with; empty when it
    /// took nothing) at its real cost (`cost`, JSON: one for every limit, or per limit name),
    /// freeing its concurrency slots; the call's outcome is `true` once the store has it.
    pub fn settle(&self, ticket: &str, cost: &str) -> Result<u32, JsValue> {
        let actual = actual_costs(&self.shared.setup, cost).map_err(thrown)?;
        self.commit("settle", ticket, actual)
    }

    /// Starts freeing the concurrency slots a `limit()` took (`ticket`), its costs staying at
    /// their estimates; the call's outcome is `true` once the store has it.
    pub fn release(&self, ticket: &str) -> Result<u32, JsValue> {
        self.commit(
            "release",
            ticket,
            vec![None; self.shared.setup.limits.len()],
        )
    }

    /// Starts reading `identifier`'s standing on the limit `name`, charging nothing; the call's
    /// outcome is one decision's JSON.
    pub fn peek(&self, name: &str, identifier: &str) -> Result<u32, JsValue> {
        let (limit, identifier) = self.shared.configured(name, identifier).map_err(thrown)?;
        let shadow = self.shared.setup.limit(name).is_some_and(|l| l.shadow);
        let shared = self.shared.clone();
        Ok(self.start(async move {
            let verdict = shared
                .store
                .peek(&limit, &identifier, shared.time())
                .await
                .map_err(|e| Error::store("peek", &e))?;
            let decision = verdict.decisions.first().ok_or_else(|| {
                Error::new(ErrorCode::Store, "peek", "the store answered no decision")
            })?;
            let out = DecisionOut::new(&limit.name, decision, shadow);
            Ok(out.to_json())
        }))
    }

    /// Starts deleting `identifier`'s state on the limit `name` and forgetting this limiter's
    /// cached denials; the call's outcome is whether any state existed (`true` or `false`).
    pub fn reset(&self, name: &str, identifier: &str) -> Result<u32, JsValue> {
        let (limit, identifier) = self.shared.configured(name, identifier).map_err(thrown)?;
        let shared = self.shared.clone();
        Ok(self.start(async move {
            let existed = shared
                .store
                .reset(&limit, &identifier)
                .await
                .map_err(|e| Error::store("reset", &e))?;
            shared.limiter.forget(&limit, &identifier);
            Ok(existed.to_string())
        }))
    }

    /// Runs call `call` until it needs the store: the body to post, or `undefined` when it is
    /// over.
    pub fn advance(&self, call: u32) -> Result<Option<String>, JsValue> {
        let mut calls = self.calls.borrow_mut();
        let exchange = calls.get(call).ok_or_else(|| unknown_call(call))?;
        Ok(exchange.advance(&self.shared.store))
    }

    /// The store's reply to call `call`'s last body (its HTTP status and text), then
    /// [`Core::advance`].
    pub fn reply(&self, call: u32, status: u16, text: String) -> Result<Option<String>, JsValue> {
        if let Some(exchange) = self.calls.borrow_mut().get(call) {
            exchange.reply(status, text);
        }
        self.advance(call)
    }

    /// Posting call `call`'s last body failed (`timed_out`: its time ran out; else `message`
    /// says how), then [`Core::advance`].
    pub fn fail(
        &self,
        call: u32,
        timed_out: bool,
        message: String,
    ) -> Result<Option<String>, JsValue> {
        if let Some(exchange) = self.calls.borrow_mut().get(call) {
            exchange.fail(&self.shared.store, timed_out, message);
        }
        self.advance(call)
    }

    /// Ends call `call`: its outcome's JSON, or throws its error (a call the wrapper gives up
    /// before it is over ends as a store error).
    pub fn finish(&self, call: u32) -> Result<String, JsValue> {
        let exchange = self
            .calls
            .borrow_mut()
            .end(call)
            .ok_or_else(|| unknown_call(call))?;
        exchange
            .into_output()
            .unwrap_or_else(|| {
                Err(Error::new(
                    ErrorCode::Store,
                    "call",
                    "ended before the store answered",
                ))
            })
            .map_err(thrown)
    }
}

impl Core {
    /// Starts sending the commits of `ticket` with the real costs `actual` (`what`: the call,
    /// named in a store error). An empty ticket is a call that took nothing: nothing is sent.
    fn commit(
        &self,
        what: &'static str,
        ticket: &str,
        actual: ActualCosts,
    ) -> Result<u32, JsValue> {
        let commits = if ticket.is_empty() {
            Vec::new()
        } else {
            Ticket::from_json(&self.shared.setup, ticket)
                .map_err(thrown)?
                .commits(&self.shared.setup, &actual)
        };
        let shared = self.shared.clone();
        Ok(self.start(async move {
            if !commits.is_empty() {
                shared
                    .store
                    .check(&commits, shared.time())
                    .await
                    .map_err(|e| Error::store(what, &e))?;
            }
            Ok("true".to_string())
        }))
    }

    fn start(&self, call: impl std::future::Future<Output = Outcome> + 'static) -> u32 {
        self.calls.borrow_mut().start(Exchange::new(call))
    }
}
