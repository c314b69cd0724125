# Installs the JS package's development packages (TypeScript, the Hono and Node types, the official
# Upstash clients its bench compares against; pinned by js/package-lock.json), only when missing or
# not what package.json asks. Needs node and npm (any node these packages accept: the tests run
# under the root package.json's node 22). Sourced by scripts/test and scripts/build-js.
ensure_apt node nodejs
ensure_apt npm npm
if [ ! -x js/node_modules/.bin/tsc ] || ! (cd js && npm ls --depth=0 >/dev/null 2>&1); then
  echo "== installing the JS package's development packages (npm ci in js/)"
  (cd js && npm ci --no-audit --no-fund --loglevel=error)
fi
