//! What deny and allow lists cost (docs/design.md §"Deny and allow lists"): the same
//! decisions through `RespStore` plain and behind a gate of two lists (deny and allow, 1,000
//! entries each) probed with an IPv4 address — 33 candidates, one `ZMSCORE` per list — in the
//! same run against the same `redis-server`: Redis's own script time per decision (`INFO
//! commandstats`: neither client nor network counted) and decisions per second at 8 clients.
//! Rows: plain (one limit: its own script); plain with two limits (the multi-limit script, which
//! every gated check runs); gated with two limits and with one, no list matching (the common
//! case: both lists asked, the limits decided); gated and allowlisted (not charged); gated and
//! denylisted (nothing decided). The modes run interleaved, `ROUNDS` times, and each row reports
//! its median, so a machine busy with other work skews every mode alike.
//! Run: `cargo bench --bench lists`.

use std::sync::Arc;

use edgelimit::control::list::{Gate, ListEntry, ListProbe};
use edgelimit::Control;
use edgelimit::{Check, CheckItem, Limit, Policy, RespStore};

mod support;

const DECISIONS: usize = 10_000;
const ROUNDS: usize = 5;
const CLIENTS: usize = 8;
const IDENTIFIERS: usize = 100;
const ENTRIES: usize = 1_000;
const T: u64 = 1_700_000_000_000;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Plain,
    /// Two limits, no gate: the multi-limit script.
    Plain2,
    /// Two limits behind the gate; the address is in no list.
    Unlisted2,
    /// Gated; the probe's address is in no list.
    Unlisted,
    /// Gated; the address is on the allow list.
    Allowlisted,
    /// Gated; the address is on the deny list.
    Denylisted,
}

impl Mode {
    const ALL: [Mode; 6] = [
        Mode::Plain,
        Mode::Plain2,
        Mode::Unlisted2,
        Mode::Unlisted,
        Mode::Allowlisted,
        Mode::Denylisted,
    ];

    fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain, 1 limit",
            Mode::Plain2 => "plain, 2 limits (multi script)",
            Mode::Unlisted2 => "gated, 2 limits, unlisted",
            Mode::Unlisted => "gated, 1 limit, unlisted",
            Mode::Allowlisted => "gated, 1 limit, allowlisted",
            Mode::Denylisted => "gated, 1 limit, denylisted",
        }
    }
}

fn check(limits: &[Limit; 2], mode: Mode, c: usize, i: usize) -> Check {
    let id = format!("id-{}", (c * 7 + i) % IDENTIFIERS);
    let address = match mode {
        Mode::Allowlisted => "198.51.100.9",
        Mode::Denylisted => "203.0.113.9",
        _ => "192.0.2.77",
    };
    let gated = |check: Check| {
        check.gated(
            ListProbe::new().with("ip", address),
            vec![Gate::new(vec!["deny".into()], vec!["allow".into()])],
        )
    };
    let item = |limit: &Limit| CheckItem::new(limit, id.clone(), 1).gated(0);
    match mode {
        Mode::Plain => Check::single(&limits[0], id.clone(), 1),
        Mode::Plain2 => Check::single(&limits[0], id.clone(), 1).with(&limits[1], id.clone(), 1),
        Mode::Unlisted2 => gated(
            Check::new()
                .with_item(item(&limits[0]))
                .with_item(item(&limits[1])),
        ),
        _ => gated(Check::new().with_item(item(&limits[0]))),
    }
}

/// Decisions per second with `CLIENTS` concurrent clients.
async fn run(store: &Arc<RespStore>, limits: &[Limit; 2], mode: Mode) -> f64 {
    let (store, limits) = (store.clone(), Arc::new(limits.clone()));
    support::rate(
        CLIENTS,
        DECISIONS / CLIENTS,
        (store, limits),
        move |(store, limits), c, i| async move {
            let verdict = support::check_at(&*store, &check(&limits, mode, c, i), T).await;
            assert_eq!(verdict.allowed, mode != Mode::Denylisted, "{mode:?}");
            (store, limits)
        },
    )
    .await
}

fn main() {
    support::on_redis(|server, store| async move {
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
            "\n{DECISIONS} checks per run, {ROUNDS} interleaved runs per row (medians), {CLIENTS} clients, {IDENTIFIERS} identifiers, two \
             lists of {ENTRIES} entries, an IPv4 probe (33 candidates); loopback; one \
             redis-server; same run"
        );
        println!("| limit | check | script µs/decision (Redis) | ratio | decisions/s | ratio |");
        println!("|---|---|---|---|---|---|");
        for spec in ["gcra 1000000/1h", "fixed 1000000/1h"] {
            let policy: Policy = spec.parse().unwrap();
            let limits = [
                Limit::new(format!("bench-{}", policy.algorithm()), policy),
                Limit::new(format!("bench2-{}", policy.algorithm()), policy),
            ];
            let costs = support::interleaved(&server, ROUNDS, &Mode::ALL, |mode| {
                run(&store, &limits, mode)
            })
            .await;
            for (mode, cost) in Mode::ALL.into_iter().zip(&costs) {
                println!("{}", cost.row(&costs[0], spec, mode.name()));
            }
        }
    });
}
