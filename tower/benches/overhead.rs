//! What the layer adds to a request, beside tower-governor, in one run: the same axum service
//! (one route answering "ok") alone, behind tower-governor (governor's GCRA, keyed by peer
//! address; without and with its headers) and behind edgelimit-tower (the same GCRA in
//! `MemoryStore`, keyed by peer address; both sets of rate-limit fields, and the draft's alone;
//! the configuration's default of consulting the store's deny and allow lists, and without
//! them), every request admitted, peers rotating over 1,024
//! addresses. Then edgelimit-tower on a local Redis, for the latency it adds.
//!
//! 1. Wall and CPU time per request, on a tokio runtime of 1 and of 2 worker threads (four
//!    tasks per thread calling the service in process: no sockets, so the middleware is what
//!    differs), rounds interleaved, medians; "added" is the variant's median less the bare
//!    service's of the same rounds, and "÷ no limiter" the variant's median over the bare
//!    service's.
//! 2. Instructions per request under callgrind (when valgrind is installed), one thread: load
//!    independent, so the ratio holds on a busy machine. Each variant runs twice (N₁ and N₂
//!    requests) and the difference is divided by N₂ − N₁, so setup costs cancel; the median of
//!    five such runs is reported. Here also edgelimit-tower with a `tracing` subscriber taking
//!    its spans (docs/performance.md, "Spans").
//! 3. On Redis (a throwaway `redis-server` on loopback): one client's requests one after
//!    another, p50 and p99 latency, blocks interleaved with the bare service's.
//!
//! `cargo bench -p edgelimit-tower --bench overhead [-- --rounds N --requests N]`. Not part of
//! the tests: its numbers are read, not asserted.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::routing::get;
use axum::Router;
use edgelimit::{MemoryStore, Store};
use edgelimit_testkit::RedisServer;
use edgelimit_tower::{redis_store, Builder, Config, ConfigBuilder, LimitBuilder, RuleBuilder};
use tower::ServiceExt;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

/// Distinct peers the requests rotate over.
const PEERS: u32 = 1024;
/// A GCRA no request of the run exceeds: a million a second per peer, bursts of a million.
const RATE: u64 = 1_000_000;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Variant {
    Bare,
    Governor,
    GovernorHeaders,
    Edgelimit,
    EdgelimitDraftFields,
    EdgelimitLists,
    /// edgelimit-tower with a `tracing` subscriber taking its spans (counted under callgrind
    /// only: a subscriber is the process's).
    EdgelimitSpans,
}

const VARIANTS: [Variant; 6] = [
    Variant::Bare,
    Variant::Governor,
    Variant::GovernorHeaders,
    Variant::Edgelimit,
    Variant::EdgelimitDraftFields,
    Variant::EdgelimitLists,
];

/// The variants measured under callgrind alone, each in a process of its own.
const CALLGRIND_ONLY: [Variant; 1] = [Variant::EdgelimitSpans];

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Bare => "no limiter",
            Variant::Governor => "tower-governor",
            Variant::GovernorHeaders => "tower-governor, headers",
            Variant::Edgelimit => "edgelimit-tower",
            Variant::EdgelimitDraftFields => "edgelimit-tower, draft fields only",
            Variant::EdgelimitLists => "edgelimit-tower, lists",
            Variant::EdgelimitSpans => "edgelimit-tower, spans recorded",
        }
    }

    fn arg(self) -> &'static str {
        match self {
            Variant::Bare => "bare",
            Variant::Governor => "governor",
            Variant::GovernorHeaders => "governor-headers",
            Variant::Edgelimit => "edgelimit",
            Variant::EdgelimitDraftFields => "edgelimit-draft-fields",
            Variant::EdgelimitLists => "edgelimit-lists",
            Variant::EdgelimitSpans => "edgelimit-spans",
        }
    }
}

/// The GCRA per peer on `/api/`, as edgelimit writes it; the store's lists consulted or not,
/// and either both sets of rate-limit fields (the default) or the draft's alone
/// (`headers = ["ratelimit"]`).
fn config(variant: Variant) -> Config {
    let builder = ConfigBuilder::new().dynamic_lists(variant == Variant::EdgelimitLists);
    let builder = match variant {
        Variant::EdgelimitDraftFields => builder.headers(&["ratelimit"]),
        _ => builder,
    };
    builder
        .rule(
            RuleBuilder::new("api")
                .path_prefix("/api/")
                .limit(LimitBuilder::new(
                    "per-ip",
                    format!("gcra {RATE}/1s burst {RATE}"),
                )),
        )
        .build()
        .expect("a valid configuration")
}

fn routes() -> Router {
    Router::new().route("/api/items", get(|| async { "ok" }))
}

/// The service as `variant` limits it (in memory).
fn service(variant: Variant) -> Router {
    let period = Duration::from_secs(1).as_nanos() as u64 / RATE;
    match variant {
        Variant::Bare => routes(),
        Variant::Governor => routes().layer(GovernorLayer::new(Arc::new(
            GovernorConfigBuilder::default()
                .per_nanosecond(period)
                .burst_size(RATE as u32)
                .finish()
                .expect("a governor configuration"),
        ))),
        Variant::GovernorHeaders => routes().layer(GovernorLayer::new(Arc::new(
            GovernorConfigBuilder::default()
                .per_nanosecond(period)
                .burst_size(RATE as u32)
                .use_headers()
                .finish()
                .expect("a governor configuration"),
        ))),
        Variant::Edgelimit
        | Variant::EdgelimitDraftFields
        | Variant::EdgelimitLists
        | Variant::EdgelimitSpans => routes().layer(
            Builder::new(config(variant))
                .build(MemoryStore::new())
                .expect("a layer"),
        ),
    }
}

/// Request `i`: from the `i % PEERS`-th peer, as axum's `ConnectInfo` records it.
fn request(i: u64) -> Request<Body> {
    let n = (i % u64::from(PEERS)) as u32;
    let peer = SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | n)), 40_000);
    Request::builder()
        .uri("/api/items")
        .extension(ConnectInfo(peer))
        .body(Body::empty())
        .expect("a request")
}

/// Sends `requests` requests to `service` from `tasks` tasks; panics unless each is admitted.
async fn drive(service: Router, tasks: u64, requests: u64) {
    let per_task = requests / tasks;
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let service = service.clone();
            tokio::spawn(async move {
                for i in 0..per_task {
                    let response = service
                        .clone()
                        .oneshot(request(t * per_task + i))
                        .await
                        .expect("infallible");
                    assert_eq!(response.status(), 200, "every request is admitted");
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.expect("a task");
    }
}

/// This process's CPU time.
fn cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec; CLOCK_PROCESS_CPUTIME_ID is always available on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// One timed run: (wall, CPU) ns per request.
fn run(variant: Variant, threads: usize, requests: u64) -> (f64, f64) {
    let rt = runtime(threads);
    let service = service(variant);
    // Warm up: every peer seen once, the allocator and the tables grown.
    rt.block_on(drive(
        service.clone(),
        threads as u64 * 4,
        u64::from(PEERS) * 4,
    ));
    let (wall, cpu) = (Instant::now(), cpu_time());
    rt.block_on(drive(service, threads as u64 * 4, requests));
    let per = |d: Duration| d.as_nanos() as f64 / requests as f64;
    (per(wall.elapsed()), per(cpu_time() - cpu))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

struct Options {
    rounds: usize,
    requests: u64,
}

fn options(args: &[String]) -> Options {
    let value = |flag: &str, default: u64| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .map_or(default, |v| {
                v.parse()
                    .unwrap_or_else(|_| panic!("{flag} takes a number, not `{v}`"))
            })
    };
    Options {
        rounds: value("--rounds", 5) as usize,
        requests: value("--requests", 200_000),
    }
}

fn in_memory(options: &Options) {
    println!(
        "\n## In memory: ns per request, medians of {} interleaved rounds of {} requests\n",
        options.rounds, options.requests
    );
    for threads in [1, 2] {
        let mut wall = vec![Vec::new(); VARIANTS.len()];
        let mut cpu = vec![Vec::new(); VARIANTS.len()];
        for _ in 0..options.rounds {
            for (v, &variant) in VARIANTS.iter().enumerate() {
                let (w, c) = run(variant, threads, options.requests);
                wall[v].push(w);
                cpu[v].push(c);
            }
        }
        let wall: Vec<f64> = wall.into_iter().map(median).collect();
        let cpu: Vec<f64> = cpu.into_iter().map(median).collect();
        println!("{threads} worker thread(s):\n");
        println!(
            "| | wall | ÷ no limiter | added | CPU | ÷ no limiter | added | added CPU ÷ tower-governor's |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        for (v, variant) in VARIANTS.iter().enumerate() {
            let added_cpu = cpu[v] - cpu[0];
            let ratio = if v == 0 {
                String::new()
            } else {
                format!("{:.2}×", added_cpu / (cpu[1] - cpu[0]))
            };
            println!(
                "| {} | {:.0} | {:.2}× | {:+.0} | {:.0} | {:.2}× | {:+.0} | {ratio} |",
                variant.name(),
                wall[v],
                wall[v] / wall[0],
                wall[v] - wall[0],
                cpu[v],
                cpu[v] / cpu[0],
                added_cpu
            );
        }
        println!();
    }
}

/// Runs `variant` for `requests` requests on one thread, untimed: what callgrind counts.
fn counted_run(variant: &str, requests: u64) {
    let variant = VARIANTS
        .into_iter()
        .chain(CALLGRIND_ONLY)
        .find(|v| v.arg() == variant)
        .unwrap_or_else(|| panic!("no variant `{variant}`"));
    if variant == Variant::EdgelimitSpans {
        // The spans created, their attributes computed and recorded, kept until they close:
        // what any subscriber pays for before its own work (an exporter's batching adds to it).
        tracing::subscriber::set_global_default(tracing_subscriber::registry())
            .expect("the first subscriber");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(drive(service(variant), 1, requests));
}

/// Instructions callgrind counts for `variant` over `requests` requests.
fn instructions(variant: Variant, requests: u64) -> Option<u64> {
    let exe = std::env::current_exe().ok()?;
    let out = std::env::temp_dir().join(format!(
        "edgelimit-tower-callgrind-{}-{}-{requests}.out",
        std::process::id(),
        variant.arg()
    ));
    let status = Command::new("valgrind")
        .args(["--tool=callgrind", "--quiet"])
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(&exe)
        .args(["--counted-run", variant.arg(), &requests.to_string()])
        .status()
        .ok()?;
    let text = std::fs::read_to_string(&out).ok();
    let _ = std::fs::remove_file(&out);
    if !status.success() {
        return None;
    }
    text?
        .lines()
        .find_map(|l| l.strip_prefix("summary: "))
        .and_then(|n| n.trim().parse().ok())
}

fn under_callgrind() {
    const FEW: u64 = 2_000;
    const MANY: u64 = 12_000;
    // A run's count of the layer's rows moves by up to ≈400 from the next one's (glibc's
    // `malloc` with the heap's state): each row is the median of its runs.
    const RUNS: usize = 5;
    println!(
        "\n## Instructions per request (callgrind, one thread, ({MANY} − {FEW}) requests, \
         median of {RUNS} runs)\n"
    );
    let mut per = Vec::new();
    for variant in VARIANTS.into_iter().chain(CALLGRIND_ONLY) {
        let mut runs = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            match (instructions(variant, FEW), instructions(variant, MANY)) {
                (Some(few), Some(many)) => runs.push((many - few) as f64 / (MANY - FEW) as f64),
                _ => {
                    println!("(valgrind is not installed, or failed: no instruction counts)");
                    return;
                }
            }
        }
        runs.sort_by(f64::total_cmp);
        per.push(runs[RUNS / 2]);
    }
    println!("| | instructions | ÷ no limiter | added | added ÷ tower-governor's |");
    println!("|---|---|---|---|---|");
    for (v, variant) in VARIANTS.iter().chain(&CALLGRIND_ONLY).enumerate() {
        let added = per[v] - per[0];
        let ratio = if v == 0 {
            String::new()
        } else {
            format!("{:.2}×", added / (per[1] - per[0]))
        };
        println!(
            "| {} | {:.0} | {:.2}× | {:+.0} | {ratio} |",
            variant.name(),
            per[v],
            per[v] / per[0],
            added
        );
    }
}

/// `requests` requests to `service` one after another: each one's latency in µs.
async fn latencies(service: &Router, from: u64, requests: u64) -> Vec<f64> {
    let mut out = Vec::with_capacity(requests as usize);
    for i in from..from + requests {
        let started = Instant::now();
        let response = service
            .clone()
            .oneshot(request(i))
            .await
            .expect("infallible");
        assert_eq!(response.status(), 200, "every request is admitted");
        out.push(started.elapsed().as_secs_f64() * 1e6);
    }
    out
}

fn on_redis(options: &Options) {
    const BLOCK: u64 = 500;
    let blocks = (options.requests / 40 / BLOCK).max(4);
    let redis = RedisServer::start();
    let rt = runtime(2);
    let bare = routes();
    let memory = service(Variant::Edgelimit);
    let limited = rt.block_on(async {
        let config = config(Variant::Edgelimit);
        let store = redis_store(&redis.url(), &config).await.expect("Redis");
        layered(config, store)
    });
    let services = [
        ("no limiter", bare),
        ("edgelimit-tower, memory", memory),
        ("edgelimit-tower, Redis", limited),
    ];
    let mut samples = vec![Vec::new(); services.len()];
    rt.block_on(async {
        for (_, service) in &services {
            latencies(service, 0, BLOCK).await; // warm up
        }
        for b in 0..blocks {
            for (s, (_, service)) in services.iter().enumerate() {
                samples[s].extend(latencies(service, b * BLOCK, BLOCK).await);
            }
        }
    });
    println!(
        "\n## One client, requests one after another: latency in µs ({} requests each, blocks of {BLOCK} interleaved)\n",
        blocks * BLOCK
    );
    println!("| | p50 | ÷ no limiter | p99 | added p50 |");
    println!("|---|---|---|---|---|");
    let mut sorted: Vec<Vec<f64>> = samples;
    for s in &mut sorted {
        s.sort_by(f64::total_cmp);
    }
    let base = percentile(&sorted[0], 0.5);
    for ((name, _), s) in services.iter().zip(&sorted) {
        let p50 = percentile(s, 0.5);
        println!(
            "| {name} | {p50:.1} | {:.2}× | {:.1} | {:+.1} |",
            p50 / base,
            percentile(s, 0.99),
            p50 - base
        );
    }
}

fn layered<S: Store + 'static>(config: Config, store: S) -> Router {
    routes().layer(Builder::new(config).build(store).expect("a layer"))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--counted-run") {
        let requests = args[i + 2].parse().expect("a request count");
        counted_run(&args[i + 1], requests);
        return;
    }
    // `cargo test --benches` runs this with `--bench` absent: nothing to measure then.
    if !args.iter().any(|a| a == "--bench") {
        return;
    }
    let options = options(&args);
    println!("# edgelimit-tower's added cost per request");
    in_memory(&options);
    under_callgrind();
    on_redis(&options);
}
