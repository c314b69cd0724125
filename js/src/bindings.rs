//! What JavaScript sees (wasm32 only): `Core`, one per `Ratelimit`, holding the library's
//! [`Limiter`] — its denial cache, fail modes and counters — over a [`FetchStore`].
//!
//! Arguments and answers cross as JSON text: the wrapper (ts/index.ts) stringifies the options
//! and identifiers and parses the outcome, and errors are rejected as the JSON of
//! [`crate::error::Error`] for it to rethrow as an `EdgelimitError`. Each asynchronous method
//! returns a `Promise` over a shared handle, so calls may overlap.

use std::rc::Rc;

use std::sync::Arc;

use edgelimit::{Clock, Identifier, Limit, Limiter, SystemClock, TimeMode, TimeSource};
use js_sys::{Function, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use crate::answer::{DecisionOut, LimitResult};
use crate::error::{Error, ErrorCode};
use crate::fetch_store::FetchStore;
use crate::options::Setup;
use crate::request::LimitCall;

/// One configured limiter: its options and the library's `Limiter` over `fetch`.
#[wasm_bindgen]
#[derive(Debug)]
pub struct Core {
    shared: Rc<Shared>,
}

#[derive(Debug)]
struct Shared {
    setup: Setup,
    store: FetchStore,
    limiter: Limiter<FetchStore>,
}

impl Shared {
    fn limiter(setup: &Setup, store: &FetchStore) -> Limiter<FetchStore> {
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

fn thrown(e: Error) -> JsValue {
    JsValue::from_str(&e.to_json())
}

#[wasm_bindgen]
impl Core {
    /// Validates `options` (JSON) and makes the limiter; `fetch(url, init)` carries its
    /// requests.
    #[wasm_bindgen(constructor)]
    pub fn new(options: &str, fetch: Function) -> Result<Core, JsValue> {
        let setup = Setup::from_json(options).map_err(thrown)?;
        let store = FetchStore::new(&setup, fetch)?;
        let limiter = Shared::limiter(&setup, &store);
        Ok(Core {
            shared: Rc::new(Shared {
                setup,
                store,
                limiter,
            }),
        })
    }

    /// Decides one request against every limit (JSON identifiers and options, see
    /// `LimitCall::new`); resolves to the outcome's JSON. Bad arguments throw before anything is
    /// sent; a store failure is answered by each limit's fail mode, never thrown.
    pub fn limit(&self, identifiers: &str, options: &str) -> Result<Promise, JsValue> {
        let call = LimitCall::new(&self.shared.setup, identifiers, options).map_err(thrown)?;
        let shared = self.shared.clone();
        Ok(future_to_promise(async move {
            let checked = shared.limiter.check_all(&call.checks).await;
            let outcome = LimitResult::new(&shared.setup, &call, &checked);
            Ok(JsValue::from_str(&outcome.to_json()))
        }))
    }

    /// `identifier`'s standing on the limit `name`, charging nothing; resolves to one
    /// decision's JSON.
    pub fn peek(&self, name: &str, identifier: &str) -> Result<Promise, JsValue> {
        let (limit, identifier) = self.shared.configured(name, identifier).map_err(thrown)?;
        let shadow = self.shared.setup.limit(name).is_some_and(|l| l.shadow);
        let shared = self.shared.clone();
        Ok(future_to_promise(async move {
            let verdict = shared
                .store
                .peek(&limit, &identifier, shared.time())
                .await
                .map_err(|e| thrown(Error::store("peek", &e)))?;
            let decision = verdict.decisions.first().ok_or_else(|| {
                thrown(Error::new(
                    ErrorCode::Store,
                    "peek",
                    "the store answered no decision",
                ))
            })?;
            let out = DecisionOut::new(&limit.name, decision, shadow);
            Ok(JsValue::from_str(
                &serde_json::to_string(&out).unwrap_or_default(),
            ))
        }))
    }

    /// Deletes `identifier`'s state on the limit `name` and forgets this limiter's cached
    /// denials; resolves to whether any state existed.
    pub fn reset(&self, name: &str, identifier: &str) -> Result<Promise, JsValue> {
        let (limit, identifier) = self.shared.configured(name, identifier).map_err(thrown)?;
        let shared = self.shared.clone();
        Ok(future_to_promise(async move {
            let existed = shared
                .store
                .reset(&limit, &identifier)
                .await
                .map_err(|e| thrown(Error::store("reset", &e)))?;
            shared.limiter.forget(&limit, &identifier);
            Ok(JsValue::from_bool(existed))
        }))
    }
}
