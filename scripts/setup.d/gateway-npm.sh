# Installs the official Upstash JS clients the gateway tests drive (pinned by the lockfile),
# only when missing. Needs node and npm (apt when missing).
ensure_apt node nodejs
ensure_apt npm npm
if [ ! -d gateway/tests/js/node_modules/@upstash/redis ]; then
  echo "== installing the Upstash JS clients (npm ci)"
  (cd gateway/tests/js && npm ci --no-audit --no-fund --loglevel=error)
fi
