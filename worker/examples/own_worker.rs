//! A workers-rs Worker of your own, rate-limited by the `edgelimit` library: docs/library.md's
//! example, compiled for wasm32 by `scripts/test.d/worker.sh`. (The ready-made Worker in
//! `worker/src` adds rules, shadow mode and headers on top of the same calls.)

#![cfg(target_arch = "wasm32")]

use std::cell::OnceCell;
use std::rc::Rc;

use edgelimit::{Check, Limit, Limiter, RestStore, TimeMode};
use worker::{event, Context, Env, Fetch, Request, Response, Result};

type Ready = Rc<(Limiter<RestStore>, Limit)>;

thread_local! {
    // One limiter per isolate, not per request: its denial cache then answers repeat offenders
    // with no round trip to Redis, and its connection settings are built once.
    static LIMITER: OnceCell<Ready> = const { OnceCell::new() };
}

fn limiter(env: &Env) -> Result<Ready> {
    if let Some(ready) = LIMITER.with(|cell| cell.get().cloned()) {
        return Ok(ready);
    }
    let url = env.secret("UPSTASH_REDIS_REST_URL")?.to_string();
    let token = env.secret("UPSTASH_REDIS_REST_TOKEN")?.to_string();
    let store = RestStore::new(&url, &token).map_err(|e| e.to_string())?;
    let per_ip = Limit::new(
        "per-ip",
        "gcra 10/1s burst 20".parse().map_err(|e| format!("{e}"))?,
    );
    let ready = Rc::new((Limiter::new(store).with_time_mode(TimeMode::Server), per_ip));
    Ok(LIMITER.with(|cell| cell.get_or_init(|| ready).clone()))
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, _ctx: Context) -> Result<Response> {
    let ready = limiter(&env)?;
    let (limiter, per_ip) = &*ready;
    let ip = req.headers().get("CF-Connecting-IP")?.unwrap_or_default();
    let verdict = limiter.check(&Check::single(per_ip, ip, 1)).await;
    let Some(denied) = verdict.denial() else {
        return Fetch::Request(req).send().await;
    };
    let mut response = Response::error("Too Many Requests", 429)?;
    let wait = denied.retry_after_ms.div_ceil(1000).to_string();
    response.headers_mut().set("Retry-After", &wait)?;
    Ok(response)
}
