//! The runtime glue (wasm32 only): the `fetch` handler converts the JS request into a
//! [`RequestView`], calls the pipeline ([`Edge::handle`]), and does the I/O around it — the
//! origin, the console, Analytics Engine, `waitUntil`. Everything it decides is decided in
//! [`edgelimit_engine::pipeline`].

use std::borrow::Cow;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use async_trait::async_trait;
use edgelimit::global::GlobalStore;
use edgelimit::http::{HeaderFields, Problem, PROBLEM_CONTENT_TYPE};
use edgelimit::redact::redact;
use edgelimit::store::{ShardedStore, StoreSpecError, REST_TOKEN_VAR, REST_URL_VAR};
use edgelimit::{Check, RestStore, Store, StoreError, TimeSource, Verdict};
use worker::wasm_bindgen::{JsCast, JsValue};
use worker::{
    console_error, console_log, event, js_sys, web_sys, AnalyticsEngineDataPointBuilder, Context,
    Env, Fetch, Headers, Request, Response, ResponseBuilder, Url,
};

use crate::durable::client::{object_store, placement_key, ObjectShard, SHARD_KEY_VAR};
use edgelimit_engine::admin_route::{check_admin_request, too_large, MAX_ADMIN_BODY};
use edgelimit_engine::after_response::{AfterResponse, ResponseView};
use edgelimit_engine::config::{
    Config, ConfigError, FixedResponse, RouteToken, StoreKind, CONFIG_VAR, STATE_BINDING,
};
use edgelimit_engine::identify::RequestView;
use edgelimit_engine::pipeline::{Edge, Handled, Route};
use edgelimit_engine::plan::Incoming;
use edgelimit_engine::reading::FieldValues;
use edgelimit_engine::route_answer::RouteAnswer;
use edgelimit_engine::route_guard::RouteGuard;
use edgelimit_engine::ruling::{Action, EXCEEDED_HEADER, NO_STORE};

/// The var naming where admitted requests go: an origin's URL, or [`ROUTE_ORIGIN`]. Unset: the
/// configuration's `respond`, and without one the Worker refuses to start — no request goes
/// anywhere its operator did not name.
const ORIGIN_VAR: &str = "ORIGIN";

/// `ORIGIN = "route"`: the request goes on to its own URL (the Worker runs on a route in front of
/// its origin).
const ROUTE_ORIGIN: &str = "route";

/// The Durable Objects as one store, shared by the request path and the admin route.
type Objects = Rc<ShardedStore<ObjectShard>>;

/// One region's store for global limits: its own Upstash database, the home's beside it, and
/// the other regions' (lenders of unused capacity).
type RegionStore = GlobalStore<Arc<RestStore>, Arc<RestStore>, Arc<RestStore>>;

/// The request path's store, chosen when the isolate loads: Redis as the library builds it from
/// the configuration (one REST store, or its shards), the Durable Objects (the one store only a
/// Worker has, built here), or (with a `global` section) one region's. Only the objects are
/// controlled through the Worker (Redis has edgelimit-admin), so Redis is held as the library's
/// concrete REST type, not as `Control`: its control operations stay out of the wasm.
enum WorkerStore {
    Redis(ShardedStore<RestStore>),
    Objects(Objects),
    Global(Box<RegionStore>),
}

#[async_trait(?Send)]
impl Store for WorkerStore {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        match self {
            WorkerStore::Redis(store) => store.check(checks, time).await,
            WorkerStore::Objects(store) => store.check(checks, time).await,
            WorkerStore::Global(store) => store.check(checks, time).await,
        }
    }

    fn upkeep_due(&self) -> bool {
        match self {
            WorkerStore::Redis(store) => store.upkeep_due(),
            WorkerStore::Objects(store) => store.upkeep_due(),
            WorkerStore::Global(store) => store.upkeep_due(),
        }
    }

    async fn upkeep(&self, now_ms: u64) -> Result<(), StoreError> {
        match self {
            WorkerStore::Redis(store) => store.upkeep(now_ms).await,
            WorkerStore::Objects(store) => store.upkeep(now_ms).await,
            WorkerStore::Global(store) => store.upkeep(now_ms).await,
        }
    }
}

/// Where admitted requests go.
enum Upstream {
    /// `ORIGIN` names an origin: the request goes there, its path and query kept.
    Origin(String),
    /// `ORIGIN = "route"`: the request goes on to its own URL.
    OwnUrl,
    /// No `ORIGIN`: the configuration's `respond`.
    Respond(FixedResponse),
}

/// What an isolate keeps between requests: the request path over its store (one per region
/// with global limits, in `global.regions` order), where admitted requests go, the admin
/// route's objects and secret when it is on, the metrics page's secret unless it is public,
/// and the guard of both routes.
struct Isolate {
    edges: Vec<Edge<WorkerStore>>,
    upstream: Upstream,
    admin: Option<(Objects, RouteToken)>,
    metrics_token: Option<RouteToken>,
    guard: RouteGuard,
}

thread_local! {
    static ISOLATE: RefCell<Option<Rc<Isolate>>> = const { RefCell::new(None) };
}

fn env_text(env: &Env, name: &str) -> Option<String> {
    let value = js_sys::Reflect::get(env, &JsValue::from_str(name)).ok()?;
    value.as_string().filter(|s| !s.trim().is_empty())
}

fn load_config(env: &Env) -> Result<Config, ConfigError> {
    let value =
        js_sys::Reflect::get(env, &JsValue::from_str(CONFIG_VAR)).unwrap_or(JsValue::UNDEFINED);
    if value.is_undefined() || value.is_null() {
        return Err(ConfigError {
            field: "(var)".to_string(),
            problem: format!("is not set: add a [vars.{CONFIG_VAR}] table to wrangler.toml"),
        });
    }
    // A table in wrangler.toml (or an object in wrangler.jsonc) arrives as an object; a string
    // var is taken as JSON.
    let text = match value.as_string() {
        Some(text) => text,
        None => js_sys::JSON::stringify(&value)
            .map(String::from)
            .unwrap_or_default(),
    };
    let config = Config::from_json(&text)?;
    // `custom:` sources are a native service's code; a request here has none to offer.
    config.refuse_custom_sources()?;
    Ok(config)
}

/// The library's refusal of the configured store, saying how to set a missing secret.
fn store_problem(e: StoreSpecError) -> String {
    match e {
        StoreSpecError::Unset { var, needed_by } => format!(
            "{var} is not set ({needed_by}): `wrangler secret put {var}` (or .dev.vars locally)"
        ),
        other => other.to_string(),
    }
}

/// The store the deployment has: `store` as configured, else Redis when the configuration names
/// one (its shards, or `UPSTASH_REDIS_REST_URL` set), else the Durable Object binding. Redis is
/// built by the library from the configuration; the objects, which only a Worker has, here.
fn configured_store(env: &Env, config: &Config) -> Result<WorkerStore, String> {
    let bound = env.durable_object(STATE_BINDING).is_ok();
    if config.store == Some(StoreKind::DurableObject) {
        if !bound {
            return Err(format!(
                "store = \"durable-object\" needs the Durable Object binding {STATE_BINDING} \
                 (class EdgeLimitState): see the root wrangler.toml"
            ));
        }
        return durable_objects(env, config).map(WorkerStore::Objects);
    }
    let spec = config
        .store_spec(|name| env_text(env, name))
        .map_err(store_problem)?;
    match spec {
        Some(spec) => spec
            .build_rest(&config.namespace, config.timeout)
            .map(WorkerStore::Redis)
            .map_err(store_problem),
        None if config.store == Some(StoreKind::Upstash) => Err(format!(
            "{REST_URL_VAR} is not set: `wrangler secret put {REST_URL_VAR}` (or .dev.vars \
             locally)"
        )),
        None if bound => durable_objects(env, config).map(WorkerStore::Objects),
        None => Err(format!(
            "no store: set {REST_URL_VAR} and {REST_TOKEN_VAR} (`wrangler secret put`) for \
             Upstash, or bind the Durable Object class EdgeLimitState as {STATE_BINDING} (the \
             root wrangler.toml does) to keep the state in Cloudflare"
        )),
    }
}

/// The Durable Objects bound as `EDGELIMIT_STATE`, as one store.
fn durable_objects(env: &Env, config: &Config) -> Result<Objects, String> {
    let namespace = env
        .durable_object(STATE_BINDING)
        .map_err(|e| format!("{STATE_BINDING}: {e}"))?;
    let key = placement_key(env_text(env, SHARD_KEY_VAR).as_deref(), &namespace)
        .map_err(|e| e.to_string())?;
    Ok(Rc::new(
        object_store(&namespace, config.objects, config.timeout, key).map_err(|e| e.to_string())?,
    ))
}

/// One request path per region, each over the region's store and the home's
/// (docs/design.md §9).
fn regional_edges(env: &Env, config: &Config) -> Result<Vec<Edge<WorkerStore>>, String> {
    let global = config.global.as_ref().expect("a global section");
    let (home, regions) = config
        .global_endpoints(|name| env_text(env, name))
        .map_err(store_problem)?
        .expect("a global section");
    let build = |endpoint: &edgelimit::store::RestEndpoint| {
        endpoint
            .build(&config.namespace, config.timeout)
            .map(Arc::new)
            .map_err(store_problem)
    };
    let home = build(&home)?;
    let stores = regions
        .iter()
        .map(build)
        .collect::<Result<Vec<_>, String>>()?;
    global
        .regions
        .iter()
        .enumerate()
        .map(|(i, region)| {
            let limits = config
                .regional_limits(i)
                .map_err(|e| format!("global.regions[{i}] \"{}\": {e}", region.name))?;
            // The other regions' stores, which lend this region their unused shares and
            // leases when the pool falls short (docs/design.md §9, "Capacity follows demand").
            let peers = (0..stores.len())
                .filter(|&j| j != i)
                .map(|j| (j, stores[j].clone()))
                .collect();
            let store = GlobalStore::new(
                stores[i].clone(),
                home.clone(),
                limits,
                global.regions.len(),
                global.lease_ms,
            )
            .with_peers(peers);
            Ok(
                Edge::new(config.clone(), WorkerStore::Global(Box::new(store)))
                    .with_id_seed(isolate_seed()),
            )
        })
        .collect()
}

impl Isolate {
    fn load(env: &Env) -> Result<Isolate, String> {
        let config = load_config(env).map_err(|e| e.to_string())?;
        if config.global.is_some() {
            if let Some(path) = &config.admin_path {
                return Err(admin_over_redis(path));
            }
            let tokens = config
                .route_tokens(|name| env_text(env, name))
                .map_err(|e| e.to_string())?;
            return Ok(Isolate {
                upstream: upstream(env, &config)?,
                edges: regional_edges(env, &config)?,
                admin: None,
                metrics_token: tokens.metrics,
                guard: RouteGuard::new(),
            });
        }
        let store = configured_store(env, &config)?;
        if let (Some(path), WorkerStore::Redis(_) | WorkerStore::Global(_)) =
            (&config.admin_path, &store)
        {
            return Err(admin_over_redis(path));
        }
        let tokens = config
            .route_tokens(|name| env_text(env, name))
            .map_err(|e| e.to_string())?;
        let admin = match (tokens.admin, &store) {
            (Some(token), WorkerStore::Objects(objects)) => Some((objects.clone(), token)),
            _ => None,
        };
        Ok(Isolate {
            upstream: upstream(env, &config)?,
            edges: vec![Edge::new(config, store).with_id_seed(isolate_seed())],
            admin,
            metrics_token: tokens.metrics,
            guard: RouteGuard::new(),
        })
    }

    /// The request path deciding `view`: its region's with global limits (by `request.cf`'s
    /// colo, else continent, else the first region), else the one.
    fn edge_for(&self, view: &View) -> usize {
        match &self.edges[0].config().global {
            Some(global) => global.region_of(
                view.cf_text("continent").as_deref(),
                view.cf_text("colo").as_deref(),
            ),
            None => 0,
        }
    }

    /// This isolate's state, loaded on first use. A configuration error is not cached, so every
    /// request is refused for it (and a fixed deployment recovers at once).
    fn get(env: &Env) -> Result<Rc<Isolate>, String> {
        if let Some(isolate) = ISOLATE.with(|e| e.borrow().clone()) {
            return Ok(isolate);
        }
        let isolate = Rc::new(Isolate::load(env)?);
        ISOLATE.with(|e| *e.borrow_mut() = Some(isolate.clone()));
        Ok(isolate)
    }
}

/// A random number naming this isolate's requests ([`Edge::with_id_seed`]): wasm32's standard
/// library has no randomness of its own.
fn isolate_seed() -> u64 {
    let half = || (js_sys::Math::random() * 4_294_967_296.0) as u64;
    (half() << 32) | half()
}

/// Why `admin_path` is refused with the state in Redis.
fn admin_over_redis(path: &str) -> String {
    format!(
        "admin_path `{path}`: the admin route controls Durable Objects; Redis is controlled \
         directly (edgelimit-admin --store upstash+https://…)"
    )
}

/// Where admitted requests go: `ORIGIN` (a URL, or `route`), else the configuration's
/// `respond`; with neither the Worker refuses to start, so that no request is sent where its
/// operator did not say.
fn upstream(env: &Env, config: &Config) -> Result<Upstream, String> {
    let Some(origin) = env_text(env, ORIGIN_VAR) else {
        return match &config.respond {
            Some(fixed) => Ok(Upstream::Respond(fixed.clone())),
            None => Err(format!(
                "{ORIGIN_VAR} is not set: set it to the origin's URL (ORIGIN = \
                 \"https://api.example.com\"), to \"{ROUTE_ORIGIN}\" when the Worker runs on a \
                 route in front of its origin, or give {CONFIG_VAR} a `respond`"
            )),
        };
    };
    let origin = origin.trim().trim_end_matches('/');
    if origin == ROUTE_ORIGIN {
        return Ok(Upstream::OwnUrl);
    }
    Url::parse(origin).map_err(|e| format!("{ORIGIN_VAR} `{origin}` is not a URL: {e}"))?;
    Ok(Upstream::Origin(origin.to_string()))
}

/// The request as the rules see it.
struct View {
    method: String,
    host: String,
    path: String,
    url: Url,
    headers: Headers,
    country: Option<String>,
    /// `request.cf`, read only for a logged line (its colo and continent).
    cf: Option<JsValue>,
}

impl View {
    fn of(req: &Request) -> worker::Result<View> {
        let url = req.url()?;
        Ok(View {
            method: req.method().to_string().to_ascii_uppercase(),
            host: url.host_str().unwrap_or_default().to_ascii_lowercase(),
            path: url.path().to_string(),
            headers: req.headers().clone(),
            country: req.cf().and_then(|cf| cf.country()),
            cf: js_sys::Reflect::get(req.inner(), &JsValue::from_str("cf"))
                .ok()
                .filter(JsValue::is_object),
            url,
        })
    }

    /// A text property of `request.cf` (`colo`, `continent`), when set and not empty. Read
    /// through `Reflect`, which never throws on a missing property (`Cf::colo` unwraps).
    fn cf_text(&self, name: &str) -> Option<String> {
        let value = js_sys::Reflect::get(self.cf.as_ref()?, &JsValue::from_str(name)).ok()?;
        value.as_string().filter(|text| !text.is_empty())
    }
}

impl RequestView for View {
    fn method(&self) -> &str {
        &self.method
    }
    fn host(&self) -> &str {
        &self.host
    }
    fn path(&self) -> &str {
        &self.path
    }
    fn query(&self, name: &str) -> Option<String> {
        self.url
            .query_pairs()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }
    fn query_values(&self, name: &str) -> FieldValues<'_> {
        let mut values = self
            .url
            .query_pairs()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v);
        let Some(first) = values.next() else {
            return FieldValues::Absent;
        };
        match values.last() {
            None => FieldValues::One(first),
            Some(last) => FieldValues::Repeated { first, last },
        }
    }
    fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).ok().flatten()
    }
    /// The runtime joins a header's repeated lines with `, ` (the Fetch API's `Headers.get`).
    fn header_values(&self, name: &str) -> FieldValues<'_> {
        FieldValues::joined(name, self.header(name).map(Cow::Owned))
    }
    fn country(&self) -> Option<String> {
        self.country.clone()
    }
}

impl View {
    /// The client's address, as the rules' `ip` reads it.
    fn client(&self) -> Option<String> {
        self.client_ip().map(|ip| ip.into_owned())
    }
}

impl Incoming for View {}

/// A fresh id for one error: a random UUID (`crypto.randomUUID()`), so no two occurrences share
/// one; the time and `Math.random()` where the runtime has no `crypto`.
fn error_id() -> String {
    let uuid = || -> Option<String> {
        let crypto = js_sys::Reflect::get(&js_sys::global(), &JsValue::from_str("crypto")).ok()?;
        let random_uuid = js_sys::Reflect::get(&crypto, &JsValue::from_str("randomUUID")).ok()?;
        random_uuid
            .dyn_into::<js_sys::Function>()
            .ok()?
            .call0(&crypto)
            .ok()?
            .as_string()
    };
    uuid().unwrap_or_else(|| {
        format!(
            "{:x}-{:x}",
            js_sys::Date::now() as u64,
            (js_sys::Math::random() * 9_007_199_254_740_992.0) as u64
        )
    })
}

/// Answers a request the Worker cannot serve — a configuration it cannot run, an internal
/// failure — with a generic problem (`status`) carrying a fresh error id, and logs `what` and
/// `detail`, every secret redacted, under the same id. Nothing of `detail` reaches the client.
fn internal_error(status: u16, what: &str, detail: &str) -> worker::Result<Response> {
    let id = error_id();
    console_error!("edgelimit: {what} (error_id {id}): {}", redact(detail));
    problem_response(&Problem::internal_error(status, &id))
}

/// Writes the store failures' log lines now due (one JSON object each, `"edgelimit":
/// "store_failure"`): a class at its first failure, then at most once a minute, never sampled.
/// Their errors were redacted when noted (`FailureLine::error`). None while the store answers
/// (one flag read).
fn log_store_failures(edge: &Edge<WorkerStore>) {
    for line in edge.limiter().store_failure_lines() {
        console_error!("{}", line.to_json());
    }
}

/// Logs `what` failed, with `error` redacted.
fn log_failure(what: &str, error: &dyn std::fmt::Display) {
    console_error!("edgelimit: {what}: {}", redact(&error.to_string()));
}

fn problem_response(problem: &Problem) -> worker::Result<Response> {
    let headers = Headers::new();
    headers.set("content-type", PROBLEM_CONTENT_TYPE)?;
    headers.set("cache-control", NO_STORE)?;
    Ok(ResponseBuilder::new()
        .with_status(problem.status)
        .with_headers(headers)
        .fixed(problem.to_json().into_bytes()))
}

/// A copy of `response` (whose headers are immutable) with `extra` header fields set.
fn with_headers(response: Response, extra: &HeaderFields) -> worker::Result<Response> {
    let status = response.status_code();
    let headers = Headers::new();
    for (name, value) in response.headers().entries() {
        headers.append(&name, &value)?;
    }
    for (name, value) in extra {
        headers.set(name, value)?;
    }
    let (_, body) = response.into_parts();
    Ok(ResponseBuilder::new()
        .with_status(status)
        .with_headers(headers)
        .body(body))
}

/// The request to forward, with [`EXCEEDED_HEADER`] the request path's own when the
/// configuration has a `soft` limit (`exceeded`: `Some`, holding the value when a `soft` limit
/// denied): a copy, since an incoming request's fields cannot be changed, with the client's own
/// field of that name removed.
fn telling_origin(req: Request, exceeded: Option<Option<String>>) -> worker::Result<Request> {
    let Some(value) = exceeded else {
        return Ok(req);
    };
    let copy = Request::from(web_sys::Request::new_with_request(req.inner())?);
    let headers = copy.headers();
    headers.delete(EXCEEDED_HEADER)?;
    if let Some(value) = value {
        headers.set(EXCEEDED_HEADER, &value)?;
    }
    Ok(copy)
}

async fn forward(
    req: Request,
    upstream: &Upstream,
    extra: &HeaderFields,
) -> worker::Result<Response> {
    let path = req.path();
    let sent = match upstream {
        Upstream::Origin(origin) => {
            let url = req.url()?;
            let target = match url.query() {
                Some(q) => format!("{origin}{}?{q}", url.path()),
                None => format!("{origin}{}", url.path()),
            };
            // `new Request(target, request)`: the same method, headers and body, another URL
            // (a Request is a valid RequestInit).
            let inner = web_sys::Request::new_with_str_and_init(
                &target,
                req.inner().unchecked_ref::<web_sys::RequestInit>(),
            )?;
            Fetch::Request(Request::from(inner)).send().await
        }
        Upstream::Respond(fixed) => {
            let headers = Headers::new();
            headers.set("content-type", &fixed.content_type)?;
            let response = ResponseBuilder::new()
                .with_status(fixed.status)
                .with_headers(headers)
                .fixed(fixed.body.clone().into_bytes());
            return with_headers(response, extra);
        }
        Upstream::OwnUrl => Fetch::Request(req).send().await,
    };
    match sent {
        Ok(response) => with_headers(response, extra),
        Err(e) => {
            log_failure("origin unreachable", &e);
            let response = problem_response(&Problem::origin_unreachable(&path))?;
            with_headers(response, extra)
        }
    }
}

/// One of the limiter's own answers (the admin route, the metrics page, their refusals) as a
/// response, written as the engine made it.
fn route_answer(answer: RouteAnswer) -> worker::Result<Response> {
    let headers = Headers::new();
    for (name, value) in answer.header_fields() {
        headers.set(name, &value)?;
    }
    Ok(ResponseBuilder::new()
        .with_status(answer.status)
        .with_headers(headers)
        .fixed(answer.body.into_bytes()))
}

/// The request's body, read up to `limit` bytes and no further: `None` when it is longer (the
/// rest is cancelled, unread). Read with the stream's own reader, chunk by chunk.
async fn body_within(req: &Request, limit: usize) -> worker::Result<Option<Vec<u8>>> {
    let Some(stream) = req.inner().body() else {
        return Ok(Some(Vec::new()));
    };
    let reader: web_sys::ReadableStreamDefaultReader = stream.get_reader().unchecked_into();
    let mut body = Vec::new();
    loop {
        let read = worker::wasm_bindgen_futures::JsFuture::from(reader.read()).await?;
        let done = js_sys::Reflect::get(&read, &JsValue::from_str("done"))?;
        if done.as_bool().unwrap_or(true) {
            return Ok(Some(body));
        }
        let chunk: js_sys::Uint8Array =
            js_sys::Reflect::get(&read, &JsValue::from_str("value"))?.unchecked_into();
        let length = chunk.length() as usize;
        if body.len() + length > limit {
            // Dropped, not awaited: nothing more of it is wanted.
            let _ = reader.cancel();
            return Ok(None);
        }
        let start = body.len();
        body.resize(start + length, 0);
        chunk.copy_to(&mut body[start..]);
    }
}

/// The admin route: the token (failures limited per client address), then the method and the
/// declared length, then the body up to its bound, then the call — nothing is read before the
/// token is found right.
async fn admin_route(
    isolate: &Isolate,
    edge: &Edge<WorkerStore>,
    view: &View,
    req: Request,
) -> worker::Result<Response> {
    // An isolate whose configuration has an admin path has its objects and token (or refuses
    // every request, Isolate::get).
    let Some((objects, token)) = &isolate.admin else {
        return internal_error(500, "admin route", "the admin route is not set up");
    };
    let authorization = view.header("authorization");
    let client = view.client();
    let now_ms = js_sys::Date::now() as u64;
    let admitted =
        match isolate
            .guard
            .admit(token, client.as_deref(), authorization.as_deref(), now_ms)
        {
            Ok(admitted) => admitted,
            Err(refused) => return route_answer(refused),
        };
    let declared = view.header("content-length");
    if let Err(refused) = check_admin_request(&view.method, declared.as_deref()) {
        return route_answer(refused);
    }
    let Some(body) = body_within(&req, MAX_ADMIN_BODY).await? else {
        return route_answer(too_large());
    };
    route_answer(edge.admin(&**objects, &admitted, &body).await)
}

/// The metrics page: this isolate's counters as Prometheus text, to the token unless public.
fn metrics_route(
    isolate: &Isolate,
    edge: &Edge<WorkerStore>,
    view: &View,
) -> worker::Result<Response> {
    route_answer(edge.metrics_page(
        &isolate.guard,
        isolate.metrics_token.as_ref(),
        view.client().as_deref(),
        view.header("authorization").as_deref(),
        js_sys::Date::now() as u64,
    ))
}

/// Logs the request's line when it is to be logged, and writes its analytics data point.
fn report(edge: &Edge<WorkerStore>, env: &Env, handled: &Handled<'_>, view: &View) {
    if handled.is_logged(js_sys::Math::random() < edge.config().log_sample) {
        let counters = edge.limiter().metrics();
        let mut line = handled.log_line(view, Some(&counters));
        // Where it was served: what places the line in a region when `sim` replays it.
        line.colo = view.cf_text("colo");
        line.continent = view.cf_text("continent");
        console_log!("{}", line.to_json());
    }
    let Some(binding_name) = &edge.config().analytics else {
        return;
    };
    let dataset = match env.analytics_engine(binding_name) {
        Ok(dataset) => dataset,
        Err(e) => {
            log_failure(&format!("analytics binding `{binding_name}`"), &e);
            return;
        }
    };
    let point = handled.analytics();
    let written = AnalyticsEngineDataPointBuilder::new()
        .indexes([point.index.as_str()])
        .blobs(point.blobs)
        .doubles(point.doubles)
        .write_to(&dataset);
    if let Err(e) = written {
        log_failure("analytics write", &e);
    }
}

/// The origin's response as the work after it reads it.
struct Origin<'a>(&'a Response);

impl ResponseView for Origin<'_> {
    fn status(&self) -> u16 {
        self.0.status_code()
    }

    fn header(&self, name: &str) -> Option<Cow<'_, str>> {
        self.0.headers().get(name).ok().flatten().map(Cow::Owned)
    }
}

/// Runs the work the request left for after its response in `waitUntil`, off the request path
/// (docs/design.md §4): its settlement and the store's upkeep (a region's lease refills). A
/// failure is logged: a failed commit leaves the estimate charged and the leases to their
/// timeout, a failed refill is asked for again by the next request that needs it.
fn after_response(ctx: &Context, isolate: &Rc<Isolate>, region: usize, work: AfterResponse) {
    if work.is_empty() {
        return;
    }
    let isolate = isolate.clone();
    ctx.wait_until(async move {
        let edge = &isolate.edges[region];
        let done = edge
            .run_after_response(work, js_sys::Date::now() as u64)
            .await;
        for e in done.failures() {
            log_failure("after the response", e);
        }
        log_store_failures(edge);
    });
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> worker::Result<Response> {
    let isolate = match Isolate::get(&env) {
        Ok(isolate) => isolate,
        Err(message) => return internal_error(500, "refusing requests", &message),
    };
    let view = View::of(&req)?;
    let region = isolate.edge_for(&view);
    let edge = &isolate.edges[region];
    match edge.route(&view.method, &view.path) {
        Route::Admin => return admin_route(&isolate, edge, &view, req).await,
        Route::Metrics => return metrics_route(&isolate, edge, &view),
        Route::Limited => {}
    }
    let handled = edge.handle(&view, js_sys::Date::now() as u64).await;
    log_store_failures(edge);
    report(edge, &env, &handled, &view);
    let answer = handled.response(&view);
    match answer.action {
        Action::Respond {
            status,
            body,
            content_type,
        } => {
            let headers = Headers::new();
            headers.set("content-type", content_type)?;
            for (name, value) in &answer.headers {
                headers.set(name, value)?;
            }
            // A denied request took nothing, but an admitting shadow check holds its leases.
            after_response(&ctx, &isolate, region, handled.after_response(None));
            Ok(ResponseBuilder::new()
                .with_status(status)
                .with_headers(headers)
                .fixed(body.into_bytes()))
        }
        Action::Forward => {
            let exceeded = edge.tells_origin().then(|| handled.exceeded_header());
            let req = telling_origin(req, exceeded)?;
            let delay_ms = handled.delay_ms();
            if delay_ms > 0 {
                // Wall time, no CPU: the invocation stays open for the wait.
                worker::Delay::from(std::time::Duration::from_millis(delay_ms)).await;
            }
            let response = forward(req, &isolate.upstream, &answer.headers).await;
            // An origin that failed stated no cost (the estimate stands), but the leases are
            // released all the same.
            let origin = response.as_ref().ok().map(Origin);
            let work = handled.after_response(origin.as_ref().map(|o| o as &dyn ResponseView));
            after_response(&ctx, &isolate, region, work);
            response
        }
    }
}
