// The bench's @upstash/ratelimit Worker, written as its documentation shows: one Ratelimit per
// limit made once per isolate (each with its default ephemeralCache), a rule's limits checked with
// Promise.all (@upstash/redis auto-pipelines the commands of one tick into one /pipeline),
// answered 200 or 429 with a RateLimit header built from the results.
import { Ratelimit } from "@upstash/ratelimit";
import { Redis } from "@upstash/redis/cloudflare";

let rules = null;

function limiterOf(l) {
  switch (l.algorithm) {
    case "fixed":
      return Ratelimit.fixedWindow(l.limit, `${l.window} s`);
    case "sliding":
      return Ratelimit.slidingWindow(l.limit, `${l.window} s`);
    case "token-bucket":
      return Ratelimit.tokenBucket(l.refill, `${l.window} s`, l.limit);
    default:
      throw new Error(`unknown algorithm ${l.algorithm}`);
  }
}

function load(env) {
  const redis = Redis.fromEnv(env);
  return Object.entries(JSON.parse(env.BENCH_RULES)).map(([path, limits]) => ({
    path,
    limits: limits.map((l) => ({
      ...l,
      ratelimit: new Ratelimit({ redis, limiter: limiterOf(l), prefix: `upstash:${path}:${l.name}` }),
    })),
  }));
}

export default {
  async fetch(request, env, ctx) {
    rules ??= load(env);
    const rule = rules.find((r) => new URL(request.url).pathname === r.path);
    if (!rule) return new Response("no rule", { status: 404 });
    const results = await Promise.all(
      rule.limits.map((l) => l.ratelimit.limit(request.headers.get(l.header) ?? "anonymous")),
    );
    ctx.waitUntil(Promise.all(results.map((r) => r.pending)));
    const now = Date.now();
    const field = results
      .map((r, i) => `"${rule.limits[i].name}";r=${r.remaining};t=${Math.max(0, Math.ceil((r.reset - now) / 1000))}`)
      .join(", ");
    if (results.every((r) => r.success)) return new Response("ok", { headers: { RateLimit: field } });
    return new Response("Too Many Requests", { status: 429, headers: { RateLimit: field } });
  },
};
