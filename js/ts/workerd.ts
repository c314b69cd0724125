/**
 * The package's entry in Cloudflare Workers and bundlers that import `.wasm` files as compiled
 * modules (the `workerd`, `worker` and `default` export conditions): Workers refuse to compile
 * WebAssembly from bytes at run time, so wrangler (esbuild) uploads the core as a module and this
 * instantiates it.
 *
 * @packageDocumentation
 */

import wasm from "./core_bg.wasm";
import { initSync } from "./core.js";

initSync({ module: wasm });

export * from "./index.js";
