// A Hono app on Cloudflare Workers, rate-limited by edgelimit: a per-user and a per-team limit
// decided together, all or nothing, in one round trip; the IETF RateLimit headers on every
// response; a 429 problem body with Retry-After when denied. Preflights pass uncounted.
import { Hono } from "hono";
import { Ratelimit, type LimitConfig } from "edgelimit";
import { rateLimiter, type RateLimitVariables } from "edgelimit/hono";

type Bindings = {
  UPSTASH_REDIS_REST_URL: string;
  UPSTASH_REDIS_REST_TOKEN: string;
};

const limits: LimitConfig[] = [
  { name: "per-user", policy: "gcra 1/1h burst 3", fail: "closed" },
  { name: "per-team", policy: "sliding-counter 5/1h" },
  { name: "per-team-next", policy: "fixed 2/1h", shadow: true },
];

// One limiter per isolate, made on first use from the bindings: its denial cache lives across
// requests.
let limiter: Ratelimit | undefined;
const ratelimit = (env: Bindings): Ratelimit => (limiter ??= Ratelimit.fromEnv(env, { limits }));

type AppEnv = { Bindings: Bindings; Variables: RateLimitVariables };
const app = new Hono<AppEnv>();

app.use(
  "/api/*",
  rateLimiter<AppEnv>({
    limiter: (c) => ratelimit(c.env),
    identify: (c) => ({
      "per-user": c.req.header("x-user") ?? "anonymous",
      "per-team": c.req.header("x-team") ?? "none",
      "per-team-next": c.req.header("x-team") ?? "none",
    }),
    cost: (c) => Number(c.req.header("x-cost") ?? "1"),
  }),
);

app.get("/api/hello", (c) => {
  const result = c.get("ratelimit");
  return c.json({ hello: "world", remaining: result.remaining, shadow: result.decisions[2].success });
});
app.options("/api/hello", (c) => c.body(null, 204));

// The same limits without the middleware: the result carries the headers and the problem body.
app.get("/direct", async (c) => {
  const r = await ratelimit(c.env).limit({ "per-user": "direct", "per-team": "direct", "per-team-next": "direct" });
  if (!r.success && r.problem) {
    return new Response(r.problem.body, {
      status: r.problem.status,
      headers: { ...r.headers, "Content-Type": r.problem.contentType },
    });
  }
  return c.json({ remaining: r.remaining }, 200, r.headers);
});

// Peek and reset, as an operator's endpoints would.
app.get("/peek/:user", async (c) => c.json(await ratelimit(c.env).peek("per-user", c.req.param("user"))));
app.post("/reset/:user", async (c) => c.json({ existed: await ratelimit(c.env).reset("per-user", c.req.param("user")) }));

export default app;
