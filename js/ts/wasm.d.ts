/** A `.wasm` import, as wrangler (esbuild's CompiledWasm rule) gives it: a compiled module. */
declare module "*.wasm" {
  const module: WebAssembly.Module;
  export default module;
}
