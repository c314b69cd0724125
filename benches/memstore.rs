//! `MemoryStore` against governor's keyed limiter at 1M keys: ns per decision with one thread
//! and with two threads sharing one limiter, and heap bytes per key — all in the same run, then
//! a table of ratios against governor.
//!
//! What makes it fair:
//! - The same keys on both sides: 1M distinct IPv4 addresses as strings (`String` keys for
//!   governor, their bytes for `MemoryStore::check_one`), first seen in one order (a warm-up that
//!   stores every key), then decided in another (a fixed permutation), as real traffic revisits
//!   keys in an order unrelated to when it first sent them.
//! - The same policy: GCRA, 1000 per second, burst 1000 (governor's `Quota::per_second(1000)`).
//!   Each key recurs every 1M decisions, so both sides admit every request.
//! - The same time source: a shared atomic millisecond counter advanced by 1 ms per 64
//!   decisions, read on every decision by both (governor's `FakeRelativeClock` is one).
//! - Governor computes less: a yes/no and, on denial, the retry time. `MemoryStore` also returns
//!   `remaining` and `reset_at_ms`, and maintains a bounded, expiring map (governor's grows until
//!   `retain_recent` is called).
//! - governor is measured with its default hasher (SipHash, DoS-resistant) and with foldhash (the
//!   hash `MemoryStore` uses), so the table shows how much of the gap is the hash.
//! - Both hold every key. `MemoryStore` has its default bound, 2^20 keys (or
//!   `MEMSTORE_BENCH_CAPACITY`): a store bounded at exactly 1M splits the bound evenly over its
//!   shards while the keys spread over them unevenly (±120 a shard), so 3,441 of the 1M would
//!   not fit, and under the bench's cyclic order every decision of a shard short of room would
//!   evict the key needed next — about half of all decisions, which governor (unbounded) never
//!   pays.
//!
//! Memory is measured by a counting global allocator: bytes requested and still live after
//! storing all 1M keys, per key, and the same with glibc's per-allocation overhead added (each
//! chunk is the request plus an 8-byte header, rounded up to 16, at least 32 bytes): each
//! governor key is one extra allocation, a short `String`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use edgelimit::{Limit, MemoryStore, Policy};
use governor::clock::FakeRelativeClock;
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};
use support::median;

mod support;

/// The number of keys: 1M, or `MEMSTORE_BENCH_KEYS` (to separate compute from cache misses).
static KEYS: std::sync::LazyLock<usize> = std::sync::LazyLock::new(|| {
    std::env::var("MEMSTORE_BENCH_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
});
/// The bound of the `MemoryStore` under test: `MEMSTORE_BENCH_CAPACITY`, else the default.
static CAPACITY: std::sync::LazyLock<usize> = std::sync::LazyLock::new(|| {
    std::env::var("MEMSTORE_BENCH_CAPACITY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(edgelimit::store::DEFAULT_CAPACITY)
});
/// Decisions per millisecond of fake time.
const PER_MS: u64 = 64;
const EPOCH_MS: u64 = 1_700_000_000_000;
const THREADS: usize = 2;

type Governor<S> = RateLimiter<
    String,
    DashMapStateStore<String, S>,
    FakeRelativeClock,
    NoOpMiddleware<<FakeRelativeClock as governor::clock::Clock>::Instant>,
>;
type SipGovernor = Governor<std::collections::hash_map::RandomState>;
type FoldGovernor = Governor<foldhash::fast::RandomState>;

/// The keys in the order they are first stored, and the order they are then decided in.
struct Keys {
    first_seen: Vec<String>,
    queries: Vec<String>,
}

fn ip(k: usize) -> String {
    // An odd multiplier is a bijection on u32: 1M distinct addresses, scattered.
    let a = (k as u32).wrapping_mul(0x9E37_79B1);
    format!(
        "{}.{}.{}.{}",
        a >> 24,
        (a >> 16) & 255,
        (a >> 8) & 255,
        a & 255
    )
}

fn keys() -> Keys {
    // 7919 is prime and does not divide 1M: j ↦ j·7919 mod 1M visits every key once.
    Keys {
        first_seen: (0..*KEYS).map(ip).collect(),
        queries: (0..*KEYS).map(|j| ip(j * 7919 % *KEYS)).collect(),
    }
}

fn policy() -> Policy {
    "gcra 1000/1s burst 1000".parse().unwrap()
}

fn quota() -> Quota {
    Quota::per_second(NonZeroU32::new(1_000).unwrap())
}

/// The time source both sides read: fake milliseconds since the start.
#[derive(Default)]
struct FakeTime {
    ms: AtomicU64,
    governor: FakeRelativeClock,
}

impl FakeTime {
    /// Called after each of a thread's decisions; `n` counts that thread's decisions.
    fn tick(&self, n: u64, threads: u64) {
        if n.is_multiple_of(PER_MS * threads) {
            self.ms.fetch_add(1, Ordering::Relaxed);
            self.governor.advance(Duration::from_millis(1));
        }
    }

    fn now_ms(&self) -> u64 {
        EPOCH_MS + self.ms.load(Ordering::Relaxed)
    }
}

/// One side of the comparison: decides for a key at the current fake time.
trait Keyed: Sync {
    // `&String`: governor's `check_key` takes a `&K`, and its keys are `String`s.
    #[allow(clippy::ptr_arg)]
    fn decide(&self, key: &String, time: &FakeTime) -> bool;
}

impl<S: std::hash::BuildHasher + Clone + Send + Sync> Keyed for Governor<S> {
    fn decide(&self, key: &String, _: &FakeTime) -> bool {
        // Reads the shared fake clock itself.
        self.check_key(key).is_ok()
    }
}

struct Memory {
    store: MemoryStore,
    limit: Limit,
}

impl Keyed for Memory {
    fn decide(&self, key: &String, time: &FakeTime) -> bool {
        let now = time.now_ms();
        self.store
            .direct()
            .check_one(&self.limit, key.as_bytes(), 1, now)
            .allowed
    }
}

fn sip_governor(time: &FakeTime) -> SipGovernor {
    RateLimiter::dashmap_with_clock(quota(), time.governor.clone())
}

fn fold_governor(time: &FakeTime) -> FoldGovernor {
    RateLimiter::dashmap_with_clock_and_hasher(
        quota(),
        time.governor.clone(),
        foldhash::fast::RandomState::default(),
    )
}

fn memory() -> Memory {
    Memory {
        store: MemoryStore::with_capacity(*CAPACITY),
        limit: Limit::new("per-ip", policy()),
    }
}

/// Stores every key once, in first-seen order.
fn warm(side: &dyn Keyed, keys: &Keys, time: &FakeTime) {
    for (n, key) in keys.first_seen.iter().enumerate() {
        assert!(side.decide(key, time), "a first request is admitted");
        time.tick(n as u64 + 1, 1);
    }
}

/// How a run is timed: wall time (the default), or with `MEMSTORE_BENCH_TIME=cpu` the mean time
/// each thread spent on a CPU, which leaves out time spent descheduled when other processes
/// compete for the cores (lock waits that sleep are left out too, so quote it beside wall time).
fn cpu_time() -> bool {
    std::env::var("MEMSTORE_BENCH_TIME").is_ok_and(|v| v == "cpu")
}

/// Nanoseconds the calling thread has run on a CPU (Linux's schedstat; 0 elsewhere).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Runs `iters` decisions on each of `threads` threads sharing `side`, thread `t` taking every
/// `threads`-th query from `start`; returns the wall time and the threads' summed CPU time.
fn run_timed(
    side: &dyn Keyed,
    keys: &Keys,
    time: &FakeTime,
    threads: usize,
    start: usize,
    iters: u64,
) -> (Duration, Duration) {
    let barrier = Barrier::new(threads + 1);
    let (wall, cpu_ns): (Duration, u64) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let cpu_before = thread_cpu_ns();
                    let mut j = (start + t) % *KEYS;
                    for n in 1..=iters {
                        black_box(side.decide(&keys.queries[j], time));
                        time.tick(n, threads as u64);
                        j += threads;
                        if j >= *KEYS {
                            j -= *KEYS;
                        }
                    }
                    thread_cpu_ns() - cpu_before
                })
            })
            .collect();
        barrier.wait();
        let began = Instant::now();
        let cpu_ns: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        (began.elapsed(), cpu_ns)
    });
    (wall, Duration::from_nanos(cpu_ns))
}

/// [`run_timed`], timed as [`cpu_time`] says (CPU time averaged over the threads).
fn run(
    side: &dyn Keyed,
    keys: &Keys,
    time: &FakeTime,
    threads: usize,
    start: usize,
    iters: u64,
) -> Duration {
    let (wall, cpu) = run_timed(side, keys, time, threads, start, iters);
    if cpu_time() {
        cpu / threads as u32
    } else {
        wall
    }
}

/// The contenders, in table order; the first is the baseline of every ratio.
fn sides(time: &FakeTime) -> Vec<(&'static str, Box<dyn Keyed>)> {
    vec![
        ("governor_keyed", Box::new(sip_governor(time))),
        ("governor_keyed_foldhash", Box::new(fold_governor(time))),
        ("memory_store_check_one", Box::new(memory())),
    ]
}

fn bench_threads(c: &mut Criterion, keys: &Keys, threads: usize) {
    let mut group = c.benchmark_group(format!("1M_keys_{threads}_threads"));
    group.throughput(Throughput::Elements(threads as u64));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(10));
    let time = FakeTime::default();
    let sides = sides(&time);
    for (name, side) in &sides {
        warm(side.as_ref(), keys, &time);
        let mut start = 0;
        group.bench_function(*name, |b| {
            b.iter_custom(|iters| {
                let elapsed = run(side.as_ref(), keys, &time, threads, start, iters);
                start = (start + threads * iters as usize) % *KEYS;
                elapsed
            })
        });
    }
    group.finish();
}

fn bench_check_now(c: &mut Criterion, keys: &Keys) {
    let mut group = c.benchmark_group("1M_keys_1_threads");
    group.throughput(Throughput::Elements(1));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(10));
    let time = FakeTime::default();
    let memory = memory();
    warm(&memory, keys, &time);
    // The general entry point: a one-item `Check` (built beforehand, untimed), a `Vec` of one
    // verdict back.
    let checks: Vec<edgelimit::Check> = keys
        .queries
        .iter()
        .map(|k| edgelimit::Check::single(&memory.limit, k.as_str(), 1))
        .collect();
    let mut j = 0;
    let mut n = 0;
    group.bench_function("memory_store_check_now", |b| {
        b.iter(|| {
            let check = std::slice::from_ref(&checks[j]);
            let verdicts = memory.store.direct().check(check, time.now_ms());
            n += 1;
            time.tick(n, 1);
            j = (j + 1) % *KEYS;
            black_box(verdicts[0].allowed)
        })
    });
    group.finish();
}

/// Live heap bytes and allocations, counted only while `COUNTING` is set so that the timed runs
/// pay one relaxed load per allocation.
struct CountingAlloc;

static COUNTING: AtomicBool = AtomicBool::new(false);
static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
static LIVE_ALLOCS: AtomicUsize = AtomicUsize::new(0);
/// Live bytes as glibc's malloc holds them: each chunk is the request and an 8-byte header,
/// rounded up to 16 bytes, and at least 32.
static LIVE_CHUNK_BYTES: AtomicUsize = AtomicUsize::new(0);

fn chunk(size: usize) -> usize {
    (size + 8).next_multiple_of(16).max(32)
}

// SAFETY: every call is forwarded unchanged to the system allocator; only counters are added.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
            LIVE_CHUNK_BYTES.fetch_add(chunk(layout.size()), Ordering::Relaxed);
            LIVE_ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
            LIVE_CHUNK_BYTES.fetch_sub(chunk(layout.size()), Ordering::Relaxed);
            LIVE_ALLOCS.fetch_sub(1, Ordering::Relaxed);
        }
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE_BYTES.fetch_add(new_size, Ordering::Relaxed);
            LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
            LIVE_CHUNK_BYTES.fetch_add(chunk(new_size), Ordering::Relaxed);
            LIVE_CHUNK_BYTES.fetch_sub(chunk(layout.size()), Ordering::Relaxed);
        }
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// What one side keeps per key: heap bytes requested, the same as glibc's chunks hold them,
/// and allocations.
#[derive(Clone, Copy)]
struct PerKey {
    bytes: f64,
    chunk_bytes: f64,
    allocs: f64,
}

/// Heap bytes and allocations per key that `make` and storing every key leave live.
fn memory_per_key<T: Keyed>(keys: &Keys, make: impl FnOnce(&FakeTime) -> T) -> PerKey {
    let time = FakeTime::default();
    // Counting from zero: frees of blocks allocated before would wrap the counters.
    LIVE_BYTES.store(0, Ordering::Relaxed);
    LIVE_CHUNK_BYTES.store(0, Ordering::Relaxed);
    LIVE_ALLOCS.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
    let side = make(&time);
    warm(&side, keys, &time);
    COUNTING.store(false, Ordering::Relaxed);
    let per_key = |n: usize| n as f64 / *KEYS as f64;
    let memory = PerKey {
        bytes: per_key(LIVE_BYTES.load(Ordering::Relaxed)),
        chunk_bytes: per_key(LIVE_CHUNK_BYTES.load(Ordering::Relaxed)),
        allocs: per_key(LIVE_ALLOCS.load(Ordering::Relaxed)),
    };
    drop(side);
    memory
}

/// Mean ns per iteration of a finished benchmark, from criterion's saved estimates.
fn mean_ns(dir: &Path, group: &str, name: &str) -> Option<f64> {
    let file = dir.join(group).join(name).join("new/estimates.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).ok()?).ok()?;
    json["mean"]["point_estimate"].as_f64()
}

fn print_table(dir: &Path, memory: &[(&str, PerKey)]) {
    let clock = if cpu_time() {
        "CPU time per thread"
    } else {
        "wall time"
    };
    println!("\n1M keys, GCRA 1000/s burst 1000, IPv4 strings, {clock}; ratio = ns per decision / governor_keyed's");
    println!(
        "{:<26} {:>7} {:>14} {:>10} {:>14} {:>10} {:>12} {:>12}",
        "side", "threads", "ns/decision", "ratio", "total Mdec/s", "", "bytes/key", "allocs/key"
    );
    for threads in [1, THREADS] {
        let group = format!("1M_keys_{threads}_threads");
        let Some(base) = mean_ns(dir, &group, "governor_keyed") else {
            continue;
        };
        for name in [
            "governor_keyed",
            "governor_keyed_foldhash",
            "memory_store_check_one",
            "memory_store_check_now",
        ] {
            let Some(ns) = mean_ns(dir, &group, name) else {
                continue;
            };
            // check_now decides over the same store as check_one.
            let stored = name.replace("check_now", "check_one");
            let (bytes, allocs) = memory
                .iter()
                .find(|(n, _)| *n == stored)
                .map_or((f64::NAN, f64::NAN), |(_, m)| (m.bytes, m.allocs));
            println!(
                "{:<26} {:>7} {:>14.1} {:>9.2}× {:>14.2} {:>10} {:>12.1} {:>12.2}",
                name,
                threads,
                ns,
                ns / base,
                threads as f64 * 1e3 / ns,
                "",
                bytes,
                allocs
            );
        }
    }
    println!("(ns/decision is per thread: the wall time of one decision on each thread at once)");
}

/// Decisions per thread in one turn of one side in the interleaved comparison.
const TURN: u64 = 200_000;
/// Rounds of the interleaved comparison: every side takes one turn per round.
const ROUNDS: usize = 15;

/// The interleaved comparison: the sides take turns of [`TURN`] decisions per thread, round
/// after round, so that whatever else the machine runs meanwhile weighs on all of them alike;
/// prints the median ns per decision per thread (wall and CPU) and the median of each round's
/// ratio to the baseline.
fn interleaved(keys: &Keys, threads: usize) {
    let time = FakeTime::default();
    let sides = sides(&time);
    for (_, side) in &sides {
        warm(side.as_ref(), keys, &time);
    }
    // Per side, per round: (wall ns, CPU ns) per decision per thread.
    let mut samples = vec![Vec::new(); sides.len()];
    let mut start = 0;
    for _ in 0..ROUNDS {
        for (i, (_, side)) in sides.iter().enumerate() {
            let (wall, cpu) = run_timed(side.as_ref(), keys, &time, threads, start, TURN);
            let per = |d: Duration| d.as_nanos() as f64 / TURN as f64;
            samples[i].push((per(wall), per(cpu) / threads as f64));
        }
        start = (start + threads * TURN as usize) % *KEYS;
    }
    for (i, (name, _)) in sides.iter().enumerate() {
        let wall = median(samples[i].iter().map(|s| s.0).collect());
        let cpu = median(samples[i].iter().map(|s| s.1).collect());
        let ratio = |pick: fn(&(f64, f64)) -> f64| {
            median(
                samples[i]
                    .iter()
                    .zip(&samples[0])
                    .map(|(s, b)| pick(s) / pick(b))
                    .collect(),
            )
        };
        println!(
            "{:<26} {:>7} {:>10.1} {:>8.2}× {:>10.1} {:>8.2}× {:>12.2}",
            name,
            threads,
            wall,
            ratio(|s| s.0),
            cpu,
            ratio(|s| s.1),
            threads as f64 * 1e3 / wall,
        );
    }
}

fn main() {
    let keys = keys();
    let memory = [
        ("governor_keyed", memory_per_key(&keys, sip_governor)),
        (
            "governor_keyed_foldhash",
            memory_per_key(&keys, fold_governor),
        ),
        (
            "memory_store_check_one",
            memory_per_key(&keys, |_| memory()),
        ),
    ];
    let dir: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR")).join("criterion-memstore");
    let mut c = Criterion::default()
        .output_directory(&dir)
        .configure_from_args();
    bench_threads(&mut c, &keys, 1);
    bench_check_now(&mut c, &keys);
    bench_threads(&mut c, &keys, THREADS);
    c.final_summary();
    print_table(&dir, &memory);
    println!(
        "\nInterleaved: {ROUNDS} rounds of {TURN} decisions per thread per side; medians, \
         ratios = median of each round's ratio to governor_keyed"
    );
    println!(
        "{:<26} {:>7} {:>10} {:>9} {:>10} {:>9} {:>12}",
        "side", "threads", "wall ns", "ratio", "CPU ns", "ratio", "total Mdec/s"
    );
    for threads in [1, THREADS] {
        interleaved(&keys, threads);
    }
    println!(
        "\nMemory after storing {} keys (MemoryStore bounded at {}); per key",
        *KEYS, *CAPACITY
    );
    println!(
        "{:<26} {:>12} {:>18} {:>12}",
        "side", "bytes", "glibc chunk bytes", "allocations"
    );
    for (name, m) in &memory {
        println!(
            "{:<26} {:>12.1} {:>18.1} {:>12.2}",
            name, m.bytes, m.chunk_bytes, m.allocs
        );
    }
}
