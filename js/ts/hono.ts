/**
 * Hono middleware (`edgelimit/hono`): every request decided against a `Ratelimit`, the IETF
 * `RateLimit` headers on every response, and a denial answered 429 (503 when its limits fail
 * closed) with `Retry-After` and the library's RFC 9457 problem body.
 *
 * ```ts
 * import { Hono } from "hono";
 * import { Ratelimit } from "edgelimit";
 * import { clientAddress, header, rateLimiter, type RateLimitVariables } from "edgelimit/hono";
 *
 * type AppEnv = { Bindings: Env; Variables: RateLimitVariables };
 * const app = new Hono<AppEnv>();
 * let rl: Ratelimit | undefined;
 * app.use("/api/*", rateLimiter<AppEnv>({
 *   limiter: (c) => (rl ??= Ratelimit.fromEnv(c.env, { limits: [{ name: "per-key", policy: "gcra 10/1s burst 20" }] })),
 *   // One value of the header, or the client address when it is left out: never a bucket a
 *   // client can choose or share (see `header` and `clientAddress`).
 *   identify: (c) => ({ "per-key": header(c, "x-api-key") ?? clientAddress(c) }),
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
   * Whether `OPTIONS` requests count; `true` unless set. Set `false` only where an earlier
   * middleware answers CORS preflights itself: any client can send an `OPTIONS`, and one that
   * passed uncounted would reach every handler that serves it.
   */
  countOptions?: boolean;
}

/**
 * A request that sends a field an identifier is read from more than once: the limiter cannot
 * tell which value the app reads, so the middleware answers it `400` (`header` and `query`
 * throw it).
 */
export class AmbiguousRequest extends Error {
  /** The field, as `header \`x-api-key\`` or `query parameter \`key\``. */
  readonly field: string;

  constructor(field: string) {
    super(`This request is refused: it sends ${field} more than once, and the limiter reads one value.`);
    this.name = "AmbiguousRequest";
    this.field = field;
  }
}

/**
 * The one value of header `name`, or `undefined` when absent or blank. The Fetch API joins a
 * header's repeated lines with `, `, so a value holding a comma may be several: it throws
 * `AmbiguousRequest` (answered 400) rather than let `a, b` be a bucket of its own — as the
 * edgelimit Worker reads a header (`duplicates = "refuse"`).
 */
export function header<E extends Env>(c: Context<E>, name: string): string | undefined {
  const value = c.req.header(name)?.trim();
  if (value === undefined || value === "") return undefined;
  if (value.includes(",")) throw new AmbiguousRequest(`header \`${name.toLowerCase()}\``);
  return value;
}

/**
 * The one value of query parameter `name`, decoded, or `undefined` when absent, blank or holding
 * a control character; a parameter sent twice throws `AmbiguousRequest` (answered 400): apps
 * disagree on which one counts.
 */
export function query<E extends Env>(c: Context<E>, name: string): string | undefined {
  const values = c.req.queries(name) ?? [];
  if (values.length > 1) throw new AmbiguousRequest(`query parameter \`${name}\``);
  const value = values[0]?.trim();
  // A decoded value may hold any character; one holding a control character is no identifier
  // (and could spell a client address's mark): it reads as absent.
  return value === undefined || value === "" || /[\u0000-\u001f\u007f]/.test(value) ? undefined : value;
}

/**
 * The client's address as Cloudflare saw it (`CF-Connecting-IP`, which Cloudflare sets and a
 * client cannot), as the edgelimit Worker's `ip` identifier reads it: an IPv4 address (also
 * when written IPv4-mapped, in any spelling) as itself, an IPv6 one as its /64 network (a client
 * holds a whole /64), marked (`\u0000ip:` before it) so no identifier a client sends names its
 * bucket.
 * Outside Cloudflare, pass the address your server or trusted proxy reports. `"ip:unknown"`
 * when there is none.
 */
export function clientAddress<E extends Env>(c: Context<E>): string {
  const ip = c.req.header("cf-connecting-ip")?.trim();
  return `${ADDRESS_MARK}ip:${ip ? addressGroup(ip) : "unknown"}`;
}

/** What `clientAddress` starts with: a NUL, which no header value can hold and `query` never
 * returns, so no identifier a client sends is a client address's bucket. */
const ADDRESS_MARK = "\u0000";

/** An address as `clientAddress` keys it (`1.2.3.4`, `2001:db8:1:2::/64`); text that is no
 * address, as it came. */
export function addressGroup(ip: string): string {
  if (!ip.includes(":")) return ip;
  let hextets: number[];
  try {
    // The URL parser reads every IPv6 spelling (case, zeros, `::`, a dotted tail).
    const host = new URL(`http://[${ip}]/`).hostname.slice(1, -1);
    const [head, tail = ""] = host.split("::");
    const part = (text: string) => (text ? text.split(":").map((h) => parseInt(h, 16)) : []);
    const [front, back] = [part(head), part(tail)];
    hextets = host.includes("::")
      ? [...front, ...Array(8 - front.length - back.length).fill(0), ...back]
      : front;
  } catch {
    return ip;
  }
  const mapped = hextets.slice(0, 5).every((h) => h === 0) && hextets[5] === 0xffff;
  if (mapped) {
    const [hi, lo] = [hextets[6], hextets[7]];
    return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  }
  // The network written as the Worker writes it (RFC 5952's shortest form, as the URL parser).
  const masked = [...hextets.slice(0, 4), 0, 0, 0, 0].map((h) => h.toString(16)).join(":");
  return `${new URL(`http://[${masked}]/`).hostname.slice(1, -1)}/64`;
}

/** The problem body answering an `AmbiguousRequest`. */
function ambiguous(error: AmbiguousRequest, instance: string): Response {
  const body = JSON.stringify({
    type: "about:blank",
    title: "Bad Request",
    status: 400,
    detail: error.message,
    instance,
    reason: "ambiguous_request",
  });
  return new Response(body, {
    status: 400,
    headers: { "Content-Type": "application/problem+json", "Cache-Control": "no-store" },
  });
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
  const { limiter, identify, cost, countOptions = true } = options;
  return async (c, next) => {
    if (!countOptions && c.req.method === "OPTIONS") {
      await next();
      return;
    }
    // The app's own context, as its functions were written against.
    const own = c as unknown as Context<E>;
    const ratelimit = typeof limiter === "function" ? limiter(own) : limiter;
    let identifiers: Identifiers;
    try {
      identifiers = await identify(own);
    } catch (error) {
      if (error instanceof AmbiguousRequest) return ambiguous(error, c.req.path);
      throw error;
    }
    const result = await ratelimit.limit(identifiers, {
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
