/**
 * The package's entry under Node (the `node` export condition): the WebAssembly core is read
 * from beside this file and compiled before anything is exported.
 *
 * @packageDocumentation
 */

import { readFileSync } from "node:fs";
import { initSync } from "./core.js";

initSync({ module: readFileSync(new URL("./core_bg.wasm", import.meta.url)) });

export * from "./index.js";
