# Installs what the HTML report's browser test drives (scripts/test.d/browser.sh,
# scripts/sim-report-png): Debian's Chromium, and playwright-core (pinned by
# sim/tests/browser/package-lock.json) to drive it. playwright-core never downloads a browser of
# its own: the test launches /usr/bin/chromium. Each only when missing.
ensure_apt chromium chromium
ensure_apt node nodejs
ensure_apt npm npm
if [ ! -d sim/tests/browser/node_modules/playwright-core ] \
  || ! (cd sim/tests/browser && npm ls --depth=0 >/dev/null 2>&1); then
  echo "== installing playwright-core (npm ci in sim/tests/browser)"
  (cd sim/tests/browser && npm ci --no-audit --no-fund --loglevel=error)
fi
