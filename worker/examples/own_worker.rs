//! A workers-rs Worker of your own, rate-limited by the `edgelimit` library: the README's example,
//! compiled for wasm32 by `scripts/test.d/worker.sh`. (The ready-made Worker in `worker/src` adds
//! rules, shadow mode, headers and a per-isolate denial cache on top of the same calls.)

#![cfg(target_arch = "wasm32")]

use edgelimit::{Check, Limit, Limiter, Policy, RestStore, TimeMode};
use worker::{event, Context, Env, Fetch, Request, Response, Result};

#[event(fetch)]
async fn fetch(req: Request, env: Env, _ctx: Context) -> Result<Response> {
    let url = env.secret("UPSTASH_REDIS_REST_URL")?.to_string();
    let token = env.secret("UPSTASH_REDIS_REST_TOKEN")?.to_string();
    let store = RestStore::new(&url, &token).map_err(|e| e.to_string())?;
    let limiter = Limiter::new(store).with_time_mode(TimeMode::Server);
    let policy: Policy = "gcra 10/1s burst 20".parse().map_err(|e| format!("{e}"))?;
    let ip = req.headers().get("CF-Connecting-IP")?.unwrap_or_default();
    let verdict = limiter
        .check(&Check::single(&Limit::new("per-ip", policy), ip, 1))
        .await;
    let Some(denied) = verdict.denial() else {
        return Fetch::Request(req).send().await;
    };
    let mut response = Response::error("Too Many Requests", 429)?;
    let wait = denied.retry_after_ms.div_ceil(1000).to_string();
    response.headers_mut().set("Retry-After", &wait)?;
    Ok(response)
}
