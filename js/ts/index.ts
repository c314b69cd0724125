/**
 * edgelimit for JavaScript: exact rate limits in Redis over the Upstash REST protocol, decided by
 * the edgelimit Rust library compiled to WebAssembly. Every limit of a call is decided all or
 * nothing in one round trip (one script), with the same keys and scripts as the edgelimit Worker
 * and native services, so they share one quota.
 *
 * ```ts
 * import { Ratelimit } from "edgelimit";
 * const rl = new Ratelimit({
 *   url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN,
 *   limits: [{ name: "per-user", policy: "gcra 10/1s burst 20" },
 *            { name: "per-team", policy: "sliding-counter 1000/1h" }],
 * });
 * const r = await rl.limit({ "per-user": user, "per-team": team });
 * if (!r.success) return new Response(r.problem!.body, { status: r.problem!.status, headers: r.headers });
 * ```
 *
 * @packageDocumentation
 */

import { Core } from "./core.js";
import { EdgelimitError, rethrow } from "./errors.js";
import { Exchange } from "./exchange.js";

export { EdgelimitError } from "./errors.js";
export type { ErrorCode } from "./errors.js";

/**
 * A policy spec, as the Worker's configuration writes it: `fixed 100/1m`,
 * `sliding-log 10/10s`, `sliding-counter 1000/1h`, `token-bucket 10/1s burst 20`,
 * `gcra 10/1s burst 20`, `concurrency 5 timeout 30s`, or a calendar quota:
 * `fixed 10000/month anchor 15 utc+02:00`, `fixed 500/week`, `fixed 1000000/year`.
 */
export type PolicySpec = string;

/**
 * What a limit does when the store cannot answer in time: `open` admits, `closed` denies (503),
 * `fallback N%` decides in this isolate at N% of the limit.
 */
export type FailMode = "open" | "closed" | `fallback ${number}%`;

/** One limit. */
export interface LimitConfig {
  /** Its name: with the identifier, whose quota (the Redis key); 1–64 of `A-Za-z0-9-_.`. */
  name: string;
  /** Its policy spec. */
  policy: PolicySpec;
  /** When the store fails; `open` unless set. */
  fail?: FailMode;
  /** Decided and reported in `decisions`, never enforced (nor advertised in the headers). */
  shadow?: boolean;
  /**
   * Named alternative policies of the same algorithm an identifier may be assigned (with
   * `edgelimit-admin tier set`); the assignment is read by the deciding script itself.
   */
  tiers?: Record<string, PolicySpec>;
  /**
   * What exceeding the limit does: `deny` (the default); `soft`, admit and name the limit in
   * `LimitResult.exceeded` (nothing is charged on it when over); or `delay <duration>`
   * (`delay 500ms`): when the limit would admit the request within that wait, its place is
   * reserved then and `limit()` resolves after the wait (`LimitResult.delayMs`); beyond, deny.
   */
  exceed?: Exceed;
  /**
   * After the limit denies an identifier, refuse it on this limit for this long (`10m`,
   * `1h`; at most `1d`, the Worker's bound): the block starts at that denial, and requests refused during it (reason `blocked`)
   * neither extend it nor charge anything.
   */
  blockFor?: string;
  /**
   * Staged enforcement: the share of identifiers the limit is enforced for (`10%`, `0.5%`),
   * chosen by a stable hash of the limit's name and the identifier — the same as the Worker's;
   * the others are decided in shadow (`Decision.shadow`).
   */
  enforce?: `${number}%`;
}

/** What exceeding a limit does: see `LimitConfig.exceed`. */
export type Exceed = "deny" | "soft" | `delay ${string}`;

/** The `init` the package passes to `fetch`. */
export interface FetchInit {
  /** Always `POST`. */
  method: string;
  /** `Authorization`, `Content-Type`, `Upstash-Encoding`. */
  headers: Record<string, string>;
  /** The `/pipeline` body (JSON). */
  body: string;
  /**
   * Aborts the request after `timeout` ms (an `AbortController`'s). Typed loosely so that every
   * runtime's `fetch`, whose `signal` is its own `AbortSignal` type, fits `FetchLike`.
   */
  signal?: any;
}

/** What the package needs of a `fetch` response. */
export interface FetchResponse {
  /** The HTTP status. */
  status: number;
  /** The body as text. */
  text(): Promise<string>;
}

/** A `fetch`: the global one unless another is given. */
export type FetchLike = (url: string, init: FetchInit) => Promise<FetchResponse>;

/** Everything but the store's address: what `Ratelimit.fromEnv` takes. */
export interface RatelimitOptions {
  /** The limits every call decides, in order. */
  limits: LimitConfig[];
  /** The Redis key namespace; `edgelimit` unless set (the Worker's and every store's default). */
  namespace?: string;
  /** How long a store round trip may take, in ms (1–30000; 1000 unless set). */
  timeout?: number;
  /**
   * Whose clock decides: `server` (Redis `TIME`, the default: a Worker's `Date.now()` stands
   * still during a request and differs between locations) or `local`.
   */
  time?: "server" | "local";
  /** How many recent denials this instance remembers (answered without a round trip); 0: none. */
  denialCache?: number;
  /**
   * How long a denial is remembered at most, in ms (0–600000; 10000 unless set), however far its retry
   * time: how long a `reset` elsewhere takes to reach this instance.
   */
  denialCacheMs?: number;
  /**
   * The rate-limit header fields a result's `headers` carries: `"ratelimit"` (`RateLimit-Policy`
   * and `RateLimit`, the IETF draft) and `"x-ratelimit"` (`X-RateLimit-Limit`, `-Remaining`,
   * `-Reset`); both unless set. `Retry-After` goes with every denial a wait lifts either way.
   */
  headers?: ("ratelimit" | "x-ratelimit")[];
  /** The `fetch` carrying the requests; the global `fetch` unless set. */
  fetch?: FetchLike;
}

/** The options of `new Ratelimit`. */
export interface RatelimitConfig extends RatelimitOptions {
  /** The REST URL (`UPSTASH_REDIS_REST_URL`), or an edgelimit gateway's. */
  url: string;
  /** The REST token (`UPSTASH_REDIS_REST_TOKEN`). */
  token: string;
}

/** Whose quota: one identifier for every limit, or one per limit name. */
export type Identifiers = string | Record<string, string>;

/** The options of one call. */
export interface LimitOptions {
  /**
   * What the request costs: the same for every limit, or per limit name (those left out cost 1).
   * A whole number; 1 unless set; 0 looks without charging; negative refunds.
   */
  cost?: number | Record<string, number>;
  /**
   * Makes the call idempotent: once admitted, a repeat with the same id within the limit's
   * window answers the first decision and charges nothing (and a lost answer is resent once).
   * An id your own code makes (one per request, kept across its retries), never one a client
   * sends: a client repeating an id would be charged once for every request.
   */
  requestId?: string;
  /** The request path, named as `instance` in a denial's problem body. */
  instance?: string;
  /**
   * The `cost` is an estimate: the result will be passed to `settle` with the real cost once the
   * work is over. A call with a `concurrency` limit may always be settled or released.
   */
  settle?: boolean;
}

/** Why a decision came out as it did. */
export type Reason =
  | "admitted"
  | "over_limit"
  | "cost_exceeds_capacity"
  | "cached_denial"
  | "failed_open"
  | "failed_closed"
  | "fallback"
  /** The store refused the limiter (a wrong token, a missing permission, a script error):
   * a misconfiguration, failed closed rather than under the limit's `fail` mode. */
  | "misconfigured_closed"
  | "misconfigured_open"
  | "misconfigured_fallback"
  | "skipped"
  | "denylisted"
  | "allowlisted"
  | "leased"
  | "blocked"
  | "delayed";

/** One limit's decision. */
export interface Decision {
  /** The limit's name. */
  name: string;
  /** Whether this limit admitted the request. */
  success: boolean;
  /** The deciding policy's capacity (the limit; the burst for the buckets). */
  limit: number;
  /** What could still be admitted now. */
  remaining: number;
  /** When the quota is whole again (epoch ms, on the deciding clock). */
  reset: number;
  /** For a denial, in how many ms the same request would be admitted (exact); else `null`. */
  retryAfterMs: number | null;
  /** Why. */
  reason: Reason;
  /**
   * Whether the limit was decided in shadow for this call: a shadow limit, a `soft` one, or a
   * staged one (`enforce`) not enforced for this identifier. Reported, never enforced.
   */
  shadow: boolean;
}

/** A denial's RFC 9457 problem body, ready to send. */
export interface Problem {
  /** 429, or 503 when every denial is a limit failing closed. */
  status: number;
  /** `application/problem+json`. */
  contentType: string;
  /** The body (JSON text). */
  body: string;
}

/** What `limit()` resolves to. */
export interface LimitResult {
  /** Whether every enforced limit admitted the request. */
  success: boolean;
  /** The binding limit's capacity: the denial with the longest wait, else the tightest limit. */
  limit: number;
  /** The binding limit's remaining quota. */
  remaining: number;
  /** When the binding limit's quota is whole again (epoch ms). */
  reset: number;
  /** `Retry-After` in seconds when denied; `null` when admitted or when no wait helps. */
  retryAfter: number | null;
  /** The binding limit's reason. */
  reason: Reason;
  /**
   * `RateLimit-Policy` and `RateLimit` (IETF draft), `X-RateLimit-Limit`/`-Remaining`/`-Reset`,
   * and `Retry-After` when denied: for every response, admitted or not.
   */
  headers: Record<string, string>;
  /** One decision per limit, in configuration order, shadow limits included. */
  decisions: Decision[];
  /** The problem body when denied; `null` when admitted. */
  problem: Problem | null;
  /** When the enforced limits were decided (epoch ms, on the deciding clock). */
  decidedAt: number;
  /**
   * How long the request waited before `limit()` resolved, in ms: the longest wait of the
   * limits that admitted it after one (`exceed: "delay …"`, reason `delayed`); 0 when none.
   */
  delayMs: number;
  /** The `soft` limits the request is over, in configuration order (empty when none). */
  exceeded: string[];
}

/** An env (a Worker's bindings, `process.env`) holding the store's URL and token. */
export type EnvLike = Record<string, unknown> | undefined;

/** JSON text of `value`; a non-finite number becomes a string, which the core then refuses. */
function json(value: unknown): string {
  const plain = JSON.stringify(value) ?? "null";
  // `JSON.stringify` writes a non-finite number as `null`: only then is the slower replacer
  // needed (a `null` the caller wrote gives the same text either way).
  if (!plain.includes("null")) return plain;
  return (
    JSON.stringify(value, (_key, v: unknown) =>
      typeof v === "number" && !Number.isFinite(v) ? String(v) : v,
    ) ?? "null"
  );
}

/** The global `fetch`, looked up at each call (so a test, or a polyfill, may replace it). */
const globalFetch: FetchLike = (url, init) =>
  (globalThis as unknown as { fetch: FetchLike }).fetch(url, init);

/**
 * A set of limits decided together. Make it once per isolate (outside the request handler), so
 * its denial cache and fallback state live across requests.
 */
export class Ratelimit {
  readonly #core: Core;
  readonly #exchange: Exchange;
  /**
   * What each result of this instance's `limit()` that may be settled took: the core's ticket,
   * `""` when it took nothing. Weak, so a result no one settles is collected with its entry.
   */
  readonly #tickets = new WeakMap<LimitResult, string>();
  /** The limits' names, in order. */
  readonly names: readonly string[];

  /** Validates `config`; throws an `EdgelimitError` (`invalid_option`) naming what is wrong. */
  constructor(config: RatelimitConfig) {
    const { fetch, ...options } = config ?? ({} as RatelimitConfig);
    try {
      this.#core = new Core(json(options));
    } catch (e) {
      rethrow(e);
    }
    this.#exchange = new Exchange(this.#core, fetch ?? globalFetch);
    this.names = (options.limits ?? []).map((l) => l.name);
  }

  /**
   * A `Ratelimit` on the store named by `UPSTASH_REDIS_REST_URL` and `UPSTASH_REDIS_REST_TOKEN`
   * in `env` (a Worker's `env`; `process.env` when `undefined`).
   */
  static fromEnv(env: EnvLike, options: RatelimitOptions): Ratelimit {
    const source =
      env ?? (globalThis as { process?: { env?: Record<string, unknown> } }).process?.env ?? {};
    const text = (name: string): string => {
      const value = source[name];
      if (typeof value !== "string" || value.trim() === "") {
        throw new EdgelimitError({
          code: "invalid_option",
          path: name,
          message: "is not set in the env",
        });
      }
      return value;
    };
    return new Ratelimit({
      ...options,
      url: text("UPSTASH_REDIS_REST_URL"),
      token: text("UPSTASH_REDIS_REST_TOKEN"),
    });
  }

  /**
   * Decides one request against every limit, all or nothing, in one round trip: when any
   * enforced limit denies, none is charged. A request admitted after a wait (`exceed: "delay
   * …"`) resolves once its wait is over. Throws an `EdgelimitError` for bad arguments (an
   * unknown limit, a missing identifier, a bad cost) before anything is sent; a store failure is
   * answered by each limit's fail mode, never thrown.
   */
  async limit(identifiers: Identifiers, options?: LimitOptions): Promise<LimitResult> {
    let answer: string;
    try {
      const call = this.#core.limit(json(identifiers), options ? json(options) : "");
      answer = await this.#exchange.run(call);
    } catch (e) {
      rethrow(e);
    }
    // The result's JSON, then on its own line the ticket of what the call took, if anything.
    const split = answer.indexOf("\n");
    const result = JSON.parse(split < 0 ? answer : answer.slice(0, split)) as LimitResult;
    // Only a call that may be settled keeps its ticket: what keeping one costs, other calls skip.
    if (split >= 0) this.#tickets.set(result, answer.slice(split + 1));
    // A delayed admission holds its place in the quota at the end of its wait: proceed then.
    if (result.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, result.delayMs));
    return result;
  }

  /**
   * Ends the work `result` (what this instance's `limit()` resolved to) was admitted for, now
   * that its real cost is known: each limit is charged `cost` in place of the call's estimate
   * (the difference refunded or charged, never denied: the work is done), and its `concurrency`
   * slots are freed. `cost` is one for every limit or per limit name (those left out keep their
   * estimate); a whole number from 0 to 2^52. `result` comes from a call with `settle: true`, or
   * with a `concurrency` limit. Only the first `settle` or `release` of a result
   * counts: a repeat (a retry after a lost answer) changes nothing. A result that took nothing
   * (denied, or admitted by a fail mode) resolves at once. Throws an `EdgelimitError`:
   * `invalid_cost`, `invalid_argument` (not such a result of this instance), or `store`.
   */
  async settle(result: LimitResult, cost: number | Record<string, number>): Promise<void> {
    const ticket = this.#ticket(result);
    try {
      await this.#exchange.run(this.#core.settle(ticket, json(cost)));
    } catch (e) {
      rethrow(e);
    }
  }

  /**
   * Ends the work `result` (what this instance's `limit()` resolved to) was admitted for, its
   * cost as estimated: frees its `concurrency` slots now rather than at their timeout. Call it
   * when the work ends, failed or not (a `finally`). As `settle`, only the first of the two
   * counts; a call with `settle: true` may be released too. Throws an `EdgelimitError`:
   * `invalid_argument` (not such a result of this instance), or `store`.
   */
  async release(result: LimitResult): Promise<void> {
    const ticket = this.#ticket(result);
    try {
      await this.#exchange.run(this.#core.release(ticket));
    } catch (e) {
      rethrow(e);
    }
  }

  /** The ticket of `result`; throws when this instance's `limit()` did not resolve to it. */
  #ticket(result: LimitResult): string {
    const ticket = typeof result === "object" && result !== null ? this.#tickets.get(result) : undefined;
    if (ticket === undefined) {
      throw new EdgelimitError({
        code: "invalid_argument",
        path: "result",
        message:
          "is not a result this Ratelimit's limit() resolved to with `settle: true` (or with a concurrency limit)",
      });
    }
    return ticket;
  }

  /** `identifier`'s standing on limit `name`, charging nothing and writing nothing. */
  async peek(name: string, identifier: string): Promise<Decision> {
    let answer: string;
    try {
      answer = await this.#exchange.run(this.#core.peek(String(name), String(identifier)));
    } catch (e) {
      rethrow(e);
    }
    return JSON.parse(answer) as Decision;
  }

  /**
   * Deletes `identifier`'s state on limit `name` (its tier or override stays), and forgets this
   * instance's cached denials; resolves to whether any state existed.
   */
  async reset(name: string, identifier: string): Promise<boolean> {
    try {
      return JSON.parse(await this.#exchange.run(this.#core.reset(String(name), String(identifier)))) as boolean;
    } catch (e) {
      rethrow(e);
    }
  }
}
