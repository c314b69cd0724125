// The example Worker (examples/worker: TypeScript, Hono, the packed tarball imported as `edgelimit`
// and `edgelimit/hono`) under `wrangler dev`, against the gateway and a real redis-server, checked
// over HTTP. Its limits: per-user `gcra 1/1h burst 3` (fails closed), per-team
// `sliding-counter 5/1h`, and the shadow per-team-next `fixed 2/1h`.
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { JS, TOKEN, startGateway, startRedis, startWrangler } from "./support.mjs";

let redis;
let gateway;
let worker;
before(async () => {
  redis = await startRedis();
  gateway = await startGateway(redis);
  worker = await startWrangler(join(JS, "examples/worker/wrangler.toml"), {
    UPSTASH_REDIS_REST_URL: gateway.url,
    UPSTASH_REDIS_REST_TOKEN: TOKEN,
  });
});
after(async () => {
  await worker?.stop();
  await gateway?.stop();
  await redis?.stop();
});

let next = 0;
const fresh = (name) => `${name}-${process.pid}-${next++}`;

async function get(path, headers = {}, method = "GET") {
  const response = await fetch(`${worker.url}${path}`, { method, headers });
  const text = await response.text();
  return { status: response.status, headers: response.headers, text, json: () => JSON.parse(text) };
}

test("admitted responses carry the IETF headers; the fourth gets a 429 problem with Retry-After", async () => {
  const who = { "x-user": fresh("ann"), "x-team": fresh("team") };
  for (let remaining = 2; remaining >= 0; remaining--) {
    const r = await get("/api/hello", who);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json().remaining, remaining);
    assert.equal(r.headers.get("ratelimit-policy"), '"per-user";q=3;w=10800, "per-team";q=5;w=3600');
    assert.match(r.headers.get("ratelimit"), new RegExp(`^"per-user";r=${remaining};t=\\d+, "per-team";r=${4 - (2 - remaining)};t=\\d+$`));
    assert.equal(r.headers.get("retry-after"), null);
  }
  const denied = await get("/api/hello", who);
  assert.equal(denied.status, 429);
  assert.equal(denied.headers.get("content-type"), "application/problem+json");
  assert.equal(denied.headers.get("cache-control"), "no-store");
  const problem = denied.json();
  assert.equal(denied.headers.get("retry-after"), String(problem.retry_after));
  assert.ok(problem.retry_after > 3500 && problem.retry_after <= 3600, `${problem.retry_after}`);
  assert.deepEqual(
    [problem.type, problem.title, problem.status, problem.instance, problem.policy, problem["violated-policies"]],
    ["https://iana.org/assignments/http-problem-types#quota-exceeded", "Request cannot be satisfied as assigned quota has been exceeded", 429, "/api/hello", "per-user", ["per-user"]],
  );
  assert.match(denied.headers.get("ratelimit"), /^"per-user";r=0;t=\d+, "per-team";r=2;t=\d+$/);
});

test("the limits are one all-or-nothing check: a request the team limit denies costs the user nothing", async () => {
  const team = fresh("team");
  const [a, b] = [fresh("a"), fresh("b")];
  for (let i = 0; i < 3; i++) assert.equal((await get("/api/hello", { "x-user": a, "x-team": team })).status, 200);
  for (let i = 0; i < 2; i++) assert.equal((await get("/api/hello", { "x-user": b, "x-team": team })).status, 200);
  const denied = await get("/api/hello", { "x-user": b, "x-team": team });
  assert.equal(denied.status, 429);
  assert.deepEqual(denied.json()["violated-policies"], ["per-team"]);
  assert.equal((await get(`/peek/${b}`)).json().remaining, 1, "b's own quota was not charged");
});

test("preflights are counted like any request (any client can send one); costs come from the request", async () => {
  const who = { "x-user": fresh("pre"), "x-team": fresh("team") };
  // gcra 1/1h burst 3: three preflights spend the user's burst, the fourth is refused.
  for (let i = 0; i < 3; i++) {
    const r = await get("/api/hello", who, "OPTIONS");
    assert.equal(r.status, 204);
    assert.match(r.headers.get("ratelimit"), /"per-user";r=\d/);
  }
  assert.equal((await get("/api/hello", who, "OPTIONS")).status, 429);
  assert.equal((await get("/api/hello", who)).status, 429, "the preflights spent the user's quota");
  const heavy = { "x-user": fresh("heavy"), "x-team": fresh("team"), "x-cost": "3" };
  assert.equal((await get("/api/hello", heavy)).json().remaining, 0);
});

test("a shadow limit is reported to the handler, never enforced", async () => {
  const who = { "x-user": fresh("s1"), "x-team": fresh("team") };
  const shadows = [];
  for (let i = 0; i < 3; i++) shadows.push((await get("/api/hello", who)).json().shadow);
  assert.deepEqual(shadows, [true, true, false], "the third request exceeds fixed 2/1h, and is admitted");
});

test("without the middleware: the result's headers and problem body; reset lifts a denial", async () => {
  for (let i = 0; i < 3; i++) assert.equal((await get("/direct")).status, 200);
  const denied = await get("/direct");
  assert.equal(denied.status, 429);
  assert.equal(denied.headers.get("content-type"), "application/problem+json");
  assert.ok(Number(denied.headers.get("retry-after")) > 0);
  const reset = await fetch(`${worker.url}/reset/direct`, { method: "POST" });
  assert.deepEqual(await reset.json(), { existed: true });
  const again = await get("/direct");
  assert.equal(again.status, 200, "reset in this isolate forgets its cached denial too");
  assert.equal(again.json().remaining, 1, "the team limit, 4 of 5 used, is now the tightest");
});

test("with the store down, the per-user limit fails closed: 503", async () => {
  await redis.stop();
  const r = await get("/api/hello", { "x-user": fresh("down"), "x-team": fresh("team") });
  assert.equal(r.status, 503, r.text);
  const problem = r.json();
  assert.equal(problem.reason, "failed_closed");
  assert.equal(r.headers.get("retry-after"), "1");
});
