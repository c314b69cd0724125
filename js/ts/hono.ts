/**
 * Hono middleware (`edgelimit/hono`): every request decided against a `Ratelimit`, the IETF
 * `RateLimit` headers on every response, and a denial answered 429 (503 when its limits fail
 * closed) with `Retry-After` and the library's RFC 9457 problem body.
 *
 * ```ts
 * import { Hono } from "hono";
 * import { Ratelimit } from "edgelimit";
 * import { rateLimiter, type RateLimitVariables } from "edgelimit/hono";
 *
 * type AppEnv = { Bindings: Env; Variables: RateLimitVariables };
 * const app = new Hono<AppEnv>();
 * let rl: Ratelimit | undefined;
 * app.use("/api/*", rateLimiter<AppEnv>({
 *   limiter: (c) => (rl ??= Ratelimit.fromEnv(c.env, { limits: [{ name: "per-ip", policy: "gcra 10/1s burst 20" }] })),
 *   identify: (c) => ({ "per-ip": c.req.header("cf-connecting-ip") ?? "unknown" }),
 * }));
 * app.get("/api/hello", (c) => c.json({ remaining: c.get("ratelimit").remaining }));
 * ```
 *
 * @packageDocumentation
 */

import type { Context, Env, MiddlewareHandler } from "hono";
import type { Identifiers, LimitOptions, LimitResult, Ratelimit } from "./index.js";

/** What the middleware adds to the context: the call's result, as `c.get("ratelimit")`. */
export type RateLimitVariables = { ratelimit: LimitResult };

/** The options of `rateLimiter`; `E` is the app's Hono env (its `Bindings` type `c.env`). */
export interface RateLimiterOptions<E extends Env = Env> {
  /**
   * The `Ratelimit`, or a function of the context returning it (to build it from `c.env` on
   * first use; keep it outside the handler so its denial cache lives across requests).
   */
  limiter: Ratelimit | ((c: Context<E>) => Ratelimit);
  /**
   * Whose quota: one identifier for every limit, or one per limit name. It must name every
   * limit of the `Ratelimit` (a missing one throws an `EdgelimitError`, which Hono's error
   * handler then answers): return a stand-in such as `"anonymous"` rather than nothing.
   */
  identify: (c: Context<E>) => Identifiers | Promise<Identifiers>;
  /** What the request costs (see `LimitOptions.cost`); 1 unless set. */
  cost?: (c: Context<E>) => LimitOptions["cost"] | Promise<LimitOptions["cost"]>;
  /**
   * Whether `OPTIONS` requests (CORS preflights, which browsers send on their own) count;
   * `false` unless set: they pass uncounted and without headers.
   */
  countOptions?: boolean;
}

/** Sets `fields` on `c.res`, copying the response first when its headers are immutable (a
 * response straight from `fetch`). */
function setHeaders<E extends Env>(c: Context<E>, fields: Record<string, string>): void {
  const entries = Object.entries(fields);
  try {
    for (const [name, value] of entries) c.res.headers.set(name, value);
  } catch {
    const copy = new Response(c.res.body, c.res);
    for (const [name, value] of entries) copy.headers.set(name, value);
    c.res = copy;
  }
}

/**
 * The middleware. Its env is the app's (inferred where it is used), with `c.get("ratelimit")`
 * added.
 */
export function rateLimiter<E extends Env = Env>(
  options: RateLimiterOptions<E>,
): MiddlewareHandler<E & { Variables: RateLimitVariables }> {
  const { limiter, identify, cost, countOptions = false } = options;
  return async (c, next) => {
    if (!countOptions && c.req.method === "OPTIONS") {
      await next();
      return;
    }
    // The app's own context, as its functions were written against.
    const own = c as unknown as Context<E>;
    const ratelimit = typeof limiter === "function" ? limiter(own) : limiter;
    const result = await ratelimit.limit(await identify(own), {
      cost: cost ? await cost(own) : undefined,
      instance: c.req.path,
    });
    c.set("ratelimit", result);
    if (!result.success && result.problem) {
      const headers = new Headers(result.headers);
      headers.set("Content-Type", result.problem.contentType);
      headers.set("Cache-Control", "no-store");
      return new Response(result.problem.body, { status: result.problem.status, headers });
    }
    await next();
    setHeaders(own, result.headers);
  };
}
