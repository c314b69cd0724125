# Installs what the fuzz hook (scripts/test.d/fuzz.sh) and scripts/fuzz-explore need, each only
# when missing or at the wrong version: cargo-fuzz (cargo, pinned) and a C++ compiler for
# libFuzzer (apt). Sourced by scripts/test and scripts/fuzz-explore.
CARGO_FUZZ_VERSION=0.13.2

ensure_apt c++ g++
if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
  echo "== installing cargo-fuzz $CARGO_FUZZ_VERSION (cargo)"
  # A debug build: it only drives cargo (docs/decisions.md, "Tools installed as debug builds").
  cargo install "cargo-fuzz@$CARGO_FUZZ_VERSION" --locked --debug
fi
