//! What deny and allow lists cost (docs/design.md §"Deny and allow lists", issue 12): the same
//! decisions through `RespStore` plain and behind a gate of two lists (deny and allow, 1,000
//! entries each) probed with an IPv4 address — 33 candidates, one `ZMSCORE` per list — in the
//! same run against the same `redis-server`: Redis's own script time per decision (`INFO
//! commandstats`: neither client nor network counted) and decisions per second at 8 clients.
//! Rows: plain; gated, no list matching (the common case: both lists asked, the limit decided);
//! gated and allowlisted (not charged); gated and denylisted (nothing decided).
//! Run: `cargo bench --bench lists`.

use std::sync::Arc;
use std::time::Instant;

use edgelimit::control::list::{Gate, ListEntry, ListProbe};
use edgelimit::{Check, CheckItem, Limit, Policy, RespStore, Store, TimeSource};
use edgelimit_testkit::RedisServer;

const DECISIONS: usize = 20_000;
const CLIENTS: usize = 8;
const IDENTIFIERS: usize = 100;
const ENTRIES: usize = 1_000;
const T: u64 = 1_700_000_000_000;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Plain,
    /// Gated; the probe's address is in no list.
    Unlisted,
    /// Gated; the address is on the allow list.
    Allowlisted,
    /// Gated; the address is on the deny list.
    Denylisted,
}

fn check(limit: &Limit, mode: Mode, c: usize, i: usize) -> Check {
    let id = format!("id-{}", (c * 7 + i) % IDENTIFIERS);
    let address = match mode {
        Mode::Plain | Mode::Unlisted => "192.0.2.77",
        Mode::Allowlisted => "198.51.100.9",
        Mode::Denylisted => "203.0.113.9",
    };
    match mode {
        Mode::Plain => Check::single(limit, id, 1),
        _ => Check::new()
            .with_item(CheckItem::new(limit, id, 1).gated(0))
            .gated(
                ListProbe::new().with("ip", address),
                vec![Gate::new(vec!["deny".into()], vec!["allow".into()])],
            ),
    }
}

async fn run(store: &Arc<RespStore>, limit: &Limit, mode: Mode) -> f64 {
    let per_client = DECISIONS / CLIENTS;
    let started = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (store, limit) = (store.clone(), limit.clone());
            tokio::spawn(async move {
                for i in 0..per_client {
                    let check = check(&limit, mode, c, i);
                    let verdict = store
                        .check(std::slice::from_ref(&check), TimeSource::At(T))
                        .await
                        .expect("redis answers");
                    assert_eq!(verdict[0].allowed, mode != Mode::Denylisted, "{mode:?}");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    (per_client * CLIENTS) as f64 / started.elapsed().as_secs_f64()
}

/// Microseconds Redis spent per script call since the last `CONFIG RESETSTAT`.
fn script_usec_per_call(server: &RedisServer) -> f64 {
    let info = server
        .command(&["INFO", "commandstats"])
        .ok()
        .and_then(|r| r.text())
        .expect("INFO answers");
    let (mut calls, mut usec) = (0.0, 0.0);
    for line in info.lines() {
        let Some(stats) = line
            .strip_prefix("cmdstat_evalsha:")
            .or_else(|| line.strip_prefix("cmdstat_eval:"))
        else {
            continue;
        };
        for field in stats.split(',') {
            match field.split_once('=') {
                Some(("calls", n)) => calls += n.parse::<f64>().unwrap_or(0.0),
                Some(("usec", n)) => usec += n.parse::<f64>().unwrap_or(0.0),
                _ => {}
            }
        }
    }
    usec / calls
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = Arc::new(RespStore::connect(&server.url()).await.unwrap());
        // Two lists of ENTRIES each: addresses and /24s elsewhere, plus the row's own entry.
        for i in 0..ENTRIES {
            for (list, octet) in [("deny", 10), ("allow", 11)] {
                let text = if i % 2 == 0 {
                    format!(
                        "ip {octet}.{}.{}.{}",
                        i / 65536 % 256,
                        i / 256 % 256,
                        i % 256
                    )
                } else {
                    format!("ip {octet}.{}.{}.0/24", i / 256 % 256, i % 256)
                };
                let entry: ListEntry = text.parse().unwrap();
                store.list_add(list, &entry, None, T).await.unwrap();
            }
        }
        let deny: ListEntry = "ip 203.0.113.0/24".parse().unwrap();
        let allow: ListEntry = "ip 198.51.100.9".parse().unwrap();
        store.list_add("deny", &deny, None, T).await.unwrap();
        store.list_add("allow", &allow, None, T).await.unwrap();
        println!(
            "\n{DECISIONS} decisions per row, {CLIENTS} clients, {IDENTIFIERS} identifiers, two \
             lists of {ENTRIES} entries, an IPv4 probe (33 candidates); loopback; one \
             redis-server; same run"
        );
        println!("| limit | check | script µs/decision (Redis) | ratio | decisions/s | ratio |");
        println!("|---|---|---|---|---|---|");
        for spec in ["gcra 1000000/1h", "fixed 1000000/1h"] {
            let policy: Policy = spec.parse().unwrap();
            let limit = Limit::new(format!("bench-{}", policy.algorithm()), policy);
            for mode in [Mode::Plain, Mode::Unlisted] {
                run(&store, &limit, mode).await; // warm up: scripts loaded, states created
            }
            let mut base = (0.0, 0.0);
            for mode in [
                Mode::Plain,
                Mode::Unlisted,
                Mode::Allowlisted,
                Mode::Denylisted,
            ] {
                server.command(&["CONFIG", "RESETSTAT"]).expect("RESETSTAT");
                let rate = run(&store, &limit, mode).await;
                let usec = script_usec_per_call(&server);
                if mode == Mode::Plain {
                    base = (usec, rate);
                }
                let name = match mode {
                    Mode::Plain => "plain",
                    Mode::Unlisted => "gated, unlisted",
                    Mode::Allowlisted => "gated, allowlisted",
                    Mode::Denylisted => "gated, denylisted",
                };
                println!(
                    "| `{spec}` | {name} | {usec:.2} | {:.2} | {rate:.0} | {:.2} |",
                    usec / base.0,
                    rate / base.1
                );
            }
        }
    });
}
