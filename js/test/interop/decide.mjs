// Decides calls through the packed package, for js/tests/interop.rs: one quota decided by this
// package, the Rust Worker and the native stores.
// Usage: node decide.mjs <REST url> <token> <limits JSON> <calls JSON: [identifiers, …]>
// Prints one line of JSON: per call, [success, [[name, success, remaining], …]].
import { Ratelimit } from "edgelimit";

const [url, token, limits, calls] = process.argv.slice(2);
const rl = new Ratelimit({ url, token, limits: JSON.parse(limits), timeout: 5000 });
const out = [];
for (const identifiers of JSON.parse(calls)) {
  const r = await rl.limit(identifiers);
  out.push([r.success, r.decisions.map((d) => [d.name, d.success, d.remaining])]);
}
console.log(JSON.stringify(out));
