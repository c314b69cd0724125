// The tarball itself: what it ships, what each export condition resolves to, and the
// declarations checked by tsc against a typed example and a file of mistakes they must refuse.
import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";

import { JS, tarball } from "./support.mjs";

test("the tarball ships the built package and nothing of its sources", () => {
  const files = execFileSync("tar", ["-tzf", tarball()], { encoding: "utf8" }).trim().split("\n").sort();
  const expected = ["README.md", "package.json"];
  for (const module of ["core", "errors", "exchange", "hono", "index", "node", "workerd"]) {
    expected.push(`dist/${module}.js`, `dist/${module}.d.ts`);
  }
  expected.push("dist/core_bg.wasm", "dist/core_bg.wasm.d.ts");
  assert.deepEqual(files, expected.map((f) => `package/${f}`).sort());
  const manifest = JSON.parse(execFileSync("tar", ["-xzOf", tarball(), "package/package.json"], { encoding: "utf8" }));
  assert.equal(manifest.dependencies, undefined, "no runtime dependency");
  assert.equal(manifest.type, "module");
});

test("under Node the package resolves to its node entry, and edgelimit/hono loads", async () => {
  const resolved = import.meta.resolve("edgelimit");
  assert.match(resolved, /\/node_modules\/edgelimit\/dist\/node\.js$/);
  const hono = await import("edgelimit/hono");
  assert.equal(typeof hono.rateLimiter, "function");
  const pkg = await import("edgelimit");
  assert.deepEqual(Object.keys(pkg).sort(), ["EdgelimitError", "Ratelimit"]);
});

test("tsc accepts the typed example and refuses every mistake in test/types/misuse.ts", async () => {
  const tsc = join(JS, "node_modules/.bin/tsc");
  const run = await promisify(execFile)(tsc, ["-p", join(JS, "test/types/tsconfig.json")], { encoding: "utf8" }).then(
    (r) => ({ code: 0, out: r.stdout + r.stderr }),
    (e) => ({ code: e.code, out: `${e.stdout}${e.stderr}` }),
  );
  assert.equal(run.code, 0, run.out);
});
