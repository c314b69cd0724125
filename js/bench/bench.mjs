// edgelimit's package beside @upstash/ratelimit (+ @upstash/redis), in the same JavaScript Worker
// shape (bench/edgelimit, bench/upstash; bench/baseline has no limiter), all three under
// `wrangler dev`, against one gateway (its /metrics on) and one redis-server, in one run. Prints
// a table:
//
// - per workload and Worker: /pipeline requests and Redis commands per request (the gateway's
//   counters, read before and after each block), the Worker process's CPU per request (workerd's
//   utime+stime from /proc, beside the baseline's), median latency, and what was denied;
// - the bundle each Worker uploads (`wrangler deploy --dry-run`), raw and gzipped;
// - the npm tarballs (edgelimit's; @upstash/ratelimit's + @upstash/redis's, from the registry);
// - cold start: the Worker's startup phase as workerd profiles it (`wrangler check startup`), and
//   importing the library and making a limiter in a fresh Node process (median of runs).
//
// The Workers take turns in blocks, so a busy machine slows them alike. Not part of CI.
// Usage (after scripts/build-js): node js/bench/bench.mjs [--requests N] [--rounds R]
// [--library-only] (only the library-alone table: no Worker, in about a minute)

import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gzipSync } from "node:zlib";

import { JS, ROOT, TOKEN, installTarball, startGateway, startRedis, startWrangler, tarball } from "../test/support.mjs";
import { edgelimitPolicy } from "./limits.mjs";

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const REQUESTS = arg("requests", 200);
const ROUNDS = arg("rounds", 3);
const BENCH = join(JS, "bench");
const WORKERS = ["edgelimit", "upstash", "baseline"];

const big = 100_000_000;
const RULES = {
  "/one": [{ name: "one-user", algorithm: "sliding", limit: big, window: 3600, header: "x-user" }],
  "/three": [
    { name: "three-user", algorithm: "sliding", limit: big, window: 3600, header: "x-user" },
    { name: "three-team", algorithm: "fixed", limit: big, window: 3600, header: "x-team" },
    { name: "three-key", algorithm: "token-bucket", refill: 1_000_000, limit: big, window: 1, header: "x-key" },
  ],
  // One client over a small quota: after 5, every request is a denial.
  "/denied": [{ name: "denied-user", algorithm: "fixed", limit: 5, window: 3600, header: "x-user" }],
  // The team's quota runs out while the user's has plenty: every later request passes the user
  // limit and fails the team limit. Is the user charged for requests the team limit denied?
  "/partial": [
    { name: "partial-user", algorithm: "sliding", limit: 1_000_000, window: 3600, header: "x-user" },
    { name: "partial-team", algorithm: "fixed", limit: 10, window: 3600, header: "x-team" },
  ],
};
const WORKLOADS = [
  { path: "/one", label: "1 limit, admitted", headers: (i) => ({ "x-user": `u${i % 20}` }) },
  {
    path: "/three",
    label: "3 limits, admitted",
    headers: (i) => ({ "x-user": `u${i % 20}`, "x-team": `t${i % 5}`, "x-key": `k${i % 10}` }),
  },
  { path: "/denied", label: "1 limit, denied (one client)", headers: () => ({ "x-user": "hot" }) },
  { path: "/partial", label: "2 limits, team exhausted", headers: (w) => ({ "x-user": `p-${w}`, "x-team": `hot-${w}` }) },
];

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.floor(s.length / 2)] : NaN;
};
const ticksPerSecond = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim());

/** CPU seconds (user + system) of every workerd in the process group `pgid`. */
function workerdCpu(pgid) {
  let total = 0;
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let stat;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, "utf8");
    } catch {
      continue;
    }
    const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // fields[2] is the pgrp; utime and stime are fields 14 and 15 of the whole line.
    if (name === "workerd" && Number(fields[2]) === pgid) total += (Number(fields[11]) + Number(fields[12])) / ticksPerSecond;
  }
  return total;
}

/** The bundle `wrangler deploy --dry-run` uploads for one Worker: raw and gzipped bytes. */
function bundle(worker) {
  const out = mkdtempSync(join(tmpdir(), "edgelimit-bench-bundle-"));
  const run = spawnSync(
    join(ROOT, "node_modules/.bin/wrangler"),
    ["deploy", "--dry-run", "--outdir", out, "--config", join(BENCH, worker, "wrangler.toml")],
    {
      encoding: "utf8",
      env: { ...process.env, WRANGLER_SEND_METRICS: "false", XDG_CONFIG_HOME: join(out, "xdg"), CI: "true" },
    },
  );
  if (run.status !== 0) throw new Error(`wrangler deploy --dry-run (${worker}) failed:\n${run.stdout}${run.stderr}`);
  let raw = 0;
  let gz = 0;
  for (const file of readdirSync(out)) {
    const path = join(out, file);
    if (!statSync(path).isFile() || file.endsWith(".map") || file === "README.md") continue;
    const bytes = readFileSync(path);
    raw += bytes.length;
    gz += gzipSync(bytes, { level: 9 }).length;
  }
  rmSync(out, { recursive: true, force: true });
  return { raw, gz };
}

/**
 * The Worker's startup phase as workerd profiles it (`wrangler check startup`: the profile's span,
 * evaluating the bundle and its WebAssembly at load), in ms: the median of `runs`.
 */
function startup(worker, runs = 5) {
  const spans = [];
  for (let i = 0; i < runs; i++) {
    const dir = mkdtempSync(join(tmpdir(), "edgelimit-bench-startup-"));
    const outfile = join(dir, "startup.cpuprofile");
    const run = spawnSync(join(ROOT, "node_modules/.bin/wrangler"), ["check", "startup", "--outfile", outfile], {
      cwd: join(BENCH, worker),
      encoding: "utf8",
      env: { ...process.env, WRANGLER_SEND_METRICS: "false", XDG_CONFIG_HOME: join(dir, "xdg"), CI: "true" },
    });
    if (run.status !== 0) throw new Error(`wrangler check startup (${worker}) failed:\n${run.stdout}${run.stderr}`);
    const profile = JSON.parse(readFileSync(outfile, "utf8"));
    spans.push((profile.endTime - profile.startTime) / 1000);
    rmSync(dir, { recursive: true, force: true });
  }
  return median(spans);
}

/** Milliseconds to import the library and make a limiter, in a fresh Node process (median). */
function coldStart(code, runs = 15) {
  const times = [];
  for (let i = 0; i < runs; i++) {
    const script = `const t = performance.now(); ${code}; console.log(performance.now() - t);`;
    const out = execFileSync(join(ROOT, "node_modules/.bin/node"), ["--input-type=module", "-e", script], {
      cwd: BENCH,
      encoding: "utf8",
    });
    times.push(Number(out.trim().split("\n").pop()));
  }
  return median(times);
}

/** The npm tarball of `spec` (name@version) from the registry, its bytes (already gzipped). */
function registryTarball(spec) {
  const dir = mkdtempSync(join(tmpdir(), "edgelimit-bench-pack-"));
  const name = execFileSync("npm", ["pack", spec, "--silent", "--pack-destination", dir], { encoding: "utf8" }).trim();
  const size = statSync(join(dir, name)).size;
  rmSync(dir, { recursive: true, force: true });
  return size;
}

const installed = (pkg) => JSON.parse(readFileSync(join(JS, "node_modules", pkg, "package.json"), "utf8")).version;

async function main() {
  installTarball(BENCH);
  if (process.argv.includes("--library-only")) {
    const redis = await startRedis();
    const gateway = await startGateway(redis);
    try {
      await printLibraryCpu(gateway.url);
    } finally {
      await gateway.stop();
      await redis.stop();
    }
    return;
  }
  console.log(`edgelimit ${tarball().split("/").pop()}; @upstash/ratelimit ${installed("@upstash/ratelimit")}, @upstash/redis ${installed("@upstash/redis")}`);
  console.log(`${REQUESTS} requests a block, ${ROUNDS} rounds; the Workers take turns\n`);

  const bundles = Object.fromEntries(WORKERS.map((w) => [w, bundle(w)]));
  const startups = Object.fromEntries(WORKERS.map((w) => [w, startup(w)]));
  const redis = await startRedis();
  const gateway = await startGateway(redis);
  const vars = {
    UPSTASH_REDIS_REST_URL: gateway.url,
    UPSTASH_REDIS_REST_TOKEN: TOKEN,
    BENCH_RULES: JSON.stringify(RULES),
  };
  const workers = {};
  try {
    for (const w of WORKERS) workers[w] = await startWrangler(join(BENCH, w, "wrangler.toml"), vars);
    const rows = [];
    for (const workload of WORKLOADS) {
      const stats = Object.fromEntries(
        WORKERS.map((w) => [w, { latencies: [], cpu: 0, pipelines: 0, commands: 0, requests: 0, denied: 0 }]),
      );
      const active = workload.path === "/one" ? WORKERS : WORKERS.filter((w) => w !== "baseline");
      // Warm each Worker's isolate and scripts first (not counted).
      for (const w of active) await fetch(`${workers[w].url}${workload.path}`, { headers: workload.headers(0) });
      for (let round = 0; round < ROUNDS; round++) {
        for (const w of active) {
          const s = stats[w];
          const before = await gateway.metrics();
          const cpu = workerdCpu(workers[w].pid);
          for (let i = 0; i < REQUESTS; i++) {
            const started = performance.now();
            const headers = workload.path === "/partial" ? workload.headers(w) : workload.headers(i);
            const response = await fetch(`${workers[w].url}${workload.path}`, { headers });
            await response.arrayBuffer();
            s.latencies.push(performance.now() - started);
            if (response.status === 429) s.denied++;
          }
          s.cpu += workerdCpu(workers[w].pid) - cpu;
          const after = await gateway.metrics();
          s.pipelines += after.pipelines - before.pipelines;
          s.commands += after.commands - before.commands;
          s.requests += REQUESTS;
        }
      }
      // The user's standing, probed under another team (this probe charges the user 1 more).
      const charged = {};
      if (workload.path === "/partial") {
        for (const w of active) {
          const probe = await fetch(`${workers[w].url}/partial`, { headers: { "x-user": `p-${w}`, "x-team": `probe-${w}` } });
          charged[w] = userCharged(probe.headers.get("ratelimit") ?? "") - 1;
        }
      }
      for (const w of active) {
        const s = stats[w];
        rows.push({
          workload: workload.label,
          worker: w,
          "pipelines/req": (s.pipelines / s.requests).toFixed(2),
          "commands/req": (s.commands / s.requests).toFixed(2),
          "CPU µs/req": Math.round((s.cpu / s.requests) * 1e6),
          "p50 ms": median(s.latencies).toFixed(2),
          denied: `${s.denied}/${s.requests}`,
          ...(workload.path === "/partial" ? { "user charged": charged[w] } : {}),
        });
      }
    }
    console.table(rows);
    await printLibraryCpu(gateway.url);
  } finally {
    for (const w of Object.values(workers)) await w.stop();
    await gateway.stop();
    await redis.stop();
  }

  console.log("\nBundles (wrangler deploy --dry-run, everything uploaded):");
  console.table(
    Object.fromEntries(
      WORKERS.map((w) => [w, { raw: bundles[w].raw, gzip: bundles[w].gz, "gzip minus baseline": bundles[w].gz - bundles.baseline.gz }]),
    ),
  );

  const ours = statSync(tarball()).size;
  const ratelimit = registryTarball(`@upstash/ratelimit@${installed("@upstash/ratelimit")}`);
  const redisClient = registryTarball(`@upstash/redis@${installed("@upstash/redis")}`);
  console.log("npm tarballs (as published, gzipped):");
  console.table({
    edgelimit: { bytes: ours },
    "@upstash/ratelimit + @upstash/redis": { bytes: ratelimit + redisClient, ratelimit, redis: redisClient },
  });

  const nothing = coldStart("await Promise.resolve()");
  const edgelimit = coldStart(
    `const { Ratelimit } = await import("edgelimit"); new Ratelimit({ url: "http://127.0.0.1:1", token: "t", limits: [{ name: "a", policy: "gcra 10/1s" }] })`,
  );
  const upstash = coldStart(
    `const { Ratelimit } = await import("@upstash/ratelimit"); const { Redis } = await import("@upstash/redis"); new Ratelimit({ redis: new Redis({ url: "http://127.0.0.1:1", token: "t", enableTelemetry: false }), limiter: Ratelimit.slidingWindow(10, "1 s") })`,
  );
  console.log("Cold start: import + construct in a fresh Node process (median of 15, ms):");
  console.table({ nothing: { ms: nothing.toFixed(1) }, edgelimit: { ms: edgelimit.toFixed(1) }, upstash: { ms: upstash.toFixed(1) } });
  console.log("Cold start: the Worker's startup phase under workerd (wrangler check startup, median of 5, ms):");
  console.table(Object.fromEntries(WORKERS.map((w) => [w, { ms: startups[w].toFixed(1), "minus baseline": (startups[w] - startups.baseline).toFixed(1) }])));
}

/** The library-alone table: 1 limit (the first of /three) and the three of /three. */
async function printLibraryCpu(url) {
  console.log("\nCPU per call of the library alone, in Node (the store's replies recorded once and replayed; median of rounds, µs):");
  const rows = {};
  for (const count of [1, 3]) {
    const { edgelimit, upstash } = await libraryCpu(url, RULES["/three"].slice(0, count));
    rows[`${count} limit${count > 1 ? "s" : ""}`] = {
      edgelimit: edgelimit.toFixed(1),
      upstash: upstash.toFixed(1),
      "edgelimit ÷ upstash": (edgelimit / upstash).toFixed(2),
    };
  }
  console.table(rows);
}

/**
 * CPU per `limit` call of each library in this process, with a `fetch` that sends the first calls
 * to the gateway and answers the rest with the last real answer: what the library itself costs
 * (building the request, parsing the reply, deciding), without the network. `limits` are bench
 * limits (@upstash/ratelimit decides each with an instance of its own, all in one `Promise.all`,
 * its client pipelining them into one request); each library's denial cache has nothing to answer
 * (all admitted).
 */
async function libraryCpu(url, limits) {
  const realFetch = globalThis.fetch;
  const replaying = () => {
    let recorded = null;
    // Enough real answers that the last one recorded is the steady state: every script loaded.
    let real = 4;
    return async (input, init) => {
      if (real > 0) {
        real--;
        const response = await realFetch(input, init);
        recorded = { status: response.status, text: await response.text() };
      }
      return new Response(recorded.text, { status: recorded.status, headers: { "content-type": "application/json" } });
    };
  };
  const ids = Object.fromEntries(limits.map((l) => [l.name, `cpu-${l.name}`]));
  const { Ratelimit } = await import("edgelimit");
  const ours = new Ratelimit({
    url,
    token: TOKEN,
    limits: limits.map((l) => ({ name: l.name, policy: edgelimitPolicy(l) })),
    fetch: replaying(),
    timeout: 5000,
  });
  const upstashModule = await import("@upstash/ratelimit");
  const { Redis } = await import("@upstash/redis");
  const upstashFetch = replaying();
  const redisClient = new Redis({ url, token: TOKEN, enableTelemetry: false, enableAutoPipelining: true });
  const theirs = limits.map(
    (l) => new upstashModule.Ratelimit({ redis: redisClient, limiter: upstashLimiter(upstashModule.Ratelimit, l), prefix: `cpu:${l.name}` }),
  );
  const callOurs = () => ours.limit(ids);
  const callTheirs = async () => {
    globalThis.fetch = upstashFetch;
    try {
      return await Promise.all(theirs.map((r, i) => r.limit(Object.values(ids)[i])));
    } finally {
      globalThis.fetch = realFetch;
    }
  };
  const per = { edgelimit: [], upstash: [] };
  // Short blocks in turns, many of them: a busy machine slows both alike.
  const calls = 1_000;
  for (let round = 0; round < 41; round++) {
    // Each goes first in every other round, so neither always runs after the other's garbage.
    const turns = [["edgelimit", callOurs], ["upstash", callTheirs]];
    for (const [name, call] of round % 2 ? turns.reverse() : turns) {
      if (round === 0) for (let i = 0; i < 200; i++) await call(); // warm the JIT and the replays
      const before = process.cpuUsage();
      for (let i = 0; i < calls; i++) await call();
      const used = process.cpuUsage(before);
      if (round > 0) per[name].push((used.user + used.system) / calls);
    }
  }
  return { edgelimit: median(per.edgelimit), upstash: median(per.upstash) };
}

/** The @upstash/ratelimit limiter for a bench limit. */
function upstashLimiter(Ratelimit, l) {
  switch (l.algorithm) {
    case "fixed":
      return Ratelimit.fixedWindow(l.limit, `${l.window} s`);
    case "sliding":
      return Ratelimit.slidingWindow(l.limit, `${l.window} s`);
    default:
      return Ratelimit.tokenBucket(l.refill, `${l.window} s`, l.limit);
  }
}

/** How much of the /partial user limit is used, from a RateLimit field naming it. */
function userCharged(field) {
  const found = field.match(/"partial-user";r=(\d+)/);
  return found ? 1_000_000 - Number(found[1]) : NaN;
}

await main();
