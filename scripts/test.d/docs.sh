#!/usr/bin/env bash
# The shell examples of README.md, docs/*.md and every crate's README (scripts/docs-check), and
# the commands in the README's table: those that can run here run — on the debug binaries, in a
# scratch directory, against a redis-server on a free port; a server of ours is started and
# stopped — and the others are checked as far as they can be (every flag in `--help`, every
# required option given, every cargo package, bench, example and feature in the workspace); the
# configurations shown must parse. Fails naming each example that errs. Run by scripts/test.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/install.sh
ensure_apt python3 python3
ensure_apt redis-server redis-server

cargo build --locked --quiet -p edgelimit-sim -p edgelimit-admin -p edgelimit-gateway
python3 scripts/docs-check README.md docs/*.md */README.md
