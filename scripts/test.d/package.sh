#!/usr/bin/env bash
# The crates as a user gets them (docs/decisions.md, "Crates"): the API docs build with no
# warning, and every publishable crate packages and builds from its package alone, its
# workspace dependencies resolved to their packages (cargo package --workspace verifies each).
# The Worker (deployed with wrangler), the npm package's wasm crate and the test kit are not
# published. Run by scripts/test.
set -euo pipefail
cd "$(dirname "$0")/../.."

echo "-- cargo doc (no warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --locked --workspace --no-deps

echo "-- cargo package --workspace (verified)"
# --allow-dirty: the tests before this one leave their outputs in the work tree.
cargo package --locked --workspace --allow-dirty \
  --exclude edgelimit-worker --exclude edgelimit-js --exclude edgelimit-testkit
