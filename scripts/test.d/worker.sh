#!/usr/bin/env bash
# The Worker's tests beyond `cargo test`: build it as deployed, check its size, run the
# request → headers path as wasm32 under node, then the end-to-end suite (wrangler dev + gateway +
# redis-server + an origin, all on free loopback ports). Run by scripts/test, after the setup
# hooks (scripts/setup.d/worker-toolchain.sh) put the toolchain on the PATH.
set -euo pipefail
cd "$(dirname "$0")/../.."

echo "-- building the Worker (scripts/build-worker)"
bash scripts/build-worker
gzipped=$(gzip -9 -c worker/build/index_bg.wasm | wc -c)
echo "-- Worker wasm gzipped: $gzipped bytes (Cloudflare's free plan allows 3 MB)"

echo "-- wasm32 tests under node (wasm-bindgen-test-runner)"
CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
  cargo test --locked -p edgelimit-worker --target wasm32-unknown-unknown

echo "-- the README's example Worker compiles for wasm32"
cargo build --locked -p edgelimit-worker --target wasm32-unknown-unknown --example own_worker

echo "-- end to end under wrangler dev"
cargo test --locked -p edgelimit-worker --test e2e -- --ignored --test-threads=2
