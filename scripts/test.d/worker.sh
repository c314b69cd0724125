#!/usr/bin/env bash
# The Worker's tests beyond `cargo test`: build it as deployed, check its size, run the
# request → headers path as wasm32 under node, then the end-to-end suites (wrangler dev + an
# origin, state in redis-server behind the gateway or in the Worker's own Durable Objects, all on
# free loopback ports), the objects' own suite (e2e_objects) and the replay of its log lines by
# `sim` (e2e_replay). Run by scripts/test, after the setup hooks
# (scripts/setup.d/worker-toolchain.sh) put the toolchain on the PATH.
set -euo pipefail
cd "$(dirname "$0")/../.."

echo "-- building the Worker as \`wrangler deploy\` would (root wrangler.toml, --dry-run)"
rm -rf .wrangler/dryrun && mkdir -p .wrangler
wrangler deploy --dry-run --outdir .wrangler/dryrun 2>&1 | tee .wrangler/dryrun.log | grep -E "worker:|Total Upload|rror" || true
grep -q "Total Upload" .wrangler/dryrun.log || { cat .wrangler/dryrun.log; exit 1; }
gzipped=$(gzip -9 -c worker/build/index_bg.wasm | wc -c)
# The budget is ours, not Cloudflare's (3 MiB on the free plan): cold starts pay for every byte,
# and a dependency change that silently adds ICU tables (see docs/decisions.md, "Size") must fail.
budget=$((550 * 1000))
if [ "$gzipped" -gt "$budget" ]; then
  echo "the Worker's wasm is $gzipped bytes gzipped: over its $budget-byte budget (docs/decisions.md, Size)" >&2
  exit 1
fi
echo "-- Worker size: $gzipped bytes of gzipped wasm (budget $budget; free plan limit 3 MiB)"

echo "-- wasm32 tests under node (wasm-bindgen-test-runner)"
CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
  cargo test --locked -p edgelimit-worker --target wasm32-unknown-unknown

echo "-- the example Worker of docs/library.md compiles for wasm32"
cargo build --locked -p edgelimit-worker --target wasm32-unknown-unknown --example own_worker

echo "-- the test kit: many wrangler dev started at once, each on its own port"
cargo test --locked -p edgelimit-testkit --test concurrent_start -- --ignored --nocapture

echo "-- end to end under wrangler dev"
cargo test --locked -p edgelimit-worker --test e2e -- --ignored --test-threads=2

echo "-- the adversarial suite: what a client sends never lifts a limit"
cargo test --locked -p edgelimit-worker --test e2e_adversarial -- --ignored --test-threads=2 --nocapture

echo "-- settling after the response (leases, settled costs, retries)"
cargo test --locked -p edgelimit-worker --test e2e_settle -- --ignored --test-threads=2

echo "-- the Worker's own routes under attack: the admin token before the body, the body bounded, guesses limited, metrics behind a token"
cargo test --locked -p edgelimit-worker --test e2e_routes -- --ignored --test-threads=2

echo "-- over the limit: soft, delayed, blocked, staged, counted by the response's status"
cargo test --locked -p edgelimit-worker --test e2e_exceed -- --ignored --test-threads=2

echo "-- live control: tiers, deny and allow lists"
cargo test --locked -p edgelimit-worker --test e2e_control -- --ignored --test-threads=2

echo "-- global limits: two regions and a home, never over the limit"
cargo test --locked -p edgelimit-worker --test e2e_global -- --ignored --test-threads=1 --nocapture
cargo test --locked -p edgelimit-worker --test e2e_global_latency -- --ignored --test-threads=1 --nocapture

echo "-- the Durable Object store's own: the differential, the admin route, placement, a restart, fail modes"
cargo test --locked -p edgelimit-worker --test e2e_objects -- --ignored --test-threads=2 --nocapture

echo "-- edgelimit-admin --worker: every command through the Worker's admin route"
cargo test --locked -p edgelimit-admin --test worker -- --ignored --test-threads=2

echo "-- sim replay predicts the Worker: its log lines replayed, request by request"
cargo test --locked -p edgelimit-worker --test e2e_replay -- --ignored --nocapture
