#!/usr/bin/env bash
# The shell examples of README.md and docs/*.md (scripts/docs-check): those that can run here
# run — on the debug binaries, in a scratch directory, against a redis-server on a free port — and
# the others are checked as far as they can be (every flag in `--help`, every cargo package, bench
# and feature in the workspace); the configurations shown must parse. Fails naming each example
# that errs. Run by scripts/test.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/install.sh
ensure_apt python3 python3

cargo build --locked --quiet -p edgelimit-sim -p edgelimit-admin -p edgelimit-gateway
python3 scripts/docs-check README.md docs/*.md
