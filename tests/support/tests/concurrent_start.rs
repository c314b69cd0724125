//! Many servers of each kind started at once, as a suite's parallel tests start them: every one
//! comes up on its own port, with no failure (the kit's port handling: `net`'s module
//! documentation). Each kind is bounded in time: a start that hangs fails the test, naming how
//! many were up.
//!
//! `wrangler dev` is the heavy one (a node process and a workerd each, about 1.5 s of CPU to
//! start): its test needs the built Worker, is `#[ignore]`d in a plain `cargo test` and run by
//! `scripts/test.d/worker.sh`, with fewer at once (see [`WRANGLERS_AT_ONCE`]).

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

use edgelimit_testkit::edge::durable_bindings;
use edgelimit_testkit::origin::start_origin;
use edgelimit_testkit::{command, gateway, RedisCluster, RedisServer, Reply, WranglerDev};

/// Servers of each kind started at once.
const AT_ONCE: usize = 64;

/// `wrangler dev`s started at once: fewer than [`AT_ONCE`], as each costs a node process and a
/// workerd (about 330 MB, and seconds of CPU to start), and all must be up within the 90 s one
/// start may take. Measured on the 2-core, 24 GB machine shared with other builds: 8 at once
/// were all up in 37 s (load average 17); 16 in 75 s (load average 17 to 37, 5.2 GB) and in 87 s
/// beside `stress-ng --cpu 2`, too close to the bound; 32 at once all ran past it (load average
/// 52); 64 would need about 21 GB. 8 is the most with room to spare on a loaded machine.
const WRANGLERS_AT_ONCE: usize = 8;

/// The bound on starting one kind's servers, all of them: each start has its own (20 s for
/// Redis, 90 s for wrangler), and a machine busy with other tests is slow, never stuck.
const BOUND: Duration = Duration::from_secs(240);

/// Runs `start(i)` for `i` in `0..n` on `n` threads released together, and returns what each
/// started (or why it did not: its panic's message), in order. Panics when they have not all
/// finished within [`BOUND`].
fn at_once<T: Send + 'static>(
    n: usize,
    start: impl Fn(usize) -> T + Send + Sync + 'static,
) -> Vec<Result<T, String>> {
    let start = Arc::new(start);
    let barrier = Arc::new(Barrier::new(n));
    let (sender, receiver) = mpsc::channel();
    for i in 0..n {
        let (start, barrier, sender) = (start.clone(), barrier.clone(), sender.clone());
        std::thread::spawn(move || {
            barrier.wait();
            let started = std::panic::catch_unwind(AssertUnwindSafe(|| start(i)))
                .map_err(|panic| panic_message(&*panic));
            let _ = sender.send((i, started));
        });
    }
    let deadline = Instant::now() + BOUND;
    let mut results: Vec<Option<Result<T, String>>> = (0..n).map(|_| None).collect();
    for done in 0..n {
        let left = deadline.saturating_duration_since(Instant::now());
        match receiver.recv_timeout(left) {
            Ok((i, started)) => results[i] = Some(started),
            Err(_) => panic!("only {done} of {n} starts finished within {BOUND:?}"),
        }
    }
    results.into_iter().map(Option::unwrap).collect()
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(a panic without a message)".into())
}

/// The servers that started; fails the test naming every one that did not.
fn all_up<T>(what: &str, results: Vec<Result<T, String>>, took: Duration) -> Vec<T> {
    let n = results.len();
    let (up, failed): (Vec<_>, Vec<_>) = results.into_iter().partition(Result::is_ok);
    let failed: Vec<String> = failed.into_iter().filter_map(Result::err).collect();
    println!(
        "{n} {what} started at once in {:.1} s: {} up, {} failed",
        took.as_secs_f64(),
        up.len(),
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "{} of {n} {what} did not start:\n{}",
        failed.len(),
        failed.join("\n---\n")
    );
    up.into_iter().filter_map(Result::ok).collect()
}

/// The server on `port`'s process id, by `INFO server`: which process answers there.
fn redis_pid(port: u16) -> String {
    let info = command(port, &["INFO", "server"])
        .ok()
        .and_then(|r| r.text())
        .unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .map(|pid| pid.trim().to_string())
        .unwrap_or_else(|| panic!("no process id from port {port}: {info}"))
}

#[test]
fn sixty_four_redis_servers_start_at_once() {
    let began = Instant::now();
    let servers = all_up(
        "redis-server",
        at_once(AT_ONCE, |_| RedisServer::start()),
        began.elapsed(),
    );
    let ports: HashSet<u16> = servers.iter().map(RedisServer::port).collect();
    let pids: HashSet<String> = servers.iter().map(|s| redis_pid(s.port())).collect();
    assert_eq!(ports.len(), AT_ONCE, "ports shared");
    assert_eq!(pids.len(), AT_ONCE, "one process answering on two ports");
}

#[test]
fn sixty_four_cluster_nodes_start_at_once_with_their_bus_ports() {
    // Sixteen clusters of four primaries: 64 nodes, each with its bus port 10000 above.
    const NODES: usize = 4;
    let began = Instant::now();
    let clusters = all_up(
        "Redis Clusters of 4",
        at_once(AT_ONCE / NODES, |_| RedisCluster::start(NODES)),
        began.elapsed(),
    );
    let mut ports = HashSet::new();
    for cluster in &clusters {
        for node in cluster.nodes() {
            assert!(ports.insert(node.port()), "port {} shared", node.port());
            let info = match node.command(&["CLUSTER", "INFO"]) {
                Ok(Reply::Bulk(info)) => String::from_utf8_lossy(&info).into_owned(),
                other => panic!("CLUSTER INFO answered {other:?}"),
            };
            // Every node sees its three peers: the buses connect.
            assert!(
                info.contains(&format!("cluster_known_nodes:{NODES}")),
                "{info}"
            );
        }
    }
    assert_eq!(ports.len(), AT_ONCE);
}

#[test]
fn sixty_four_gateways_start_at_once() {
    let runtime = edgelimit_testkit::task::runtime();
    runtime.block_on(async {
        let began = Instant::now();
        let started = tokio::time::timeout(
            BOUND,
            edgelimit_testkit::task::join_all((0..AT_ONCE).map(|_| async {
                let redis = tokio::task::spawn_blocking(RedisServer::start)
                    .await
                    .expect("redis-server starts");
                let gateway = gateway::start(&redis, "kit-token").await;
                (redis, gateway)
            })),
        )
        .await
        .unwrap_or_else(|_| panic!("the gateways did not all start within {BOUND:?}"));
        println!(
            "{AT_ONCE} gateways (each in front of its own redis-server) started at once in {:.1} s, 0 failed",
            began.elapsed().as_secs_f64()
        );
        // Each gateway answers, and in front of its own Redis.
        let client = reqwest::Client::new();
        let mut addresses = HashSet::new();
        for (i, (redis, gateway)) in started.iter().enumerate() {
            assert!(addresses.insert(gateway.local_addr()));
            let status = client
                .post(format!("{}/", gateway::url(gateway)))
                .bearer_auth("kit-token")
                .body(format!(r#"["SET","which","{i}"]"#))
                .send()
                .await
                .expect("the gateway answers")
                .status();
            assert_eq!(status, 200);
            assert_eq!(
                redis.command(&["GET", "which"]).unwrap().text(),
                Some(i.to_string())
            );
        }
    });
}

#[test]
fn sixty_four_origins_start_at_once() {
    let runtime = edgelimit_testkit::task::runtime();
    runtime.block_on(async {
        let began = Instant::now();
        let origins = tokio::time::timeout(
            BOUND,
            edgelimit_testkit::task::join_all((0..AT_ONCE).map(|_| start_origin())),
        )
        .await
        .expect("the origins start");
        println!(
            "{AT_ONCE} origins started at once in {:.2} s, 0 failed",
            began.elapsed().as_secs_f64()
        );
        let distinct: HashSet<_> = origins.iter().collect();
        assert_eq!(distinct.len(), AT_ONCE);
        let client = reqwest::Client::new();
        for origin in origins {
            let body = client
                .get(format!("http://{origin}/ping"))
                .send()
                .await
                .expect("the origin answers")
                .text()
                .await
                .unwrap();
            assert!(body.contains(r#""path":"/ping""#), "{body}");
        }
    });
}

#[test]
#[ignore = "needs the built Worker and wrangler: scripts/test.d/worker.sh runs it"]
fn many_wranglers_start_at_once() {
    let runtime = edgelimit_testkit::task::runtime();
    let origin = runtime.block_on(start_origin());
    let vars = format!(
        "[vars]\nORIGIN = \"http://{origin}\"\n\n[vars.EDGELIMIT_CONFIG]\nnamespace = \"kit\"\n\n\
         [[vars.EDGELIMIT_CONFIG.rules]]\nname = \"limited\"\npath_prefix = \"/limited/\"\n\
         limits = [{{ name = \"per-ip\", policy = \"fixed 5/1h\", identifier = \"ip\" }}]\n\n{}",
        durable_bindings()
    );
    // EDGELIMIT_WRANGLERS_AT_ONCE: another count, to measure what a machine takes.
    let n = std::env::var("EDGELIMIT_WRANGLERS_AT_ONCE")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(WRANGLERS_AT_ONCE);
    let began = Instant::now();
    let workers = all_up(
        "wrangler dev",
        at_once(n, move |_| WranglerDev::start(&vars)),
        began.elapsed(),
    );
    runtime.block_on(async {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let mut urls = HashSet::new();
        for worker in &workers {
            assert!(urls.insert(worker.url()));
            let body = client
                .get(format!("{}/through", worker.url()))
                .send()
                .await
                .expect("the Worker answers")
                .text()
                .await
                .unwrap();
            // Through the Worker to the origin: this process's Worker, not another's.
            assert!(body.contains(r#""path":"/through""#), "{body}");
        }
    });
}
