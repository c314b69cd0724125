// Node side of `cargo bench -p edgelimit-worker --bench wasm_cpu` (see wasm_cpu.rs, which builds
// the probe and runs this with the repo's pinned node). Prints one JSON object per line.
//
//   node wasm_cpu.mjs <probe.js> <worker index_bg.wasm> <iterations>      the whole bench
//   node wasm_cpu.mjs --cold <worker index_bg.wasm>                        one cold start
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

// Imports for instantiating the Worker's wasm outside workerd: functions that do nothing (none
// is called while instantiating) and tags of the declared type.
function stubs(module) {
  const imports = {};
  for (const { module: name, name: field, kind } of WebAssembly.Module.imports(module)) {
    imports[name] ??= {};
    imports[name][field] =
      kind === "function" ? () => undefined
      : kind === "tag" ? new WebAssembly.Tag({ parameters: ["externref"] })
      : kind === "global" ? new WebAssembly.Global({ value: "i32", mutable: false }, 0)
      : undefined;
  }
  return imports;
}

// One cold start in this fresh process: V8 caches compiled modules by their bytes, so a second
// compile in the same process would measure the cache.
async function cold(wasmPath) {
  const bytes = readFileSync(wasmPath);
  const t0 = performance.now();
  const module = await WebAssembly.compile(bytes);
  const t1 = performance.now();
  new WebAssembly.Instance(module, stubs(module));
  const t2 = performance.now();
  console.log(JSON.stringify({ compile_ms: t1 - t0, instantiate_ms: t2 - t1, bytes: bytes.length }));
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

function main(probePath, wasmPath, iterations) {
  console.log(JSON.stringify({ node: process.version }));
  const probe = createRequire(import.meta.url)(probePath);
  const stages = probe.stages().split("\n");
  const scenarios = [
    ["1 limit, admitted", 1, false, true],
    ["3 limits, admitted", 3, false, true],
    ["3 limits, denied by the store", 3, true, false],
    ["3 limits, denied from the denial cache", 3, true, true],
  ];
  for (const [scenario, limits, denied, cache] of scenarios) {
    const error = probe.setup(limits, denied, cache);
    if (error) throw new Error(`${scenario}: ${error}`);
    stages.forEach((stage, index) => {
      probe.run(index, Math.max(1, Math.floor(iterations / 10)));
      // The best of 5 rounds: on a shared machine the other processes only ever add time.
      const round = Math.max(1, Math.floor(iterations / 5));
      let ns = Infinity;
      const a0 = probe.allocations();
      const b0 = probe.allocated_bytes();
      for (let r = 0; r < 5; r++) {
        const t0 = process.hrtime.bigint();
        probe.run(index, round);
        ns = Math.min(ns, Number(process.hrtime.bigint() - t0) / round);
      }
      const allocations = (probe.allocations() - a0) / (5 * round);
      const bytes = (probe.allocated_bytes() - b0) / (5 * round);
      console.log(JSON.stringify({ scenario, stage, index, ns, allocations, bytes }));
    });
  }
  const runs = [];
  const self = fileURLToPath(import.meta.url);
  for (let i = 0; i < 15; i++) {
    const out = execFileSync(process.execPath, [self, "--cold", wasmPath], { encoding: "utf8" });
    runs.push(JSON.parse(out));
  }
  const totals = runs.map((r) => r.compile_ms + r.instantiate_ms);
  console.log(JSON.stringify({
    cold: {
      runs: runs.length,
      bytes: runs[0].bytes,
      compile_ms: median(runs.map((r) => r.compile_ms)),
      instantiate_ms: median(runs.map((r) => r.instantiate_ms)),
      total_ms: median(totals),
      total_min_ms: Math.min(...totals),
      total_max_ms: Math.max(...totals),
    },
  }));
}

const args = process.argv.slice(2);
if (args[0] === "--cold") {
  await cold(args[1]);
} else {
  main(args[0], args[1], Number(args[2] ?? 20000));
}
