// Mistakes the declarations must refuse: each line after `@ts-expect-error` must be a type error,
// or tsc fails (an expectation no error meets is itself an error).
import { Ratelimit, EdgelimitError, type LimitResult, type ErrorCode } from "edgelimit";
import { rateLimiter } from "edgelimit/hono";

const limits = [{ name: "a", policy: "fixed 1/1s" }];

// @ts-expect-error: no url or token.
new Ratelimit({ limits });
// @ts-expect-error: a fail mode that does not exist.
new Ratelimit({ url: "u", token: "t", limits: [{ name: "a", policy: "fixed 1/1s", fail: "sometimes" }] });
// @ts-expect-error: time is `server` or `local`.
new Ratelimit({ url: "u", token: "t", limits, time: "utc" });
// @ts-expect-error: the timeout is a number of ms.
new Ratelimit({ url: "u", token: "t", limits, timeout: "1s" });
// @ts-expect-error: an option that does not exist.
new Ratelimit({ url: "u", token: "t", limits, prefix: "x" });

// The runtime's own fetch fits the `fetch` option.
new Ratelimit({ url: "u", token: "t", limits, fetch });
const rl = new Ratelimit({ url: "u", token: "t", limits, fail: undefined } as never);
async function uses(): Promise<void> {
  // @ts-expect-error: identifiers are strings.
  await rl.limit({ a: 42 });
  // @ts-expect-error: a cost is a number or per-limit numbers.
  await rl.limit("x", { cost: "1" });
  const r: LimitResult = await rl.limit("x", { cost: { a: 2 }, requestId: "r", instance: "/p" });
  // @ts-expect-error: success is a boolean.
  const s: string = r.success;
  // @ts-expect-error: retryAfter may be null.
  const wait: number = r.retryAfter;
  // @ts-expect-error: reason is one of the library's names.
  if (r.reason === "timeout") return;
  const headers: Record<string, string> = r.headers;
  const remaining: number = r.decisions[0].remaining;
  // @ts-expect-error: peek takes a limit name and an identifier.
  await rl.peek("a");
  const existed: boolean = await rl.reset("a", "x");
  const estimated: LimitResult = await rl.limit("x", { cost: 100, settle: true });
  await rl.settle(estimated, 3);
  // @ts-expect-error: settle is a boolean.
  await rl.limit("x", { settle: "yes" });
  await rl.settle(r, 3);
  await rl.settle(r, { a: 3 });
  await rl.release(r);
  // @ts-expect-error: settle takes the real cost.
  await rl.settle(r);
  // @ts-expect-error: a real cost is a number or per-limit numbers.
  await rl.settle(r, "3");
  // @ts-expect-error: release takes what limit() resolved to, not an identifier.
  await rl.release("x");
  void [s, wait, headers, remaining, existed];
}

function handles(e: unknown): ErrorCode | undefined {
  if (e instanceof EdgelimitError) {
    // @ts-expect-error: codes are the documented ones.
    if (e.code === "bad_policy") return undefined;
    return e.code;
  }
  return undefined;
}

// @ts-expect-error: the middleware needs an identify function.
rateLimiter({ limiter: rl });
rateLimiter({ limiter: rl, identify: () => "x", countOptions: true });

void [uses, handles];
