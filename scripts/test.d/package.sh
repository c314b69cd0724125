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
# Each crate is verified in a build of its own (its features resolved alone), so the
# verification builds the dependency tree once per crate. It gets a target directory of its own,
# without debug info, removed afterwards: the builds are only compiled, never run or debugged,
# and a rerun must not reuse an earlier run's builds of the packaged crates.
# Inside target/, on the disk that holds the builds (a temporary directory may be a small tmpfs).
verify_target="$PWD/target/package-verify"
rm -rf "$verify_target"
trap 'rm -rf "$verify_target"' EXIT
# --allow-dirty: the tests before this one leave their outputs in the work tree.
CARGO_TARGET_DIR="$verify_target" CARGO_PROFILE_DEV_DEBUG=0 \
  cargo package --locked --workspace --allow-dirty \
  --exclude edgelimit-worker --exclude edgelimit-js --exclude edgelimit-testkit
echo "-- verification used $(du -sh "$verify_target" | cut -f1)"
