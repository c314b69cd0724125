#!/usr/bin/env bash
# Dependency checks. `cargo deny` (advisories, licences, duplicate versions, sources; the policy
# and each exception's reason in deny.toml) over the workspace and the fuzz workspace, offline,
# against the RustSec advisory database snapshot beside the checkout (../shared/advisory-db,
# described in ../shared/advisory-db.txt): never fetched, since these machines cannot. Then
# `npm audit` for the npm package's lockfiles (js/, and the root's tools), skipped with a note
# when the registry does not answer audits. Run by scripts/test, after
# scripts/setup.d/cargo-deny.sh installed cargo-deny.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

snapshot=${EDGELIMIT_ADVISORY_DB:-../shared/advisory-db}
[ -d "$snapshot/crates" ] || {
  echo "no RustSec advisory database at $snapshot (set EDGELIMIT_ADVISORY_DB to one)" >&2
  exit 1
}
dbs=$(mktemp -d)
trap 'rm -rf "$dbs"' EXIT
# cargo-deny opens the database as a git repository, at <db-path>/<name from its URL>: this is
# the name it gives the default (RustSec's) URL. The commit carries the snapshot's date, so the
# database's age is the snapshot's.
db="$dbs/advisory-db-3157b0e258782691"
cp -r "$snapshot" "$db"
snapshot_date=$(sed -n 's/.*(\([0-9-]*\)).*/\1/p' "$snapshot/../advisory-db.txt" 2>/dev/null | head -1)
snapshot_date=${snapshot_date:-$(date -u +%F)}
(
  cd "$db"
  rm -rf .git
  git init -q
  git add -A
  GIT_AUTHOR_DATE="${snapshot_date}T00:00:00Z" GIT_COMMITTER_DATE="${snapshot_date}T00:00:00Z" \
    git -c user.name=edgelimit -c user.email=edgelimit@localhost -c commit.gpgsign=false \
    commit -q -m "RustSec advisory database snapshot"
)
export EDGELIMIT_ADVISORY_DBS="$dbs"
echo "-- RustSec advisory database: snapshot of $snapshot_date ($(find "$db/crates" -name '*.md' | wc -l) crate advisories)"

# --offline: no advisory fetch, and no registry access. So every crate either workspace locks is
# fetched first, for every platform: `cargo test` fetches only this machine's (a fresh
# CARGO_HOME lacks, e.g., core-foundation), and cargo-deny's `cargo metadata` needs them all.
for manifest in Cargo.toml fuzz/Cargo.toml; do
  cargo metadata --locked --format-version 1 --manifest-path "$manifest" >/dev/null
done
for manifest in Cargo.toml fuzz/Cargo.toml; do
  echo "-- cargo deny ($manifest)"
  cargo deny --offline --locked --manifest-path "$manifest" --workspace --color never \
    check --show-stats 2>"$dbs/deny.log" || { cat "$dbs/deny.log" >&2; exit 1; }
  # The summary (one line per check) and any warning; the per-crate notes stay out.
  grep -E '^ *(advisories|bans|licenses|sources) |^warning' "$dbs/deny.log" || true
done

# npm audit: the registry's audit endpoint may not answer here (a mirror that serves packages
# only); then the audit is skipped with a note, never failed. Found vulnerabilities fail it.
for dir in js .; do
  echo "-- npm audit ($dir/package-lock.json)"
  audit=$( (cd "$dir" && npm audit --json 2>/dev/null) || true)
  verdict=$(AUDIT="$audit" node -e '
    let report;
    try { report = JSON.parse(process.env.AUDIT || ""); } catch { report = null; }
    if (!report || report.error || !report.metadata) {
      const why = report?.error?.summary || report?.message || "no answer";
      console.log(`skipped: the registry did not answer the audit (${why.trim() || "an error"})`);
    } else {
      const v = report.metadata.vulnerabilities;
      const found = Object.entries(v).filter(([k, n]) => k !== "total" && n > 0);
      console.log(found.length === 0
        ? `ok: no known vulnerability in ${report.metadata.dependencies?.total ?? "?"} packages`
        : `FAILED: ${found.map(([k, n]) => `${n} ${k}`).join(", ")}`);
    }')
  echo "$verdict"
  case "$verdict" in FAILED*) (cd "$dir" && npm audit) || true; exit 1 ;; esac
done
