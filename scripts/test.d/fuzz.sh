#!/usr/bin/env bash
# The fuzz corpus as a test (docs/decisions.md, "Fuzzing"): builds the cargo-fuzz targets in
# fuzz/ and replays every corpus file through every target, once each; any panic or broken
# invariant fails. Seeking new inputs is not a test of the checkout but a search of unbounded
# length: scripts/fuzz-explore does it, after scripts/test, in .ci/run. Run by scripts/test,
# after scripts/setup.d/fuzz-tools.sh installed cargo-fuzz.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/fuzz.sh

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
corpus_before=$(fuzz_corpus_listing)

echo "-- cargo fmt, lockfile (fuzz/)"
cargo fmt --manifest-path fuzz/Cargo.toml --check
# cargo-fuzz has no --locked: refuse a fuzz/Cargo.lock that would change, as CI does elsewhere.
cargo metadata --locked --format-version 1 --manifest-path fuzz/Cargo.toml >/dev/null || {
  echo "fuzz/Cargo.lock is out of date (a dependency of edgelimit's crates changed): run" >&2
  echo "  cargo metadata --format-version 1 --manifest-path fuzz/Cargo.toml >/dev/null" >&2
  echo "and commit fuzz/Cargo.lock" >&2
  exit 1
}
fuzz_build "$work/build.log"

echo "-- replaying every corpus file through every target"
for t in $FUZZ_TARGETS; do
  # -runs=0: run each input once and stop. Any panic or broken invariant fails the hook.
  "$FUZZ_BIN_DIR/$t" -runs=0 -timeout=10 -artifact_prefix="$work/" "${FUZZ_CORPORA[@]}" \
    >"$work/$t.replay.log" 2>&1 || { cat "$work/$t.replay.log"; exit 1; }
  # libFuzzer prints "#<inputs>\tINITED …" once the corpus has run; absent, say 0 (never fail here).
  replayed=$({ grep -o '^#[0-9]*[[:space:]]*INITED' "$work/$t.replay.log" || true; } | grep -o '[0-9]*' | head -1)
  echo "$t: ${replayed:-0} inputs replayed, no crash"
done

fuzz_corpus_unchanged "$corpus_before"
