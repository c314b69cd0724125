// The package as npm ships it (test/node_modules/edgelimit, from the tarball), under Node 22,
// against the edgelimit gateway and a real redis-server started here on free ports.
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { after, before, describe, test } from "node:test";

import { EdgelimitError, Ratelimit } from "edgelimit";
import { TOKEN, startGateway, startRedis } from "./support.mjs";

let redis;
let gateway;
before(async () => {
  redis = await startRedis();
  gateway = await startGateway(redis);
});
after(async () => {
  await gateway?.stop();
  await redis?.stop();
});

let next = 0;
/** An identifier no other test uses. */
const fresh = (name = "id") => `${name}-${process.pid}-${next++}`;

function ratelimit(limits, options = {}) {
  return new Ratelimit({ url: gateway.url, token: TOKEN, limits, ...options });
}

/** What `calls` cost the gateway: /pipeline requests and the commands Redis ran. */
async function cost(calls) {
  const before = await gateway.metrics();
  const result = await calls();
  const after = await gateway.metrics();
  const commands = {};
  for (const [name, n] of Object.entries(after.byCommand)) {
    const delta = n - (before.byCommand[name] ?? 0);
    if (delta) commands[name] = delta;
  }
  return { result, pipelines: after.pipelines - before.pipelines, requests: after.requests - before.requests, commands };
}

describe("every algorithm", () => {
  // [policy, capacity, RateLimit-Policy parameters, the longest a denial may be told to wait (s)]
  const table = [
    ["fixed 3/1h", 3, "q=3;w=3600", 3600],
    ["sliding-log 3/1h", 3, "q=3;w=3600", 3600],
    // Once the window turns, the full previous one weighs on until a third of the next has passed.
    ["sliding-counter 3/1h", 3, "q=3;w=3600", 4800],
    ["token-bucket 1/1h burst 3", 3, "q=3;w=10800", 3600],
    ["gcra 1/1h burst 3", 3, "q=3;w=10800", 3600],
    ["concurrency 3 timeout 30s", 3, 'q=3;qu="concurrent-requests"', 30],
  ];
  for (const [policy, capacity, advertised, longest] of table) {
    test(policy, async () => {
      const rl = ratelimit([{ name: "only", policy }]);
      const id = fresh();
      const results = [];
      for (let i = 0; i <= capacity; i++) results.push(await rl.limit(id));
      assert.deepEqual(
        results.map((r) => [r.success, r.remaining]),
        [...Array.from({ length: capacity }, (_, i) => [true, capacity - 1 - i]), [false, 0]],
      );
      for (const r of results.slice(0, capacity)) {
        assert.equal(r.reason, "admitted");
        assert.equal(r.limit, capacity);
        assert.equal(r.problem, null);
        assert.equal(r.retryAfter, null);
        assert.equal(r.headers["Retry-After"], undefined);
        assert.equal(r.headers["RateLimit-Policy"], `"only";${advertised}`);
        assert.match(r.headers.RateLimit, new RegExp(`^"only";r=${r.remaining};t=\\d+$`));
      }
      const denied = results[capacity];
      assert.equal(denied.reason, "over_limit");
      assert.ok(denied.retryAfter >= 1 && denied.retryAfter <= longest, `retryAfter ${denied.retryAfter}`);
      assert.equal(denied.headers["Retry-After"], String(denied.retryAfter));
      assert.equal(denied.headers["X-RateLimit-Remaining"], "0");
      const exact = denied.decisions[0].retryAfterMs;
      assert.equal(Math.ceil(exact / 1000), denied.retryAfter, "Retry-After is the exact wait rounded up");
      assert.equal(denied.problem.status, 429);
      assert.equal(denied.problem.contentType, "application/problem+json");
      const body = JSON.parse(denied.problem.body);
      assert.deepEqual(
        [body.type, body.status, body.policy, body["violated-policies"], body.retry_after, body.reason],
        ["https://iana.org/assignments/http-problem-types#quota-exceeded", 429, "only", ["only"], denied.retryAfter, "over_limit"],
      );
    });
  }
});

test("three limits are decided all or nothing, in one round trip and one script", async () => {
  const rl = ratelimit([
    { name: "per-user", policy: "fixed 5/1h" },
    { name: "per-key", policy: "gcra 1/1h burst 2" },
    { name: "per-team", policy: "sliding-log 10/1h" },
  ]);
  const [user, key, team] = [fresh("user"), fresh("key"), fresh("team")];
  const ids = { "per-user": user, "per-key": key, "per-team": team };
  await rl.limit({ "per-user": fresh(), "per-key": fresh(), "per-team": fresh() }); // scripts loaded
  const first = await cost(() => rl.limit(ids));
  assert.equal(first.pipelines, 1, "one /pipeline per call");
  assert.deepEqual(first.commands, { EVALSHA: 1 }, "one script for the three limits");
  assert.equal((await rl.limit(ids)).success, true);
  const denied = await rl.limit(ids);
  assert.equal(denied.success, false);
  assert.deepEqual(
    denied.decisions.map((d) => [d.name, d.success, d.remaining]),
    [
      ["per-user", true, 3],
      ["per-key", false, 0],
      ["per-team", true, 8],
    ],
    "the limits that would have admitted report their standing quota, uncharged",
  );
  assert.deepEqual(JSON.parse(denied.problem.body)["violated-policies"], ["per-key"]);
  // Nothing was charged by the denied call: the stored state agrees.
  assert.equal((await rl.peek("per-user", user)).remaining, 3);
  assert.equal((await rl.peek("per-team", team)).remaining, 8);
  // A call the store can decide is never half charged, whichever limit denies.
  const other = { ...ids, "per-key": fresh("key") };
  assert.equal((await rl.limit(other)).decisions[0].remaining, 2);
});

test("costs: whole, per limit, above capacity, refunds and looks", async () => {
  const rl = ratelimit([
    { name: "tokens", policy: "fixed 10/1h" },
    { name: "calls", policy: "fixed 100/1h" },
  ]);
  const id = fresh();
  let r = await rl.limit(id, { cost: 4 });
  assert.deepEqual(r.decisions.map((d) => d.remaining), [6, 96]);
  r = await rl.limit(id, { cost: { tokens: 5 } });
  assert.deepEqual(r.decisions.map((d) => d.remaining), [1, 95], "a limit left out costs 1");
  r = await rl.limit(id, { cost: { tokens: 0, calls: 0 } });
  assert.deepEqual(r.decisions.map((d) => d.remaining), [1, 95], "cost 0 looks");
  r = await rl.limit(id, { cost: { tokens: -3, calls: 0 } });
  assert.deepEqual(r.decisions.map((d) => d.remaining), [4, 95], "a negative cost refunds");
  r = await rl.limit(fresh(), { cost: { tokens: 11 } });
  assert.equal(r.success, false);
  assert.equal(r.reason, "cost_exceeds_capacity");
  assert.equal(r.retryAfter, null, "no wait can admit it");
  assert.equal(r.headers["Retry-After"], undefined);
  assert.match(JSON.parse(r.problem.body).detail, /can ever admit/);
});

test("the headers option chooses the sets of rate-limit fields; a denial keeps Retry-After", async () => {
  const limits = [{ name: "only", policy: "fixed 1/1h" }];
  const sets = async (headers) => {
    const rl = ratelimit(limits, headers === undefined ? {} : { headers });
    const id = fresh();
    return [await rl.limit(id), await rl.limit(id)].map((r) => Object.keys(r.headers).sort());
  };
  const draft = ["RateLimit", "RateLimit-Policy"];
  const legacy = ["X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"];
  const both = [...draft, ...legacy].sort();
  assert.deepEqual(await sets(undefined), [both, [...both, "Retry-After"].sort()]);
  assert.deepEqual(await sets(["ratelimit"]), [draft, [...draft, "Retry-After"].sort()]);
  assert.deepEqual(await sets(["x-ratelimit"]), [legacy, [...legacy, "Retry-After"].sort()]);
  assert.deepEqual(await sets([]), [[], ["Retry-After"]]);
  assert.throws(() => ratelimit(limits, { headers: ["legacy"] }), (e) => e instanceof EdgelimitError && e.code === "invalid_option" && e.path === "headers[0]");
});

test("the headers describe every enforced limit and the binding one", async () => {
  const rl = ratelimit([
    { name: "burst", policy: "gcra 10/1s burst 20" },
    { name: "daily", policy: "fixed 3/1d" },
  ]);
  const r = await rl.limit(fresh());
  assert.equal(r.headers["RateLimit-Policy"], '"burst";q=20;w=2, "daily";q=3;w=86400');
  assert.match(r.headers.RateLimit, /^"burst";r=19;t=1, "daily";r=2;t=\d+$/);
  // The binding limit is the tightest: 2 left of the daily quota.
  assert.deepEqual(
    [r.limit, r.remaining, r.headers["X-RateLimit-Limit"], r.headers["X-RateLimit-Remaining"]],
    [3, 2, "3", "2"],
  );
  assert.equal(r.reset, r.decisions[1].reset);
  assert.ok(Math.abs(r.decidedAt - Date.now()) < 60_000, "decided on Redis's clock, near ours");
});

test("shadow limits are decided in the same round trip, reported, never enforced", async () => {
  const rl = ratelimit([
    { name: "trial", policy: "fixed 1/1h", shadow: true },
    { name: "real", policy: "fixed 100/1h" },
  ]);
  const id = fresh();
  await rl.limit(fresh());
  const first = await cost(() => rl.limit(id));
  assert.equal(first.pipelines, 1);
  assert.deepEqual(first.commands, { EVALSHA: 2 }, "the enforced and the shadow check, one pipeline");
  const second = await rl.limit(id);
  assert.equal(second.success, true);
  assert.deepEqual(
    second.decisions.map((d) => [d.name, d.shadow, d.success, d.reason]),
    [
      ["trial", true, false, "over_limit"],
      ["real", false, true, "admitted"],
    ],
  );
  assert.ok(!second.headers.RateLimit.includes("trial"), "a shadow limit is not advertised");
  assert.equal(second.problem, null);
});

test("a denial is remembered in the isolate: repeats cost no round trip until it lapses", async () => {
  const rl = ratelimit([{ name: "one", policy: "fixed 1/1h" }]);
  const id = fresh();
  await rl.limit(id);
  assert.equal((await rl.limit(id)).reason, "over_limit");
  const repeat = await cost(() => rl.limit(id));
  assert.equal(repeat.result.reason, "cached_denial");
  assert.equal(repeat.result.success, false);
  assert.equal(repeat.requests, 0, "answered without the store");
  const uncached = ratelimit([{ name: "one", policy: "fixed 1/1h" }], { denialCache: 0 });
  const asked = await cost(() => uncached.limit(id));
  assert.equal(asked.result.reason, "over_limit");
  assert.equal(asked.pipelines, 1);
});

test("concurrent calls never admit more than the limit", async () => {
  const rl = ratelimit([{ name: "burst", policy: "sliding-log 10/1h" }], { denialCache: 0 });
  const id = fresh();
  const results = await Promise.all(Array.from({ length: 25 }, () => rl.limit(id)));
  assert.equal(results.filter((r) => r.success).length, 10);
  assert.deepEqual(
    results.filter((r) => r.success).map((r) => r.remaining).sort((a, b) => a - b),
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
  );
});

test("peek charges nothing; reset forgets the state and this instance's cached denial", async () => {
  const rl = ratelimit([{ name: "daily", policy: "fixed 2/1d" }]);
  const id = fresh();
  assert.equal(await rl.reset("daily", id), false, "nothing to reset yet");
  for (let i = 0; i < 3; i++) assert.equal((await rl.peek("daily", id)).remaining, 2);
  await rl.limit(id);
  await rl.limit(id);
  assert.equal((await rl.limit(id)).success, false);
  assert.equal((await rl.limit(id)).reason, "cached_denial");
  const peeked = await rl.peek("daily", id);
  assert.deepEqual([peeked.name, peeked.remaining, peeked.limit, peeked.shadow], ["daily", 0, 2, false]);
  assert.equal(await rl.reset("daily", id), true);
  assert.equal(redis.cli("--scan", "--pattern", `{el:edgelimit:daily:${id}}:*`), "", "no state key left");
  const after = await rl.limit(id);
  assert.deepEqual([after.success, after.remaining], [true, 1]);
});

test("a request id makes a call idempotent: a repeat answers the first decision, uncharged", async () => {
  const rl = ratelimit([{ name: "api", policy: "fixed 5/1h" }]);
  const id = fresh();
  const first = await rl.limit(id, { requestId: "req-1" });
  const repeat = await rl.limit(id, { requestId: "req-1" });
  assert.deepEqual([first.remaining, repeat.remaining], [4, 4]);
  assert.equal((await rl.limit(id, { requestId: "req-2" })).remaining, 3);
});

describe("settle and release: the work is over", () => {
  test("release frees a concurrency slot now; without it the slot stays held", async () => {
    const rl = ratelimit([{ name: "slots", policy: "concurrency 1 timeout 60s" }]);
    const released = fresh();
    const first = await rl.limit(released);
    assert.equal(first.success, true);
    assert.equal((await rl.limit(released)).success, false, "the one slot is held");
    await rl.release(first);
    assert.equal((await rl.limit(released)).success, true, "admitted again after the release");

    const kept = fresh();
    assert.equal((await rl.limit(kept)).success, true);
    const denied = await rl.limit(kept);
    assert.equal(denied.success, false);
    await rl.release(denied); // a denial took nothing: its release frees nothing
    assert.equal((await rl.limit(kept)).success, false, "never released: still held until its timeout");
  });

  test("settle charges the real cost in place of the estimate, once, and frees the slots", async () => {
    const rl = ratelimit([
      { name: "tokens", policy: "fixed 100/1h" },
      { name: "slots", policy: "concurrency 1 timeout 60s" },
    ]);
    const id = fresh();
    const first = await rl.limit(id, { cost: { tokens: 50 }, settle: true });
    assert.equal((await rl.peek("tokens", id)).remaining, 50, "the estimate is charged");
    const { pipelines } = await cost(() => rl.settle(first, { tokens: 20 }));
    assert.equal(pipelines, 1, "one round trip");
    assert.equal((await rl.peek("tokens", id)).remaining, 80, "the real cost replaced the estimate");
    await rl.settle(first, { tokens: 20 });
    await rl.release(first);
    assert.equal((await rl.peek("tokens", id)).remaining, 80, "a repeat changes nothing");
    const second = await rl.limit(id, { cost: { tokens: 10 }, settle: true });
    assert.equal(second.success, true, "the slot was freed");
    await rl.settle(second, 30);
    assert.equal((await rl.peek("tokens", id)).remaining, 50, "more than estimated is charged");
  });

  test("bad arguments throw before anything is sent", async () => {
    const rl = ratelimit([
      { name: "tokens", policy: "fixed 100/1h" },
      { name: "slots", policy: "concurrency 1 timeout 60s" },
    ]);
    const other = ratelimit([{ name: "tokens", policy: "fixed 100/1h" }]);
    const result = await rl.limit(fresh());
    const copy = { ...result };
    const plain = ratelimit([{ name: "tokens", policy: "fixed 100/1h" }]);
    const unsettled = await plain.limit(fresh());
    for (const [call, code, path] of [
      [() => rl.settle(result, -1), "invalid_cost", "cost"],
      [() => rl.settle(result, 1.5), "invalid_cost", "cost"],
      [() => rl.settle(result, undefined), "invalid_cost", "cost"],
      [() => rl.settle(result, { slots: 1 }), "invalid_cost", 'cost["slots"]'],
      [() => rl.settle(result, { nope: 1 }), "invalid_cost", 'cost["nope"]'],
      [() => rl.release(copy), "invalid_argument", "result"],
      [() => other.release(result), "invalid_argument", "result"],
      [() => rl.release(null), "invalid_argument", "result"],
      [() => plain.settle(unsettled, 1), "invalid_argument", "result"],
    ]) {
      await assert.rejects(call, (e) => e instanceof EdgelimitError && e.code === code && e.path === path, `${code} ${path}`);
    }
    await rl.release(result);
  });
});

test("keys are the library's: {el:<namespace>:<limit>:<identifier>}:<algorithm>", async () => {
  const rl = ratelimit([{ name: "per-user", policy: "gcra 1/1s" }], { namespace: "app.v2" });
  const id = fresh("alice");
  await rl.limit(id);
  assert.equal(redis.cli("--scan", "--pattern", `{el:app.v2:per-user:${id}}:*`), `{el:app.v2:per-user:${id}}:gcra`);
  // An identifier cannot forge another's key or hash tag: every byte but [A-Za-z0-9._~-] is
  // escaped as %XX (docs/design.md §2).
  const forged = `x}:{el:app.v2:per-user:${id}`;
  await rl.limit(forged);
  const escaped = [...Buffer.from(forged)]
    .map((b) => (/[A-Za-z0-9._~-]/.test(String.fromCharCode(b)) ? String.fromCharCode(b) : `%${b.toString(16).toUpperCase().padStart(2, "0")}`))
    .join("");
  assert.equal(
    redis.cli("--scan", "--pattern", "{el:app.v2:per-user:x*"),
    `{el:app.v2:per-user:${escaped}}:gcra`,
  );
  assert.equal((await rl.peek("per-user", id)).remaining, 0, "the forged identifier touched no other state");
});

test("time: local decides on this process's clock", async () => {
  const rl = ratelimit([{ name: "l", policy: "fixed 2/1m" }], { time: "local" });
  const before = Date.now();
  const r = await rl.limit(fresh());
  assert.ok(r.decidedAt >= before && r.decidedAt <= Date.now(), `${r.decidedAt}`);
  assert.equal(r.reset, Math.floor(r.decidedAt / 60_000) * 60_000 + 60_000, "windows align to the epoch");
});

test("fromEnv reads the Upstash variables, and a custom fetch carries the calls", async () => {
  let calls = 0;
  const fetchCounted = (url, init) => {
    calls++;
    return fetch(url, init);
  };
  const env = { UPSTASH_REDIS_REST_URL: gateway.url, UPSTASH_REDIS_REST_TOKEN: TOKEN };
  const rl = Ratelimit.fromEnv(env, { limits: [{ name: "e", policy: "fixed 1/1m" }], fetch: fetchCounted });
  assert.equal((await rl.limit(fresh())).success, true);
  assert.equal(calls, 1);
  assert.deepEqual(rl.names, ["e"]);
});

describe("when the store cannot answer", () => {
  test("each limit follows its fail mode, and limit() never throws", async () => {
    const ownRedis = await startRedis();
    const ownGateway = await startGateway(ownRedis);
    try {
      const limits = [
        { name: "open", policy: "fixed 10/1m", fail: "open" },
        { name: "closed", policy: "fixed 10/1m", fail: "closed" },
        { name: "fallback", policy: "fixed 4/1m", fail: "fallback 50%" },
      ];
      const rl = new Ratelimit({ url: ownGateway.url, token: TOKEN, limits, timeout: 500 });
      assert.equal((await rl.limit("u")).success, true);
      await ownRedis.stop();
      const r = await rl.limit("u");
      assert.deepEqual(
        r.decisions.map((d) => [d.name, d.success, d.reason]),
        [
          ["open", true, "failed_open"],
          ["closed", false, "failed_closed"],
          ["fallback", true, "fallback"],
        ],
      );
      assert.equal(r.success, false);
      assert.equal(r.problem.status, 503, "every denial fails closed: the client did nothing wrong");
      assert.equal(r.headers["Retry-After"], "1");
      // The fallback decides in the isolate at 50% of 4/1m: 2 per minute.
      const lenient = new Ratelimit({ url: ownGateway.url, token: TOKEN, limits: [limits[0], limits[2]], timeout: 500 });
      const outcomes = [];
      for (let i = 0; i < 3; i++) outcomes.push((await lenient.limit("v")).success);
      assert.deepEqual(outcomes, [true, true, false]);
      await assert.rejects(rl.peek("open", "u"), (e) => e instanceof EdgelimitError && e.code === "store" && e.transient === true);
    } finally {
      await ownGateway.stop();
      await ownRedis.stop();
    }
  });

  test("a silent store fails within the timeout", async () => {
    const sockets = [];
    const silent = createServer((s) => sockets.push(s));
    await new Promise((r) => silent.listen(0, "127.0.0.1", r));
    try {
      const rl = new Ratelimit({
        url: `http://127.0.0.1:${silent.address().port}`,
        token: "t",
        timeout: 200,
        limits: [{ name: "l", policy: "fixed 1/1s", fail: "closed" }],
      });
      const started = performance.now();
      const r = await rl.limit("u");
      const took = performance.now() - started;
      assert.equal(r.reason, "failed_closed");
      // The 200 ms timeout: 50 ms below it is slack for Node's timers; under 2 s is slack for a
      // loaded machine, against a silent server that would hold the call for ever.
      assert.ok(took >= 150 && took < 2_000, `took ${took} ms`);
    } finally {
      for (const s of sockets) s.destroy();
      silent.close();
    }
  });

  test("a wrong token is a misconfiguration: the limits fail closed, and peek says so", async () => {
    // fail: "open" is for a store that cannot answer; a store that refuses the limiter fails
    // closed unless failMisconfigured says otherwise (docs/configuration.md).
    const rl = new Ratelimit({ url: gateway.url, token: "wrong", limits: [{ name: "l", policy: "fixed 1/1s", fail: "open" }] });
    assert.equal((await rl.limit("u")).reason, "misconfigured_closed");
    await assert.rejects(rl.peek("l", "u"), (e) => e.code === "store" && e.transient === false && /credentials/.test(e.message));
  });
});

describe("bad input throws an EdgelimitError naming what and where", () => {
  const base = () => ({ url: "http://127.0.0.1:9", token: "t", limits: [{ name: "a", policy: "fixed 1/1s" }] });
  const construction = [
    [{ ...base(), url: undefined }, "url"],
    [{ ...base(), url: "redis://x" }, "url"],
    [{ ...base(), token: "" }, "token"],
    [{ ...base(), limits: [] }, "limits"],
    [{ ...base(), limits: [{ name: "a", policy: "fixed ten/1s" }] }, "limits[0].policy"],
    [{ ...base(), limits: [{ name: "a", policy: "leaky 1/1s" }] }, "limits[0].policy"],
    [{ ...base(), limits: [{ name: "a", policy: "fixed 1/1s", fail: "maybe" }] }, "limits[0].fail"],
    [{ ...base(), limits: [{ name: "a b", policy: "fixed 1/1s" }] }, "limits[0].name"],
    [{ ...base(), limits: [{ name: "a", policy: "fixed 1/1s" }, { name: "a", policy: "fixed 2/1s" }] }, "limits[1].name"],
    [{ ...base(), limits: [{ name: "a", policy: 5 }] }, "limits[0].policy"],
    [{ ...base(), timeout: 0 }, "timeout"],
    [{ ...base(), time: "utc" }, "time"],
    [{ ...base(), namespace: "a:b" }, "namespace"],
    [{ ...base(), colour: "red" }, "colour"],
  ];
  for (const [options, path] of construction) {
    test(`new Ratelimit: ${path} ${JSON.stringify(options[path.split(/[.[]/)[0]] ?? options)}`.slice(0, 100), () => {
      assert.throws(
        () => new Ratelimit(options),
        (e) => e instanceof EdgelimitError && e.code === "invalid_option" && e.path === path && e.message.startsWith(path),
      );
    });
  }

  const rl = new Ratelimit({
    url: "http://127.0.0.1:9",
    token: "t",
    limits: [
      { name: "per-user", policy: "fixed 1/1s" },
      { name: "per-team", policy: "fixed 1/1s" },
    ],
  });
  const calls = [
    [{ "per-user": "u" }, undefined, "missing_identifier", 'identifiers["per-team"]'],
    [{ "per-user": "u", "per-team": "" }, undefined, "missing_identifier", 'identifiers["per-team"]'],
    [{ "per-user": "u", "per-team": undefined }, undefined, "missing_identifier", 'identifiers["per-team"]'],
    [{ "per-user": "u", "per-team": "t", "per-ip": "1" }, undefined, "unknown_limit", 'identifiers["per-ip"]'],
    [{ "per-user": 42, "per-team": "t" }, undefined, "invalid_identifier", 'identifiers["per-user"]'],
    [undefined, undefined, "invalid_identifier", "identifiers"],
    ["u", { cost: 1.5 }, "invalid_cost", "options.cost"],
    ["u", { cost: Number.NaN }, "invalid_cost", "options.cost"],
    ["u", { cost: Infinity }, "invalid_cost", "options.cost"],
    ["u", { cost: { "per-usr": 1 } }, "invalid_cost", 'options.cost["per-usr"]'],
    ["u", { requestId: 7 }, "invalid_argument", "options.requestId"],
    ["u", { costs: 1 }, "invalid_argument", "options"],
  ];
  for (const [ids, options, code, path] of calls) {
    test(`limit: ${code} at ${path}`, async () => {
      await assert.rejects(rl.limit(ids, options), (e) => e instanceof EdgelimitError && e.code === code && e.path === path);
    });
  }
  test("peek and reset: an unknown limit, an empty identifier", async () => {
    await assert.rejects(rl.peek("per-ip", "u"), (e) => e.code === "unknown_limit" && /per-user/.test(e.message));
    await assert.rejects(rl.reset("per-user", ""), (e) => e.code === "missing_identifier");
  });
  test("fromEnv without the variables", () => {
    assert.throws(
      () => Ratelimit.fromEnv({ UPSTASH_REDIS_REST_URL: "http://x" }, { limits: base().limits }),
      (e) => e instanceof EdgelimitError && e.path === "UPSTASH_REDIS_REST_TOKEN",
    );
  });
});

describe("over the limit", () => {
  test("a soft limit admits and names itself in `exceeded`", async () => {
    const rl = ratelimit([
      { name: "per-user", policy: "fixed 10/1h" },
      { name: "soft-cap", policy: "fixed 1/1h", exceed: "soft" },
    ]);
    const id = fresh();
    const first = await rl.limit(id);
    assert.deepEqual([first.success, first.exceeded], [true, []]);
    const second = await rl.limit(id);
    assert.deepEqual([second.success, second.exceeded], [true, ["soft-cap"]]);
    assert.deepEqual(
      second.decisions.map((d) => [d.name, d.success, d.shadow, d.remaining]),
      [
        ["per-user", true, false, 8],
        ["soft-cap", false, true, 0],
      ],
    );
    assert.equal(second.problem, null);
  });

  test("a delayed request resolves after its wait, one beyond the longest is denied", async () => {
    const rl = ratelimit([{ name: "paced", policy: "gcra 2/1s burst 1", exceed: "delay 800ms" }]);
    const id = fresh();
    assert.equal((await rl.limit(id)).delayMs, 0);
    const started = Date.now();
    const second = await rl.limit(id);
    const waited = Date.now() - started;
    assert.equal(second.success, true);
    assert.equal(second.decisions[0].reason, "delayed");
    assert.ok(second.delayMs > 0 && second.delayMs <= 500, `delayMs ${second.delayMs}`);
    assert.ok(waited >= second.delayMs - 5, `resolved after ${waited} ms, its wait ${second.delayMs}`);
    // Three more at once: waits of ~0.5, ~1 and ~1.5 s; the last two are beyond 0.8 s. The slack
    // is 200 ms: the three must reach the store within 200 ms of the second's answer (a few ms
    // idle) or the second of them would fit within 0.8 s.
    const results = await Promise.all([rl.limit(id), rl.limit(id), rl.limit(id)]);
    assert.deepEqual(results.map((r) => r.success).sort(), [false, false, true]);
  });

  test("a blocked identifier is refused for the block, charging nothing", async () => {
    // No denial cache: it would answer the blocked calls itself (`cached_denial`), the denial
    // having told the block's end.
    const rl = ratelimit([{ name: "login", policy: "fixed 1/1h", blockFor: "2h" }], { denialCache: 0 });
    const id = fresh();
    assert.equal((await rl.limit(id)).success, true);
    const denied = await rl.limit(id);
    assert.deepEqual([denied.success, denied.reason], [false, "over_limit"]);
    assert.equal(denied.retryAfter, 7200, "the denial that starts the block tells its end");
    const blocked = await rl.limit(id);
    assert.deepEqual([blocked.success, blocked.reason], [false, "blocked"]);
    // The block is two hours from the denial, past the window's end.
    assert.ok(blocked.retryAfter > 3600 && blocked.retryAfter <= 7200, `retryAfter ${blocked.retryAfter}`);
  });

  test("a staged limit is enforced for a stable share of identifiers", async () => {
    const rl = ratelimit([{ name: "staged", policy: "fixed 1/1h", enforce: "50%" }]);
    const outcomes = [];
    for (let i = 0; i < 40; i++) {
      const id = `staged-${i}`;
      await rl.reset("staged", id);
      await rl.limit(id);
      const second = await rl.limit(id);
      outcomes.push([second.success, second.decisions[0].shadow]);
    }
    // Refused exactly when enforced (not in shadow), and both kinds occur.
    for (const [success, shadow] of outcomes) assert.equal(success, shadow);
    const enforced = outcomes.filter(([, shadow]) => !shadow).length;
    assert.ok(enforced >= 8 && enforced <= 32, `${enforced} of 40 enforced`);
  });

  test("options that combine badly are refused, naming the option", () => {
    assert.throws(
      () => ratelimit([{ name: "a", policy: "fixed 1/1s", exceed: "soft", blockFor: "1m" }]),
      (e) => e instanceof EdgelimitError && e.path === "limits[0].blockFor",
    );
    assert.throws(
      () => ratelimit([{ name: "a", policy: "concurrency 2", exceed: "delay 1s" }]),
      (e) => e instanceof EdgelimitError && e.path === "limits[0].exceed",
    );
  });
});
