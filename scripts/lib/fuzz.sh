# What the fuzz scripts share (docs/decisions.md, "Fuzzing"): the instrumented build of the
# cargo-fuzz targets in fuzz/ and where it lives, the targets and their corpora, and a listing of
# the checked-in corpus a run must leave as it found it. Sourced by scripts/test.d/fuzz.sh (the
# corpus replayed, in scripts/test) and scripts/fuzz-explore (new inputs sought, in .ci/run);
# each runs from the checkout's root with cargo-fuzz installed (scripts/setup.d/fuzz-tools.sh).

# Stable Rust: the targets are built without a sanitizer (the code is safe Rust; what we hunt
# is panics, overflows and broken invariants), which needs no nightly flag.
FUZZ_BUILD=(--sanitizer none)
# The instrumented build outlives the checkout (CI clones afresh): only edgelimit's own crates
# rebuild when nothing else changed, and the exploration after scripts/test reuses its build.
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/edgelimit/fuzz-target}
FUZZ_BIN_DIR="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release"

# The corpus's files, names and sizes: a run must leave them as it found them.
fuzz_corpus_listing() { find fuzz/corpus -type f -printf '%p %s\n' | sort; }

# Builds every target (its log in $1), then sets FUZZ_TARGETS and FUZZ_CORPORA (the corpus
# directories that exist).
fuzz_build() {
  echo "-- building the fuzz targets (instrumented, into $CARGO_TARGET_DIR)"
  cargo fuzz build --fuzz-dir fuzz "${FUZZ_BUILD[@]}" >"$1" 2>&1 || { cat "$1"; return 1; }
  FUZZ_TARGETS=$(cargo fuzz list --fuzz-dir fuzz)
  FUZZ_CORPORA=()
  local t
  for t in $FUZZ_TARGETS; do
    [ -x "$FUZZ_BIN_DIR/$t" ] || { echo "fuzz target $t was not built" >&2; return 1; }
    [ -d "fuzz/corpus/$t" ] && FUZZ_CORPORA+=("fuzz/corpus/$t")
  done
}

# Fails, showing the change, when the corpus differs from the listing in $1.
fuzz_corpus_unchanged() {
  [ "$(fuzz_corpus_listing)" = "$1" ] || {
    echo "the fuzz run changed fuzz/corpus; new inputs belong in a temporary directory:" >&2
    diff <(echo "$1") <(fuzz_corpus_listing) >&2 || true
    return 1
  }
}
