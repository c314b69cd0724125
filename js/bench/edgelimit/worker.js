// The bench's edgelimit Worker: each rule's limits (BENCH_RULES, by path) decided in one call —
// one round trip, all or nothing — answered 200 or the library's 429 problem, with its RateLimit
// headers.
import { Ratelimit } from "edgelimit";
import { edgelimitPolicy } from "../limits.mjs";

let rules = null;

function load(env) {
  return Object.entries(JSON.parse(env.BENCH_RULES)).map(([path, limits]) => ({
    path,
    limits,
    ratelimit: Ratelimit.fromEnv(env, {
      limits: limits.map((l) => ({ name: l.name, policy: edgelimitPolicy(l) })),
      timeout: 5000,
    }),
  }));
}

export default {
  async fetch(request, env) {
    rules ??= load(env);
    const rule = rules.find((r) => new URL(request.url).pathname === r.path);
    if (!rule) return new Response("no rule", { status: 404 });
    const identifiers = {};
    for (const l of rule.limits) identifiers[l.name] = request.headers.get(l.header) ?? "anonymous";
    const r = await rule.ratelimit.limit(identifiers);
    if (r.success) return new Response("ok", { headers: r.headers });
    return new Response(r.problem.body, {
      status: r.problem.status,
      headers: { ...r.headers, "Content-Type": r.problem.contentType },
    });
  },
};
