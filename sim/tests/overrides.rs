//! `sim replay --config … --overrides FILE`: tiers, overrides and deny/allow lists given as
//! `edgelimit-admin` commands. The `sim` binary is run on a hand-made trace, and every count is
//! held against one worked out here from the trace and the policies written in this file: within
//! one fixed window an identifier is admitted while fewer than its capacity got through.

use std::path::Path;
use std::process::{Command, Output};

use edgelimit_testkit::dir::TempDir as Dir;
use serde_json::Value;

fn sim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sim"))
}

/// A minute boundary (epoch ms): every request below falls in the fixed window it opens.
const T0: u64 = 1_700_000_040_000;
/// The limit's own capacity, its `pro` tier's and the override's (per minute, fixed windows).
const OWN: u64 = 3;
const PRO: u64 = 10;
const OVERRIDDEN: u64 = 5;
/// The tier with a TTL lapses this long after the first request.
const TTL_MS: u64 = 30_000;

const CONFIG: &str = r#"
[[rules]]
name = "api"
path_prefix = "/api/"
limits = [{ name = "per-ip", policy = "fixed 3/1m", identifier = "ip", tiers = { pro = "fixed 10/1m" } }]
"#;

const OVERRIDES: &str = "\
# Live control for the what-if, as typed after edgelimit-admin.
tier set per-ip 192.0.2.2 pro
tier set per-ip 192.0.2.5 pro --ttl 30s   # lapses half way through

override set per-ip 192.0.2.3 'fixed 5/1m'
deny add ip 198.51.100.0/24
allow add --rule api ip 192.0.2.4
";

/// Who sends what: the identifier, its capacity over time (`at` ms after `T0`), and the
/// offsets of its requests to `/api/`.
struct Sender {
    ip: &'static str,
    capacity: fn(u64) -> u64,
    offsets: Vec<u64>,
    /// Deny-listed: every request 403, nothing counted.
    denied: bool,
    /// Allow-listed: every request forwarded, nothing counted.
    allowed: bool,
}

fn senders() -> Vec<Sender> {
    let twelve = |skew: u64| (0..12).map(|i| i * 1000 + skew).collect::<Vec<u64>>();
    let sender = |ip, capacity: fn(u64) -> u64, offsets| Sender {
        ip,
        capacity,
        offsets,
        denied: false,
        allowed: false,
    };
    let mut lapsing: Vec<u64> = (0..6).map(|i| i * 1000 + 5).collect();
    lapsing.extend((0..6).map(|i| 40_000 + i * 1000 + 5));
    vec![
        sender("192.0.2.1", |_| OWN, twelve(1)),
        sender("192.0.2.2", |_| PRO, twelve(2)),
        sender("192.0.2.3", |_| OVERRIDDEN, twelve(3)),
        Sender {
            denied: true,
            ..sender("198.51.100.9", |_| OWN, twelve(4))
        },
        Sender {
            allowed: true,
            ..sender("192.0.2.4", |_| OWN, twelve(6))
        },
        sender(
            "192.0.2.5",
            |at| if at < TTL_MS { PRO } else { OWN },
            lapsing,
        ),
    ]
}

/// What the Worker answers each sender, request by request, worked out from the capacities:
/// (admitted, refused) per sender, in `senders()` order.
fn expected(senders: &[Sender]) -> Vec<(u64, u64)> {
    senders
        .iter()
        .map(|s| {
            if s.denied {
                return (0, s.offsets.len() as u64);
            }
            if s.allowed {
                return (s.offsets.len() as u64, 0);
            }
            let mut admitted = 0;
            for &at in &s.offsets {
                if admitted < (s.capacity)(at) {
                    admitted += 1;
                }
            }
            (admitted, s.offsets.len() as u64 - admitted)
        })
        .collect()
}

/// The trace as request-mode CSV, in time order, plus one request of the deny-listed client
/// that no rule matches (the dynamic lists are consulted only with a check: forwarded).
fn trace(senders: &[Sender]) -> String {
    let mut rows: Vec<(u64, &str, &str)> = senders
        .iter()
        .flat_map(|s| {
            s.offsets
                .iter()
                .map(move |&at| (T0 + at, s.ip, "/api/items"))
        })
        .collect();
    rows.push((T0 + 500, "198.51.100.9", "/static/logo.png"));
    rows.sort();
    let mut csv = String::from("timestamp_ms,ip,method,host,path\n");
    for (t, ip, path) in rows {
        csv.push_str(&format!("{t},{ip},GET,api.example.com,{path}\n"));
    }
    csv
}

/// Runs `sim replay TRACE --config CONFIG` with `extra` arguments; the JSON report.
fn replay(dir: &Dir, extra: &[&Path]) -> (Output, Option<Value>) {
    let trace = dir.write("trace.csv", &trace(&senders()));
    let config = dir.write("config.toml", CONFIG);
    let json = dir.join("report.json");
    let _ = std::fs::remove_file(&json);
    let out = sim()
        .arg("replay")
        .arg(&trace)
        .arg("--config")
        .arg(&config)
        .args(extra)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let report = std::fs::read_to_string(&json)
        .ok()
        .map(|text| serde_json::from_str(&text).unwrap());
    (out, report)
}

fn succeeded(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// Runs `sim replay` on the CSV trace `csv` with `--config`, `--overrides` and `extra`
/// arguments; the JSON report of a run that must succeed.
fn replay_csv(dir: &Dir, csv: &str, config: &Path, overrides: &Path, extra: &[&str]) -> Value {
    let trace = dir.write("trace.csv", csv);
    let json = dir.join("report.json");
    let out = sim()
        .arg("replay")
        .arg(&trace)
        .arg("--config")
        .arg(config)
        .arg("--overrides")
        .arg(overrides)
        .args(extra)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    succeeded(&out);
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

/// A limit's report's most limited identifiers with their refusals, sorted by identifier.
fn top_identifiers(limit: &Value) -> Vec<(String, u64)> {
    let mut top: Vec<(String, u64)> = limit["top_identifiers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["identifier"].as_str().unwrap().to_string(),
                t["denied"].as_u64().unwrap(),
            )
        })
        .collect();
    top.sort();
    top
}

#[test]
fn tiers_overrides_and_lists_decide_as_at_the_edge() {
    let dir = Dir::new("sim-overrides-decide");
    let overrides = dir.write("live.txt", OVERRIDES);
    let (out, report) = replay(&dir, &[Path::new("--overrides"), &overrides]);
    let table = succeeded(&out);
    let r = report.unwrap();
    let senders = senders();
    let expected = expected(&senders);
    let requests: u64 = senders.iter().map(|s| s.offsets.len() as u64).sum::<u64>() + 1;
    let admitted: u64 = expected.iter().map(|e| e.0).sum::<u64>() + 1;
    let listed = expected[3].1;
    let limited: u64 = expected.iter().map(|e| e.1).sum::<u64>() - listed;
    // The worked-out answers are what the capacities say, so a replay ignoring the file fails.
    assert_eq!(
        expected,
        [(3, 9), (10, 2), (5, 7), (0, 12), (12, 0), (6, 6)]
    );
    assert_eq!(r["requests"], requests);
    assert_eq!(r["admitted"], admitted);
    assert_eq!(r["denied"], requests - admitted);
    assert_eq!(r["unmatched"], 1);
    // 403 is its own status, not lumped with others.
    assert_eq!(
        r["statuses"],
        serde_json::json!({"200": admitted, "403": listed, "429": limited})
    );
    let rule = &r["rules"][0];
    assert_eq!(rule["matched"], requests - 1);
    assert_eq!(rule["denied"], listed + limited);
    assert_eq!(rule["listed"], listed);
    assert_eq!(rule["allowlisted"], senders[4].offsets.len() as u64);
    let limit = &rule["limits"][0];
    // A listed request counts on no limit: neither the deny-listed nor the allow-listed.
    let counted: u64 = senders
        .iter()
        .filter(|s| !s.denied && !s.allowed)
        .map(|s| s.offsets.len() as u64)
        .sum();
    assert_eq!(limit["checked"], counted);
    assert_eq!(limit["denied"], limited);
    // Each identifier's refusals by the limit, from the worked-out answers.
    let top = top_identifiers(limit);
    let mut want: Vec<(String, u64)> = senders
        .iter()
        .zip(&expected)
        .filter(|(s, e)| !s.denied && e.1 > 0)
        .map(|(s, e)| (s.ip.to_string(), e.1))
        .collect();
    want.sort();
    assert_eq!(top, want);
    // The boundary metrics hold the limit's own policy to the identifiers on it: the tiered and
    // overridden ones decide by another policy, and the listed ones by no limit, so only the
    // first sender's requests are held to its exact log, and they agree with it.
    let boundary = &limit["boundary"];
    let own: Vec<&Sender> = senders.iter().filter(|s| s.ip == "192.0.2.1").collect();
    assert_eq!(boundary["decided"], own[0].offsets.len() as u64);
    assert_eq!(boundary["max_admitted_in_window"], OWN);
    assert_eq!(
        (&boundary["false_allows"], &boundary["false_denies"]),
        (&0.into(), &0.into())
    );
    let applied = &r["overrides"];
    assert_eq!(applied["file"], overrides.display().to_string());
    assert_eq!(
        (
            &applied["commands"],
            &applied["tiers"],
            &applied["overrides"],
            &applied["deny_entries"],
            &applied["allow_entries"]
        ),
        (
            &Value::from(5),
            &Value::from(2),
            &Value::from(1),
            &Value::from(1),
            &Value::from(1)
        )
    );
    assert_eq!(applied["applied_at_ms"], T0 + 1);
    assert!(
        table.contains(&format!(
            "overrides {}: 2 tiers, 1 override, 1 deny entry, 1 allow entry",
            overrides.display()
        )),
        "{table}"
    );
    assert!(table.contains("403: 12"), "{table}");
}

#[test]
fn without_overrides_the_configuration_alone_decides() {
    let dir = Dir::new("sim-overrides-plain");
    let (out, report) = replay(&dir, &[]);
    succeeded(&out);
    let r = report.unwrap();
    let senders = senders();
    // Everyone on the limit's own policy: OWN admitted each, nothing listed.
    let admitted = senders.len() as u64 * OWN + 1;
    assert_eq!(r["admitted"], admitted);
    assert_eq!(r["statuses"]["403"], Value::Null);
    assert_eq!(r["overrides"], Value::Null);
    assert_eq!(r["rules"][0]["listed"], Value::Null);
}

#[test]
fn what_if_with_and_without_the_overrides() {
    let dir = Dir::new("sim-overrides-whatif");
    let overrides = dir.write("live.txt", OVERRIDES);
    let config = dir.write("config.toml", CONFIG);
    let senders = senders();
    let with = expected(&senders);
    // Flips from the configuration alone (OWN admitted each, the first ones) to it with the
    // file, per sender: more admitted is refused → 200, fewer is 200 → refused.
    let mut more = 0;
    let mut fewer = 0;
    for (s, (admitted, _)) in senders.iter().zip(&with) {
        let alone = OWN.min(s.offsets.len() as u64);
        more += admitted.saturating_sub(alone);
        fewer += alone.saturating_sub(*admitted);
    }
    assert_eq!((more, fewer), (21, 3));

    // The candidate with the file against the baseline without it.
    let (out, report) = replay(
        &dir,
        &[
            Path::new("--overrides"),
            &overrides,
            Path::new("--baseline"),
            &config,
        ],
    );
    succeeded(&out);
    let w = &report.unwrap()["whatif"];
    assert_eq!(
        (&w["newly_admitted"], &w["newly_denied"]),
        (&more.into(), &fewer.into())
    );
    assert_eq!(w["baseline_overrides"], Value::Null);
    // The deny-listed client's flips are labelled by the entry that refused them.
    let affected = w["rules"][0]["top_identifiers"].as_array().unwrap();
    assert!(
        affected
            .iter()
            .any(|a| a["identifier"] == "deny: ip 198.51.100.0/24" && a["newly_denied"] == OWN),
        "{affected:?}"
    );

    // The other way round: the file on the baseline only.
    let (out, report) = replay(
        &dir,
        &[
            Path::new("--baseline"),
            &config,
            Path::new("--baseline-overrides"),
            &overrides,
        ],
    );
    let table = succeeded(&out);
    let r = report.unwrap();
    let w = &r["whatif"];
    assert_eq!(
        (&w["newly_admitted"], &w["newly_denied"]),
        (&fewer.into(), &more.into())
    );
    assert_eq!(w["baseline_overrides"]["tiers"], 2);
    assert_eq!(r["overrides"], Value::Null);
    assert!(table.contains("baseline overrides"), "{table}");
}

/// Runs the replay with an overrides file whose third line is `line`; its error.
fn refused(dir: &Dir, line: &str) -> String {
    let file = dir.write("bad.txt", &format!("# a comment\n\n{line}\n"));
    let (out, report) = replay(dir, &[Path::new("--overrides"), &file]);
    assert!(!out.status.success(), "{line}: accepted");
    // Bad input, not a crash.
    assert_eq!(out.status.code(), Some(1), "{line}");
    assert!(report.is_none(), "{line}: a report was written");
    let stderr = String::from_utf8(out.stderr).unwrap();
    let prefix = format!("sim: {}:3: ", file.display());
    assert!(stderr.starts_with(&prefix), "{line}: {stderr}");
    stderr[prefix.len()..].trim_end().to_string()
}

#[test]
fn bad_lines_are_refused_with_the_file_line_and_the_admin_clis_message() {
    let dir = Dir::new("sim-overrides-bad");
    // The admin CLI's own validation, against the configuration given to --config.
    let config = edgelimit_engine::config::file::parse(CONFIG, "config.toml").unwrap();
    let config_name = dir.join("config.toml").display().to_string();
    for (line, argv) in [
        (
            "tier set per-ip 192.0.2.2 gold",
            vec!["tier", "set", "per-ip", "192.0.2.2", "gold"],
        ),
        (
            "override set per-ip 192.0.2.3 'gcra 5/1s burst 5'",
            vec![
                "override",
                "set",
                "per-ip",
                "192.0.2.3",
                "gcra 5/1s burst 5",
            ],
        ),
        (
            "deny add header:x-partner acme",
            vec!["deny", "add", "header:x-partner", "acme"],
        ),
        (
            "tier set per-ip 2001:DB8::1 pro",
            vec!["tier", "set", "per-ip", "2001:DB8::1", "pro"],
        ),
    ] {
        use clap::Parser;
        let cli = edgelimit_engine::command::Cli::try_parse_from(
            std::iter::once("edgelimit-admin").chain(argv),
        )
        .unwrap();
        let admin = edgelimit_engine::command::plan(&cli.command, &config, &config_name, false)
            .unwrap_err()
            .to_string();
        assert_eq!(refused(&dir, line), admin, "{line}");
    }
    assert_eq!(
        refused(&dir, "tier set per-ip 192.0.2.2 pro --ttl 0s"),
        "--ttl: `0s` is zero"
    );
    // clap's own complaints.
    assert!(refused(&dir, "tier set per-ip 192.0.2.2").contains("<TIER>"));
    assert!(refused(&dir, "frobnicate").contains("frobnicate"));
    assert!(refused(&dir, "tier set per-ip 'unbalanced").contains("quotes"));
}

#[test]
fn read_only_commands_and_store_flags_are_refused() {
    let dir = Dir::new("sim-overrides-readonly");
    for (line, named) in [
        ("peek per-ip 192.0.2.1", "`peek`"),
        ("reset per-ip 192.0.2.1", "`reset`"),
        ("tier get per-ip 192.0.2.1", "`tier get`"),
        ("deny list", "`deny list`"),
        ("allow list --rule api", "`allow list`"),
        (
            "--store redis://127.0.0.1:6379 deny add ip 192.0.2.9",
            "--store",
        ),
        ("deny add ip 192.0.2.9 --cluster", "--cluster"),
        ("--timeout 2s deny add ip 192.0.2.9", "--timeout"),
        (
            "tier set per-ip 192.0.2.2 pro --config other.toml",
            "--config",
        ),
        (
            "--worker https://edge.example.com deny add ip 192.0.2.9",
            "--worker",
        ),
        ("deny add ip 192.0.2.9 --token s3cret", "--token"),
    ] {
        let message = refused(&dir, line);
        assert!(message.starts_with(named), "{line}: {message}");
    }
}

/// A configuration's own static deny entry answers 403 without `--overrides` too: counted as
/// 403 (it was once lumped under "other") and as listed on the rule, on no limit.
#[test]
fn a_static_deny_entry_is_a_403_of_its_own() {
    let dir = Dir::new("sim-overrides-static");
    let trace = dir.write("trace.csv", &trace(&senders()));
    let config = dir.write(
        "static.toml",
        &format!("deny = [\"ip 198.51.100.0/24\"]\n{CONFIG}"),
    );
    let json = dir.join("report.json");
    let out = sim()
        .arg("replay")
        .arg(&trace)
        .arg("--config")
        .arg(&config)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    succeeded(&out);
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let senders = senders();
    // The listed client's requests, its unmatched one included (a configuration-wide static
    // entry refuses whatever rules matched, none too).
    let listed = senders[3].offsets.len() as u64;
    assert_eq!(r["statuses"]["403"], listed + 1);
    assert_eq!(r["statuses"]["0"], Value::Null);
    assert_eq!(r["rules"][0]["listed"], listed);
    assert_eq!(
        r["rules"][0]["limits"][0]["checked"],
        (senders.len() as u64 - 1) * 12
    );
}

#[test]
fn a_shadow_rules_own_deny_list_only_reports() {
    const SHADOWED: &str = r#"
[[rules]]
name = "api"
path_prefix = "/api/"
limits = [{ name = "per-ip", policy = "fixed 100/1m", identifier = "ip" }]

[[rules]]
name = "watch"
shadow = true
limits = [{ name = "watch-ip", policy = "fixed 100/1m", identifier = "ip" }]
"#;
    let dir = Dir::new("sim-overrides-shadow-list");
    let config = dir.write("config.toml", SHADOWED);
    let overrides = dir.write("live.txt", "deny add --rule watch ip 192.0.2.7\n");
    // The listed address sends 5 requests, another 4: far under both limits.
    let (listed, other) = (5u64, 4u64);
    let mut csv = String::from("timestamp_ms,ip,method,host,path\n");
    for i in 0..listed + other {
        let ip = if i < listed { "192.0.2.7" } else { "192.0.2.8" };
        csv.push_str(&format!(
            "{},{ip},GET,api.example.com,/api/x\n",
            T0 + i * 100
        ));
    }
    let r = replay_csv(&dir, &csv, &config, &overrides, &[]);
    // Every request is forwarded: a shadow rule's list refuses nothing.
    assert_eq!(r["requests"], listed + other);
    assert_eq!(r["admitted"], listed + other);
    let rule = |name: &str| {
        r["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|rule| rule["name"] == name)
            .unwrap()
            .clone()
    };
    // The shadow rule reports what its list would have refused; the enforced rule saw no list.
    assert_eq!(rule("watch")["listed"], listed);
    assert_eq!(rule("watch")["denied"], listed);
    assert!(rule("api")["listed"].as_u64().unwrap_or(0) == 0);
    assert_eq!(rule("api")["denied"], 0);
}

#[test]
fn an_outages_fallback_keeps_the_tier_the_store_decided_with() {
    // Own 4 a minute, the `pro` tier 10; while the store is down, half of either in the isolate.
    let config = r#"
[[rules]]
name = "api"
limits = [{ name = "per-ip", policy = "fixed 4/1m", identifier = "ip", fail = "fallback 50%", tiers = { pro = "fixed 10/1m" } }]
"#;
    let (own_share, pro_share) = (2, 5);
    let dir = Dir::new("sim-overrides-fallback-tier");
    let config = dir.write("config.toml", config);
    let overrides = dir.write("live.txt", "tier set per-ip 192.0.2.2 pro\n");
    // One request each while the store answers (it decides the pro client by its tier), then
    // twelve each in the next minute, which the outage covers.
    let clients = ["192.0.2.1", "192.0.2.2"];
    let burst = 12u64;
    let mut csv = String::from("timestamp_ms,ip,method,host,path\n");
    for ip in clients {
        csv.push_str(&format!("{},{ip},GET,api.example.com,/api/x\n", T0 + 10));
    }
    for i in 0..burst {
        for ip in clients {
            csv.push_str(&format!(
                "{},{ip},GET,api.example.com,/api/x\n",
                T0 + 60_000 + i * 1000
            ));
        }
    }
    let outage = format!("{}..{}", T0 + 60_000, T0 + 120_000);
    let r = replay_csv(&dir, &csv, &config, &overrides, &["--outage", &outage]);
    assert_eq!(r["outage"]["fallback_decisions"], 2 * burst);
    // Both first requests admitted by the store, then each client's share of its own policy.
    assert_eq!(r["admitted"], 2 + own_share + pro_share);
    let top = top_identifiers(&r["rules"][0]["limits"][0]);
    assert_eq!(
        top,
        [
            ("192.0.2.1".to_string(), burst - own_share),
            ("192.0.2.2".to_string(), burst - pro_share)
        ]
    );
}
