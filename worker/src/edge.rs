//! The runtime glue (wasm32 only): the `fetch` handler, reading the request, calling the store
//! and the origin. Everything it decides is decided in [`crate::plan`].

use std::cell::RefCell;
use std::rc::Rc;

use edgelimit::http::{Problem, PROBLEM_CONTENT_TYPE};
use edgelimit::store::{Shard, ShardedStore, REST_TOKEN_VAR, REST_URL_VAR};
use edgelimit::{Checked, Limiter, RestStore};
use worker::wasm_bindgen::{JsCast, JsValue};
use worker::{
    console_error, console_log, event, js_sys, web_sys, AnalyticsEngineDataPointBuilder, Context,
    Env, Fetch, Headers, Request, Response, ResponseBuilder, Url,
};

use crate::config::{Config, ConfigError, FixedResponse, CONFIG_VAR};
use crate::identify::RequestView;
use crate::lists::{DenyCache, ListCounters, Via};
use crate::plan::{Action, Outcome, Plan, NO_STORE};

/// The var naming the origin admitted requests go to. Unset: the request goes on to its own URL
/// (the Worker runs on a route in front of the origin), or to `respond` when configured.
const ORIGIN_VAR: &str = "ORIGIN";

/// What an isolate keeps between requests: the configuration, the limiter with its denial
/// cache and counters, and the deny lists' answers it remembers with their counters.
struct Edge {
    config: Config,
    limiter: Limiter<ShardedStore>,
    origin: Option<String>,
    // An isolate runs one request at a time between awaits, and no borrow is held across one.
    deny_cache: RefCell<DenyCache>,
    list_counters: RefCell<ListCounters>,
}

thread_local! {
    static EDGE: RefCell<Option<Rc<Edge>>> = const { RefCell::new(None) };
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
    Config::from_json(&text)
}

fn rest_store(
    env: &Env,
    config: &Config,
    url_var: &str,
    token_var: &str,
) -> Result<RestStore, String> {
    let url = env_text(env, url_var).ok_or_else(|| {
        format!("{url_var} is not set: `wrangler secret put {url_var}` (or .dev.vars locally)")
    })?;
    let token = env_text(env, token_var).ok_or_else(|| {
        format!("{token_var} is not set: `wrangler secret put {token_var}` (or .dev.vars locally)")
    })?;
    RestStore::new(&url, &token)
        .map(|s| {
            s.with_namespace(config.namespace.clone())
                .with_timeout(config.timeout)
        })
        .map_err(|e| e.to_string())
}

impl Edge {
    fn load(env: &Env) -> Result<Edge, String> {
        let config = load_config(env).map_err(|e| e.to_string())?;
        let shards = if config.shards.is_empty() {
            vec![Shard::new(
                "default",
                rest_store(env, &config, REST_URL_VAR, REST_TOKEN_VAR)?,
            )]
        } else {
            config
                .shards
                .iter()
                .map(|s| {
                    Ok(Shard::new(
                        s.name.clone(),
                        rest_store(env, &config, &s.url_var, &s.token_var)?,
                    ))
                })
                .collect::<Result<Vec<_>, String>>()?
        };
        let store = ShardedStore::new(shards).map_err(|e| e.to_string())?;
        let limiter = Limiter::new(store)
            .with_time_mode(config.time)
            .with_denial_cache(config.denial_cache)
            .with_denial_cache_ms(config.denial_cache_ms);
        let origin = env_text(env, ORIGIN_VAR).map(|o| o.trim().trim_end_matches('/').to_string());
        if let Some(origin) = &origin {
            Url::parse(origin).map_err(|e| format!("{ORIGIN_VAR} `{origin}` is not a URL: {e}"))?;
        }
        Ok(Edge {
            deny_cache: RefCell::new(DenyCache::new(config.list_cache_ms)),
            list_counters: RefCell::new(ListCounters::default()),
            config,
            limiter,
            origin,
        })
    }

    /// This isolate's edge, loaded on first use. A configuration error is not cached, so every
    /// request reports it (and a fixed deployment recovers at once).
    fn get(env: &Env) -> Result<Rc<Edge>, String> {
        if let Some(edge) = EDGE.with(|e| e.borrow().clone()) {
            return Ok(edge);
        }
        let edge = Rc::new(Edge::load(env)?);
        EDGE.with(|e| *e.borrow_mut() = Some(edge.clone()));
        Ok(edge)
    }
}

/// The request as the rules see it.
struct View {
    method: String,
    host: String,
    path: String,
    url: Url,
    headers: Headers,
    country: Option<String>,
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
            url,
        })
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
    fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).ok().flatten()
    }
    fn country(&self) -> Option<String> {
        self.country.clone()
    }
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
fn with_headers(response: Response, extra: &[(&str, String)]) -> worker::Result<Response> {
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

async fn forward(
    req: Request,
    origin: Option<&str>,
    respond: Option<&FixedResponse>,
    extra: &[(&str, String)],
) -> worker::Result<Response> {
    let path = req.path();
    let upstream = match (origin, respond) {
        (Some(origin), _) => {
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
        (None, Some(fixed)) => {
            let headers = Headers::new();
            headers.set("content-type", &fixed.content_type)?;
            let response = ResponseBuilder::new()
                .with_status(fixed.status)
                .with_headers(headers)
                .fixed(fixed.body.clone().into_bytes());
            return with_headers(response, extra);
        }
        (None, None) => Fetch::Request(req).send().await,
    };
    match upstream {
        Ok(response) => with_headers(response, extra),
        Err(e) => {
            console_error!("edgelimit: origin unreachable: {e}");
            let response = problem_response(&Problem::origin_unreachable(&path))?;
            with_headers(response, extra)
        }
    }
}

fn report(edge: &Edge, env: &Env, decided: (&Plan<'_>, &Checked, &Outcome), view: &View) {
    let (plan, checked, outcome) = decided;
    let sampled = js_sys::Math::random() < edge.config.log_sample;
    // A denial the store's lists just answered is news; repeats from the isolate's cache (a
    // flood, typically) and static entries are sampled like everything else.
    let news = outcome.denied.as_ref().is_some_and(|d| d.via == Via::Store);
    if sampled || news || !outcome.shadow_denied.is_empty() {
        let isolate = edge.limiter.metrics();
        console_log!("{}", outcome.log_line(plan, checked, view, Some(&isolate)));
    }
    let Some(binding_name) = &edge.config.analytics else {
        return;
    };
    let dataset = match env.analytics_engine(binding_name) {
        Ok(dataset) => dataset,
        Err(e) => {
            console_error!("edgelimit: analytics binding `{binding_name}`: {e}");
            return;
        }
    };
    let binding = outcome.binding.as_ref();
    let limit = binding.map_or("", |b| &*b.name);
    let rules: Vec<&str> = plan.rules.iter().map(|r| r.name.as_str()).collect();
    let shadow_denied: Vec<&str> = outcome.shadow_denied.iter().map(|n| &**n).collect();
    let point = AnalyticsEngineDataPointBuilder::new()
        .indexes([limit])
        .blobs([
            rules.join(","),
            limit.to_string(),
            if outcome.allowed() {
                "allowed"
            } else {
                "denied"
            }
            .to_string(),
            match &outcome.denied {
                Some(_) => "denied",
                None => binding.map_or("", |b| b.reason.as_str()),
            }
            .to_string(),
            shadow_denied.join(","),
        ])
        .doubles([
            1.0,
            binding.map_or(0.0, |b| b.remaining as f64),
            checked.store_ms.unwrap_or(0.0),
        ]);
    if let Err(e) = point.write_to(&dataset) {
        console_error!("edgelimit: analytics write: {e}");
    }
}

/// Settles what the request reserved — releases its concurrency leases, commits the real cost of
/// limits whose cost the response states — after the response, off the request path
/// (docs/design.md §4). A failure leaves the estimate charged and the leases to their timeout.
fn settle_after(
    ctx: &Context,
    edge: &Rc<Edge>,
    plan: &Plan<'_>,
    checked: &Checked,
    response: Option<&Response>,
) {
    // Without a request id the reservation still needs a name for its commit's id.
    let fallback_id = format!(
        "edge-{:x}-{:x}",
        js_sys::Date::now() as u64,
        (js_sys::Math::random() * 9_007_199_254_740_992.0) as u64
    );
    let Some(settlement) = plan.settlement(&checked.verdicts, &fallback_id) else {
        return;
    };
    let commits = settlement.commits(|name| response?.headers().get(name).ok().flatten());
    if commits.is_empty() {
        return;
    }
    let edge = edge.clone();
    ctx.wait_until(async move {
        for commit in commits {
            if let Err(e) = edge.limiter.settle(commit).await {
                console_error!("edgelimit: settling after the response: {e}");
            }
        }
    });
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> worker::Result<Response> {
    let edge = match Edge::get(&env) {
        Ok(edge) => edge,
        Err(message) => {
            console_error!("edgelimit: refusing requests: {message}");
            return problem_response(&Problem::misconfigured(&message));
        }
    };
    let view = View::of(&req)?;
    if req.method() == worker::Method::Get
        && edge.config.metrics_path.as_deref() == Some(view.path.as_str())
    {
        let headers = Headers::new();
        headers.set("content-type", "text/plain; version=0.0.4")?;
        let metrics = edge.limiter.metrics();
        let text = format!(
            "{}# HELP edgelimit_isolate_cache_hits_total Denials answered from this isolate's cache.\n# TYPE edgelimit_isolate_cache_hits_total counter\nedgelimit_isolate_cache_hits_total {}\n{}",
            metrics.to_prometheus(),
            metrics.totals().cache_hits,
            edge.list_counters.borrow().to_prometheus()
        );
        return Ok(ResponseBuilder::new()
            .with_headers(headers)
            .fixed(text.into_bytes()));
    }
    let mut plan = edge.config.plan(&view);
    let now_ms = js_sys::Date::now() as u64;
    plan.deny_if_remembered(&mut edge.deny_cache.borrow_mut(), now_ms);
    // The limiter times the store itself; the decisions carry the time they were made at. A
    // request refused before the store has no check: no store call.
    let checked = edge.limiter.check_all(plan.checks()).await;
    let outcome = plan.decide(&checked.verdicts, &view.path);
    if let Some(denial) = &outcome.denied {
        edge.list_counters.borrow_mut().denied(denial);
        edge.deny_cache.borrow_mut().remember_denial(denial, now_ms);
    }
    if !outcome.shadow_listed.is_empty() {
        edge.list_counters.borrow_mut().shadow_denied();
    }
    report(&edge, &env, (&plan, &checked, &outcome), &view);
    match &outcome.action {
        Action::Respond {
            status,
            body,
            content_type,
        } => {
            let headers = Headers::new();
            headers.set("content-type", content_type)?;
            for (name, value) in &outcome.headers {
                headers.set(name, value)?;
            }
            // A denied request took nothing, but an admitting shadow check holds its leases.
            settle_after(&ctx, &edge, &plan, &checked, None);
            Ok(ResponseBuilder::new()
                .with_status(*status)
                .with_headers(headers)
                .fixed(body.clone().into_bytes()))
        }
        Action::Forward => {
            let response = forward(
                req,
                edge.origin.as_deref(),
                edge.config.respond.as_ref(),
                &outcome.headers,
            )
            .await;
            // An origin that failed stated no cost (the estimate stands), but the leases are
            // released all the same.
            settle_after(&ctx, &edge, &plan, &checked, response.as_ref().ok());
            response
        }
    }
}
