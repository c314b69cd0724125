#!/usr/bin/env bash
# Fuzzing (docs/decisions.md, "Fuzzing"): builds the cargo-fuzz targets in fuzz/, replays every
# corpus file through every target as a regression test, then fuzzes each target for a short,
# bounded time (FUZZ_SECONDS, default 20; 0 skips it), one target and one job at a time.
# New inputs go to a temporary directory, never into the checked-in corpus (checked at the end).
# Run by scripts/test, after scripts/setup.d/fuzz-tools.sh installed cargo-fuzz.
set -euo pipefail
cd "$(dirname "$0")/../.."

FUZZ_SECONDS=${FUZZ_SECONDS:-20}
# Stable Rust: the targets are built without a sanitizer (the code is safe Rust; what we hunt
# is panics, overflows and broken invariants), which needs no nightly flag.
FUZZ_BUILD=(--sanitizer none)
# The instrumented build outlives the checkout (CI clones afresh): only edgelimit's own crates
# rebuild when nothing else changed.
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/edgelimit/fuzz-target}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The corpus's files, names and sizes: the run must leave them as it found them.
corpus_listing() { find fuzz/corpus -type f -printf '%p %s\n' | sort; }
corpus_before=$(corpus_listing)

echo "-- cargo fmt, lockfile (fuzz/)"
cargo fmt --manifest-path fuzz/Cargo.toml --check
# cargo-fuzz has no --locked: refuse a fuzz/Cargo.lock that would change, as CI does elsewhere.
cargo metadata --locked --format-version 1 --manifest-path fuzz/Cargo.toml >/dev/null || {
  echo "fuzz/Cargo.lock is out of date (a dependency of edgelimit's crates changed): run" >&2
  echo "  cargo metadata --format-version 1 --manifest-path fuzz/Cargo.toml >/dev/null" >&2
  echo "and commit fuzz/Cargo.lock" >&2
  exit 1
}
echo "-- building the fuzz targets (instrumented, into $CARGO_TARGET_DIR)"
cargo fuzz build --fuzz-dir fuzz "${FUZZ_BUILD[@]}" >"$work/build.log" 2>&1 \
  || { cat "$work/build.log"; exit 1; }
targets=$(cargo fuzz list --fuzz-dir fuzz)
bin_dir="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release"
corpora=()
for t in $targets; do
  [ -x "$bin_dir/$t" ] || { echo "fuzz target $t was not built" >&2; exit 1; }
  [ -d "fuzz/corpus/$t" ] && corpora+=("fuzz/corpus/$t")
done

echo "-- replaying every corpus file through every target"
for t in $targets; do
  # -runs=0: run each input once and stop. Any panic or broken invariant fails the hook.
  "$bin_dir/$t" -runs=0 -timeout=10 -artifact_prefix="$work/" "${corpora[@]}" \
    >"$work/$t.replay.log" 2>&1 || { cat "$work/$t.replay.log"; exit 1; }
  # libFuzzer prints "#<inputs>\tINITED …" once the corpus has run; absent, say 0 (never fail here).
  replayed=$({ grep -o '^#[0-9]*[[:space:]]*INITED' "$work/$t.replay.log" || true; } | grep -o '[0-9]*' | head -1)
  echo "$t: ${replayed:-0} inputs replayed, no crash"
done

if [ "$FUZZ_SECONDS" -gt 0 ]; then
  echo "-- fuzzing each target for ${FUZZ_SECONDS}s"
  for t in $targets; do
    mkdir -p "$work/new/$t"
    "$bin_dir/$t" "$work/new/$t" "fuzz/corpus/$t" -max_total_time="$FUZZ_SECONDS" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/" \
      >"$work/$t.fuzz.log" 2>&1 || { tail -40 "$work/$t.fuzz.log"; exit 1; }
    runs=$({ grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/$t.fuzz.log" || true; } | grep -o '[0-9]*$')
    runs=${runs:-0}
    echo "$t: $runs executions in ${FUZZ_SECONDS}s ($((runs / FUZZ_SECONDS))/s), no crash"
  done
fi

[ "$(corpus_listing)" = "$corpus_before" ] || {
  echo "the fuzz run changed fuzz/corpus; new inputs belong in a temporary directory:" >&2
  diff <(echo "$corpus_before") <(corpus_listing) >&2 || true
  exit 1
}
