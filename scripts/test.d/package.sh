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
# cargo verifies each crate against its packaged dependencies through a local registry, which it
# unpacks under $CARGO_HOME/registry/src/-<hash of the registry's path>/ and never unpacks again
# while that folder exists: a run from the same path would build the crates a previous run
# packaged, not this one's. Those folders hold only our crates (a registry with no name is
# cargo's overlay), so they go before and after.
overlay_sources() {
  find "${CARGO_HOME:-$HOME/.cargo}/registry/src" -mindepth 2 -maxdepth 2 -type d \
    -path '*/registry/src/-*/edgelimit*' 2>/dev/null
}
clean() {
  rm -rf "$verify_target"
  overlay_sources | xargs -r rm -rf
}
clean
trap clean EXIT
# --allow-dirty: the tests before this one leave their outputs in the work tree.
CARGO_TARGET_DIR="$verify_target" CARGO_PROFILE_DEV_DEBUG=0 \
  cargo package --locked --workspace --allow-dirty \
  --exclude edgelimit-worker --exclude edgelimit-js --exclude edgelimit-testkit
echo "-- verification used $(du -sh "$verify_target" | cut -f1)"
