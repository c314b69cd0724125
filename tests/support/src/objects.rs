//! What the Worker's Durable Objects hold under `wrangler dev`: every entry of every
//! `EdgeLimitState` object, read from the SQLite files `--persist-to` keeps (table `_cf_KV`, one
//! row per entry, its value a library [`Saved`] entry's kept text — [`Saved::to_stored`] — as V8
//! serialised it). Node 22's own `node:sqlite` and `v8.deserialize` read them, so the tests need
//! no SQLite crate; reading is safe while the Worker runs (the files are in WAL mode, and an
//! object's writes are committed before it answers), waiting out a write under way.
//!
//! Each entry is named as the Redis key the same entry has in Redis ([`ObjectEntry::redis_key`]):
//! a test asking the store "which keys match `*req-1*commit*`" asks both kinds of store alike.

use std::path::Path;
use std::process::Command;

use edgelimit::store::key::{block_key, control_key, lease_key, list_key, request_key, state_key};
use edgelimit::store::Saved;
use edgelimit::Identifier;

use crate::dir::repo_root;

/// The class whose objects hold the Worker's state (the root wrangler.toml binds it).
pub const STATE_CLASS: &str = "EdgeLimitState";

/// One stored entry of one object.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectEntry {
    /// The object's name (`edgelimit-<n>`).
    pub object: String,
    /// The entry's key in the object's storage.
    pub key: String,
    /// The entry.
    pub saved: Saved,
}

impl ObjectEntry {
    /// The key the same entry has in Redis under `namespace` (`edgelimit::store::key`).
    pub fn redis_key(&self, namespace: &str) -> String {
        let id = |bytes: &[u8]| Identifier::from(bytes.to_vec());
        match &self.saved {
            Saved::State {
                limit,
                identifier,
                state,
                ..
            } => state_key(namespace, limit, state.algorithm(), &id(identifier)),
            Saved::Request {
                limit,
                identifier,
                request_id,
                ..
            } => request_key(namespace, limit, &id(identifier), &id(request_id)),
            Saved::Assignments {
                limit, identifier, ..
            } => control_key(namespace, limit, &id(identifier)),
            Saved::CapacityLease {
                limit, identifier, ..
            } => lease_key(namespace, limit, &id(identifier)),
            Saved::Block {
                limit, identifier, ..
            } => block_key(namespace, limit, &id(identifier)),
            Saved::List { name, .. } => list_key(namespace, name),
        }
    }
}

/// Reads every object's entries under `persist_to` (what `wrangler dev --persist-to` was given),
/// in object then key order. None before an object has been created. Panics when node cannot
/// read them (the toolchain is missing, or the files are not what this expects).
pub fn entries(persist_to: &Path) -> Vec<ObjectEntry> {
    let mut out = Vec::new();
    for dir in class_dirs(persist_to) {
        out.extend(read_class_dir(&dir));
    }
    out.sort_by(|a, b| (&a.object, &a.key).cmp(&(&b.object, &b.key)));
    out
}

/// The script node runs over one class's directory: one JSON line per entry.
const READER: &str = r#"
import { DatabaseSync } from "node:sqlite";
import { readdirSync } from "node:fs";
import { deserialize } from "node:v8";
const dir = process.argv[1];
for (const file of readdirSync(dir)) {
  if (!file.endsWith(".sqlite") || file === "metadata.sqlite") continue;
  const db = new DatabaseSync(`${dir}/${file}`, { readOnly: true });
  db.exec("PRAGMA busy_timeout = 10000");
  const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all().map((t) => t.name);
  if (!tables.includes("_cf_KV")) { db.close(); continue; }
  const named = tables.includes("__miniflare_do_name")
    ? db.prepare("SELECT name FROM __miniflare_do_name").all() : [];
  const object = named.length ? named[0].name : file;
  for (const row of db.prepare("SELECT key, value FROM _cf_KV").all()) {
    const value = deserialize(Buffer.from(row.value));
    console.log(JSON.stringify({ object, key: row.key, value }));
  }
  db.close();
}
"#;

/// How many rows every object under `persist_to` holds, unread: what a test watching storage
/// grow and shrink counts (fast for hundreds of thousands of rows).
pub fn rows(persist_to: &Path) -> usize {
    class_dirs(persist_to)
        .iter()
        .map(|dir| {
            node(COUNTER, &[dir.as_os_str()])
                .trim()
                .parse::<usize>()
                .expect("node prints a count")
        })
        .sum()
}

/// Writes `text` under `key` into the storage of the object named `object` (which must have
/// been created), as the object itself would: how a test puts there what the object would never
/// write (text it cannot read).
pub fn put_text(persist_to: &Path, object: &str, key: &str, text: &str) {
    let written: usize = class_dirs(persist_to)
        .iter()
        .map(|dir| {
            let args = [
                dir.as_os_str(),
                object.as_ref(),
                key.as_ref(),
                text.as_ref(),
            ];
            node(WRITER, &args)
                .trim()
                .parse::<usize>()
                .expect("node prints a count")
        })
        .sum();
    assert_eq!(
        written,
        1,
        "no object `{object}` under {}",
        persist_to.display()
    );
}

/// The directories of the class's objects under `persist_to`.
fn class_dirs(persist_to: &Path) -> Vec<std::path::PathBuf> {
    let Ok(dirs) = std::fs::read_dir(persist_to.join("v3/do")) else {
        return Vec::new();
    };
    dirs.flatten()
        .filter(|d| {
            d.file_name()
                .to_string_lossy()
                .ends_with(&format!("-{STATE_CLASS}"))
        })
        .map(|d| d.path())
        .collect()
}

/// The script counting one class directory's rows.
const COUNTER: &str = r#"
import { DatabaseSync } from "node:sqlite";
import { readdirSync } from "node:fs";
const dir = process.argv[1];
let rows = 0;
for (const file of readdirSync(dir)) {
  if (!file.endsWith(".sqlite") || file === "metadata.sqlite") continue;
  const db = new DatabaseSync(`${dir}/${file}`, { readOnly: true });
  db.exec("PRAGMA busy_timeout = 10000");
  const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all().map((t) => t.name);
  if (tables.includes("_cf_KV")) rows += db.prepare("SELECT count(*) AS n FROM _cf_KV").get().n;
  db.close();
}
console.log(rows);
"#;

/// The script writing one row (text, V8-serialised as the runtime keeps it) into the object of
/// one class directory named `argv[2]`; prints how many objects it wrote to.
const WRITER: &str = r#"
import { DatabaseSync } from "node:sqlite";
import { readdirSync } from "node:fs";
import { serialize } from "node:v8";
const [dir, object, key, text] = process.argv.slice(1);
let written = 0;
for (const file of readdirSync(dir)) {
  if (!file.endsWith(".sqlite") || file === "metadata.sqlite") continue;
  const db = new DatabaseSync(`${dir}/${file}`);
  db.exec("PRAGMA busy_timeout = 10000");
  const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all().map((t) => t.name);
  const named = tables.includes("__miniflare_do_name")
    ? db.prepare("SELECT name FROM __miniflare_do_name").all() : [];
  if (tables.includes("_cf_KV") && named.length && named[0].name === object) {
    db.prepare("INSERT OR REPLACE INTO _cf_KV (key, value) VALUES (?, ?)").run(key, serialize(text));
    written += 1;
  }
  db.close();
}
console.log(written);
"#;

/// Runs `script` under the repository's node 22 with `args`; what it printed.
fn node(script: &str, args: &[&std::ffi::OsStr]) -> String {
    let node = repo_root().join("node_modules/.bin/node");
    assert!(
        node.exists(),
        "{} is missing: scripts/setup.d/worker-toolchain.sh installs node 22",
        node.display()
    );
    let output = Command::new(&node)
        .args(["--no-warnings", "--input-type=module", "-e", script])
        .args(args)
        .output()
        .expect("node runs");
    assert!(
        output.status.success(),
        "node failed on {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn read_class_dir(dir: &Path) -> Vec<ObjectEntry> {
    node(READER, &[dir.as_os_str()])
        .lines()
        .map(|line| {
            let row: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("node printed `{line}`: {e}"));
            let text = row["value"]
                .as_str()
                .unwrap_or_else(|| panic!("an entry that is not text: {line}"));
            ObjectEntry {
                object: row["object"].as_str().unwrap_or_default().to_string(),
                key: row["key"].as_str().unwrap_or_default().to_string(),
                saved: Saved::from_stored(text)
                    .unwrap_or_else(|e| panic!("an entry that is not a saved entry ({e}): {line}")),
            }
        })
        .collect()
}

/// Whether `text` matches the glob `pattern` as Redis's `KEYS` reads it, for `*` (any run)
/// and `?` (any one character).
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // The classic two-pointer match with one backtrack point: the last `*` seen.
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_redis_keys_does() {
        for (pattern, text) in [
            ("*", ""),
            ("*", "anything"),
            ("*req-1*commit*", "{el:e2e:tokens:dan}:rq:req-1/commit"),
            ("*per-user:vip*", "{el:edgelimit:per-user:vip}:fixed"),
            ("a?c", "abc"),
            ("*:ctl", "{el:x:l:i}:ctl"),
        ] {
            assert!(glob_match(pattern, text), "{pattern} {text}");
        }
        for (pattern, text) in [("a*b", "a"), ("*partner*", "{el:e:l:p}"), ("a?c", "ac")] {
            assert!(!glob_match(pattern, text), "{pattern} {text}");
        }
    }

    #[test]
    fn entries_are_named_as_their_redis_keys() {
        let entry = |saved: Saved| ObjectEntry {
            object: "edgelimit-0".into(),
            key: saved.key(),
            saved,
        };
        let listed = entry(Saved::List {
            name: "deny".into(),
            members: vec![],
        });
        assert_eq!(listed.redis_key("ns"), "{el:ns:list:deny}");
        let assigned = entry(Saved::Assignments {
            limit: "per-user".into(),
            identifier: b"alice".to_vec(),
            held: vec![],
        });
        assert_eq!(assigned.redis_key("ns"), "{el:ns:per-user:alice}:ctl");
    }
}
