//! The request path the Worker and `sim` share, natively, with no store round trip: planning a
//! request against `sim bench`'s configuration (three rules, five limits), deciding it with the
//! `Limiter` over a `MemoryStore`, and ruling on the verdicts. Prints ns per request for the plan
//! alone and for the whole path, over requests from 100,000 clients (one in eight a write, one in
//! five a static file, as the bench's config row builds them).
//!
//! `cargo bench -p edgelimit-worker --bench plan [-- --requests N]`

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use edgelimit::{Limiter, ManualClock, MemoryStore};
use edgelimit_worker::{config_file, OwnedRequest};

/// `sim bench`'s `--config` row configuration (sim/src/bench.rs, `BENCH_CONFIG`).
const CONFIG: &str = r#"
[[rules]]
name = "api"
path_prefix = "/api/"
limits = [
  { name = "per-ip", policy = "gcra 100/1m burst 50", identifier = "ip" },
  { name = "per-key", policy = "sliding-counter 1000/1h", identifier = "api-key:header:authorization" },
]

[[rules]]
name = "writes"
methods = ["POST"]
path_prefix = "/api/"
limits = [
  { name = "write-ip", policy = "fixed 20/1m", identifier = "ip" },
  { name = "write-user", policy = "sliding-log 10/1m", identifier = "header:x-user", missing = "allow" },
]

[[rules]]
name = "watch"
shadow = true
limits = [{ name = "watch-ip", policy = "token-bucket 10/1s burst 20", identifier = "ip" }]
"#;

/// Distinct clients.
const CLIENTS: u64 = 100_000;

/// Requests built before timing, replayed in a loop.
const TRACE: u64 = 200_000;

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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let requests: u64 = args
        .iter()
        .position(|a| a == "--requests")
        .and_then(|i| args.get(i + 1))
        .map(|n| n.parse().expect("--requests takes a whole number"))
        .unwrap_or(1_000_000);
    let worker = config_file::parse(CONFIG, "bench").expect("the bench configuration parses");
    // `sim` replays with the dynamic lists off (its store holds none).
    let mut sim = worker.clone();
    sim.dynamic_lists = false;
    // Requests are built before timing: only the shared path is measured.
    let trace: Vec<OwnedRequest> = (0..TRACE).map(request).collect();
    println!("{requests} requests, 3 rules 5 limits, {CLIENTS} clients (ns/request):");
    for (name, config) in [
        ("dynamic lists on (Worker)", &worker),
        ("dynamic lists off (sim)", &sim),
    ] {
        let started = Instant::now();
        let mut checks = 0usize;
        for i in 0..requests {
            let plan = config.plan(&trace[(i % TRACE) as usize]);
            checks += plan.checks().len();
        }
        let plan_ns = started.elapsed().as_nanos() as f64 / requests as f64;
        std::hint::black_box(checks);

        let clock = Arc::new(ManualClock::at(0));
        let limiter = Limiter::new(MemoryStore::new()).with_clock(clock.clone());
        let started = Instant::now();
        let mut denied = 0u64;
        for i in 0..requests {
            clock.set(i / 10);
            let plan = config.plan(&trace[(i % TRACE) as usize]);
            let checked = ready(limiter.check_all(plan.checks()));
            denied += u64::from(plan.rule(&checked.verdicts).status != 200);
        }
        let path_ns = started.elapsed().as_nanos() as f64 / requests as f64;
        println!("  {name:26} Config::plan {plan_ns:6.0}   + Limiter::check_all + Plan::rule {path_ns:6.0}   ({denied} denied)");
    }
}
