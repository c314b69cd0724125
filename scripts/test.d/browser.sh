#!/usr/bin/env bash
# The sim's HTML reports in a real browser: the bundled trace's policy report and a configuration
# replay's report, written by the debug `sim`, opened in Debian's Chromium by playwright-core
# (sim/tests/browser/report.mjs): every chart rendered, no console error, and at a phone's 390 px
# nothing cut off. scripts/setup.d/browser.sh installed both. Run by scripts/test.
set -euo pipefail
cd "$(dirname "$0")/../.."

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
cargo build --locked --quiet -p edgelimit-sim
target/debug/sim -q --html "$out/policies.html"
target/debug/sim replay sim/data/apache_logs.gz --config sim/data/three-rules.toml \
  --baseline sim/data/three-rules-candidate.toml -q --html "$out/config.html"
node sim/tests/browser/report.mjs "$out/policies.html" "$out/config.html"
