# Installs the Worker toolchain, each piece only when missing or at the wrong version:
# worker-build (the version of the `worker` crate worker/Cargo.toml pins) and wasm-bindgen-cli (it
# must equal the pinned `wasm-bindgen`) from cargo; wrangler, node 22 (wrangler 4.164 needs Node
# 22.12 or later) and binaryen's wasm-opt (Debian's is too old for this wasm) from npm, pinned by
# package-lock.json. Then exports what worker-build and wrangler need to run offline. Sourced by
# scripts/test, scripts/build-worker, scripts/build-js and scripts/worker-dev.
WORKER_BUILD_VERSION=0.8.7
WASM_BINDGEN_VERSION=0.2.130

ensure_apt node nodejs
ensure_apt npm npm
# npm's node 22 comes first: wrangler 4.164 refuses Debian's node 20; then the tools cargo
# installs (into $CARGO_HOME/bin), so a run finds what an earlier one installed.
export PATH="$PWD/node_modules/.bin:${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
# Debug builds of the tools: they install in less than half the time (docs/decisions.md,
# "Tools installed as debug builds"), and the Worker builds as fast with them.
if [ "$(worker-build --version 2>/dev/null)" != "$WORKER_BUILD_VERSION" ]; then
  echo "== installing worker-build $WORKER_BUILD_VERSION (cargo)"
  cargo install "worker-build@$WORKER_BUILD_VERSION" --locked --debug
fi
if ! wasm-bindgen --version 2>/dev/null | grep -qx "wasm-bindgen $WASM_BINDGEN_VERSION"; then
  echo "== installing wasm-bindgen-cli $WASM_BINDGEN_VERSION (cargo)"
  # Not --locked: its lockfile names a crate version the registry no longer serves.
  cargo install "wasm-bindgen-cli@$WASM_BINDGEN_VERSION" --debug
fi
if [ "$(wrangler --version 2>/dev/null | tail -1)" != "4.164.0" ] || [ ! -x node_modules/.bin/wasm-opt ]; then
  echo "== installing wrangler, node 22 and wasm-opt (npm, pinned by package-lock.json)"
  # `npm install`, not `npm ci`: npm 11 leaves other platforms' workerd out of the lock file
  # and `npm ci` then refuses it. With the lock present, `npm install` installs exactly it.
  npm install --no-audit --no-fund --loglevel=error
fi
# worker-build would download these from GitHub; use the pinned local ones.
export WASM_BINDGEN_BIN="$(command -v wasm-bindgen)"
export WASM_OPT_BIN="$PWD/node_modules/.bin/wasm-opt"
export ESBUILD_BIN="$PWD/node_modules/.bin/esbuild"
# wrangler: no telemetry, no network lookups, config kept inside the checkout.
export WRANGLER_SEND_METRICS=false WRANGLER_SEND_ERROR_REPORTS=false
export CLOUDFLARE_CF_FETCH_ENABLED=false DO_NOT_TRACK=1
export XDG_CONFIG_HOME="$PWD/.xdg-config"
