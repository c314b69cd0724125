//! ns per decision for each algorithm — one hot key, and 1M distinct keys — beside governor's
//! GCRA on the same key sequence in the same run, so the report quotes ratios, not lone times.
//!
//! governor is the anchor: `direct` (one atomic GCRA cell) for the hot key, its dashmap-keyed
//! limiter for 1M keys, both on a fake clock advanced like ours so neither side pays a syscall.

use std::collections::HashMap;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use edgelimit::algorithm::State;
use edgelimit::{Algorithm, Check, Limit, MemoryStore, Policy};
use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};

const KEYS: u64 = 1_000_000;

fn policies() -> Vec<Policy> {
    Algorithm::ALL
        .iter()
        .map(|&a| Policy::new(a, 1_000, 1_000, a.takes_burst().then_some(1_000)).unwrap())
        .collect()
}

fn quota() -> Quota {
    Quota::per_second(NonZeroU32::new(1_000).unwrap())
}

/// A key sequence that visits every one of 1M keys in a scrambled order.
fn key_at(i: u64) -> u64 {
    (i % KEYS).wrapping_mul(0x9E37_79B9_7F4A_7C15) % (KEYS * 7919)
}

fn hot_key(c: &mut Criterion) {
    let mut group = c.benchmark_group("hot_key");
    group.throughput(Throughput::Elements(1));
    // 10 requests per ms against 1 per ms allowed: most are denied, as on a hot key under
    // attack, and the sliding log stays at its limit's size.
    let clock = FakeRelativeClock::default();
    let keyed = RateLimiter::dashmap_with_clock(quota(), clock.clone());
    let mut tick = 0u64;
    group.bench_function("governor_keyed_gcra", |b| {
        b.iter(|| {
            tick += 1;
            if tick.is_multiple_of(10) {
                clock.advance(Duration::from_millis(1));
            }
            black_box(keyed.check_key(black_box(&42u64)).is_ok())
        })
    });
    let clock = FakeRelativeClock::default();
    let direct = RateLimiter::direct_with_clock(quota(), clock.clone());
    group.bench_function("governor_direct_gcra", |b| {
        b.iter(|| {
            tick += 1;
            if tick.is_multiple_of(10) {
                clock.advance(Duration::from_millis(1));
            }
            black_box(direct.check().is_ok())
        })
    });
    for policy in policies() {
        let mut state = State::fresh(policy.algorithm());
        let mut now = 1_700_000_000_000u64;
        group.bench_function(format!("edgelimit_step_{}", policy.algorithm()), |b| {
            b.iter(|| {
                tick += 1;
                if tick.is_multiple_of(10) {
                    now += 1;
                }
                black_box(state.apply(&policy, black_box(now), 1).decision)
            })
        });
        // The keyed shape of governor's limiter: a map lookup, then the step.
        let mut states: HashMap<u64, State> = HashMap::new();
        group.bench_function(format!("edgelimit_keyed_{}", policy.algorithm()), |b| {
            b.iter(|| {
                tick += 1;
                if tick.is_multiple_of(10) {
                    now += 1;
                }
                let state = states
                    .entry(black_box(42))
                    .or_insert_with(|| State::fresh(policy.algorithm()));
                black_box(state.apply(&policy, now, 1).decision)
            })
        });
    }
    group.finish();
}

fn million_keys(c: &mut Criterion) {
    let mut group = c.benchmark_group("1M_keys");
    group.throughput(Throughput::Elements(1));
    group.sample_size(20);
    let clock = FakeRelativeClock::default();
    let governor = RateLimiter::dashmap_with_clock(quota(), clock.clone());
    let mut i = 0u64;
    group.bench_function("governor_keyed_gcra", |b| {
        b.iter(|| {
            i += 1;
            if i.is_multiple_of(64) {
                clock.advance(Duration::from_millis(1));
            }
            black_box(governor.check_key(&key_at(i)).is_ok())
        })
    });
    for policy in policies() {
        // The simulator's shape: the pure step over a plain map.
        let mut states: HashMap<u64, State> = HashMap::with_capacity(KEYS as usize);
        let (mut i, mut now) = (0u64, 1_700_000_000_000u64);
        group.bench_function(format!("edgelimit_map_{}", policy.algorithm()), |b| {
            b.iter(|| {
                i += 1;
                if i.is_multiple_of(64) {
                    now += 1;
                }
                let state = states
                    .entry(key_at(i))
                    .or_insert_with(|| State::fresh(policy.algorithm()));
                black_box(state.apply(&policy, now, 1).decision.allowed)
            })
        });
    }
    for policy in [policies()[0], policies()[4]] {
        // The embedded store: a Check, the lock, the bounded map and its expiry index.
        let store = MemoryStore::with_capacity(KEYS as usize);
        let limit = Limit::new("bench", policy);
        let ids: Vec<String> = (0..KEYS).map(|k| key_at(k).to_string()).collect();
        let (mut i, mut now) = (0u64, 1_700_000_000_000u64);
        group.bench_function(
            format!("edgelimit_memory_store_{}", policy.algorithm()),
            |b| {
                b.iter_batched(
                    || {
                        i += 1;
                        if i.is_multiple_of(64) {
                            now += 1;
                        }
                        let check = Check::single(&limit, ids[(i % KEYS) as usize].as_str(), 1);
                        (check, now)
                    },
                    |(check, now)| {
                        black_box(
                            store.direct().check(std::slice::from_ref(&check), now)[0].allowed,
                        )
                    },
                    BatchSize::SmallInput,
                )
            },
        );
    }
    group.finish();
}

criterion_group!(benches, hot_key, million_keys);
criterion_main!(benches);
