// The official Upstash clients, unchanged, against edgelimit's gateway.
// Usage: node client.mjs <gateway url> <token>. Exits non-zero on the first failed check.
import assert from "node:assert/strict";
import { Redis } from "@upstash/redis";
import { IpDenyList, MultiRegionRatelimit, Ratelimit } from "@upstash/ratelimit";

const [url, token] = process.argv.slice(2);
// Defaults as users run them: base64 responses, auto-pipelining, the sync token.
const redis = new Redis({ url, token, enableTelemetry: false, enableAutoPipelining: true });
const results = [];
async function check(name, fn) {
  try {
    await fn();
    results.push(`ok   ${name}`);
  } catch (e) {
    results.push(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}

await check("set/get with base64 (unicode, braces)", async () => {
  assert.equal(await redis.set("js:key", "héllo {world} ✓"), "OK");
  assert.equal(await redis.get("js:key"), "héllo {world} ✓");
  assert.equal(await redis.get("js:missing"), null);
});
await check("JSON values round-trip", async () => {
  await redis.set("js:obj", { a: 1, b: [true, "x"] });
  assert.deepEqual(await redis.get("js:obj"), { a: 1, b: [true, "x"] });
});
await check("integers", async () => {
  await redis.del("js:n");
  assert.equal(await redis.incr("js:n"), 1);
  assert.equal(await redis.incrby("js:n", 41), 42);
});
await check("explicit pipeline", async () => {
  const p = redis.pipeline();
  p.set("js:p", 1);
  p.incr("js:p");
  p.get("js:p");
  p.exists("js:p", "js:none");
  assert.deepEqual(await p.exec(), ["OK", 2, 2, 1]);
});
await check("multi-exec", async () => {
  const tx = redis.multi();
  tx.set("js:t", "x");
  tx.append("js:t", "y");
  tx.get("js:t");
  assert.deepEqual(await tx.exec(), ["OK", 2, "xy"]);
});
await check("EVAL and EVALSHA", async () => {
  assert.equal(await redis.eval("return ARGV[1]", [], ["hi"]), "hi");
  const sha = await redis.scriptLoad("return 42");
  assert.equal(await redis.evalsha(sha, [], []), 42);
});
await check("NOSCRIPT fall back (Script.exec: EVALSHA, then EVAL)", async () => {
  const script = redis.createScript(`return redis.call("INCR", KEYS[1])`);
  const first = await script.exec(["js:script"], []);
  const second = await script.exec(["js:script"], []);
  assert.equal(second, first + 1);
});
await check("a command error comes back as an error", async () => {
  await redis.set("js:s", "text");
  await assert.rejects(redis.incr("js:s"), /not an integer/);
});
await check("@upstash/ratelimit 2.2 (scripts with #!lua flags=allow-key-locking)", async () => {
  for (const limiter of [Ratelimit.fixedWindow(3, "10 s"), Ratelimit.slidingWindow(3, "10 s"), Ratelimit.tokenBucket(1, "10 s", 3)]) {
    await clearOfWindowEnd(10_000);
    const ratelimit = new Ratelimit({ redis, limiter, prefix: `js:rl:${Math.random()}`, analytics: false });
    const outcomes = [];
    for (let i = 0; i < 5; i++) outcomes.push((await ratelimit.limit("user")).success);
    assert.deepEqual(outcomes, [true, true, true, false, false]);
  }
});

// Every documented feature of @upstash/ratelimit 2.2, with the commands it sends through the
// gateway's default allow-list (directly, or from its scripts, which the gateway's Redis ACL user
// holds to the same list).
const uniquePrefix = (name) => `js:${name}:${Math.random().toString(36).slice(2)}`;
// MultiRegionRatelimit's resetTokens starts its reset script without awaiting it (ratelimit 2.2:
// the map callback has no `return`), so the reset may reach the gateway after the next read.
// Poll until the expected value appears, for at most two seconds, and return what was seen last.
async function remainingOnceSettled(ratelimit, identifier, expected) {
  const deadline = Date.now() + 2000;
  for (;;) {
    const { remaining } = await ratelimit.getRemaining(identifier);
    if (remaining === expected || Date.now() > deadline) return remaining;
    await new Promise((r) => setTimeout(r, 20));
  }
}

// @upstash/ratelimit's fixed and sliding windows are aligned to the epoch by the client's clock:
// a sequence that crosses a window's end starts afresh there and admits what the test expects
// denied (on a loaded machine a sequence of a few requests can take a second or more). Each
// windowed sequence starts at least `needMs` before its window ends.
async function clearOfWindowEnd(windowMs, needMs = 3000) {
  const left = windowMs - (Date.now() % windowMs);
  if (left < needMs) await new Promise((r) => setTimeout(r, left + 20));
}

async function outcomes(ratelimit, identifier, n) {
  const out = [];
  for (let i = 0; i < n; i++) {
    const response = await ratelimit.limit(identifier);
    await response.pending;
    out.push(response.success);
  }
  return out;
}

await check("ratelimit deny list: enableProtection (EVAL with SMISMEMBER, TTL, SETEX)", async () => {
  const prefix = uniquePrefix("deny");
  // The IP deny list is downloaded from the internet unless switched off, as its documented
  // switch does: MULTI with SDIFFSTORE, DEL and SET.
  const disabled = await IpDenyList.disableIpDenyList(redis, prefix);
  assert.equal(disabled.length, 3);
  await redis.sadd(`${prefix}:denyList:all`, "blocked-user", "203.0.113.9");
  const ratelimit = new Ratelimit({ redis, limiter: Ratelimit.fixedWindow(10, "10 s"), prefix, enableProtection: true });
  const byIdentifier = await ratelimit.limit("blocked-user");
  assert.equal(byIdentifier.success, false);
  assert.equal(byIdentifier.reason, "denyList");
  assert.equal(byIdentifier.deniedValue, "blocked-user");
  const byIp = await ratelimit.limit("another-user", { ip: "203.0.113.9" });
  assert.equal(byIp.success, false);
  assert.equal(byIp.deniedValue, "203.0.113.9");
  const allowed = await ratelimit.limit("good-user", { ip: "198.51.100.1", userAgent: "test", country: "NL" });
  await allowed.pending;
  assert.equal(allowed.success, true);
  assert.equal(allowed.reason, undefined);
});
await check("ratelimit dynamic limits: set, read, apply, clear (SET, GET, DEL)", async () => {
  for (const limiter of [Ratelimit.fixedWindow(5, "10 s"), Ratelimit.slidingWindow(5, "10 s"), Ratelimit.tokenBucket(1, "10 s", 5)]) {
    await clearOfWindowEnd(10_000);
    const ratelimit = new Ratelimit({ redis, limiter, prefix: uniquePrefix("dynamic"), dynamicLimits: true, ephemeralCache: false });
    assert.deepEqual(await ratelimit.getDynamicLimit(), { dynamicLimit: null });
    await ratelimit.setDynamicLimit({ limit: 2 });
    assert.deepEqual(await ratelimit.getDynamicLimit(), { dynamicLimit: 2 });
    assert.deepEqual(await outcomes(ratelimit, "user", 3), [true, true, false]);
    const remaining = await ratelimit.getRemaining("user");
    assert.equal(remaining.limit, 2);
    assert.equal(remaining.remaining, 0);
    await ratelimit.setDynamicLimit({ limit: false });
    assert.deepEqual(await ratelimit.getDynamicLimit(), { dynamicLimit: null });
  }
});
await check("ratelimit getRemaining and resetUsedTokens (a script with SCAN and DEL)", async () => {
  for (const limiter of [Ratelimit.fixedWindow(2, "10 s"), Ratelimit.slidingWindow(2, "10 s"), Ratelimit.tokenBucket(1, "10 s", 2), Ratelimit.cachedFixedWindow(2, "10 s")]) {
    await clearOfWindowEnd(10_000);
    const ratelimit = new Ratelimit({ redis, limiter, prefix: uniquePrefix("reset") });
    assert.deepEqual(await outcomes(ratelimit, "user", 3), [true, true, false]);
    assert.equal((await ratelimit.getRemaining("user")).remaining, 0);
    await ratelimit.resetUsedTokens("user");
    assert.equal((await ratelimit.getRemaining("user")).remaining, 2);
    assert.deepEqual(await outcomes(ratelimit, "user", 1), [true]);
  }
});
await check("ratelimit analytics (ZINCRBY; EVAL with ZRANGE and ZUNION)", async () => {
  await clearOfWindowEnd(10_000);
  const ratelimit = new Ratelimit({ redis, limiter: Ratelimit.fixedWindow(1, "10 s"), prefix: uniquePrefix("analytics"), analytics: true, ephemeralCache: false });
  assert.deepEqual(await outcomes(ratelimit, "user", 3), [true, false, false]);
  const usage = await ratelimit.analytics.getUsage();
  assert.deepEqual(usage.user, { success: 1, blocked: 2 });
  const series = await ratelimit.analytics.getUsageOverTime(1, "identifier");
  assert.equal(series.length, 1);
});
await check("ratelimit blockUntilReady", async () => {
  const ratelimit = new Ratelimit({ redis, limiter: Ratelimit.fixedWindow(1, "500 ms"), prefix: uniquePrefix("block") });
  assert.equal((await ratelimit.limit("user")).success, true);
  const started = Date.now();
  const waited = await ratelimit.blockUntilReady("user", 3000);
  assert.equal(waited.success, true);
  // Admitted by the next 500 ms window, not by blockUntilReady's own 3 s timeout: 2.5 s of
  // slack for a loaded machine.
  assert.ok(Date.now() - started < 3000);
});
await check("multi-region ratelimit (HSET, scripts with HGETALL)", async () => {
  for (const limiter of [MultiRegionRatelimit.fixedWindow(2, "10 s"), MultiRegionRatelimit.slidingWindow(2, "10 s")]) {
    await clearOfWindowEnd(10_000);
    const ratelimit = new MultiRegionRatelimit({ redis: [redis], limiter, prefix: uniquePrefix("multi") });
    assert.deepEqual(await outcomes(ratelimit, "user", 3), [true, true, false]);
    assert.equal((await ratelimit.getRemaining("user")).remaining, 0);
    await ratelimit.resetUsedTokens("user");
    assert.equal(await remainingOnceSettled(ratelimit, "user", 2), 2);
  }
});

console.log(results.join("\n"));
const failed = results.filter((r) => r.startsWith("FAIL")).length;
console.log(`${results.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
