//! What the CLI suites share: a configuration file of their own, the real binary run as a child
//! process, and listings of what the store holds — keys straight from Redis, or a Worker's
//! Durable Object entries named as the same Redis keys — to prove what was, and was not, written.

#![allow(dead_code)] // each suite uses its own share of these helpers

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use edgelimit_engine::Config;
use edgelimit_testkit::{objects, RedisServer, Reply, WranglerDev};
use serde_json::Value;

pub mod suite;

/// The Worker configuration every suite runs on: tiers on `per-ip`, an `api-key:` limit, and
/// two rules (for per-rule lists). Windows are an hour, so nothing refills while a test runs.
pub const CONFIG: &str = r#"
namespace = "admtest"

[[rules]]
name = "api"
path_prefix = "/api/"
limits = [
  { name = "per-ip", policy = "gcra 20/1h", identifier = "ip", tiers = { free = "gcra 5/1h", pro = "gcra 200/1h" } },
  { name = "per-key", policy = "fixed 1000/1h", identifier = "api-key:header:authorization" },
]

[[rules]]
name = "login"
path = "/login"
limits = [{ name = "login-user", policy = "sliding-log 5/1m", identifier = "header:x-user" }]
"#;

/// The namespace of [`CONFIG`].
pub const NAMESPACE: &str = "admtest";

static NEXT: AtomicU64 = AtomicU64::new(0);

/// [`CONFIG`] written to a fresh file, as a wrangler.toml would hold it.
pub fn config_file() -> PathBuf {
    config_file_of(CONFIG)
}

/// `config` (a bare `EDGELIMIT_CONFIG` table starting with `namespace =`) written to a fresh
/// file, as a wrangler.toml would hold it.
pub fn config_file_of(config: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "edgelimit-admin-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let path = dir.join("wrangler.toml");
    let wrangler = format!(
        "name = \"edge\"\nmain = \"build/worker/shim.mjs\"\ncompatibility_date = \"2025-01-01\"\n\n{}",
        config
            .replace("namespace =", "[vars.EDGELIMIT_CONFIG]\nnamespace =")
            .replace("[[rules]]", "[[vars.EDGELIMIT_CONFIG.rules]]")
    );
    std::fs::write(&path, wrangler).expect("the configuration is written");
    path
}

/// [`CONFIG`] parsed, as the Worker (and the CLI) read it.
pub fn config() -> Config {
    edgelimit_engine::config::file::parse(CONFIG, "config.toml").expect("CONFIG is valid")
}

/// The configured limit named `name` (with its tiers).
pub fn limit(name: &str) -> edgelimit::Limit {
    let config = config();
    let found = config
        .rules
        .iter()
        .flat_map(|r| &r.limits)
        .find(|l| &*l.limit.name == name)
        .unwrap_or_else(|| panic!("no limit {name}"));
    edgelimit::Limit::clone(&found.limit)
}

/// What one run of the binary did.
#[derive(Debug)]
pub struct Run {
    /// The exit code.
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    /// Standard output as JSON, after checking the run succeeded.
    pub fn json(&self) -> Value {
        assert_eq!(self.code, 0, "the command failed: {self:?}");
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }
}

/// The binary, pointed at one store and one configuration file.
#[derive(Debug, Clone)]
pub struct Admin {
    /// `--store` (empty: not given).
    pub store: String,
    /// `--worker` (empty: not given).
    pub worker: String,
    /// `--config`.
    pub config: PathBuf,
    /// Extra environment (the REST token).
    pub env: Vec<(String, String)>,
}

impl Admin {
    /// The CLI on `store` with [`CONFIG`].
    pub fn new(store: &str) -> Admin {
        Admin {
            store: store.to_string(),
            worker: String::new(),
            config: config_file(),
            env: Vec::new(),
        }
    }

    /// The CLI on the Worker at `url` (`--worker`) with the configuration `config` (a bare
    /// `EDGELIMIT_CONFIG` table, as [`config_file_of`] takes it); no token yet.
    pub fn worker(url: &str, config: &str) -> Admin {
        Admin {
            store: String::new(),
            worker: url.to_string(),
            config: config_file_of(config),
            env: Vec::new(),
        }
    }

    /// The same with an environment variable set for every run.
    pub fn with_env(mut self, name: &str, value: &str) -> Admin {
        self.env.push((name.to_string(), value.to_string()));
        self
    }

    /// Runs `edgelimit-admin --store … --config … <args>`.
    pub fn run(&self, args: &[&str]) -> Run {
        let mut command = Command::new(env!("CARGO_BIN_EXE_edgelimit-admin"));
        if !self.store.is_empty() {
            command.arg("--store").arg(&self.store);
        }
        if !self.worker.is_empty() {
            command.arg("--worker").arg(&self.worker);
            // The CLI's 5 s default is a budget for a deployed Worker; under `wrangler dev` on a
            // loaded machine (beside `stress-ng --cpu 2`) the admin route took longer. A test
            // of the timeout itself names its own.
            if !args.contains(&"--timeout") {
                command.args(["--timeout", "60s"]);
            }
        }
        command
            .arg("--config")
            .arg(&self.config)
            .args(args)
            // Nothing from the developer's shell may decide a test.
            .env_remove("UPSTASH_REDIS_REST_URL")
            .env_remove("UPSTASH_REDIS_REST_TOKEN")
            .env_remove("EDGELIMIT_ADMIN_CONFIG")
            .env_remove("EDGELIMIT_ADMIN_TOKEN");
        for (name, value) in &self.env {
            command.env(name, value);
        }
        let output = command.output().expect("the binary runs");
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Runs with `--json` and returns the answer, checking the run succeeded.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        self.run(&all).json()
    }
}

/// Where a backend's state is listed.
#[derive(Debug)]
pub enum Stored<'a> {
    /// One server, or every node of a Cluster.
    Redis(Vec<&'a RedisServer>),
    /// The Durable Objects of a Worker under `wrangler dev`.
    Objects(&'a WranglerDev),
}

impl Stored<'_> {
    /// Every key, sorted: Redis's, or each Durable Object entry named as the Redis key of the
    /// same entry under [`NAMESPACE`] (`edgelimit_testkit::objects`), so one assertion reads
    /// either.
    pub fn keys(&self) -> Vec<String> {
        match self {
            Stored::Redis(nodes) => keys(nodes),
            Stored::Objects(worker) => {
                let mut keys: Vec<String> = objects::entries(&worker.state_dir())
                    .iter()
                    .map(|e| e.redis_key(NAMESPACE))
                    .collect();
                keys.sort();
                // A list is kept on every object: one key, as in Redis.
                keys.dedup();
                keys
            }
        }
    }

    /// Every key with its value and TTL ([`snapshot`]); a Durable Object entry's value is its
    /// saved JSON (which carries its own times), its TTL -1 (objects keep no TTL). One object's
    /// entry per key: an object holds each (limit, identifier) alone, and a list's copies on
    /// every object are one key here only when they are equal.
    pub fn snapshot(&self) -> Vec<(String, Reply, i64)> {
        match self {
            Stored::Redis(nodes) => snapshot(nodes),
            Stored::Objects(worker) => {
                let mut all: Vec<(String, Vec<u8>)> = objects::entries(&worker.state_dir())
                    .into_iter()
                    .map(|e| {
                        let value = serde_json::to_vec(&e.saved).expect("entries serialise");
                        (e.redis_key(NAMESPACE), value)
                    })
                    .collect();
                all.sort();
                all.dedup();
                all.into_iter()
                    .map(|(key, value)| (key, Reply::Bulk(value), -1))
                    .collect()
            }
        }
    }
}

/// Every key on `nodes` (one server, or every node of a Cluster), sorted.
pub fn keys(nodes: &[&RedisServer]) -> Vec<String> {
    let mut keys: Vec<String> = nodes.iter().flat_map(|server| server.keys("*")).collect();
    keys.sort();
    keys
}

/// Every key on `nodes` with its serialized value and TTL (ms; -1 none).
pub fn snapshot(nodes: &[&RedisServer]) -> Vec<(String, Reply, i64)> {
    let mut all = Vec::new();
    for server in nodes {
        all.extend(keys(&[server]).into_iter().map(|key| {
            let dump = server.command(&["DUMP", &key]).expect("redis answers");
            let ttl = match server.command(&["PTTL", &key]).expect("redis answers") {
                Reply::Int(ms) => ms,
                other => panic!("PTTL answered {other:?}"),
            };
            (key, dump, ttl)
        }));
    }
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

/// Asserts nothing was written between two snapshots: the same keys and values, and no TTL
/// renewed (a TTL may only have counted down).
pub fn assert_unchanged(before: &[(String, Reply, i64)], after: &[(String, Reply, i64)]) {
    let names = |s: &[(String, Reply, i64)]| s.iter().map(|k| k.0.clone()).collect::<Vec<_>>();
    assert_eq!(names(before), names(after), "keys changed");
    for (b, a) in before.iter().zip(after) {
        assert_eq!(b.1, a.1, "{} was rewritten", b.0);
        assert!(
            (b.2 < 0 && a.2 == b.2) || (b.2 >= 0 && a.2 <= b.2),
            "{}'s TTL was renewed: {} ms, then {} ms",
            b.0,
            b.2,
            a.2
        );
    }
}

/// The bad commands every suite tries, and the argument each must name. None may write.
pub const BAD_INPUT: &[(&[&str], &str)] = &[
    (
        &["tier", "set", "no-such-limit", "203.0.113.7", "pro"],
        "LIMIT",
    ),
    (&["tier", "set", "per-ip", "203.0.113.7", "gold"], "TIER"),
    (&["tier", "set", "per-key", "k", "pro"], "TIER"),
    (&["tier", "set", "per-ip", "not-an-ip", "pro"], "IDENTIFIER"),
    (
        &["tier", "set", "per-ip", "2001:DB8::1", "pro"],
        "IDENTIFIER",
    ),
    (
        &["tier", "set", "per-ip", "203.0.113.7", "pro", "--ttl", "7"],
        "--ttl",
    ),
    (
        &["tier", "set", "per-ip", "203.0.113.7", "pro", "--ttl", "0s"],
        "--ttl",
    ),
    (
        &[
            "tier",
            "set",
            "per-ip",
            "203.0.113.7",
            "pro",
            "--ttl",
            "1fortnight",
        ],
        "--ttl",
    ),
    (
        &["override", "set", "per-ip", "203.0.113.7", "gcra 0/1s"],
        "POLICY",
    ),
    (
        &["override", "set", "per-ip", "203.0.113.7", "fixed 10/1s"],
        "POLICY",
    ),
    (
        &["override", "set", "per-ip", "203.0.113.7", "banana"],
        "POLICY",
    ),
    (&["reset", "login-user", "  "], "IDENTIFIER"),
    (&["peek", "per-ip", "203.0.113.7/24"], "IDENTIFIER"),
    (&["deny", "add", "ip", "203.0.113.0/33"], "ENTRY"),
    (&["deny", "add", "ip 999.1.1.1"], "ENTRY"),
    (&["deny", "add", "cookie:x y"], "ENTRY"),
    (&["deny", "add", "header:x-nobody-sends abc"], "ENTRY"),
    (
        &["deny", "add", "ip 203.0.113.7", "--rule", "nope"],
        "--rule",
    ),
    (&["allow", "add", "country CN", "--ttl", "-5s"], "--ttl"),
    (
        &["allow", "remove", "ip 203.0.113.7", "--rule", "nope"],
        "--rule",
    ),
];

/// Runs [`BAD_INPUT`]: every command exits 2 naming its argument.
pub fn refuses_bad_input(admin: &Admin) {
    for (args, argument) in BAD_INPUT {
        let run = admin.run(args);
        assert_eq!(
            run.code, 2,
            "{args:?} must be refused as bad input: {run:?}"
        );
        assert!(
            run.stderr
                .starts_with(&format!("edgelimit-admin: {argument}: ")),
            "{args:?} must name {argument}: {run:?}"
        );
        assert!(run.stdout.is_empty(), "{args:?} printed {run:?}");
    }
}
