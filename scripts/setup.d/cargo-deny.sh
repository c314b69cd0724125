# Installs cargo-deny (pinned) for the dependency checks (scripts/test.d/deny.sh), only when
# missing or at another version. Sourced by scripts/test.
CARGO_DENY_VERSION=0.20.2

export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
if [ "$(cargo deny --version 2>/dev/null)" != "cargo-deny $CARGO_DENY_VERSION" ]; then
  echo "== installing cargo-deny $CARGO_DENY_VERSION (cargo)"
  # A debug build: it only reads Cargo.lock and the advisory database (docs/decisions.md, "Tools
  # installed as debug builds").
  cargo install "cargo-deny@$CARGO_DENY_VERSION" --locked --debug
fi
