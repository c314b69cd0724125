# Shared install helpers for scripts/*: each installs only what is missing, so a machine that
# already has the tool pays nothing.

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

APT_UPDATED=${APT_UPDATED:-}
# ensure_apt COMMAND PACKAGE: installs PACKAGE with apt when COMMAND is not on the PATH.
ensure_apt() {
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "== installing $2 (apt)"
  if [ -z "$APT_UPDATED" ]; then
    as_root apt-get update -qq
    APT_UPDATED=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
}

ensure_wasm_target() {
  rustup target list --installed | grep -qx wasm32-unknown-unknown && return 0
  echo "== adding the wasm32-unknown-unknown target (rustup)"
  rustup target add wasm32-unknown-unknown
}
