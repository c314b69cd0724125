//! The request path the Worker and `sim` share, natively, with no store round trip: planning a
//! request against `sim bench`'s configuration (three rules, five limits), deciding it with the
//! `Limiter` over a `MemoryStore`, and ruling on the verdicts (`Edge::handle`). Prints ns and allocations per
//! request for the plan alone and for the whole path, over requests from 100,000 clients (one in
//! eight a write, one in five a static file, as the bench's config row builds them): once as the
//! Worker plans (dynamic lists on, the default) and once as `sim` replays (dynamic lists off).
//!
//! Allocations are counted by a counting global allocator: unlike the times on a shared
//! machine, they do not vary from run to run.
//!
//! `cargo bench -p edgelimit-worker --bench plan [-- --requests N] [--only worker|sim]`

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use edgelimit::{ManualClock, MemoryStore};
use edgelimit_engine::config::file as config_file;
use edgelimit_engine::{Config, Edge, OwnedRequest};

/// `sim bench`'s `--config` row configuration: the same file, so the two benches measure one
/// configuration.
const CONFIG: &str = include_str!("../../sim/src/bench-config.toml");

/// Distinct clients.
const CLIENTS: u64 = 100_000;

/// Requests built before timing, replayed in a loop.
const TRACE: u64 = 200_000;

/// The system allocator, counting allocations.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's guarantees, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's guarantees, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Request `i`: a pseudo-random client, its address and API key, a write one time in eight.
fn request(i: u64) -> OwnedRequest {
    let c = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40 & 0xFF_FFFF;
    let c = c % CLIENTS;
    let write = i.is_multiple_of(8);
    let path = if i.is_multiple_of(5) {
        format!("/static/{}.css", c % 50)
    } else {
        format!("/api/items/{}", c % 1000)
    };
    let mut r = OwnedRequest::new(if write { "POST" } else { "GET" }, "api.example.com", &path)
        .with_header(
            "cf-connecting-ip",
            &format!("10.{}.{}.{}", c >> 16 & 255, c >> 8 & 255, c & 255),
        )
        .with_header("authorization", &format!("Bearer key-{}", c % 20_000));
    if write {
        r = r.with_header("x-user", &format!("user-{}", c % 5_000));
    }
    r
}

/// Polls a future that must be ready at once (the memory store never waits).
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the memory store did not answer at once"),
    }
}

/// Per request over `requests` of `trace`: (ns, allocations) planning alone, then planning,
/// deciding with a fresh limiter and ruling; and how many were refused.
fn measure(config: &Config, trace: &[OwnedRequest], requests: u64) -> [(f64, f64); 2] {
    let per_request = |started: Instant, allocations: u64| {
        (
            started.elapsed().as_nanos() as f64 / requests as f64,
            (ALLOCATIONS.load(Ordering::Relaxed) - allocations) as f64 / requests as f64,
        )
    };
    let request = |i: u64| &trace[(i % trace.len() as u64) as usize];

    let allocations = ALLOCATIONS.load(Ordering::Relaxed);
    let started = Instant::now();
    let mut checks = 0usize;
    for i in 0..requests {
        checks += config.plan(request(i)).checks().len();
    }
    let plan = per_request(started, allocations);
    std::hint::black_box(checks);

    let clock = Arc::new(ManualClock::at(0));
    let store = MemoryStore::new().with_clock(clock.clone());
    let edge = Edge::new(config.clone(), store).with_clock(clock.clone());
    let allocations = ALLOCATIONS.load(Ordering::Relaxed);
    let started = Instant::now();
    let mut refused = 0u64;
    for i in 0..requests {
        clock.set(i / 10);
        refused += u64::from(ready(edge.handle(request(i), i / 10)).outcome().status != 200);
    }
    let path = per_request(started, allocations);
    std::hint::black_box(refused);
    [plan, path]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let requests: u64 = arg("--requests")
        .map(|n| n.parse().expect("--requests takes a whole number"))
        .unwrap_or(1_000_000)
        .max(1);
    let only = arg("--only");
    let worker = config_file::parse(CONFIG, "bench").expect("the bench configuration parses");
    // `sim` replays with the dynamic lists off (its store holds none).
    let mut sim = worker.clone();
    sim.dynamic_lists = false;
    // Requests are built before timing: only the shared path is measured.
    let trace: Vec<OwnedRequest> = (0..TRACE).map(request).collect();
    println!("{requests} requests, 3 rules 5 limits, {CLIENTS} clients, per request:");
    for (key, name, config) in [
        ("worker", "dynamic lists on (Worker)", &worker),
        ("sim", "dynamic lists off (sim)", &sim),
    ] {
        if only.as_ref().is_some_and(|o| o != key) {
            continue;
        }
        let [(plan_ns, plan_allocs), (path_ns, path_allocs)] = measure(config, &trace, requests);
        println!(
            "  {name:26} Config::plan {plan_ns:6.0} ns {plan_allocs:5.1} allocs   \
             Edge::handle {path_ns:6.0} ns {path_allocs:5.1} allocs"
        );
    }
}
