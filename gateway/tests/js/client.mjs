// The official Upstash clients, unchanged, against edgelimit's gateway.
// Usage: node client.mjs <gateway url> <token>. Exits non-zero on the first failed check.
import assert from "node:assert/strict";
import { Redis } from "@upstash/redis";
import { Ratelimit } from "@upstash/ratelimit";

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
    const ratelimit = new Ratelimit({ redis, limiter, prefix: `js:rl:${Math.random()}`, analytics: false });
    const outcomes = [];
    for (let i = 0; i < 5; i++) outcomes.push((await ratelimit.limit("user")).success);
    assert.deepEqual(outcomes, [true, true, true, false, false]);
  }
});

console.log(results.join("\n"));
const failed = results.filter((r) => r.startsWith("FAIL")).length;
console.log(`${results.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
