// Installs the packed tarball (target/npm/edgelimit-*.tgz) where the tests import it: beside the
// Node tests (test/node_modules) and the example Worker (examples/worker/node_modules), so both
// use the package exactly as npm ships it, through its export conditions. Run before `node --test`
// (scripts/test.d/js.sh does).
import { join } from "node:path";
import { JS, installTarball, tarball } from "./support.mjs";

for (const project of [join(JS, "test"), join(JS, "examples/worker")]) installTarball(project);
console.log(`installed ${tarball()}`);
