#!/usr/bin/env bash
# The JS package's tests beyond `cargo test` (js/): build the package (scripts/build-js) and the
# Worker it shares quotas with (scripts/build-worker; scripts/test.d/worker.sh's own build then
# only relinks), install the packed tarball where the tests import it, then Node's test runner —
# the API against the gateway and a real redis-server, the example TypeScript Worker with the Hono
# middleware under wrangler dev, the tarball's files and its declarations under tsc — and the
# interop test (the package, the Worker, RespStore and RestStore on one quota). Every server on a
# free loopback port. Run by scripts/test, after the setup hooks put node 22 and wrangler on the
# PATH.
set -euo pipefail
cd "$(dirname "$0")/../.."

echo "-- building the package (scripts/build-js) and the Worker (scripts/build-worker)"
bash scripts/build-js
bash scripts/build-worker
cargo build --locked -p edgelimit-gateway
node js/test/install.mjs

echo "-- node --test: the API, the example Worker under wrangler dev, the tarball and its types"
(cd js && node --test --test-concurrency=2 --test-reporter=spec "test/*.test.mjs")

echo "-- one quota: the package, the Worker, RespStore and RestStore"
cargo test --locked -p edgelimit-js --test interop -- --ignored
