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
# Cargo extracts each packaged crate of the verification's local registry once, by name and
# version, and reuses the extraction on the next run: a rerun after a change would verify
# against the previous run's sources. Our crates' extractions from local registries (never
# crates.io's, whose directory names start with the index's host) are removed first.
# Likewise their builds in target/package, which cargo takes for an immutable registry's.
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/edgelimit* target/package
# --allow-dirty: the tests before this one leave their outputs in the work tree.
cargo package --locked --workspace --allow-dirty \
  --exclude edgelimit-worker --exclude edgelimit-js --exclude edgelimit-testkit
