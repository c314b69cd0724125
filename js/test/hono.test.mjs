// The adversarial suite for the Hono middleware (edgelimit/hono), as npm ships it, under Node
// against the gateway and a real redis-server: each attack a client can make on what the
// middleware reads of its request, sent as the attacker sends it, and what reaches the app —
// never more than the limit (docs/security.md lists each attack and what stops it).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Hono } from "hono";
import { Ratelimit } from "edgelimit";
import { addressGroup, clientAddress, header, query, rateLimiter } from "edgelimit/hono";
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
/** A limit name no other test uses (each test its own quota). */
const fresh = () => `hono-${process.pid}-${next++}`;

/** An app limiting `/api/*` to `policy` per identifier `identify` gives, answering 200. */
function app(policy, identify, options = {}) {
  const name = fresh();
  const rl = new Ratelimit({ url: gateway.url, token: TOKEN, limits: [{ name, policy }] });
  const hono = new Hono();
  hono.use("/api/*", rateLimiter({ limiter: rl, identify: (c) => ({ [name]: identify(c) }), ...options }));
  hono.all("/api/*", (c) => c.text("ok"));
  return hono;
}

/** How many of `requests` (each `[path, init]`) reached the app, printed with the attack. */
async function reached(attack, hono, requests) {
  const statuses = [];
  for (const [path, init] of requests) statuses.push((await hono.request(path, init)).status);
  const count = statuses.filter((s) => s === 200).length;
  console.log(`${attack}: ${count} of ${statuses.length} reached the app (${statuses.join(", ")})`);
  return { count, statuses };
}

const byKey = (c) => header(c, "x-api-key") ?? clientAddress(c);

describe("what a client sends chooses no bucket", () => {
  test("an API key sent twice is refused, naming the header", async () => {
    const hono = app("fixed 3/1h", byKey);
    // Two lines reach the app joined ("k1, r<i>"): before, a fresh bucket each time.
    const requests = Array.from({ length: 10 }, (_, i) => {
      const headers = new Headers([["x-api-key", "k1"], ["x-api-key", `r${i}`], ["cf-connecting-ip", "198.51.100.1"]]);
      return ["/api/x", { headers }];
    });
    const { count, statuses } = await reached("x-api-key twice", hono, requests);
    assert.equal(count, 0);
    assert.ok(statuses.every((s) => s === 400));
    const answer = await hono.request(...requests[0]);
    const problem = await answer.json();
    assert.equal(problem.reason, "ambiguous_request");
    assert.match(problem.detail, /header `x-api-key`/);
  });

  test("a query parameter sent twice is refused", async () => {
    const hono = app("fixed 3/1h", (c) => query(c, "key") ?? clientAddress(c));
    const requests = Array.from({ length: 10 }, (_, i) => [`/api/x?key=r${i}&key=acme`, {}]);
    assert.equal((await reached("query key twice", hono, requests)).count, 0);
  });

  test("a preflight header buys nothing", async () => {
    // Before, every OPTIONS passed uncounted.
    const hono = app("fixed 3/1h", byKey);
    const headers = { "access-control-request-method": "POST", "cf-connecting-ip": "198.51.100.2" };
    const requests = Array.from({ length: 10 }, () => ["/api/x", { method: "OPTIONS", headers }]);
    assert.equal((await reached("preflight header", hono, requests)).count, 3);
  });

  test("leaving the key out limits the client alone, in a bucket no key can name", async () => {
    const hono = app("fixed 3/1h", byKey);
    const from = (ip, key) => ["/api/x", { headers: { "cf-connecting-ip": ip, ...(key ? { "x-api-key": key } : {}) } }];
    const attacker = Array.from({ length: 10 }, () => from("198.51.100.3"));
    assert.equal((await reached("key left out", hono, attacker)).count, 3);
    assert.equal((await hono.request(...from("198.51.100.4"))).status, 200, "another keyless client");
    // A key spelling the other client's bucket is a key of its own.
    const forged = Array.from({ length: 3 }, () => from("198.51.100.5", "ip:198.51.100.4"));
    assert.equal((await reached("forged address key", hono, forged)).count, 3);
    assert.equal((await hono.request(...from("198.51.100.4"))).status, 200);
  });

  test("every spelling of an IPv4 client is one client, and an IPv6 client its /64", async () => {
    const hono = app("fixed 3/1h", (c) => clientAddress(c));
    const spellings = ["1.2.3.4", "::ffff:1.2.3.4", "::ffff:102:304", "0:0:0:0:0:ffff:1.2.3.4", "::FFFF:1.2.3.4"];
    const requests = spellings.map((ip) => ["/api/x", { headers: { "cf-connecting-ip": ip } }]);
    assert.equal((await reached("IPv4-mapped spellings", hono, requests)).count, 3);
    // As the Worker keys them (src/net/grouping.rs).
    assert.equal(addressGroup("2001:db8:1:2:3:4:5:6"), "2001:db8:1:2::/64");
    assert.equal(addressGroup("2001:DB8::7"), "2001:db8::/64");
    assert.equal(addressGroup("2001:db8:1234:5678::1.2.3.4"), "2001:db8:1234:5678::/64");
    assert.equal(addressGroup("64:ff9b::1.2.3.4"), "64:ff9b::/64");
    assert.equal(addressGroup("not an address"), "not an address");
  });
});
