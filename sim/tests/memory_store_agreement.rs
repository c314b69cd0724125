//! The fast replay (typed vectors of states) decides exactly as the library's `MemoryStore`,
//! request for request, on generated traffic for every algorithm.

use edgelimit::{Check, Limit, MemoryStore, Policy};
use edgelimit_sim::generate::{Generator, Kind};
use edgelimit_sim::policy::Replay;
use edgelimit_sim::Interner;

#[test]
fn replay_counts_equal_memory_store_counts() {
    let specs = [
        "fixed 20/10s",
        "sliding-log 20/10s",
        "sliding-counter 20/10s",
        "token-bucket 2/1s burst 20",
        "gcra 2/1s burst 20",
    ];
    let policies: Vec<Policy> = specs.iter().map(|s| s.parse().unwrap()).collect();
    let limits: Vec<Limit> = policies
        .iter()
        .enumerate()
        .map(|(i, p)| Limit::new(format!("p{i}"), *p))
        .collect();
    let kind = Kind::Bursty {
        rate: 40.0,
        clients: 5,
        burst_factor: 8.0,
        period_ms: 5_000.0,
    };
    let store = MemoryStore::new();
    let mut replay = Replay::new(&policies).unwrap();
    let mut store_admitted = vec![0u64; policies.len()];
    for ev in Generator::new(kind, 9, 20_000, 1_700_000_000_000) {
        replay.step(ev);
        for (i, limit) in limits.iter().enumerate() {
            let check = Check::single(limit, format!("c{}", ev.client), ev.cost);
            if store.direct().check(&[check], ev.time_ms)[0].allowed {
                store_admitted[i] += 1;
            }
        }
    }
    let results = replay.finish(&Interner::new());
    for (r, &expected) in results.iter().zip(&store_admitted) {
        assert_eq!(r.admitted, expected, "{}", r.spec);
        assert!(r.denied > 0, "{} should bind", r.spec);
    }
}
