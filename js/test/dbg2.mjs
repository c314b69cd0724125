import { Ratelimit } from "edgelimit";
import { startRedis, startGateway, TOKEN } from "./support.mjs";
const ownRedis = await startRedis(); const ownGateway = await startGateway(ownRedis);
const limits = [
  { name: "open", policy: "fixed 10/1m", fail: "open" },
  { name: "closed", policy: "fixed 10/1m", fail: "closed" },
  { name: "fallback", policy: "fixed 4/1m", fail: "fallback 50%" },
];
const rl = new Ratelimit({ url: ownGateway.url, token: TOKEN, limits, timeout: 500 });
console.log((await rl.limit("u")).success);
console.log("stopping");
await ownRedis.stop();
console.log("stopped");
let t = performance.now();
const r = await rl.limit("u");
console.log(performance.now() - t, r.decisions.map(d => d.reason));
const lenient = new Ratelimit({ url: ownGateway.url, token: TOKEN, limits: [limits[0], limits[2]], timeout: 500 });
for (let i = 0; i < 3; i++) { t = performance.now(); const x = await lenient.limit("v"); console.log("lenient", performance.now() - t, x.success, x.decisions.map(d=>d.reason)); }
try { await rl.peek("open", "u"); } catch (e) { console.log("peek", e.code, e.transient, e.message); }
await ownGateway.stop();
console.log("done");
