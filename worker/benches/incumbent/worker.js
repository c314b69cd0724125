// The incumbent: a Worker that rate-limits with the official @upstash/ratelimit over
// @upstash/redis, written as their documentation shows, for worker/benches/edge_vs_incumbent.rs.
//
// - One `Ratelimit` per limit, made once per isolate (outside the handler), so each keeps its
//   default `ephemeralCache` of blocked identifiers between requests, as the docs advise.
// - Several limits on one request are checked together with `Promise.all`: @upstash/redis
//   auto-pipelines the commands issued in the same tick into one `/pipeline` request. A rule with
//   `"sequential": true` awaits them one after another instead and stops at the first denial,
//   the other way users write it.
// - Admitted requests go on to ORIGIN; denied ones get 429. Either way a `RateLimit` header
//   reports each checked limit's remaining quota (`"name";r=<remaining>;t=<seconds to reset>`).
//
// Configuration (vars or .dev.vars): UPSTASH_REDIS_REST_URL and UPSTASH_REDIS_REST_TOKEN (read by
// `Redis.fromEnv`), ORIGIN, and BENCH_RULES, a JSON list of rules:
//   [{ "path_prefix": "/two/", "sequential": false, "limits": [
//       { "name": "per-user", "algorithm": "sliding", "limit": 100, "window": "1 m", "header": "x-user" },
//       { "name": "per-key", "algorithm": "token-bucket", "refill": 10, "window": "1 s", "limit": 20, "header": "x-key" } ] }]
// `algorithm` is `fixed` (Ratelimit.fixedWindow), `sliding` (Ratelimit.slidingWindow) or
// `token-bucket` (Ratelimit.tokenBucket(refill, window, limit)).

import { Ratelimit } from "@upstash/ratelimit";
import { Redis } from "@upstash/redis/cloudflare";

let rules = null;

function limiterOf(limit) {
  switch (limit.algorithm) {
    case "fixed":
      return Ratelimit.fixedWindow(limit.limit, limit.window);
    case "sliding":
      return Ratelimit.slidingWindow(limit.limit, limit.window);
    case "token-bucket":
      return Ratelimit.tokenBucket(limit.refill, limit.window, limit.limit);
    default:
      throw new Error(`BENCH_RULES: unknown algorithm "${limit.algorithm}" in limit "${limit.name}"`);
  }
}

function load(env) {
  const redis = Redis.fromEnv(env);
  return JSON.parse(env.BENCH_RULES).map((rule) => ({
    prefix: rule.path_prefix,
    sequential: Boolean(rule.sequential),
    limits: rule.limits.map((limit) => ({
      name: limit.name,
      header: limit.header,
      ratelimit: new Ratelimit({ redis, limiter: limiterOf(limit), prefix: `incumbent:${limit.name}` }),
    })),
  }));
}

async function check(rule, request) {
  const identifier = (limit) => request.headers.get(limit.header) ?? "anonymous";
  if (!rule.sequential) {
    return Promise.all(rule.limits.map((limit) => limit.ratelimit.limit(identifier(limit))));
  }
  const results = [];
  for (const limit of rule.limits) {
    const result = await limit.ratelimit.limit(identifier(limit));
    results.push(result);
    if (!result.success) break;
  }
  return results;
}

export default {
  async fetch(request, env, ctx) {
    rules ??= load(env);
    const url = new URL(request.url);
    const rule = rules.find((r) => url.pathname.startsWith(r.prefix));
    const upstream = () => fetch(new Request(`${env.ORIGIN}${url.pathname}${url.search}`, request));
    if (!rule) return upstream();

    const results = await check(rule, request);
    // Analytics and multi-region sync finish after the answer (nothing here, but as documented).
    ctx.waitUntil(Promise.all(results.map((r) => r.pending)));
    const now = Date.now();
    const report = results
      .map((r, i) => `"${rule.limits[i].name}";r=${r.remaining};t=${Math.max(0, Math.ceil((r.reset - now) / 1000))}`)
      .join(", ");
    if (results.every((r) => r.success)) {
      const response = await upstream();
      const answer = new Response(response.body, response);
      answer.headers.set("RateLimit", report);
      return answer;
    }
    return new Response("Too Many Requests", {
      status: 429,
      headers: { "RateLimit": report, "Cache-Control": "no-store" },
    });
  },
};
